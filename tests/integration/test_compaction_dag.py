"""Whole compaction DAG runs through ``dag.test()``: real gate, local Spark, real Iceberg tables.

The tables are filled by the gated small-files writer in Spark (day-partitioned, format v2, merge-on-read),
so they hold what a streaming writer leaves: many small data files and position-delete files.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_iceberg.hooks.write_gate import WriteGateHook
from devkit.tables import TableStats
from devkit.writers import write_small_files

WRITER_ARGS = ("--days", "2", "--commits", "3", "--files-per-commit", "6", "--delete-commits", "2")


def asset_events(table: str) -> list[dict]:
    """The extras of the asset events of ``table``, oldest first, from Airflow's metadata database."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from airflow_iceberg.core.tables import TableName
    from airflow_iceberg.operators.rewrite import table_asset

    with create_session() as session:
        query = (
            select(AssetEvent.extra)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.uri == table_asset(TableName.parse(table)).uri)
            .order_by(AssetEvent.id)
        )
        return list(session.scalars(query))


def snapshot_ids(table: str) -> list[int]:
    metadata = IcebergHook("lake").load_table(table.split(".", 1)[1]).metadata
    return [s.snapshot_id for s in metadata.snapshots]


@pytest.fixture
def small_files_table(unique_name, table_config) -> str:
    """A new table with 36 small data files in 2 day partitions and a few position-delete files."""
    table = f"lake.compact.{unique_name}"
    written = write_small_files(table_config(table), *WRITER_ARGS)
    assert written["rows_written"] == 720
    return table


@pytest.fixture(scope="module")
def untouched_table(table_config) -> str:
    """One small-files table shared by the tests whose point is that the table stays as it was."""
    table = "lake.compact.must_stay_unchanged"
    write_small_files(table_config(table), *WRITER_ARGS)
    return table


def test_a_dag_run_compacts_the_table_keeps_every_row_and_reopens_the_gate(small_files_table, compaction_dag):
    table = small_files_table
    before = TableStats.read("lake", table)
    assert before.data_files == 36 and before.position_delete_files > 0

    run = compaction_dag(table, where="ts >= '{{ macros.ds_add(ds, -3) }}'").test()

    assert run.state == "success"
    after = TableStats.read("lake", table)
    assert after.rows == before.rows == 720 - 10
    assert after.data_files <= before.data_files / 10
    # Every delete file of the partitions it took is gone: applied by the data rewrite, then dropped as dangling by
    # the position-delete rewrite (rewrite-all: a partition's single delete file too).
    assert after.position_delete_files == 0, f"{after.position_delete_files} delete files left, applying to nothing"
    gate = WriteGateHook()
    assert gate.get_state(table).state == "open"
    assert [r["action"] for r in gate.audit_trail(table)] == ["close", "open"]
    assert {r["owner_run_id"] for r in gate.audit_trail(table)} == {run.run_id}

    # Both rewrites ran in the one task's Spark application, data files first; each reported its result row.
    results = run.get_task_instance("rewrite_files").xcom_pull(task_ids="rewrite_files")
    assert list(results) == ["rewrite_data_files", "rewrite_position_delete_files"]
    assert results["rewrite_data_files"]["rewritten_data_files_count"] == before.data_files
    assert results["rewrite_data_files"]["added_data_files_count"] == after.data_files
    assert "rewritten_delete_files_count" in results["rewrite_position_delete_files"]
    assert asset_events(table) == [{"procedures": results}]  # "this table was compacted", with what was done


def test_a_where_predicate_limits_the_rewrite_to_its_partitions(small_files_table, compaction_dag):
    table = small_files_table
    files = IcebergHook("lake").load_table(table.split(".", 1)[1]).inspect.files().to_pylist()
    days = sorted({f["partition"]["ts_day"] for f in files})
    newest_day = days[-1].isoformat()
    per_day = {d: sum(1 for f in files if f["partition"]["ts_day"] == d and f["content"] == 0) for d in days}

    run = compaction_dag(table, where=f"ts >= '{newest_day}'").test()

    assert run.state == "success"
    after = IcebergHook("lake").load_table(table.split(".", 1)[1]).inspect.files().to_pylist()
    after_per_day = {d: sum(1 for f in after if f["partition"]["ts_day"] == d and f["content"] == 0) for d in days}
    assert after_per_day[days[-1]] == 1
    assert after_per_day[days[0]] == per_day[days[0]]  # the older partition was not touched


def test_a_failed_rewrite_leaves_the_gate_open_the_run_failed_and_the_table_unchanged(untouched_table, compaction_dag):
    table = untouched_table
    before = TableStats.read("lake", table)
    snapshots_before = snapshot_ids(table)

    # The predicate parses and names the table's own column, but compares it with a column, not a value, so
    # Iceberg cannot select files by it: Spark fails after the gate is closed. (A predicate plan_compaction can
    # refuse never gets that far.)
    run = compaction_dag(table, where="id > id + 1").test()

    assert run.state == "failed"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["close_gate"] == "success"
    assert states["rewrite_files"] == "failed"
    assert states["open_gate"] == "success"
    assert asset_events(table) == []  # a failed rewrite emits no asset event
    gate = WriteGateHook()
    assert gate.get_state(table).state == "open"
    assert [r["action"] for r in gate.audit_trail(table)][-2:] == ["close", "open"]
    assert TableStats.read("lake", table) == before
    assert snapshot_ids(table) == snapshots_before


def test_a_killed_rewrite_leaves_the_gate_open_the_run_failed_and_the_table_unchanged(untouched_table, compaction_dag):
    table = untouched_table
    before = TableStats.read("lake", table)
    snapshots_before = snapshot_ids(table)
    dag = compaction_dag(table)
    # Killed by its timeout while Spark is still starting: SparkSubmitOperator.on_kill ends spark-submit.
    dag.get_task("rewrite_files").execution_timeout = timedelta(seconds=2)

    run = dag.test()

    assert run.state == "failed"
    assert run.get_task_instance("rewrite_files").state == "failed"
    assert run.get_task_instance("open_gate").state == "success"
    assert WriteGateHook().get_state(table).state == "open"
    assert TableStats.read("lake", table) == before
    assert snapshot_ids(table) == snapshots_before


def test_a_rewrite_refuses_to_start_when_its_run_no_longer_holds_the_gate(untouched_table, compaction_dag):
    table = untouched_table
    snapshots_before = snapshot_ids(table)
    dag = compaction_dag(table)
    # Simulate the lease ending mid-run: someone opens the gate before the rewrite starts.
    wait = dag.get_task("wait_until_snapshot_idle")
    original_poke = wait.poke

    def poke_then_lose_the_gate(context):
        result = original_poke(context)
        if result.is_done:
            WriteGateHook().force_open(table, "test: the lease ended")
        return result

    wait.poke = poke_then_lose_the_gate
    run = dag.test()

    assert run.state == "failed"
    assert run.get_task_instance("rewrite_files").state == "failed"
    assert snapshot_ids(table) == snapshots_before
    assert WriteGateHook().audit_trail(table)[-1]["action"] == "open_noop"
