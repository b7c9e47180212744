"""The rewrite operator: arguments checked at construction, the job it submits, and where it runs.

Where the rewrite runs is set by the Spark connection and the table's spark settings, never by code.
"""

from __future__ import annotations

import json
import os

import pytest

from airflow_iceberg.config import TableConfig
from airflow_iceberg.dag_factory import build_compaction_dag
from airflow_iceberg.hooks.spark_submit import IcebergSparkSubmitHook
from airflow_iceberg.operators.rewrite import RUN_PROCEDURE_JOB, SPARK_JOBS_DIR, IcebergRewriteOperator
from airflow_iceberg.spark_jobs.iceberg_call import InvalidCallError, TableName


def test_rewrite_operator_submits_the_installed_procedure_job_with_its_helper_module():
    op = IcebergRewriteOperator(
        task_id="rewrite_data_files",
        table="lake.demo.events",
        procedure="rewrite_data_files",
        options={"min-input-files": 5},
        where="ts >= '{{ ds }}'",
    )
    import airflow_iceberg.spark_jobs

    assert SPARK_JOBS_DIR.samefile(airflow_iceberg.spark_jobs.__path__[0])
    assert op.application == str(RUN_PROCEDURE_JOB) and RUN_PROCEDURE_JOB.is_file()
    assert op.py_files == str(SPARK_JOBS_DIR / "iceberg_call.py")
    assert op.name == "iceberg-rewrite_data_files-lake.demo.events"
    assert op.table == TableName("lake", "demo", "events")
    assert op.iceberg_conn_id == "lake"  # the catalog's name by default
    assert "where" in op.template_fields
    assert set(IcebergRewriteOperator.template_fields) >= {"application", "conf", "jars", "where"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"table": "demo.events"}, "'demo.events' is not 'catalog.namespace.table'"),
        ({"procedure": "drop_table"}, "'drop_table' is not supported"),
        ({"options": {"rewrite-all": "maybe"}}, "option 'rewrite-all' must be a boolean, got 'maybe'"),
    ],
)
def test_rewrite_operator_refuses_bad_input_at_construction(kwargs, message):
    arguments = {"table": "lake.demo.events", "procedure": "rewrite_data_files", **kwargs}
    with pytest.raises(InvalidCallError, match=message):
        IcebergRewriteOperator(task_id="t", **arguments)


def test_the_operators_hook_is_the_result_reading_hook_with_every_argument_the_operator_set():
    op = IcebergRewriteOperator(
        task_id="t",
        table="lake.demo.events",
        procedure="rewrite_data_files",
        conf={"spark.sql.shuffle.partitions": "4"},
        driver_memory="3G",
        name="compaction-of-events",
    )
    hook = op._get_hook()
    assert isinstance(hook, IcebergSparkSubmitHook) and hook.result is None
    command = hook._build_spark_submit_command(str(op.application))
    assert "spark.sql.shuffle.partitions=4" in command
    assert flag(command, "--driver-memory") == "3G" and flag(command, "--name") == "compaction-of-events"


