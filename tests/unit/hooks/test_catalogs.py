"""One connection, two readers: the pyiceberg properties IcebergHook uses and the Spark settings, per catalog type."""

from __future__ import annotations

import json
import re

import airflow.providers.apache.iceberg.hooks.iceberg as iceberg_hook_module
import pytest
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_iceberg.hooks.catalogs import pyiceberg_properties, spark_catalog_settings, spark_settings_for_connection

CATALOGS = {
    "sql": (
        {
            "extra": {
                "type": "sql",
                "uri": "mysql+pymysql://etl:s3cr3t@db.internal:3307/iceberg",
                "warehouse": "s3://wh/",
            }
        },
        {
            "spark.sql.catalog.lake.type": "jdbc",
            "spark.sql.catalog.lake.uri": "jdbc:mysql://db.internal:3307/iceberg?permitMysqlScheme",
            "spark.sql.catalog.lake.warehouse": "s3://wh/",
            "spark.sql.catalog.lake.jdbc.user": "etl",
        },
        {"spark.sql.catalog.lake.jdbc.password": "s3cr3t"},
        {},
    ),
    "rest": (
        {
            "host": "https://catalog.example.com/api/catalog/",
            "login": "client-id",
            "password": "client-s3cr3t",
            "extra": {
                "type": "rest",
                "warehouse": "prod",
                "scope": "PRINCIPAL_ROLE:ALL",
                "s3.region": "eu-west-1",
                "token": "rest-t0ken",
                "header.X-Api-Key": "rest-h3ader",
            },
        },
        {
            "spark.sql.catalog.lake.type": "rest",
            "spark.sql.catalog.lake.uri": "https://catalog.example.com/api/catalog",
            "spark.sql.catalog.lake.warehouse": "prod",
            "spark.sql.catalog.lake.scope": "PRINCIPAL_ROLE:ALL",
            "spark.sql.catalog.lake.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
            "spark.sql.catalog.lake.client.region": "eu-west-1",
        },
        {
            "spark.sql.catalog.lake.credential": "client-id:client-s3cr3t",
            "spark.sql.catalog.lake.token": "rest-t0ken",
            "spark.sql.catalog.lake.header.X-Api-Key": "rest-h3ader",
        },
        {},
    ),
    "hive": (
        {"extra": {"type": "hive", "uri": "thrift://metastore:9083", "warehouse": "hdfs://nn:8020/warehouse"}},
        {
            "spark.sql.catalog.lake.type": "hive",
            "spark.sql.catalog.lake.uri": "thrift://metastore:9083",
            "spark.sql.catalog.lake.warehouse": "hdfs://nn:8020/warehouse",
        },
        {},
        {},
    ),
    "glue": (
        {
            "extra": {
                "type": "glue",
                "warehouse": "s3://lake-bucket/warehouse",
                "glue.id": "123456789012",
                "glue.region": "us-east-1",
                "glue.access-key-id": "AKIAEXAMPLE",
                "glue.secret-access-key": "glue-s3cr3t",
            }
        },
        {
            "spark.sql.catalog.lake.catalog-impl": "org.apache.iceberg.aws.glue.GlueCatalog",
            "spark.sql.catalog.lake.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
            "spark.sql.catalog.lake.warehouse": "s3://lake-bucket/warehouse",
            "spark.sql.catalog.lake.glue.id": "123456789012",
            "spark.sql.catalog.lake.client.region": "us-east-1",
        },
        {},
        {"aws.accessKeyId": "AKIAEXAMPLE", "aws.secretAccessKey": "glue-s3cr3t"},
    ),
}


@pytest.fixture(params=sorted(CATALOGS))
def catalog(request, monkeypatch):
    """A connection named after the Spark catalog ("lake") of one catalog type, as an env-var connection."""
    connection, conf, secret_conf, system_properties = CATALOGS[request.param]
    monkeypatch.setenv("AIRFLOW_CONN_LAKE", json.dumps({"conn_type": "iceberg", **connection}))
    return request.param, conf, secret_conf, system_properties


def test_properties_are_exactly_what_iceberg_hook_hands_to_pyiceberg(catalog, monkeypatch):
    captured = {}
    monkeypatch.setattr(
        iceberg_hook_module, "load_catalog", lambda name, **properties: captured.update(properties) or object()
    )
    IcebergHook("lake").catalog  # noqa: B018 - builds the catalog, through the patched load_catalog
    assert pyiceberg_properties(IcebergHook.get_connection("lake")) == captured


def test_spark_settings_match_the_catalog_and_keep_secrets_out_of_conf(catalog):
    kind, conf, secret_conf, system_properties = catalog
    settings = spark_settings_for_connection("lake", "lake")
    assert settings.conf == {
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        "spark.log.level": "WARN",
        "spark.redaction.regex": r"(?i)secret|password|token|access[.-]?key|credential|header\.",
        "spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog",
        **conf,
    }
    assert settings.job_secrets == {"spark_conf": secret_conf, "system_properties": system_properties}
    for secret in [*secret_conf.values(), *system_properties.values()]:
        assert secret not in json.dumps(settings.conf)


def test_spark_redacts_every_secret_setting_wherever_it_shows_settings(catalog):
    redaction = re.compile(spark_settings_for_connection("lake", "lake").conf["spark.redaction.regex"])
    for key in catalog[2]:  # Spark matches its redaction pattern against each setting's key
        assert redaction.search(key), key


def test_sql_catalog_without_password_has_no_secret():
    settings = spark_catalog_settings(
        "lake", {"type": "sql", "uri": "mysql+pymysql://root@127.0.0.1:3306/cat", "warehouse": "file:///w"}
    )
    assert settings.job_secrets == {"spark_conf": {}, "system_properties": {}}
    assert settings.conf["spark.sql.catalog.lake.uri"] == "jdbc:mysql://127.0.0.1:3306/cat?permitMysqlScheme"


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({"type": "sql", "uri": "mysql+pymysql://root@h/cat"}, "needs 'warehouse'"),
        ({"type": "hive"}, "needs 'uri'"),
        ({"type": "glue"}, "needs 'warehouse'"),
        ({"type": "bigquery"}, "has type 'bigquery'; supported: sql, rest, hive, glue"),
        ({"type": "sql", "uri": "sqlite:///x.db", "warehouse": "file:///w"}, "no JDBC mapping for database 'sqlite'"),
    ],
)
def test_incomplete_or_unsupported_catalogs_are_named(properties, message):
    with pytest.raises(ValueError, match=message):
        spark_catalog_settings("lake", properties)
