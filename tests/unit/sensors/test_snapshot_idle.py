"""The idle sensor's arguments, checked at construction, and its looks, bounded by its timeout."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout

from airflow_iceberg.core.idle import IdleCheck
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.exceptions import LeaseLostError, WorkGoneError
from airflow_iceberg.sensors import snapshot_idle as sensor_module
from airflow_iceberg.sensors.snapshot_idle import SnapshotIdleSensor


class TaskInstance:
    """What the sensor uses of its task instance: the XComs it pushes, and in reschedule mode, when the wait's
    first try began (``waited`` seconds ago)."""

    def __init__(self, waited: float = 0.0) -> None:
        self.first = datetime.now(timezone.utc) - timedelta(seconds=waited)
        self.pushed: dict[str, object] = {}

    def get_first_reschedule_date(self, context):
        return self.first

    def xcom_push(self, key, value):
        self.pushed[key] = value


def test_sensor_defaults_its_iceberg_connection_to_the_catalog_and_refuses_negative_idle():
    sensor = SnapshotIdleSensor(task_id="w", table="other.demo.events", idle_seconds=10)
    assert sensor.iceberg_conn_id == "other"
    assert sensor.table == TableName("other", "demo", "events")
    with pytest.raises(ValueError, match="idle_seconds must be a non-negative integer, got -1"):
        SnapshotIdleSensor(task_id="w", table="lake.demo.events", idle_seconds=-1)


def test_sensor_needs_an_idle_window_from_its_caller():
    with pytest.raises(TypeError, match="idle_seconds"):
        SnapshotIdleSensor(task_id="w", table="lake.demo.events")


def test_no_look_outlasts_the_sensors_timeout(monkeypatch):
    """A catalog read that hangs ends the wait when the sensor's time is up (or the least time a look gets, if that
    is later), not when the read returns."""
    released = threading.Event()
    monkeypatch.setattr(sensor_module, "LOOK_FLOOR_SECONDS", 2.0)  # 10 s in a deployment: the rule, not the wait
    sensor = SnapshotIdleSensor(task_id="w", table="lake.demo.events", idle_seconds=10, timeout=1, mode="poke")
    monkeypatch.setattr(sensor, "_check", lambda context: released.wait(600))  # a look that never comes back
    started = time.monotonic()
    try:
        with pytest.raises(
            AirflowSensorTimeout,
            match="timeout of 1 s ran out, with a look still running after 2 s: no look at "
            "lake.demo.events finished: the catalog or the gate's MySQL",
        ):
            sensor.execute({"ti": TaskInstance()})
    finally:
        released.set()
    # The look's floor of 2 s plus slack for a loaded machine, never the read's 600 s.
    assert time.monotonic() - started < 60


def test_a_look_that_fails_fails_the_poke_with_its_own_error(monkeypatch):
    sensor = SnapshotIdleSensor(task_id="w", table="lake.demo.events", idle_seconds=10, timeout=60, mode="poke")

    def look(context):
        raise LookupError("table 'demo.events' not found")

    monkeypatch.setattr(sensor, "_check", look)
    with pytest.raises(LookupError, match="not found"):  # retried like any error: the catalog may come back
        sensor.execute({"ti": TaskInstance()})


def test_a_run_that_lost_its_gate_fails_the_wait_without_retries(monkeypatch):
    sensor = SnapshotIdleSensor(task_id="w", table="lake.demo.events", idle_seconds=10, timeout=60, mode="poke")

    def look(context):
        raise LeaseLostError("the write gate of lake.demo.events is not held")

    monkeypatch.setattr(sensor, "_check", look)
    with pytest.raises(AirflowFailException, match="is not held"):
        sensor.execute({"ti": TaskInstance()})
    with pytest.raises(AirflowFailException, match="is not held"):  # the same when waiting in the triggerer
        sensor.execute_complete({}, {"status": "not_held", "message": "the write gate of lake.demo.events is not held"})


def test_a_wait_for_pre_started_work_looks_at_that_work_and_fails_for_good_once_it_is_gone(monkeypatch):
    sensor = SnapshotIdleSensor(
        task_id="w", table="lake.demo.events", idle_seconds=10, timeout=60, mode="poke", prestarted_work=True
    )
    seen: dict = {}

    def look(**kwargs):
        seen.update(kwargs)
        raise WorkGoneError("the rewrite of lake.demo.events ended before the go: rewrite_files failed")

    monkeypatch.setattr(sensor_module, "check_snapshot_idle", look)
    context = {
        "ti": TaskInstance(),
        "dag": SimpleNamespace(dag_id="iceberg_compact__lake__demo__events"),
        "run_id": "manual__1",
        "dag_run": SimpleNamespace(clear_number=2),
    }
    with pytest.raises(AirflowFailException, match="ended before the go"):  # no retry brings the work back
        sensor._bounded_check(context)
    assert seen["attempt"] == 2  # the run's attempt: a cleared run's work is another's
    plain = SnapshotIdleSensor(task_id="w", table="lake.demo.events", idle_seconds=10, timeout=60)
    with pytest.raises(AirflowFailException, match="ended before the go"):  # the same when waiting in the triggerer
        plain.execute_complete({}, {"status": "work_gone", "message": "WorkGoneError: ... ended before the go"})


CLOSED_AT = datetime(2026, 11, 25, 10, 0, tzinfo=timezone.utc)


def looks_until_timeout(monkeypatch, check: IdleCheck) -> str:
    """The message of a poke-mode wait that times out while every look returns ``check``."""
    sensor = SnapshotIdleSensor(
        task_id="w",
        table="lake.demo.events",
        idle_seconds=300,
        timeout=0.3,
        poke_interval=0.1,
        mode="poke",
        write_gate_conn_id="gate",
    )
    monkeypatch.setattr(sensor, "_check", lambda context: check)
    with pytest.raises(AirflowSensorTimeout) as timed_out:
        sensor.execute({"ti": TaskInstance()})
    return str(timed_out.value)


def test_a_wait_that_times_out_while_a_writer_commits_through_the_gate_says_so(monkeypatch):
    committing = IdleCheck(
        done=False,
        idle_for_seconds=2.0,
        idle_seconds=300,
        gate_closed_at=CLOSED_AT,
        newest_snapshot_id=77,
        newest_snapshot_at=CLOSED_AT + timedelta(seconds=95),
        writers=("events-ingest",),
        writers_acknowledged=("events-ingest",),
    )
    message = looks_until_timeout(monkeypatch, committing)
    assert message.startswith("the writers of lake.demo.events had not gone idle when the sensor's timeout of 0.3 s ")
    assert (
        "a writer kept committing to lake.demo.events while its gate was closed: the newest snapshot, 77, was "
        "committed by a writer whose snapshot summary names no Flink job or Spark application 95 s after the gate "
        "closed (at 2026-11-25 10:00:00 UTC)" in message
    )
    assert (
        "check that every writer of lake.demo.events reads its write gate, from the database of connection "
        "'gate'" in message
    )
    assert "still running" not in message


def test_the_rescheduled_try_that_meets_the_timeout_still_looks_and_names_the_committing_writer(monkeypatch):
    """In reschedule mode each poke is a new try of a new sensor object, with no earlier look to go by. The try
    that starts after the timeout has run out must look before it fails, and say what the look saw: a writer
    committing through the closed gate, named from its snapshot's summary, not a catalog that did not answer."""
    committing = IdleCheck(
        done=False,
        idle_for_seconds=0.5,
        idle_seconds=10,
        gate_closed_at=CLOSED_AT,
        newest_snapshot_id=78,
        newest_snapshot_at=CLOSED_AT + timedelta(seconds=31),
        newest_snapshot_by="Flink job 5e2c0b7a",
        writers=("events-ingest",),
        writers_acknowledged=(),
    )

    def look(context):
        time.sleep(0.3)  # a real look takes time: the catalog, then the gate
        return committing

    sensor = SnapshotIdleSensor(
        task_id="w", table="lake.demo.events", idle_seconds=10, timeout=30, mode="reschedule", write_gate_conn_id="gate"
    )
    monkeypatch.setattr(sensor, "_check", look)
    ti = TaskInstance(waited=31.7)
    with pytest.raises(AirflowSensorTimeout) as timed_out:
        sensor.execute({"ti": ti})
    message = str(timed_out.value)
    assert ti.pushed == {"failure": message}  # for the run's record
    assert message.startswith("the writers of lake.demo.events had not gone idle when the sensor's timeout of 30 s ")
    assert (
        "a writer kept committing to lake.demo.events while its gate was closed: the newest snapshot, 78, was "
        "committed by Flink job 5e2c0b7a 31 s after the gate closed" in message
    )
    assert "still running" not in message and "did not answer" not in message


