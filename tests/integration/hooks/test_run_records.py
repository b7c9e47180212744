"""The run records and health checks in the gate's MySQL: a run written at its start and completed at its end, a
failed run recorded without its error's text, and each table's latest health check."""

from __future__ import annotations

import pytest

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.surface.dag_factory import compaction_dag_id


def record(table: str, run_id: str, **columns) -> dict:
    return {"table_name": table, "dag_id": compaction_dag_id(TableName.parse(table)), "run_id": run_id, **columns}


def test_a_run_is_written_at_its_start_and_completed_keeping_what_its_start_wrote(gate_hook, gate_table):
    start = {"decision": "compact", "reason": "12 small files", "outcome": "running", "data_files_before": 40}
    gate_hook.records.record_run(record(gate_table, "manual__1", **start), finished=False)
    [started] = gate_hook.records.run_records(gate_table)
    assert (started["decision"], started["data_files_before"], started["finished_at"]) == ("compact", 40, None)

    gate_hook.records.record_run(record(gate_table, "manual__1", outcome="success", data_files_after=3), finished=True)
    [done] = gate_hook.records.run_records(gate_table)
    assert (done["decision"], done["reason"], done["data_files_before"]) == ("compact", "12 small files", 40)
    assert (done["outcome"], done["data_files_after"]) == ("success", 3)
    assert done["id"] == started["id"] and done["finished_at"] >= done["started_at"]  # one row, completed in place


def test_an_unknown_column_is_refused_naming_it_before_anything_is_written(gate_hook, gate_table):
    with pytest.raises(ValueError, match=r"unknown run record columns \['password'\]"):
        gate_hook.records.record_run(record(gate_table, "manual__1", outcome="success", password="x"), finished=True)
    assert gate_hook.records.run_records(gate_table) == []


def test_a_run_that_failed_before_it_planned_is_recorded_by_its_errors_type_alone(gate_hook, gate_table):
    error = ConnectionError("mysql+pymysql://admin:s3cret@catalog/iceberg refused")
    dag_id = compaction_dag_id(TableName.parse(gate_table))
    gate_hook.records.record_failed_run(gate_table, dag_id, "manual__2", "plan_compaction", error)
    [failed] = gate_hook.records.run_records(gate_table)
    assert (failed["decision"], failed["outcome"]) == ("none", "failed")
    assert failed["reason"] == "plan_compaction failed (ConnectionError); see its log"
    assert gate_hook.records.failed_runs(3600)[gate_table] == 1


def test_each_tables_latest_health_check_replaces_its_last_and_a_started_run_is_stamped(gate_hook, gate_table):
    check = {"table_name": gate_table, "reading": "listing", "data_files": 10, "delete_files": 0}
    healthy = {"snapshot_id": 1, "decision": "healthy", "reason": "ok", "score": 0}
    gate_hook.records.record_health_checks([{**check, **healthy}])
    assert gate_hook.records.health_checks(gate_table)[gate_table]["started_at"] is None
    started = {"snapshot_id": 2, "decision": "started", "reason": "12 small files", "score": 12}
    gate_hook.records.record_health_checks([{**check, **started}])
    [latest] = gate_hook.records.health_checks(gate_table).values()
    assert (latest["snapshot_id"], latest["decision"], latest["score"]) == (2, "started", 12)
    assert latest["started_at"] is not None and latest["checked_at"] is not None


def test_a_tables_last_run_is_its_newest_and_says_how_long_ago_it_ended(gate_hook, gate_table):
    for n in (1, 2):
        done = {"decision": "skip", "reason": "healthy", "outcome": "skipped"}
        gate_hook.records.record_run(record(gate_table, f"manual__{n}", **done), finished=True)
    last = gate_hook.records.last_runs([gate_table])[gate_table]
    assert last["run_id"] == "manual__2" and 0 <= last["seconds_ago"] < 600
