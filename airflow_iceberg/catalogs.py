"""Spark catalog settings derived from the same Iceberg connection that the sensor reads with pyiceberg.

One connection describes the catalog for both sides, so Spark and pyiceberg always see the same tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook
from sqlalchemy.engine import make_url

from spark_jobs.iceberg_call import CATALOG_PASSWORD_ENV

#: Spark settings every Iceberg procedure call needs.
ICEBERG_SPARK_CONF = {
    "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
}


@dataclass(frozen=True)
class SparkCatalogSettings:
    """``spark.sql.catalog.<name>.*`` settings, and the secrets that go to the job's environment instead."""

    conf: dict[str, str]
    secret_env: dict[str, str] = field(default_factory=dict)


def spark_catalog_settings(catalog: str, properties: Mapping[str, Any]) -> SparkCatalogSettings:
    """Spark settings for the catalog named ``catalog`` from the pyiceberg ``properties`` of its connection.

    Supported: ``type: sql`` (pyiceberg's SQL catalog), which is Iceberg's JDBC catalog in Spark.
    """
    kind = properties.get("type", "rest")
    prefix = f"spark.sql.catalog.{catalog}"
    if kind != "sql":
        raise ValueError(
            f"Iceberg catalog {catalog!r} has type {kind!r}; this version derives Spark settings for 'sql' "
            "(JDBC) catalogs only"
        )
    for key in ("uri", "warehouse"):
        if not properties.get(key):
            raise ValueError(f"Iceberg catalog {catalog!r} (type sql) needs {key!r} in its connection extra")
    url = make_url(str(properties["uri"]))
    backend = url.get_backend_name()
    jdbc = {"mysql": "mysql", "mariadb": "mysql", "postgresql": "postgresql"}.get(backend)
    if jdbc is None:
        raise ValueError(f"Iceberg catalog {catalog!r}: no JDBC mapping for database {backend!r} in its uri")
    host = url.host or "127.0.0.1"
    port = f":{url.port}" if url.port else ""
    conf = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.type": "jdbc",
        f"{prefix}.uri": f"jdbc:{jdbc}://{host}{port}/{url.database or ''}",
        f"{prefix}.warehouse": str(properties["warehouse"]),
    }
    if url.username:
        conf[f"{prefix}.jdbc.user"] = url.username
    secret_env = {CATALOG_PASSWORD_ENV: url.password} if url.password else {}
    return SparkCatalogSettings(conf=conf, secret_env=secret_env)


def spark_settings_for_connection(catalog: str, iceberg_conn_id: str) -> SparkCatalogSettings:
    """Everything a Spark job needs to call Iceberg procedures on ``catalog``, from its Iceberg connection."""
    properties = IcebergHook.get_connection(iceberg_conn_id).extra_dejson
    settings = spark_catalog_settings(catalog, properties)
    return SparkCatalogSettings(conf={**ICEBERG_SPARK_CONF, **settings.conf}, secret_env=settings.secret_env)
