"""The health watch's trigger: one shared sweep per catalog, and its serialization."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.triggers.table_health import (
    HEALTH_STREAM,
    TableHealthTrigger,
    health_asset,
    health_asset_name,
)


def trigger(table: str = "lake.db.t", **overrides) -> TableHealthTrigger:
    settings = {
        "table": table,
        "dag_id": f"iceberg_compact__{table.replace('.', '__')}",
        "iceberg_conn_id": "lake",
        "write_gate_conn_id": "write_gate_default",
        "poll_interval": 60,
        "min_small_files": 12,
        "rewrite_data_files_where": "ts >= '{{ macros.ds_add(ds, -2) }}'",
        **overrides,
    }
    return TableHealthTrigger(**settings)


def test_watchers_of_one_catalog_gate_database_and_interval_share_one_sweep():
    assert trigger("lake.db.a").shared_stream_key() == trigger("lake.db.b", min_small_files=4).shared_stream_key()
    assert trigger().shared_stream_key()[0] == HEALTH_STREAM
    for other in ({"iceberg_conn_id": "lake2"}, {"write_gate_conn_id": "gate2"}, {"poll_interval": 30}):
        assert trigger(**other).shared_stream_key() != trigger().shared_stream_key()


def test_it_serializes_to_the_arguments_that_rebuild_it():
    path, kwargs = trigger(cooldown_minutes=5, min_small_files=4, target_file_size_bytes=1 << 20).serialize()
    assert path == "airflow_iceberg.triggers.table_health.TableHealthTrigger"
    assert TableHealthTrigger(**kwargs).serialize() == (path, kwargs)
    rebuilt = TableHealthTrigger(**kwargs)
    assert (rebuilt.thresholds.min_small_files, rebuilt.options) == (4, {"target-file-size-bytes": 1 << 20})
    assert rebuilt.where == {
        "rewrite_data_files": "ts >= '{{ macros.ds_add(ds, -2) }}'",
        "rewrite_position_delete_files": None,
    }


def test_its_arguments_are_flat_and_leave_defaults_out():
    """The dag-processor serializes, hashes and decodes them at every parse: scalars only, and few."""
    _, kwargs = trigger(min_small_files=12, rewrite_data_files_where=None).serialize()
    assert sorted(kwargs) == [
        "cooldown_minutes",
        "dag_id",
        "iceberg_conn_id",
        "poll_interval",
        "table",
        "write_gate_conn_id",
    ]
    assert all(isinstance(value, (str, int, float)) for value in kwargs.values())


def test_its_repr_names_the_table_and_dag_and_not_the_arguments():
    assert repr(trigger()) == "<TableHealthTrigger lake.db.t for iceberg_compact__lake__db__t>"


def test_an_unknown_health_trigger_is_refused_by_name():
    with pytest.raises(TypeError, match="min_small_file"):
        trigger(min_small_file=3)


def test_each_table_has_its_own_asset_and_watcher():
    asset = health_asset(trigger("lake.sales.orders"))
    assert (
        asset.name == health_asset_name(TableName.parse("lake.sales.orders")) == "iceberg_health__lake__sales__orders"
    )
    assert [w.trigger.table for w in asset.watchers] == ["lake.sales.orders"]


def unchanged(monkeypatch, sweep) -> None:
    """The catalog's second look, before a run starts, finds each table as the sweep's check read it."""
    monkeypatch.setattr(
        sweep, "list_locations", lambda tables: ({str(t): sweep.memory[str(t)].location for t in tables}, {})
    )


class _Runs:
    """The gate database's run records as ``hold_back`` reads them: none, or the one a test sets."""

    def __init__(self) -> None:
        self.last: dict[str, dict] = {}

    def last_runs(self, tables):
        return {t: self.last[t] for t in tables if t in self.last}


