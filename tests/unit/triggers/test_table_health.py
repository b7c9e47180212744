"""The health watch's trigger: one shared sweep per catalog, and its serialization."""

from __future__ import annotations

import pytest

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.triggers.health_sweep import HEALTH_STREAM
from airflow_iceberg.triggers.table_health import (
    TableHealthTrigger,
    health_asset,
    health_asset_name,
)
from tests.unit.triggers.watchers import trigger


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
