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
        from airflow_iceberg.core.tables import TableName
        from airflow_iceberg.surface.dag_factory import full_rewrite_dag_id
        from devkit.dag_runs import load_dag

        dag = load_dag(full_rewrite_dag_id(TableName.parse(table)))
    before = snapshot_id(table)

    run = dag.test(run_conf={"strategy": "binpack", "sort_order": "id DESC"})

    assert run.state == "failed"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["plan_compaction"] == "failed"
    assert states["close_gate"] == "upstream_failed"
    assert WriteGateHook().audit_trail(table) == []  # no close was even attempted
    assert snapshot_id(table) == before


def test_a_dry_run_reports_the_plan_and_changes_neither_table_nor_gate(table, compaction_dag):
    before = snapshot_id(table)
    gate_before = WriteGateHook().get_state(table)

    run = compaction_dag(table).test(run_conf={"dry_run": True})

    assert run.state == "success"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["plan_compaction"] == "success"
    assert {states[t] for t in states if t != "plan_compaction"} == {"skipped"}
    plan = run.get_task_instance("plan_compaction").xcom_pull(task_ids="plan_compaction", key="plan")
    assert (plan["decision"], plan["outcome"]) == ("compact", "dry_run")
    assert plan["partitions"] == {"rewrite_data_files": ["(unpartitioned)"]}  # no deletes: nothing for the other
    assert plan["health"]["data_files"] == 6 and plan["health"]["bytes"] > 0
    assert plan["health"]["unhealthy"][0]["small_files"] == 6
    [record] = WriteGateHook().records.run_records(table)
    assert (record["outcome"], record["data_files_before"], record["data_files_after"]) == ("dry_run", 6, None)
    assert snapshot_id(table) == before
    gate_after = WriteGateHook().get_state(table)
    assert (gate_after.state, gate_after.owner, gate_after.closed_at) == (
        gate_before.state,
        gate_before.owner,
        gate_before.closed_at,
    )
    assert WriteGateHook().audit_trail(table) == []


BAD_PREDICATES = {
    "unbalanced-quote": ("id >= '3", "is not valid Spark SQL"),
    "statement-separator": ("id >= 3; DROP TABLE lake.manual.t", "must be one condition"),
    "unknown-column": ("region = 'eu'", "names 'region', which table lake.manual."),
    "empty": ("", "param 'where' is empty"),
}


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry-run"])
@pytest.mark.parametrize("name", list(BAD_PREDICATES))
def test_a_predicate_spark_would_refuse_fails_the_plan_before_the_gate(table, compaction_dag, capfd, name, dry_run):
    predicate, message = BAD_PREDICATES[name]
    before = snapshot_id(table)

    run = compaction_dag(table).test(run_conf={"where": predicate, "dry_run": dry_run})

    assert run.state == "failed"
    check = run.get_task_instance("plan_compaction")
    assert check.state == "failed"
    assert run.get_task_instance("close_gate").state == "upstream_failed"
    output = capfd.readouterr()
    log = output.out + output.err  # dag.test() runs the tasks in this process
    assert message in log and (repr(predicate) in log or name == "empty"), log[-3000:]
    assert WriteGateHook().audit_trail(table) == []  # no close was even attempted
    assert snapshot_id(table) == before
    [record] = WriteGateHook().records.run_records(table)  # never planned, yet recorded
    assert (record["decision"], record["outcome"], record["run_id"]) == ("none", "failed", run.run_id)
    assert record["reason"] == "plan_compaction failed (RunParamsError); see its log"
    assert predicate not in str(record) or name == "empty"  # the predicate stays in the task's log


def test_a_gate_mysql_that_does_not_answer_fails_the_plan_naming_the_table_the_connection_and_what_to_do(
    table, compaction_dag, capfd, monkeypatch
):
    import json
    import os

    before = snapshot_id(table)
    gate = json.loads(os.environ["AIRFLOW_CONN_WRITE_GATE_DEFAULT"])
    monkeypatch.setenv("AIRFLOW_CONN_WRITE_GATE_DEFAULT", json.dumps({**gate, "port": 1}))  # nothing listens

    run = compaction_dag(table).test()

    output = capfd.readouterr()
    log = output.out + output.err  # dag.test() runs the tasks in this process
    monkeypatch.undo()  # the gate's real connection again, to look at it
    assert run.state == "failed"
    assert run.get_task_instance("plan_compaction").state == "failed"
    assert run.get_task_instance("close_gate").state == "upstream_failed"
    expected = (
        f"cannot plan {table}: the write gate's MySQL ({gate['host']}:1, database '{gate['schema']}') of connection "
        "'write_gate_default' did not answer: "
    )
    assert expected in log, log[-3000:]
    assert "Nothing in the gate changed." in log and "`airflow connections get write_gate_default`" in log
    assert "(2003," not in log.split(expected, 1)[1].splitlines()[0]  # pymysql's raw tuple is not the message
    assert WriteGateHook().audit_trail(table) == [] and snapshot_id(table) == before