def test_a_run_asked_for_but_not_yet_created_by_the_scheduler_holds_the_table_back_past_its_cooldown(monkeypatch):
    """Airflow's scheduler creates asset-triggered runs a few per loop: with 200 events at once, a run appeared a
    minute after its event, and the table, its cool-down over and no run of it queued yet, got a second event."""
    import asyncio
    import time as clock

    from airflow_iceberg.triggers import table_health
    from airflow_iceberg.triggers.table_health import CatalogSweep, Check, TableMemory

    pending = {"count": 0}

    async def pending_runs(dag_id):
        return pending["count"]

    monkeypatch.setattr(table_health, "_pending_runs", pending_runs)
    now = {"t": 1000.0}
    monkeypatch.setattr(clock, "monotonic", lambda: now["t"])
    runs = _Runs()
    sweep = CatalogSweep("lake", "write_gate_default", 60)
    monkeypatch.setattr(sweep, "_gate", lambda: runs)
    unchanged(monkeypatch, sweep)
    watcher = trigger(cooldown_minutes=1)
    sweep.memory["lake.db.t"] = TableMemory(location="s3://t", facts=None)

    def decide() -> Check:
        check = Check("lake.db.t", "needs_work", "1 of 1 partitions need work")
        asyncio.run(sweep.hold_back([check], {"lake.db.t": watcher}))
        return check

    assert decide().decision == "started"
    now["t"] += 61  # the cool-down is over; the scheduler has not created the run yet
    check = decide()
    assert check.decision == "waiting" and "has not been created yet" in check.reason, check.reason
    pending["count"] = 1  # created, queued
    assert decide().decision == "waiting"
    pending["count"] = 0  # it ran and ended a minute ago
    runs.last["lake.db.t"] = {
        "run_id": "r1",
        "outcome": "succeeded",
        "started_at": datetime.now(timezone.utc),
        "finished_at": datetime.now(timezone.utc),
        "seconds_ago": 61.0,
    }
    now["t"] += 61
    assert decide().decision == "started"  # the table needs work again: a new need, a new run


def test_a_run_that_never_appears_holds_the_table_back_no_longer_than_run_appear_seconds(monkeypatch):
    import asyncio
    import time as clock

    from airflow_iceberg.triggers import table_health
    from airflow_iceberg.triggers.table_health import RUN_APPEAR_SECONDS, CatalogSweep, Check, TableMemory

    async def no_runs(dag_id):
        return 0

    monkeypatch.setattr(table_health, "_pending_runs", no_runs)
    now = {"t": 1000.0}
    monkeypatch.setattr(clock, "monotonic", lambda: now["t"])
    sweep = CatalogSweep("lake", "write_gate_default", 60)
    monkeypatch.setattr(sweep, "_gate", lambda: _Runs())
    unchanged(monkeypatch, sweep)
    sweep.memory["lake.db.t"] = TableMemory(location="s3://t", facts=None)
    watcher = trigger(cooldown_minutes=1)

    def decide() -> str:
        check = Check("lake.db.t", "needs_work", "needs work")
        asyncio.run(sweep.hold_back([check], {"lake.db.t": watcher}))
        return check.decision

    assert decide() == "started"
    now["t"] += RUN_APPEAR_SECONDS - 1
    assert decide() == "waiting"
    now["t"] += 2
    assert decide() == "started"


