"""A table-list change, a pause and an unpause take effect within a minute under the fleet setting, with nobody
asking for a parse.

The suite's live Airflow runs the fleet setting (``FLEET_SETTINGS``: an unchanged table list parsed once an
hour, the DAG folder as a ``TableListDagBundle``). Here the table list is only written, as a user or a deploy
would write it: no REST call, no CLI, no touch of a DAG file. The new table's DAG must be parsed and runnable, and
the removed table's DAGs gone, within 60 s of the write.
"""

from __future__ import annotations

import time
from datetime import datetime

import pyarrow as pa
import yaml
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.surface.dag_bundle import FLEET_SETTINGS
from airflow_iceberg.surface.dag_factory import compaction_dag_id, full_rewrite_dag_id
from airflow_iceberg.triggers.table_health import health_asset_name

#: What the issue allows from the write of the table list to the change having taken effect.
TAKES_EFFECT_SECONDS = 60
#: The health watch's poll interval in these tests.
POLL_SECONDS = 5


def _dags_of(table: TableName) -> tuple[str, str]:
    return compaction_dag_id(table), full_rewrite_dag_id(table)


def _announcements(live_airflow) -> int:
    """How often the dag-processor's bundle has logged a table-list change so far."""
    log = (live_airflow.home / "standalone.log").read_text(errors="replace")
    return log.count(f"The table list {live_airflow.table_list} changed")


def test_a_table_list_change_takes_effect_within_a_minute(unique_name, live_airflow):
    for name, value in FLEET_SETTINGS.items():  # the setting this test holds to its promise
        assert live_airflow.env[name] == value, f"the live Airflow does not run the fleet setting's {name}"
    added = TableName.parse(f"lake.table_list.{unique_name}")
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    catalog = IcebergHook("lake").catalog
    catalog.create_namespace_if_not_exists(added.namespace)
    catalog.create_table(added.in_catalog, schema=rows.schema).append(rows)

    document = yaml.safe_load(live_airflow.table_list.read_text())
    removed = TableName.parse(document["tables"][-1]["table"])
    live_airflow.wait_for(  # the live Airflow's first parse of its table list, if this test comes first
        f"{removed}'s DAGs to remove", lambda: all(live_airflow.dag_parsed(d) for d in _dags_of(removed)), 600
    )
    announced = _announcements(live_airflow)

    document["tables"] = document["tables"][:-1] + [{"table": str(added), "full_rewrite": {"schedule": None}}]
    live_airflow.table_list.write_text(yaml.safe_dump(document))
    written = time.monotonic()

    def changed() -> bool:
        present = all(live_airflow.dag_parsed(d) for d in _dags_of(added))
        gone = not any(live_airflow.dag_parsed(d) for d in _dags_of(removed))
        return present and gone

    live_airflow.wait_for("the table list's change to take effect", changed, TAKES_EFFECT_SECONDS)
    took = time.monotonic() - written
    print(f"table added and table removed took effect {took:.1f} s after the write (goal: {TAKES_EFFECT_SECONDS} s)")
    # The bundle made it so, not the hourly parse (FLEET_PARSE_SECONDS) and not a parse someone asked for.
    assert _announcements(live_airflow) == announced + 1, "the bundle did not say it saw the table list change"

    dag_id = compaction_dag_id(added)
    response = live_airflow.api(
        "POST", f"dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": {"dry_run": True}}
    )
    assert response.status_code == 200, response.text
    run = live_airflow.wait_for_run(dag_id, response.json()["dag_run_id"], timeout=600)
    states = live_airflow.task_states(dag_id, run["dag_run_id"])
    assert run["state"] == "success", states
    assert states["plan_compaction"] == "success", states


def _watchers(live_airflow, table: TableName) -> int:
    """How many triggers Airflow has registered to watch the table's health (its asset's watchers)."""
    return live_airflow.query(
        "SELECT count(*) FROM asset_watcher w JOIN asset a ON a.id = w.asset_id WHERE a.name = %s",
        health_asset_name(table),
    )[0][0]


def _checked_at(table: TableName) -> datetime | None:
    check = WriteGateHook("write_gate_default").health_checks().get(str(table))
    return check["checked_at"] if check else None


def _pause(live_airflow, dag_id: str, paused: bool) -> None:
    """Pause or unpause through the REST API, as the UI does."""
    response = live_airflow.api("PATCH", f"dags/{dag_id}", json={"is_paused": paused})
    assert response.status_code == 200, response.text


class Quiet:
    """True once the table's last check has not changed for ``seconds``: its sweeps have stopped."""

    def __init__(self, table: TableName, seconds: float) -> None:
        self.table, self.seconds = table, seconds
        self.last, self.since = _checked_at(table), time.monotonic()

    def __call__(self) -> bool:
        checked = _checked_at(self.table)
        if checked != self.last:
            self.last, self.since = checked, time.monotonic()
        return time.monotonic() - self.since >= self.seconds


def test_a_paused_table_stops_being_watched_and_an_unpaused_one_starts_within_a_minute(unique_name, live_airflow):
    """Airflow registers a health watch at a parse, and only for an unpaused DAG: under the fleet setting's hourly
    parse, the bundle's look at the paused DAGs is what makes the watch follow a pause and an unpause."""
    table = TableName.parse(f"lake.table_list.{unique_name}")
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    catalog = IcebergHook("lake").catalog
    catalog.create_namespace_if_not_exists(table.namespace)
    catalog.create_table(table.in_catalog, schema=rows.schema).append(rows)
    health = {"watch": True, "poll_interval": POLL_SECONDS, "cooldown_minutes": 1}
    live_airflow.add_tables({"table": str(table), "full_rewrite": {"schedule": None}, "health": health})
    dag_id = compaction_dag_id(table)
    live_airflow.wait_for(f"the first health check of {table}", lambda: _checked_at(table), TAKES_EFFECT_SECONDS)
    assert _watchers(live_airflow, table) == 1

    paused_at = time.monotonic()
    _pause(live_airflow, dag_id, True)
    live_airflow.wait_for(f"{table}'s watch to go", lambda: _watchers(live_airflow, table) == 0, TAKES_EFFECT_SECONDS)
    print(f"paused: its watch went {time.monotonic() - paused_at:.1f} s after (goal: {TAKES_EFFECT_SECONDS} s)")
    quiet = Quiet(table, 3 * POLL_SECONDS)
    live_airflow.wait_for(f"{table}'s checks to stop", quiet, TAKES_EFFECT_SECONDS)
    last_check = quiet.last

    unpaused_at = time.monotonic()
    _pause(live_airflow, dag_id, False)
    live_airflow.wait_for(
        f"{table} to be checked after its unpause", lambda: _checked_at(table) != last_check, TAKES_EFFECT_SECONDS
    )
    print(f"unpaused: checked again {time.monotonic() - unpaused_at:.1f} s after (goal: {TAKES_EFFECT_SECONDS} s)")
    assert _watchers(live_airflow, table) == 1