def spark_submit_command(monkeypatch, connection: dict, spark: dict) -> list[str]:
    """The spark-submit command the rewrite task's own hook builds for this connection and these settings."""
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CLUSTER", json.dumps({"conn_type": "spark", **connection}))
    config = TableConfig.model_validate(
        {"table": "dl_test.ods.order_base_stream_v2", "spark_conn_id": "spark_cluster", "spark": spark}
    )
    task = build_compaction_dag(config).get_task("rewrite_data_files")
    return task._get_hook()._build_spark_submit_command(str(task.application))


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_source_designs_yarn_submission_maps_onto_connection_and_table_settings(monkeypatch):
    # The source design: --master yarn --deploy-mode client --driver-memory 4G --num-executors 4
    # --executor-memory 8G --executor-cores 4 --queue root.default, and four --conf settings.
    command = spark_submit_command(
        monkeypatch,
        {"host": "yarn", "extra": {"deploy-mode": "client", "queue": "root.default"}},
        {
            "packages": ["org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2"],
            "driver_memory": "4G",
            "num_executors": 4,
            "executor_memory": "8G",
            "executor_cores": 4,
            "conf": {
                "spark.sql.debug.maxToStringFields": "1000",
                "spark.rpc.message.maxSize": "1024",
                "spark.sql.legacy.timeParserPolicy": "LEGACY",
                "spark.sql.storeAssignmentPolicy": "ANSI",
            },
        },
    )
    assert flag(command, "--master") == "yarn"
    assert flag(command, "--deploy-mode") == "client"
    assert flag(command, "--queue") == "root.default"
    assert flag(command, "--driver-memory") == "4G"
    assert flag(command, "--num-executors") == "4"
    assert flag(command, "--executor-memory") == "8G"
    assert flag(command, "--executor-cores") == "4"
    assert flag(command, "--packages") == "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2"
    confs = {command[i + 1] for i, part in enumerate(command) if part == "--conf"}
    assert {
        "spark.sql.debug.maxToStringFields=1000",
        "spark.rpc.message.maxSize=1024",
        "spark.sql.legacy.timeParserPolicy=LEGACY",
        "spark.sql.storeAssignmentPolicy=ANSI",
    } <= confs


def test_kubernetes_submission_comes_from_the_connection_too(monkeypatch):
    command = spark_submit_command(
        monkeypatch,
        {
            "host": "k8s://https://kubernetes.default.svc",
            "port": 443,
            "extra": {"deploy-mode": "cluster", "namespace": "spark"},
        },
        {
            "jars": ["local:///opt/iceberg/iceberg-spark-runtime-3.5_2.12-1.10.2.jar"],
            "conf": {"spark.kubernetes.container.image": "registry.example.com/airflow-iceberg-spark:0.1.0"},
        },
    )
    assert flag(command, "--master") == "k8s://https://kubernetes.default.svc:443"
    assert flag(command, "--deploy-mode") == "cluster"
    assert "spark.kubernetes.namespace=spark" in command
    assert flag(command, "--jars") == "local:///opt/iceberg/iceberg-spark-runtime-3.5_2.12-1.10.2.jar"


def gated_rewrite(where: str | None) -> IcebergRewriteOperator:
    return IcebergRewriteOperator(
        task_id="rewrite_data_files", table="lake.demo.events", procedure="rewrite_data_files", where=where,
        apply_run_params=True,
    )  # fmt: skip


def test_a_runs_own_where_replaces_the_tables_template_unrendered():
    op = gated_rewrite("ts >= '{{ ds }}'")  # would fail to render in a run without a logical date
    own = "note = '{{ conn.lake.password }}'"  # the run's text is data, never a template
    op.render_template_fields({"params": {"where": own}})
    assert op.where == own


def test_without_a_runs_where_the_tables_template_is_rendered():
    op = gated_rewrite("ts >= '{{ ds }}'")
    op.render_template_fields({"params": {"where": None}, "ds": "2026-11-20"})
    assert op.where == "ts >= '2026-11-20'"


def test_a_commit_conflict_fails_the_rewrite_without_retries(tmp_path, monkeypatch):
    from airflow.sdk.exceptions import AirflowFailException

    spark_submit = tmp_path / "spark-submit"
    spark_submit.write_text(
        "#!/bin/sh\necho 'py4j.protocol.Py4JJavaError: An error occurred while calling o42.sql.'\n"
        "echo ': org.apache.iceberg.exceptions.ValidationException: Cannot commit, found new position delete for "
        "replaced data file'\nexit 1\n"
    )
    spark_submit.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    monkeypatch.setenv("AIRFLOW_CONN_LAKE", json.dumps({"conn_type": "iceberg", "extra": {"type": "sql",
                       "uri": "mysql+pymysql://u@127.0.0.1:1/unused", "warehouse": "file:///tmp/unused"}}))  # fmt: skip
    op = gated_rewrite(None)
    op.apply_run_params = False
    with pytest.raises(AirflowFailException, match="lost an Iceberg commit conflict") as raised:
        op.execute({"outlet_events": {}})
    assert "Cannot commit, found new position delete" in str(raised.value)