def test_a_table_that_changed_while_a_long_sweep_ran_waits_for_the_next_sweep(monkeypatch):
    """With 200 tables a sweep took three minutes, most of it asking Airflow about each table's runs. A run that
    compacted a table after the sweep read it, and ended more than a cool-down before its turn came, left a stale
    "needs work": the watch started a second run, which found nothing to do."""
    import asyncio

    from airflow_iceberg.triggers import table_health
    from airflow_iceberg.triggers.table_health import CatalogSweep, Check, TableMemory

    async def no_runs(dag_id):
        return 0

    monkeypatch.setattr(table_health, "_pending_runs", no_runs)
    runs = _Runs()
    runs.last["lake.db.t"] = {
        "run_id": "r1",
        "outcome": "success",
        "started_at": datetime.now(timezone.utc),
        "finished_at": datetime.now(timezone.utc),
        "seconds_ago": 75.0,  # ended after the sweep read the table, a cool-down before its turn
    }
    sweep = CatalogSweep("lake", "write_gate_default", 60)
    monkeypatch.setattr(sweep, "_gate", lambda: runs)
    sweep.memory["lake.db.t"] = TableMemory(location="s3://t/00007.metadata.json", facts=None)
    now_at = {"lake.db.t": "s3://t/00008.metadata.json"}  # the run's rewrite committed
    monkeypatch.setattr(sweep, "list_locations", lambda tables: (now_at, {}))
    watcher = trigger(cooldown_minutes=1)

    check = Check("lake.db.t", "needs_work", "1 of 1 partitions need work")
    asyncio.run(sweep.hold_back([check], {"lake.db.t": watcher}))
    assert check.decision == "waiting", check
    assert check.reason.endswith("waits: the table changed while this sweep ran; the next one decides")
    assert sweep.memory["lake.db.t"].started_at is None  # no run asked for

    now_at["lake.db.t"] = "s3://t/00007.metadata.json"  # as read: the need stands
    check = Check("lake.db.t", "needs_work", "1 of 1 partitions need work")
    asyncio.run(sweep.hold_back([check], {"lake.db.t": watcher}))
    assert check.decision == "started"


def test_a_catalog_that_does_not_answer_the_second_look_starts_nothing(monkeypatch):
    import asyncio

    from airflow_iceberg.triggers import table_health
    from airflow_iceberg.triggers.table_health import CatalogSweep, Check, TableMemory

    async def no_runs(dag_id):
        return 0

    def down(tables):
        raise ConnectionError("catalog database down")

    monkeypatch.setattr(table_health, "_pending_runs", no_runs)
    sweep = CatalogSweep("lake", "write_gate_default", 60)
    monkeypatch.setattr(sweep, "_gate", lambda: _Runs())
    monkeypatch.setattr(sweep, "list_locations", down)
    sweep.memory["lake.db.t"] = TableMemory(location="s3://t", facts=None)

    check = Check("lake.db.t", "needs_work", "needs work")
    asyncio.run(sweep.hold_back([check], {"lake.db.t": trigger(cooldown_minutes=1)}))
    assert check.decision == "waiting"
    assert "the catalog did not answer a second look: ConnectionError: catalog database down" in check.reason


def test_a_new_snapshot_keeps_what_the_watch_asked_for_and_saw_of_runs(monkeypatch):
    """A streaming writer commits every minute: a new snapshot must not forget that the watch asked for a run that
    the scheduler has not created yet, or the table gets a second event a cool-down later."""
    from airflow_iceberg.planning.screen import SnapshotFacts
    from airflow_iceberg.triggers import table_health
    from airflow_iceberg.triggers.table_health import CatalogSweep, TableMemory

    asked = datetime(2026, 11, 29, 9, 0, tzinfo=timezone.utc)
    sweep = CatalogSweep("lake", "write_gate_default", 60)
    sweep.memory["lake.db.t"] = TableMemory(
        "s3://t/1.json", SnapshotFacts(1), started_at=5.0, started_wall=asked, run_seen=False
    )
    monkeypatch.setattr(sweep, "read_facts", lambda location: SnapshotFacts(2))
    monkeypatch.setattr(table_health, "screen", lambda facts, last_read, thresholds: (False, "its totals say healthy"))

    sweep.check(trigger(), "s3://t/2.json", {})

    memory = sweep.memory["lake.db.t"]
    assert (memory.location, memory.facts.snapshot_id) == ("s3://t/2.json", 2)
    assert (memory.started_at, memory.started_wall, memory.run_seen) == (5.0, asked, False)
