"""What Airflow hands the Spark job (its arguments) and what it hands back (its result lines)."""

from __future__ import annotations

import pytest

from airflow_iceberg.core.spark_job import JobArguments, ProcedureCall, format_result_line, parse_result_line
from airflow_iceberg.core.tables import InvalidCallError, TableName


def test_result_line_round_trips_and_other_lines_are_ignored():
    line = format_result_line({"rewritten_data_files_count": 210, "added_data_files_count": 3})
    assert parse_result_line(line) == {"rewritten_data_files_count": 210, "added_data_files_count": 3}
    assert parse_result_line("26/11/22 INFO SparkContext: Running Spark version 3.5.9") is None


def test_result_line_survives_spark_progress_output_on_the_same_line():
    line = format_result_line({"rewritten_data_files_count": 24}) + "[Stage 12:=====>          (3 + 2) / 8]"
    assert parse_result_line(line) == {"rewritten_data_files_count": 24}
    assert parse_result_line("[Stage 3:>  (0 + 2) / 2]\r" + format_result_line({"a": 1})) == {"a": 1}
    assert parse_result_line("AIRFLOW_ICEBERG_RESULT {not json") is None


def test_the_job_arguments_round_trip_and_carry_no_secret():
    calls = (
        ProcedureCall("rewrite_data_files", {"min-input-files": 5}, "dt >= '20240620'"),
        ProcedureCall("rewrite_position_delete_files", arguments={}),
    )
    argv = JobArguments(TableName.parse("lake.db.events"), calls, "/tmp/secrets.json").argv()
    assert JobArguments.parse(argv) == JobArguments(TableName.parse("lake.db.events"), calls, "/tmp/secrets.json")
    assert argv[:2] == ["--table", "lake.db.events"] and argv[-2:] == ["--job-secrets", "/tmp/secrets.json"]


@pytest.mark.parametrize(
    ("calls", "message"),
    [
        ("[]", "non-empty JSON list"),
        ('{"procedure": "rewrite_data_files"}', "non-empty JSON list"),
        ('[{"options": {}}]', "an object with a procedure"),
        ('[{"procedure": "rewrite_data_files", "wehre": "x"}]', "wehre"),
    ],
)
def test_bad_calls_are_refused_naming_them_before_spark_starts(calls, message):
    with pytest.raises(InvalidCallError, match=message):
        JobArguments.parse(["--table", "lake.db.events", "--calls", calls])


def test_a_call_builds_its_checked_statement():
    call = ProcedureCall("rewrite_data_files", {"min-input-files": 5}, "dt = '1'")
    assert call.statement(TableName.parse("lake.db.events")) == (
        "CALL `lake`.system.rewrite_data_files(table => 'db.events', options => map('min-input-files', '5'), "
        "where => 'dt = \\'1\\'')"
    )
