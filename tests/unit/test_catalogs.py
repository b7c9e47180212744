"""Spark catalog settings come from the Iceberg connection's pyiceberg properties; secrets stay out of conf."""

from __future__ import annotations

import pytest

from airflow_iceberg.catalogs import spark_catalog_settings
from spark_jobs.iceberg_call import CATALOG_PASSWORD_ENV


def test_sql_catalog_maps_to_spark_jdbc_catalog_with_password_in_the_environment_only():
    settings = spark_catalog_settings(
        "lake",
        {"type": "sql", "uri": "mysql+pymysql://etl:s3cr3t@db.internal:3307/iceberg", "warehouse": "s3://wh/"},
    )
    assert settings.conf == {
        "spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.lake.type": "jdbc",
        "spark.sql.catalog.lake.uri": "jdbc:mysql://db.internal:3307/iceberg",
        "spark.sql.catalog.lake.warehouse": "s3://wh/",
        "spark.sql.catalog.lake.jdbc.user": "etl",
    }
    assert settings.secret_env == {CATALOG_PASSWORD_ENV: "s3cr3t"}
    assert "s3cr3t" not in repr(settings.conf)


def test_sql_catalog_without_password_has_no_secret():
    settings = spark_catalog_settings(
        "lake", {"type": "sql", "uri": "mysql+pymysql://root@127.0.0.1:3306/cat", "warehouse": "file:///w"}
    )
    assert settings.secret_env == {}
    assert settings.conf["spark.sql.catalog.lake.uri"] == "jdbc:mysql://127.0.0.1:3306/cat"


def test_sql_catalog_missing_warehouse_is_named():
    with pytest.raises(ValueError, match="needs 'warehouse'"):
        spark_catalog_settings("lake", {"type": "sql", "uri": "mysql+pymysql://root@h/cat"})


def test_unsupported_catalog_type_is_named():
    with pytest.raises(ValueError, match="has type 'glue'"):
        spark_catalog_settings("lake", {"type": "glue"})
