"""The idle sensor's arguments: checked at construction."""

from __future__ import annotations

import pytest

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
