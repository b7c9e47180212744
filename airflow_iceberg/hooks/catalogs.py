"""One Iceberg catalog, two readers: the sensor's pyiceberg and the rewrite's Spark, from one Airflow connection.

Every table and catalog the provider reads through pyiceberg comes from here: :func:`load_iceberg_table` (the
sensor's look, the plan, the report, expiry's checkpoint marker) and :func:`iceberg_catalog` (the health watch's
sweep), both through the Iceberg provider's ``IcebergHook``.

The catalog is described once, by the ``iceberg`` connection the Iceberg provider's ``IcebergHook`` reads: its
*extra* holds pyiceberg catalog properties (``type``, ``uri``, ``warehouse``, ...), its *host* may hold the
catalog URI and its *login*/*password* a REST catalog's client credentials. :func:`pyiceberg_properties`
reproduces what ``IcebergHook`` passes to ``pyiceberg.catalog.load_catalog``, and :func:`spark_catalog_settings`
turns those same properties into ``spark.sql.catalog.<name>.*`` settings, so Spark and the sensor always read
the same catalog.

Supported catalog types (pyiceberg name -> Iceberg Spark catalog):

- ``sql`` -> ``type=jdbc`` (``uri`` ``mysql+pymysql://user:pw@host:port/db`` ->
  ``jdbc:mysql://host:port/db?permitMysqlScheme``)
- ``rest`` -> ``type=rest``
- ``hive`` -> ``type=hive`` (``uri`` ``thrift://metastore:9083``)
- ``glue`` -> ``catalog-impl=org.apache.iceberg.aws.glue.GlueCatalog`` with ``S3FileIO``

Secrets (passwords, REST credentials, tokens and headers, S3 and AWS keys) never become Spark confs on a command
line or in a driver's spec: they travel to the Spark job in its secrets file (``core/job_secrets.py``), which the job
reads and applies to its session (secret confs) and its JVM (the AWS SDK's system properties). Spark's
redaction (``spark.redaction.regex``, set below) hides them where Spark shows settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import make_url

from airflow_iceberg.core.job_secrets import JobSecrets
from airflow_iceberg.core.tables import TableName

#: Spark settings every Iceberg procedure call needs.
ICEBERG_SPARK_CONF = {
    "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
    # Timestamps in predicates and procedure arguments (older_than) are UTC, like Iceberg's day partitions.
    "spark.sql.session.timeZone": "UTC",
    # The progress bar redraws one stderr line with carriage returns, garbling the task log and the job's
    # result line in spark-submit's merged output.
    "spark.ui.showConsoleProgress": "false",
    # Spark's INFO lines (over a thousand per rewrite) would fill the task log, and cost the task's log pipeline
    # CPU while writers wait. The driver logs warnings and errors; `spark.log.level: INFO` in a table's
    # spark.conf brings the rest back. Cluster deploy modes keep spark-submit's own INFO lines, which the
    # Spark provider reads (application id, pod name).
    "spark.log.level": "WARN",
    # Spark's default redaction (secret, password, token, access key) misses REST credentials and headers.
    "spark.redaction.regex": r"(?i)secret|password|token|access[.-]?key|credential|header\.",
}

_S3_FILE_IO = "org.apache.iceberg.aws.s3.S3FileIO"
# pyiceberg FileIO properties -> Iceberg (Java) FileIO properties; a None target means "secret, see below".
_S3_PROPERTIES = {
    "s3.endpoint": "s3.endpoint",
    "s3.path-style-access": "s3.path-style-access",
    "s3.region": "client.region",
    "s3.access-key-id": "s3.access-key-id",
    "s3.secret-access-key": "s3.secret-access-key",
    "s3.session-token": "s3.session-token",
}
_SECRET_PROPERTIES = {"credential", "token", "s3.secret-access-key", "s3.session-token", "s3.access-key-id"}
#: REST headers are secrets: they are where catalogs take API keys and bearer tokens.
_SECRET_PREFIXES = ("header.",)
# REST catalog properties that mean the same to pyiceberg and to Iceberg's Java RESTCatalog.
_REST_PASSTHROUGH = ("warehouse", "credential", "token", "scope", "oauth2-server-uri", "prefix")
# Glue: pyiceberg's static credentials become the AWS SDK's system properties in the Spark driver's JVM.
_GLUE_SYSTEM_PROPERTIES = {
    "glue.access-key-id": "aws.accessKeyId",
    "glue.secret-access-key": "aws.secretAccessKey",
    "glue.session-token": "aws.sessionToken",
}


@dataclass(frozen=True)
class SparkCatalogSettings:
    """``spark.sql.catalog.<name>.*`` settings, and the secrets that reach the job through its secrets file.

    ``secret_conf`` are Spark settings the job sets on its session; ``system_properties`` are set in the
    driver's JVM (the AWS SDK's credentials).
    """

    conf: dict[str, str]
    secret_conf: dict[str, str] = field(default_factory=dict)
    system_properties: dict[str, str] = field(default_factory=dict)

    @property
    def job_secrets(self) -> JobSecrets:
        """The catalog's part of a job's secrets file."""
        return {"spark_conf": dict(self.secret_conf), "system_properties": dict(self.system_properties)}


def pyiceberg_properties(connection: Any) -> dict[str, Any]:
    """The catalog properties ``IcebergHook`` passes to pyiceberg for ``connection``.

    Mirrors ``IcebergHook.catalog``: the extra, then the host as ``uri``, ``type`` defaulting to ``rest``, and
    for REST the login and password as ``credential``. A unit test pins this against the hook itself.
    """
    properties: dict[str, Any] = dict(connection.extra_dejson or {})
    if connection.host:
        properties["uri"] = connection.host.rstrip("/")
    properties.setdefault("type", "rest")
    if properties["type"] == "rest" and connection.login and connection.password:
        properties["credential"] = f"{connection.login}:{connection.password}"
    return properties


def spark_catalog_settings(catalog: str, properties: Mapping[str, Any]) -> SparkCatalogSettings:
    """Spark settings for the catalog named ``catalog`` from its pyiceberg ``properties``."""
    kind = properties.get("type", "rest")
    builders = {"sql": _jdbc, "rest": _rest, "hive": _hive, "glue": _glue}
    if kind not in builders:
        raise ValueError(
            f"Iceberg catalog {catalog!r} has type {kind!r}; supported: {', '.join(builders)} "
            "(pyiceberg's names; 'sql' is Iceberg's JDBC catalog in Spark)"
        )
    settings, secrets, system_properties = builders[kind](catalog, properties)
    prefix = f"spark.sql.catalog.{catalog}"
    io_settings, io_secrets = _s3(properties)
    conf = {prefix: "org.apache.iceberg.spark.SparkCatalog"}
    conf.update({f"{prefix}.{key}": str(value) for key, value in {**settings, **io_settings}.items()})
    secret_conf = {f"{prefix}.{key}": str(value) for key, value in {**secrets, **io_secrets}.items()}
    return SparkCatalogSettings(conf=conf, secret_conf=secret_conf, system_properties=system_properties)


def _required(catalog: str, properties: Mapping[str, Any], *keys: str) -> None:
    for key in keys:
        if not properties.get(key):
            raise ValueError(
                f"Iceberg catalog {catalog!r} (type {properties.get('type')}) needs {key!r} in its connection"
            )


def _split_secrets(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    def secret(key: str) -> bool:
        return key in _SECRET_PROPERTIES or key.startswith(_SECRET_PREFIXES)

    return {k: v for k, v in values.items() if not secret(k)}, {k: v for k, v in values.items() if secret(k)}


def _jdbc(catalog: str, properties: Mapping[str, Any]):
    _required(catalog, properties, "uri", "warehouse")
    url = make_url(str(properties["uri"]))
    backend = url.get_backend_name()
    jdbc = {"mysql": "mysql", "mariadb": "mysql", "postgresql": "postgresql"}.get(backend)
    if jdbc is None:
        raise ValueError(f"Iceberg catalog {catalog!r}: no JDBC mapping for database {backend!r} in its uri")
    port = f":{url.port}" if url.port else ""
    # MariaDB's Connector/J (3.x), which the shipped table list loads, takes a jdbc:mysql: URL only with
    # permitMysqlScheme in it; MySQL's Connector/J ignores the property.
    options = "?permitMysqlScheme" if jdbc == "mysql" else ""
    settings = {
        "type": "jdbc",
        "uri": f"jdbc:{jdbc}://{url.host or '127.0.0.1'}{port}/{url.database or ''}{options}",
        "warehouse": properties["warehouse"],
    }
    if url.username:
        settings["jdbc.user"] = url.username
    secrets = {"jdbc.password": url.password} if url.password else {}
    return settings, secrets, {}


def _rest(catalog: str, properties: Mapping[str, Any]):
    _required(catalog, properties, "uri")
    values = {key: properties[key] for key in _REST_PASSTHROUGH if properties.get(key)}
    values.update({k: v for k, v in properties.items() if k.startswith("header.")})
    plain, secrets = _split_secrets(values)
    return {"type": "rest", "uri": properties["uri"], **plain}, secrets, {}


def _hive(catalog: str, properties: Mapping[str, Any]):
    _required(catalog, properties, "uri")
    settings = {"type": "hive", "uri": properties["uri"]}
    if properties.get("warehouse"):
        settings["warehouse"] = properties["warehouse"]
    return settings, {}, {}


def _glue(catalog: str, properties: Mapping[str, Any]):
    _required(catalog, properties, "warehouse")
    settings = {
        "catalog-impl": "org.apache.iceberg.aws.glue.GlueCatalog",
        "io-impl": _S3_FILE_IO,
        "warehouse": properties["warehouse"],
    }
    if properties.get("glue.id"):
        settings["glue.id"] = properties["glue.id"]
    region = properties.get("glue.region") or properties.get("client.region")
    if region:
        settings["client.region"] = region
    system = {name: str(properties[key]) for key, name in _GLUE_SYSTEM_PROPERTIES.items() if properties.get(key)}
    return settings, {}, system


def _s3(properties: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """S3 FileIO settings, for catalogs whose warehouse is on S3 (or an S3-compatible store)."""
    values = {target: properties[source] for source, target in _S3_PROPERTIES.items() if properties.get(source)}
    if not values:
        return {}, {}
    plain, secrets = _split_secrets(values)
    return {"io-impl": _S3_FILE_IO, **plain}, secrets


def spark_settings_for_connection(catalog: str, iceberg_conn_id: str) -> SparkCatalogSettings:
    """Everything a Spark job needs to call Iceberg procedures on ``catalog``, from its Iceberg connection."""
    # The connection alone: importing IcebergHook would load pyiceberg (0.4 s), and the rewrite task, which calls
    # this while writers are paused, needs none of it.
    from airflow.sdk import BaseHook

    properties = pyiceberg_properties(BaseHook.get_connection(iceberg_conn_id))
    settings = spark_catalog_settings(catalog, properties)
    return SparkCatalogSettings(
        conf={**ICEBERG_SPARK_CONF, **settings.conf},
        secret_conf=settings.secret_conf,
        system_properties=settings.system_properties,
    )


def iceberg_catalog(iceberg_conn_id: str) -> Any:
    """The pyiceberg catalog of the Iceberg connection, as ``IcebergHook`` builds it."""
    from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook  # pyiceberg: off the parse path

    return IcebergHook(iceberg_conn_id).catalog


def load_iceberg_table(iceberg_conn_id: str, table: TableName) -> Any:
    """``table`` as pyiceberg reads it through the Iceberg connection; LookupError, saying why, if it is not there."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    try:
        return iceberg_catalog(iceberg_conn_id).load_table(table.in_catalog)
    except (NoSuchTableError, NoSuchNamespaceError):
        raise LookupError(
            f"table {table.in_catalog!r} not found through Iceberg connection {iceberg_conn_id!r}; for a SQL "
            f"(JDBC) catalog the connection id must equal the Spark catalog name {table.catalog!r}, because "
            "pyiceberg keys the catalog's rows by the name IcebergHook gives it, which is the connection id"
        ) from None
