"""A catalog password lives only in its Airflow connection: never in logs, XCom, rendered templates or any
process's command line (sampled with ps while the rewrites run)."""

from __future__ import annotations

import json

from airflow.models.renderedtifields import RenderedTaskInstanceFields
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session
from sqlalchemy import select

from devkit.tables import TableStats
from devkit.writers import write_small_files
from tests.integration.conftest import CATALOG_USER as USER
from tests.integration.conftest import CATALOG_USER_PASSWORD as PASSWORD
from tests.integration.conftest import GATE_USERS


def test_catalog_password_reaches_spark_but_no_log_xcom_or_rendered_field(
    password_protected_catalog, unique_name, table_config, compaction_dag, capfd, argv_sampler
):
    table = f"lake.secrets.{unique_name}"
    # The Spark writer and both rewrites can only reach the JDBC catalog with the password: Spark received it.
    write_small_files(table_config(table), "--days", "1", "--commits", "2", "--files-per-commit", "4")

    with argv_sampler(PASSWORD, GATE_USERS["airflow"][1]) as sampler:  # and the gate's, for the lease keeper
        run = compaction_dag(table, rewrite_data_files={"min-input-files": 2}).test()

    assert run.state == "success"
    assert sampler.spark_samples > 0, "no sample caught the rewrite's Spark processes"
    assert sampler.leaks == [], sampler.leaks
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
        assert {r.task_id for r in rendered} >= {"rewrite_files"}
        assert all(PASSWORD not in json.dumps(r.rendered_fields, default=str) for r in rendered)