def test_a_wait_that_times_out_with_no_new_commit_names_the_writers_that_did_not_acknowledge(monkeypatch):
    idle = IdleCheck(
        done=False,
        idle_for_seconds=120.4,
        idle_seconds=300,
        gate_closed_at=CLOSED_AT,
        newest_snapshot_id=76,
        newest_snapshot_at=CLOSED_AT - timedelta(seconds=30),
        writers=("a", "b"),
        writers_acknowledged=("a",),
    )
    message = looks_until_timeout(monkeypatch, idle)
    assert (
        "lake.demo.events was idle for 120 s of the 300 s required, and writers ['b'] did not acknowledge the "
        "pause (writers waited for: ['a', 'b']; acknowledged: ['a'])" in message
    )
    assert "a shorter idle_seconds" in message


def test_a_deferred_wait_that_times_out_fails_with_the_triggers_reason():
    sensor = SnapshotIdleSensor(task_id="w", table="lake.demo.events", idle_seconds=300, timeout=600)
    ti = TaskInstance()
    with pytest.raises(
        AirflowSensorTimeout,
        match=r"^the writers of lake.demo.events had not gone idle when the "
        r"sensor's timeout of 600 s ran out: a writer kept committing",
    ) as timed_out:
        event = {"status": "timeout", "message": "a writer kept committing to lake.demo.events"}
        sensor.execute_complete({"ti": ti}, event)
    assert ti.pushed == {"failure": str(timed_out.value)}  # for the run's record
