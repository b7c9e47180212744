"""The Spark job's result lines, as the Airflow task reads them back."""

from __future__ import annotations

from airflow_iceberg.core.spark_job import format_result_line, parse_result_line


def test_result_line_round_trips_and_other_lines_are_ignored():
    line = format_result_line({"rewritten_data_files_count": 210, "added_data_files_count": 3})
    assert parse_result_line(line) == {"rewritten_data_files_count": 210, "added_data_files_count": 3}
    assert parse_result_line("26/11/22 INFO SparkContext: Running Spark version 3.5.9") is None


def test_result_line_survives_spark_progress_output_on_the_same_line():
    line = format_result_line({"rewritten_data_files_count": 24}) + "[Stage 12:=====>          (3 + 2) / 8]"
    assert parse_result_line(line) == {"rewritten_data_files_count": 24}
    assert parse_result_line("[Stage 3:>  (0 + 2) / 2]\r" + format_result_line({"a": 1})) == {"a": 1}
    assert parse_result_line("AIRFLOW_ICEBERG_RESULT {not json") is None
