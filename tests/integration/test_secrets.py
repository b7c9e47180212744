"""A catalog password lives only in its Airflow connection: never in logs, XCom or rendered templates."""

from __future__ import annotations

import json
import os

import pytest
from airflow.models.renderedtifields import RenderedTaskInstanceFields
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session
from sqlalchemy import select

from devkit.tables import TableStats
from devkit.writers import write_small_files

USER = "airflow_iceberg_test_catalog_user"
PASSWORD = "Kq7-catalog-secret-91x"


@pytest.fixture
def password_protected_catalog(mysql_server, monkeypatch):
    """The suite's catalog reached through a MySQL user that needs a password, as in production."""
    catalog = json.loads(os.environ["AIRFLOW_CONN_LAKE"])
    database = catalog["extra"]["uri"].rsplit("/", 1)[1]
    host = os.environ.get("AIRFLOW_ICEBERG_MYSQL_HOST", "127.0.0.1")
    with mysql_server.cursor() as cursor:
        cursor.execute(f"DROP USER IF EXISTS '{USER}'@'%'")
        cursor.execute(f"CREATE USER '{USER}'@'%%' IDENTIFIED BY %s", (PASSWORD,))  # %% is a literal %
        cursor.execute(f"GRANT ALL ON `{database}`.* TO '{USER}'@'%'")
    port = os.environ.get("AIRFLOW_ICEBERG_MYSQL_PORT", "3306")
    catalog["extra"]["uri"] = f"mysql+pymysql://{USER}:{PASSWORD}@{host}:{port}/{database}"
    monkeypatch.setenv("AIRFLOW_CONN_LAKE", json.dumps(catalog))
    yield
    with mysql_server.cursor() as cursor:
        cursor.execute(f"DROP USER IF EXISTS '{USER}'@'%'")


def test_catalog_password_reaches_spark_but_no_log_xcom_or_rendered_field(
    password_protected_catalog, unique_name, table_config, compaction_dag, capfd
):
    table = f"lake.secrets.{unique_name}"
    # The Spark writer and both rewrites can only reach the JDBC catalog with the password: Spark received it.
    write_small_files(table_config(table), "--days", "1", "--commits", "2", "--files-per-commit", "4")

    run = compaction_dag(table, rewrite_data_files={"min-input-files": 2}).test()

    assert run.state == "success"
    assert TableStats.read("lake", table).data_files == 1
    output = capfd.readouterr()
    logs = output.out + output.err
    assert f"spark.sql.catalog.lake.jdbc.user={USER}" in logs  # the submit command was logged, with the user
    assert PASSWORD not in logs
    with create_session() as session:
        xcoms = session.scalars(select(XComModel).where(XComModel.run_id == run.run_id)).all()
        assert xcoms, "the run pushed no XCom at all"
        assert all(PASSWORD not in json.dumps(x.value, default=str) for x in xcoms)
        rendered = session.scalars(
            select(RenderedTaskInstanceFields).where(RenderedTaskInstanceFields.run_id == run.run_id)
        ).all()
        assert {r.task_id for r in rendered} >= {"rewrite_data_files", "rewrite_position_delete_files"}
        assert all(PASSWORD not in json.dumps(r.rendered_fields, default=str) for r in rendered)
