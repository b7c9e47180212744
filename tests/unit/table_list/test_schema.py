"""The table list's schema: each setting's check and default, and errors that name the field."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.table_list.schema import TableConfig


def test_the_longest_pause_must_leave_room_for_the_wait_and_the_rewrites():
    with pytest.raises(ValueError, match=r"max_pause_seconds \(600\) must be more than twice idle_seconds \(300\)"):
        TableConfig(table="lake.db.a", idle_seconds=300, max_pause_seconds=600)
    with pytest.raises(ValueError, match=r"max_pause_seconds \(700\) must be at least lease_seconds \(900\)"):
        TableConfig(table="lake.db.a", idle_seconds=300, max_pause_seconds=700, lease_seconds=900)


def test_the_lease_is_short_by_default_and_outlasts_the_renewals_of_the_idle_wait():
    config = TableConfig(table="lake.db.a")
    assert (config.lease_seconds, config.max_pause_seconds) == (300, 3600)  # a dead run frees writers in 5 min
    with pytest.raises(ValueError, match=r"lease_seconds \(60\) must be at least three poke intervals \(90 s\)"):
        TableConfig(table="lake.db.a", lease_seconds=60, poke_interval=30)
    with pytest.raises(ValueError, match="lease_seconds"):
        TableConfig(table="lake.db.a", lease_seconds=10)


@pytest.mark.parametrize(
    ("partition", "message"),
    [
        ({"column": "dt"}, "give exactly one of format"),
        ({"column": "dt", "format": "yyyyMMdd", "transform": "day"}, "give exactly one of format"),
        ({"column": "dt", "format": "yyyy'); DROP"}, "may use only yyyy, MM, dd, HH"),
        ({"column": "d t", "transform": "day"}, "must be a plain identifier"),
        ({"column": "ts", "transform": "hour"}, "Input should be 'day'"),
    ],
)
def test_a_bad_day_partition_mapping_is_named(partition, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        TableConfig.model_validate({"table": "lake.db.a", "full_rewrite": {"partition": partition}})


def test_orphan_removal_window_shorter_than_the_longest_pause_plus_margin_is_refused_in_config():
    with pytest.raises(
        ValueError, match=r"orphan_older_than_hours \(30.0\) must be at least max_pause_seconds .* 30.50"
    ):
        TableConfig(table="lake.db.a", max_pause_seconds=106200, maintenance={"orphan_older_than_hours": 30})
    TableConfig(table="lake.db.a", max_pause_seconds=106200, maintenance={"orphan_older_than_hours": 31})
    with pytest.raises(ValueError, match=r"Iceberg's own 24 hours: 24.00 hours"):
        TableConfig(table="lake.db.a", max_pause_seconds=3600, maintenance={"orphan_older_than_hours": 12})


def test_the_table_is_parsed_once_into_its_parts_and_written_back_as_text():
    config = TableConfig(table="lake.db.a")
    assert config.table == TableName("lake", "db", "a") and config.catalog_conn_id == "lake"
    assert config.model_dump()["table"] == "lake.db.a"
    assert TableConfig.model_validate(config.model_dump()) == config


@pytest.mark.parametrize("where", ["", "  "])
def test_an_empty_where_is_refused_not_taken_for_the_whole_table(where):
    with pytest.raises(ValueError, match="where is empty"):
        TableConfig(table="lake.db.a", where=where)
    assert TableConfig(table="lake.db.a").where is None  # leaving it out is how to say "the whole table"


def test_where_per_procedure_names_a_bad_procedure_or_an_empty_predicate():
    config = TableConfig(table="lake.db.a", where={"rewrite_data_files": 'dt >= "20240620"'})
    assert config.where_for("rewrite_data_files") == 'dt >= "20240620"'
    assert config.where_for("rewrite_position_delete_files") is None
    assert TableConfig(table="lake.db.a", where="x > 1").where_for("rewrite_position_delete_files") == "x > 1"
    with pytest.raises(ValidationError, match=r"where names \['rewrite_manifests'\]"):
        TableConfig(table="lake.db.a", where={"rewrite_manifests": "x > 1"})
    with pytest.raises(ValidationError, match="where.rewrite_data_files is empty"):
        TableConfig(table="lake.db.a", where={"rewrite_data_files": " "})


def test_health_triggers_are_checked():
    assert TableConfig(table="lake.db.a").health.thresholds().min_small_files == 12
    with pytest.raises(ValidationError, match="small_file_ratio"):
        TableConfig(table="lake.db.a", health={"small_file_ratio": 2})
    with pytest.raises(ValidationError, match="min_small_files"):
        TableConfig(table="lake.db.a", health={"min_small_files": 0})


def test_an_entry_without_health_settings_plans_with_the_planners_own_thresholds():
    from airflow_iceberg.planning.health import HealthThresholds

    assert TableConfig(table="lake.db.a").health.thresholds() == HealthThresholds()
