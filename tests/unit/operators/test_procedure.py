"""The procedure operator, the base of the rewrite and maintenance operators: any procedure with its checked
arguments, its Spark hook and the core it ships, and what it does with the job's result rows."""

from __future__ import annotations

import pytest

from airflow_iceberg.core.bundle import core_zip
from airflow_iceberg.core.spark_job import format_result_line
from airflow_iceberg.hooks.spark_submit import IcebergSparkSubmitHook
from airflow_iceberg.operators.procedure import RUN_PROCEDURE_JOB, IcebergProcedureOperator
from airflow_iceberg.operators.rewrite import IcebergRewriteOperator
from tests.unit.operators.fake_spark_submit import PushedXCom, fake_spark_submit, flag


def test_the_procedure_operator_runs_a_maintenance_procedure_with_its_arguments_and_takes_no_predicate():
    op = IcebergProcedureOperator(
        task_id="rewrite_manifests",
        table="lake.demo.events",
        procedures=["rewrite_manifests"],
        arguments={"rewrite_manifests": {"use_caching": False}},
    )
    assert op.application == str(RUN_PROCEDURE_JOB)
    assert op.name == "iceberg-rewrite_manifests-lake.demo.events"
    assert "where" not in op.template_fields
    [call] = op._calls({})
    assert call.statement(op.table) == (
        "CALL `lake`.system.rewrite_manifests(table => 'demo.events', use_caching => false)"
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"procedures": ["drop_table"]}, "'drop_table' is not supported"),
        ({"procedures": ["expire_snapshots", "expire_snapshots"]}, "list of distinct procedure names"),
        ({"arguments": {"remove_orphan_files": {"dry_run": True}}}, "arguments given for remove_orphan_files"),
        ({"arguments": {"expire_snapshots": {"retain_last": 0}}}, "retain_last"),
    ],
)
def test_the_procedure_operator_refuses_bad_input_at_construction(kwargs, message):
    arguments = {"table": "lake.demo.events", "procedures": ["expire_snapshots"], **kwargs}
    with pytest.raises(ValueError, match=message):
        IcebergProcedureOperator(task_id="t", **arguments)


def test_the_rewrite_operator_runs_the_rewrites_only_and_names_the_operator_for_the_others():
    with pytest.raises(ValueError, match="not expire_snapshots: run other procedures with IcebergProcedureOperator"):
        IcebergRewriteOperator(task_id="t", table="lake.demo.events", procedures=["expire_snapshots"])
    both = IcebergRewriteOperator(task_id="t", table="lake.demo.events")
    assert both.procedures == ["rewrite_data_files", "rewrite_position_delete_files"]


def test_a_procedures_result_rows_are_returned_and_its_seconds_pushed_with_no_rewrite_rule_applied(
    tmp_path, monkeypatch
):
    # A result with "failed" counts would fail a rewrite (partial progress); a maintenance procedure's is its own.
    result = {"deleted_data_files_count": 12, "deleted_manifest_files_count": 3, "failed_data_files_count": 1}
    fake_spark_submit(
        tmp_path, monkeypatch, f"echo '{format_result_line({'procedure': 'expire_snapshots', **result})}'\n"
    )
    op = IcebergProcedureOperator(task_id="expire_snapshots", table="lake.demo.events", procedures=["expire_snapshots"])
    ti = PushedXCom()
    assert op.execute({"outlet_events": {}, "ti": ti, "params": {}}) == {"expire_snapshots": result}
    assert set(ti.pushed) == {"seconds"} and ti.pushed["seconds"] >= 0


def test_the_operators_hook_is_the_result_reading_hook_with_every_argument_the_operator_set():
    op = IcebergProcedureOperator(
        task_id="t",
        table="lake.demo.events",
        procedures=["rewrite_data_files"],
        conf={"spark.sql.shuffle.partitions": "4"},
        driver_memory="3G",
        name="compaction-of-events",
    )
    hook = op._get_hook()
    assert isinstance(hook, IcebergSparkSubmitHook) and hook.result is None
    command = hook._build_spark_submit_command(str(op.application))
    assert "spark.sql.shuffle.partitions=4" in command
    assert flag(command, "--driver-memory") == "3G" and flag(command, "--name") == "compaction-of-events"


def test_the_job_gets_the_core_zip_beside_the_users_own_py_files_once():
    op = IcebergProcedureOperator(
        task_id="rewrite_files", table="lake.demo.events", procedures=["rewrite_data_files"], py_files="/jobs/extra.py"
    )
    op._get_hook()
    op._get_hook()  # a second hook (on_kill) adds nothing
    assert op.py_files == f"{core_zip()},/jobs/extra.py"
