"""The idle sensor's arguments, checked at construction, and its looks, bounded by its timeout."""

from __future__ import annotations

import threading
import time

import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout

from airflow_iceberg.hooks.write_gate import WriteGateNotHeldError
from airflow_iceberg.sensors.snapshot_idle import SnapshotIdleSensor
from airflow_iceberg.spark_jobs.iceberg_call import TableName


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
    """A catalog read that hangs ends the wait when the sensor's time is up, not when the read returns."""
    released = threading.Event()
    sensor = SnapshotIdleSensor(task_id="w", table="lake.demo.events", idle_seconds=10, timeout=2, mode="poke")
    monkeypatch.setattr(sensor, "_check", lambda context: released.wait(600))  # a look that never comes back
    started = time.monotonic()
    try:
        with pytest.raises(AirflowSensorTimeout, match="still running when the sensor's timeout of 2 s ran out"):
            sensor.execute({"ti": None})
    finally:
        released.set()
    assert time.monotonic() - started < 60  # the timeout (2 s) plus slack for a loaded machine, never the read's 600 s


def test_a_look_that_fails_fails_the_poke_with_its_own_error(monkeypatch):
    sensor = SnapshotIdleSensor(task_id="w", table="lake.demo.events", idle_seconds=10, timeout=60, mode="poke")

    def look(context):
        raise LookupError("table 'demo.events' not found")

    monkeypatch.setattr(sensor, "_check", look)
    with pytest.raises(LookupError, match="not found"):  # retried like any error: the catalog may come back
        sensor.execute({"ti": None})


def test_a_run_that_lost_its_gate_fails_the_wait_without_retries(monkeypatch):
    sensor = SnapshotIdleSensor(task_id="w", table="lake.demo.events", idle_seconds=10, timeout=60, mode="poke")

    def look(context):
        raise WriteGateNotHeldError("the write gate of lake.demo.events is not held")

    monkeypatch.setattr(sensor, "_check", look)
    with pytest.raises(AirflowFailException, match="is not held"):
        sensor.execute({"ti": None})
    with pytest.raises(AirflowFailException, match="is not held"):  # the same when waiting in the triggerer
        sensor.execute_complete({}, {"status": "not_held", "message": "the write gate of lake.demo.events is not held"})
