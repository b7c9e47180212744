"""Manual runs with Params on a real table and gate: bad values stop before the gate; dry runs touch nothing."""

from __future__ import annotations

import pyarrow as pa
import pytest
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_iceberg.hooks.write_gate import WriteGateHook


@pytest.fixture
def table(unique_name: str) -> str:
    """A real table with six small data files, written by six commits."""
    catalog = IcebergHook("lake").catalog
    catalog.create_namespace_if_not_exists("manual")
    iceberg_table = catalog.create_table(f"manual.{unique_name}", schema=pa.schema([("id", pa.int64())]))
    for start in range(0, 60, 10):
        iceberg_table.append(pa.table({"id": pa.array(range(start, start + 10), pa.int64())}))
    return f"lake.manual.{unique_name}"


def snapshot_id(table: str) -> int:
    return IcebergHook("lake").load_table(table.split(".", 1)[1]).current_snapshot().snapshot_id


@pytest.mark.parametrize("dag_kind", ["compaction", "full_rewrite"])
def test_a_bad_param_fails_the_run_before_the_gate_closes(table, compaction_dag, dag_kind):
    dag = compaction_dag(table)
    if dag_kind == "full_rewrite":
        from airflow_iceberg.dag_factory import full_rewrite_dag_id
        from airflow_iceberg.spark_jobs.iceberg_call import TableName
        from devkit.dag_runs import load_dag

        dag = load_dag(full_rewrite_dag_id(TableName.parse(table)))
    before = snapshot_id(table)

    run = dag.test(run_conf={"strategy": "binpack", "sort_order": "id DESC"})

    assert run.state == "failed"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["check_run_params"] == "failed"
    assert states["close_gate"] == "upstream_failed"
    assert WriteGateHook().audit_trail(table) == []  # no close was even attempted
    assert snapshot_id(table) == before


def test_a_dry_run_reports_the_plan_and_changes_neither_table_nor_gate(table, compaction_dag):
    before = snapshot_id(table)
    gate_before = WriteGateHook().get_state(table)

    run = compaction_dag(table).test(run_conf={"dry_run": True})

    assert run.state == "success"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["check_run_params"] == "success"
    assert {states[t] for t in states if t != "check_run_params"} == {"skipped"}
    plan = run.get_task_instance("check_run_params").xcom_pull(task_ids="check_run_params", key="plan")
    assert plan["data_files"] == 6 and plan["file_groups"] == 1 and plan["bytes"] > 0
    assert snapshot_id(table) == before
    gate_after = WriteGateHook().get_state(table)
    assert (gate_after.state, gate_after.owner, gate_after.closed_at) == (
        gate_before.state,
        gate_before.owner,
        gate_before.closed_at,
    )
    assert WriteGateHook().audit_trail(table) == []
