"""The table list: each entry validated alone, errors naming the entry and the field."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from airflow_iceberg.config import TableConfig, config_path, load_table_list
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.exceptions import IcebergConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tables.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_defaults_merge_under_each_entry_and_entries_override(tmp_path, monkeypatch):
    monkeypatch.setenv("JARS_DIR", "/opt/jars")
    tables = load_table_list(
        write(
            tmp_path,
            """
            defaults:
              idle_seconds: 60
              spark: {jars: ["${JARS_DIR}/iceberg.jar"], conf: {spark.ui.enabled: "false"}}
            tables:
              - table: lake.db.a
              - table: lake.db.b
                idle_seconds: 120
                spark: {conf: {spark.executor.cores: "2"}}
            """,
        )
    )
    assert tables.errors == []
    a, b = tables.tables
    assert (a.idle_seconds, b.idle_seconds) == (60, 120)
    assert a.spark.jars == ["/opt/jars/iceberg.jar"]
    assert b.spark.jars == ["/opt/jars/iceberg.jar"]  # spark merged one level deep, not replaced
    assert b.spark.conf == {"spark.ui.enabled": "false", "spark.executor.cores": "2"}
    assert a.catalog_conn_id == "lake"


def test_bad_entry_is_named_by_position_table_and_field_and_the_others_stay_valid(tmp_path):
    tables = load_table_list(
        write(
            tmp_path,
            """
            tables:
              - table: lake.db.good
              - table: lake.db.bad
                idle_seconds: -5
              - table: not-a-table
            """,
        )
    )
    assert [t.table for t in tables.tables] == [TableName("lake", "db", "good")]
    assert len(tables.errors) == 2
    assert "tables[1] (lake.db.bad)" in tables.errors[0]
    assert "field 'idle_seconds'" in tables.errors[0]
    assert "-5" in tables.errors[0]
    assert "tables[2] (not-a-table)" in tables.errors[1] and "field 'table'" in tables.errors[1]


def test_a_where_without_a_template_that_spark_would_refuse_fails_its_entry_when_the_list_loads(tmp_path):
    tables = load_table_list(
        write(
            tmp_path,
            """
            tables:
              - table: lake.db.quote
                where: "dt >= '2026-11-20"
              - table: lake.db.separator
                where: {rewrite_data_files: "dt >= '2026-11-20';"}
              - table: lake.db.literal
                where: "dt >= '2026-11-20'"
              - table: lake.db.templated
                where: "dt >= '{{ ds }}"
            """,
        )
    )
    # A templated predicate is final only once rendered: each run checks it, in check_run_params.
    assert [str(t.table) for t in tables.tables] == ["lake.db.literal", "lake.db.templated"]
    assert tables.errors[0].endswith(
        "tables[0] (lake.db.quote): field 'where': where \"dt >= '2026-11-20\" is not valid Spark SQL: the ' at "
        "character 7 opens a string that is never closed: add the closing '"
    )
    assert (
        "tables[1] (lake.db.separator): field 'where': where.rewrite_data_files \"dt >= '2026-11-20';\" must "
        "be one condition, but it holds a ';'" in tables.errors[1]
    )


def test_unknown_field_and_bad_rewrite_option_are_named(tmp_path):
    tables = load_table_list(
        write(
            tmp_path,
            """
            tables:
              - table: lake.db.a
                idle_secs: 5
              - table: lake.db.b
                rewrite_data_files: {min-input-files: 0}
            """,
        )
    )
    assert "field 'idle_secs'" in tables.errors[0]
    assert "field 'rewrite_data_files'" in tables.errors[1]
    assert "option 'min-input-files' must be a positive integer, got 0" in tables.errors[1]


def test_duplicate_table_is_an_error_for_the_second_entry(tmp_path):
    tables = load_table_list(write(tmp_path, "tables: [{table: lake.db.a}, {table: lake.db.a}]"))
    assert len(tables.tables) == 1
    assert "tables[1] (lake.db.a): field 'table': lake.db.a is listed more than once" in tables.errors[0]


def test_unset_environment_variable_in_jars_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("NO_SUCH_JARS_DIR", raising=False)
    tables = load_table_list(
        write(tmp_path, "tables: [{table: lake.db.a, spark: {jars: ['${NO_SUCH_JARS_DIR}/x.jar']}}]")
    )
    assert "field 'spark.jars'" in tables.errors[0]
    assert "NO_SUCH_JARS_DIR" in tables.errors[0]


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


def test_unreadable_or_malformed_file_raises_naming_the_file(tmp_path):
    with pytest.raises(IcebergConfigError, match="cannot read the table list"):
        load_table_list(tmp_path / "missing.yaml")
    with pytest.raises(IcebergConfigError, match="expected a mapping with a 'tables' list"):
        load_table_list(write(tmp_path, "- table: lake.db.a"))


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


def test_the_table_list_is_the_one_airflow_iceberg_config_names(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_ICEBERG_CONFIG", str(tmp_path / "mine.yaml"))
    assert config_path() == tmp_path / "mine.yaml"


def test_without_airflow_iceberg_config_the_table_list_is_in_airflows_dag_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("AIRFLOW_ICEBERG_CONFIG", raising=False)
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(tmp_path / "dags"))
    assert config_path() == tmp_path / "dags" / "iceberg_tables.yaml"


def test_the_table_is_parsed_once_into_its_parts_and_written_back_as_text():
    config = TableConfig(table="lake.db.a")
    assert config.table == TableName("lake", "db", "a") and config.catalog_conn_id == "lake"
    assert config.model_dump()["table"] == "lake.db.a"
    assert TableConfig.model_validate(config.model_dump()) == config


def test_a_renamed_setting_is_named_with_its_new_name(tmp_path):
    tables = load_table_list(write(tmp_path, "tables: [{table: lake.db.a, poke_seconds: 5}]"))
    assert "setting 'poke_seconds' is now called 'poke_interval'" in tables.errors[0]


@pytest.mark.parametrize("where", ["", "  "])
def test_an_empty_where_is_refused_not_taken_for_the_whole_table(where):
    with pytest.raises(ValueError, match="where is empty"):
        TableConfig(table="lake.db.a", where=where)
    assert TableConfig(table="lake.db.a").where is None  # leaving it out is how to say "the whole table"


def test_one_pool_per_spark_connection_sized_by_the_largest_setting_among_its_tables():
    from airflow_iceberg.cli import pool_sizes

    tables = [
        TableConfig(table="lake.db.a", spark_conn_id="spark_yarn", spark_pool_slots=2),
        TableConfig(table="lake.db.b", spark_conn_id="spark_yarn", spark_pool_slots=5),
        TableConfig(table="lake.db.c", spark_conn_id="spark_k8s", spark_pool_slots=1),
        TableConfig(table="lake.db.d", spark_conn_id="spark_other"),  # no pool: Airflow's default pool
    ]
    assert pool_sizes(tables) == {"iceberg_spark__spark_yarn": 5, "iceberg_spark__spark_k8s": 1}


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
