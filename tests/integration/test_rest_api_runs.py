"""Manual runs through the REST API without a logical date, on a live Airflow parsing a fleet of 200 tables.

Airflow 3 lets a run be triggered with ``logical_date: null``; such a run has no ``ds``. A run that gives its
own ``where`` compacts the table; a run of a table whose ``where`` needs ``ds``, and that gives none, fails in
``plan_compaction`` with a sentence saying so, before the gate was ever closed; so does a run whose conf has a
key that is no Param (a typo), naming it and the nearest Param.
"""

from __future__ import annotations

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.surface.dag_factory import compaction_dag_id
from devkit.writers import write_small_files

#: The shipped demo table's predicate: the last two days before the run's logical date.
RECENT_DAYS = "ts >= '{{ macros.ds_add(ds, -2) }}'"


def test_a_run_without_logical_date_uses_its_own_where(unique_name, table_config, gate_hook, live_airflow):
    table = TableName.parse(f"lake.rest.{unique_name}")
    write_small_files(
        table_config(table), "--days", "2", "--commits", "3", "--files-per-commit", "3", "--delete-commits", "1"
    )
    entry = {"where": RECENT_DAYS, "full_rewrite": {"schedule": None}}
    live_airflow.compacted(table, entry, {"where": "ts >= '2000-01-01'"})
    actions = [row["action"] for row in gate_hook.audit_trail(table)]
    assert actions == ["close", "open"]
    assert gate_hook.get_state(table).state == "open"


def refused_before_the_gate(live_airflow, gate_hook, table: TableName, conf: dict) -> str:
    """Trigger ``table``'s compaction DAG with ``conf`` and no logical date; assert that ``plan_compaction`` failed
    the run and the gate was never touched; return that task's log."""
    live_airflow.add_tables({"table": str(table), "where": RECENT_DAYS, "full_rewrite": {"schedule": None}})
    dag_id = compaction_dag_id(table)

    run_id = live_airflow.trigger(dag_id, conf)
    run = live_airflow.wait_for_run(dag_id, run_id, timeout=600)

    states = live_airflow.task_states(dag_id, run_id)
    assert run["state"] == "failed"
    assert states["plan_compaction"] == "failed", states
    assert states["close_gate"] == "upstream_failed", states
    assert gate_hook.audit_trail(table) == [], "the gate was touched"
    return live_airflow.task_log(dag_id, run_id, "plan_compaction")


def test_a_run_without_logical_date_needing_ds_fails_before_the_gate(unique_name, gate_hook, live_airflow):
    log = refused_before_the_gate(live_airflow, gate_hook, TableName.parse(f"lake.rest.{unique_name}"), {})
    assert "uses the run's logical date" in log and "this run has none" in log, log[-3000:]
    assert "Give the run its own 'where' in its conf" in log


def test_a_conf_key_that_is_no_param_fails_before_the_gate_naming_it_and_the_nearest(
    unique_name, gate_hook, live_airflow
):
    table = TableName.parse(f"lake.rest.{unique_name}")
    log = refused_before_the_gate(live_airflow, gate_hook, table, {"wher": "ts >= '2026-11-29'"})
    assert "the run's conf has 'wher', which is no Param of this DAG; did you mean 'where'?" in log, log[-3000:]
    assert "'ds' is undefined" not in log  # named before the table's predicate is rendered
