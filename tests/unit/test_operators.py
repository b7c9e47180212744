"""Operator arguments: checked at construction, before any DAG run can close a gate."""

from __future__ import annotations

import pytest
from airflow.sdk import TriggerRule

from airflow_iceberg.operators.rewrite import RUN_PROCEDURE_JOB, SPARK_JOBS_DIR, IcebergRewriteOperator
from airflow_iceberg.operators.write_gate import CloseWriteGateOperator, OpenWriteGateOperator
from airflow_iceberg.sensors.snapshot_idle import SnapshotIdleSensor
from airflow_iceberg.triggers.snapshot_idle import SnapshotIdleTrigger
from spark_jobs.iceberg_call import InvalidCallError


def test_rewrite_operator_submits_the_procedure_job_with_its_helper_module():
    op = IcebergRewriteOperator(
        task_id="rewrite_data_files",
        table="lake.demo.events",
        procedure="rewrite_data_files",
        options={"min-input-files": 5},
        where="ts >= '{{ ds }}'",
    )
    assert op.application == str(RUN_PROCEDURE_JOB)
    assert op.py_files == str(SPARK_JOBS_DIR / "iceberg_call.py")
    assert op.name == "iceberg-rewrite_data_files-lake.demo.events"
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


def test_close_operator_refuses_bad_lease_and_table():
    with pytest.raises(ValueError, match="lease_seconds must be a positive integer, got 0"):
        CloseWriteGateOperator(task_id="c", table="lake.demo.events", lease_seconds=0)
    with pytest.raises(InvalidCallError, match="'lake.demo'"):
        CloseWriteGateOperator(task_id="c", table="lake.demo")


def test_open_operator_runs_whatever_happened_upstream():
    assert OpenWriteGateOperator(task_id="o", table="lake.demo.events").trigger_rule == TriggerRule.ALL_DONE


def test_sensor_defaults_its_iceberg_connection_to_the_catalog_and_refuses_negative_idle():
    sensor = SnapshotIdleSensor(task_id="w", table="other.demo.events", idle_seconds=10)
    assert sensor.iceberg_conn_id == "other"
    with pytest.raises(ValueError, match="idle_seconds must be a non-negative integer, got -1"):
        SnapshotIdleSensor(task_id="w", table="lake.demo.events", idle_seconds=-1)


def test_trigger_serializes_to_its_own_class_and_arguments():
    trigger = SnapshotIdleTrigger(
        table="lake.demo.events", dag_id="d", run_id="r", idle_seconds=5, iceberg_conn_id="lake",
        write_gate_conn_id="gate", poll_interval=2,
    )  # fmt: skip
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_iceberg.triggers.snapshot_idle.SnapshotIdleTrigger"
    assert SnapshotIdleTrigger(**kwargs).serialize() == (classpath, kwargs)


def test_orphan_removal_refuses_an_older_than_inside_the_lease_plus_margin():
    from airflow_iceberg.operators.table_care import RemoveOrphanFilesOperator

    with pytest.raises(ValueError, match=r"older_than_hours=25 is too short: .* lease \(90000 s\) plus a margin"):
        RemoveOrphanFilesOperator(task_id="r", table="lake.demo.events", older_than_hours=25, lease_seconds=90000)
    with pytest.raises(ValueError, match=r"older_than_hours=2 is too short: .* Iceberg's own 24 hours"):
        RemoveOrphanFilesOperator(task_id="r", table="lake.demo.events", older_than_hours=2, lease_seconds=600)
    ok = RemoveOrphanFilesOperator(task_id="r", table="lake.demo.events", older_than_hours=26, lease_seconds=90000)
    assert ok.procedure == "remove_orphan_files"
