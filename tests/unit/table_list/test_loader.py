"""The table list file: each entry validated alone after the defaults merge, errors naming the entry and the field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.exceptions import IcebergConfigError
from airflow_iceberg.table_list.loader import config_path, load_table_list, read_table_list


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
    # A templated predicate is final only once rendered: each run checks it, in plan_compaction.
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


def test_unreadable_or_malformed_file_raises_naming_the_file(tmp_path):
    with pytest.raises(IcebergConfigError, match="cannot read the table list"):
        load_table_list(tmp_path / "missing.yaml")
    with pytest.raises(IcebergConfigError, match="expected a mapping with a 'tables' list"):
        load_table_list(write(tmp_path, "- table: lake.db.a"))


def test_the_table_list_is_the_one_airflow_iceberg_config_names(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_ICEBERG_CONFIG", str(tmp_path / "mine.yaml"))
    assert config_path() == tmp_path / "mine.yaml"


def test_without_airflow_iceberg_config_the_table_list_is_in_airflows_dag_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("AIRFLOW_ICEBERG_CONFIG", raising=False)
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(tmp_path / "dags"))
    assert config_path() == tmp_path / "dags" / "iceberg_tables.yaml"


@pytest.mark.parametrize("value", ["0", "-3", "ten", "true", "2.5"])
def test_a_tables_per_dag_file_that_is_not_a_whole_number_of_at_least_one_is_refused_naming_it(tmp_path, value):
    with pytest.raises(IcebergConfigError, match=r"tables_per_dag_file must be a whole number of at least 1, got"):
        read_table_list(write(tmp_path, f"tables_per_dag_file: {value}\ntables: [{{table: lake.db.a}}]"))
