"""The idle trigger's serialization, pacing and events, with a fake look at the table."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

from airflow_iceberg.core.gate_state import GateOwner
from airflow_iceberg.core.idle import IdleCheck
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.exceptions import LeaseLostError, WorkGoneError
from airflow_iceberg.triggers import snapshot_idle
from airflow_iceberg.triggers.snapshot_idle import SnapshotIdleTrigger

RUN = GateOwner("iceberg_compact__lake__db__t", "manual__1")
CLOSED_AT = datetime(2026, 11, 22, 12, 0, 0, tzinfo=timezone.utc)


def trigger(**overrides) -> SnapshotIdleTrigger:
    arguments = {
        "table": "lake.db.t",
        "dag_id": RUN.dag_id,
        "run_id": RUN.run_id,
        "idle_seconds": 30,
        "iceberg_conn_id": "lake",
        "write_gate_conn_id": "gate",
        "poke_interval": 10.0,
    }
    return SnapshotIdleTrigger(**{**arguments, **overrides})


def test_trigger_serializes_to_its_own_class_and_arguments():
    classpath, kwargs = trigger().serialize()
    assert classpath == "airflow_iceberg.triggers.snapshot_idle.SnapshotIdleTrigger"
    assert SnapshotIdleTrigger(**kwargs).serialize() == (classpath, kwargs)
    assert trigger(attempt=2).serialize()[1]["attempt"] == 2  # pre-started work: its looks watch the work too


def test_trigger_ends_the_wait_when_the_pre_started_work_is_gone(monkeypatch):
    def look(**kwargs):
        assert kwargs["attempt"] == 1
        raise WorkGoneError("the rewrite of lake.db.t ended before the go: rewrite_files failed")

    monkeypatch.setattr(snapshot_idle, "check_snapshot_idle", look)
    payload, _ = run_trigger(trigger(attempt=1), monkeypatch)
    message = "WorkGoneError: the rewrite of lake.db.t ended before the go: rewrite_files failed"
    assert payload == {"status": "work_gone", "message": message}  # the sensor fails it without retries


def looks(idle: list[float], idle_seconds: int = 30):
    """A stand-in for check_snapshot_idle that reports these idle times in turn, and records its calls."""
    calls: list[dict] = []

    def look(**kwargs) -> IdleCheck:
        calls.append(kwargs)
        seconds = idle[len(calls) - 1]
        return IdleCheck(seconds >= idle_seconds, seconds, idle_seconds, CLOSED_AT, 7, CLOSED_AT)

    return look, calls


def run_trigger(instance: SnapshotIdleTrigger, monkeypatch) -> tuple[dict, list[float]]:
    slept: list[float] = []

    async def no_wait(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(snapshot_idle.asyncio, "sleep", no_wait)
    event = asyncio.run(anext(instance.run()))
    return event.payload, slept


def test_trigger_sleeps_a_poke_interval_or_until_the_window_ends_then_fires(monkeypatch):
    look, calls = looks([0.0, 10.0, 25.0, 30.0])
    monkeypatch.setattr(snapshot_idle, "check_snapshot_idle", look)
    payload, slept = run_trigger(trigger(), monkeypatch)
    assert payload["status"] == "success" and payload["check"]["idle_for_seconds"] == 30
    assert slept == [10.0, 10.0, 5.0]  # the last sleep ends when the window would
    assert calls[0]["table"] == TableName("lake", "db", "t") and calls[0]["owner"] == RUN


def test_trigger_reports_a_failed_look_as_an_error_event_instead_of_crashing(monkeypatch):
    def look(**kwargs):
        raise LeaseLostError("the write gate of lake.db.t is not held")

    monkeypatch.setattr(snapshot_idle, "check_snapshot_idle", look)
    payload, _ = run_trigger(trigger(), monkeypatch)
    message = "LeaseLostError: the write gate of lake.db.t is not held"
    assert payload == {"status": "not_held", "message": message}  # the sensor fails it without retries


def test_trigger_reports_any_other_failed_look_as_an_error_event(monkeypatch):
    def look(**kwargs):
        raise LookupError("table 'db.t' not found through Iceberg connection 'lake'")

    monkeypatch.setattr(snapshot_idle, "check_snapshot_idle", look)
    payload, _ = run_trigger(trigger(), monkeypatch)
    assert payload == {
        "status": "error",
        "message": "LookupError: table 'db.t' not found through Iceberg connection 'lake'",
    }


def test_a_wait_in_the_triggerer_ends_at_its_time_saying_why_the_writers_had_not_gone_idle(monkeypatch):
    look, calls = looks([5.0, 6.0, 7.0])
    monkeypatch.setattr(snapshot_idle, "check_snapshot_idle", look)
    ends_at = datetime.now(timezone.utc) - timedelta(seconds=1)  # already over after the first look
    event, slept = run_trigger(trigger(ends_at=ends_at.isoformat()), monkeypatch)
    assert len(calls) == 1 and slept == []
    assert event == {
        "status": "timeout",
        "message": "lake.db.t was idle for 5 s of the 30 s required, and no "
        "writer acknowledged it (writers waited for: none reported; acknowledged: []). Give the wait "
        "more time (half of the table's max_pause_seconds), or a shorter idle_seconds",
    }


def test_a_wait_in_the_triggerer_sleeps_no_later_than_its_end(monkeypatch):
    look, _ = looks([5.0, 40.0])
    monkeypatch.setattr(snapshot_idle, "check_snapshot_idle", look)
    ends_at = datetime.now(timezone.utc) + timedelta(seconds=3)
    event, slept = run_trigger(trigger(ends_at=ends_at.isoformat()), monkeypatch)
    assert event["status"] == "success" and len(slept) == 1 and 0 < slept[0] <= 3
