"""Building Iceberg CALL statements: every part checked, quoted or passed as an escaped literal."""

from __future__ import annotations

import pytest

from spark_jobs.iceberg_call import (
    InvalidCallError,
    TableName,
    build_call,
    format_result_line,
    normalize_options,
    parse_result_line,
    sql_string_literal,
)

EVENTS = TableName("lake", "demo", "events")


def test_table_name_parses_three_identifiers():
    assert TableName.parse("lake.demo.events") == EVENTS
    assert EVENTS.in_catalog == "demo.events"
    assert str(EVENTS) == "lake.demo.events"


@pytest.mark.parametrize(
    "bad",
    ["demo.events", "a.b.c.d", "lake.demo.ev-ents", "lake.demo.1events", "lake..events", "lake.demo.`x`",
     "lake.demo.events; DROP TABLE x", "", None, 42],
)  # fmt: skip
def test_table_name_rejects_anything_but_three_plain_identifiers_and_names_the_value(bad):
    with pytest.raises(InvalidCallError) as error:
        TableName.parse(bad)
    assert repr(bad) in str(error.value)


def test_call_with_options_and_where_is_built_exactly():
    statement = build_call(
        "rewrite_data_files",
        EVENTS,
        {"target-file-size-bytes": 134217728, "min-input-files": "5", "partial-progress.enabled": True},
        "ts >= '2026-11-20'",
    )
    assert statement == (
        "CALL `lake`.system.rewrite_data_files(table => 'demo.events', "
        "options => map('target-file-size-bytes', '134217728', 'min-input-files', '5', "
        "'partial-progress.enabled', 'true'), where => 'ts >= \\'2026-11-20\\'')"
    )


def test_call_without_options_or_where_names_only_the_table():
    assert build_call("rewrite_position_delete_files", EVENTS) == (
        "CALL `lake`.system.rewrite_position_delete_files(table => 'demo.events')"
    )


def test_where_cannot_close_its_literal_and_add_sql():
    hostile = "x = 1') ; DROP TABLE lake.demo.events; --\\"
    statement = build_call("rewrite_data_files", EVENTS, None, hostile)
    literal = statement.split("where => ", 1)[1][:-1]
    assert literal == sql_string_literal(hostile)
    # Inside the literal every quote is escaped and the trailing backslash is doubled, so it cannot end early.
    body = literal[1:-1]
    assert "'" not in body.replace("\\'", "")
    assert body.endswith("\\\\")


def test_unknown_procedure_is_refused_with_the_known_ones():
    with pytest.raises(InvalidCallError, match="'drop_table' is not supported; choose one of rewrite_data_files"):
        build_call("drop_table", EVENTS)


def test_unknown_option_is_refused_by_name():
    with pytest.raises(InvalidCallError, match="does not take option 'target-file-size'"):
        normalize_options("rewrite_data_files", {"target-file-size": 1})


def test_option_only_valid_for_data_files_is_refused_for_position_deletes():
    with pytest.raises(
        InvalidCallError, match="rewrite_position_delete_files does not take option 'delete-file-threshold'"
    ):
        normalize_options("rewrite_position_delete_files", {"delete-file-threshold": 2})


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("min-input-files", 0, "positive integer"),
        ("min-input-files", "five", "positive integer"),
        ("min-input-files", True, "positive integer"),
        ("min-input-files", "5; DROP", "positive integer"),
        ("rewrite-all", "yes", "boolean"),
        ("rewrite-job-order", "random", "one of none, bytes-asc"),
        ("delete-ratio-threshold", 1.5, "number between 0 and 1"),
    ],
)
def test_bad_option_value_is_refused_naming_option_and_value(name, value, expected):
    with pytest.raises(InvalidCallError) as error:
        normalize_options("rewrite_data_files", {name: value})
    assert f"option {name!r} must be a {expected}" in str(error.value)
    assert repr(value) in str(error.value)


def test_option_values_are_normalised_to_the_strings_spark_takes():
    assert normalize_options(
        "rewrite_data_files",
        {"rewrite-all": "TRUE", "max-concurrent-file-group-rewrites": "200", "delete-ratio-threshold": "0.3"},
    ) == {"rewrite-all": "true", "max-concurrent-file-group-rewrites": "200", "delete-ratio-threshold": "0.3"}


def test_result_line_round_trips_and_other_lines_are_ignored():
    line = format_result_line({"rewritten_data_files_count": 210, "added_data_files_count": 3})
    assert parse_result_line(line) == {"rewritten_data_files_count": 210, "added_data_files_count": 3}
    assert parse_result_line("26/11/22 INFO SparkContext: Running Spark version 3.5.9") is None
