"""CALL statements are built exactly, and bad procedures, options and arguments are refused by name."""

from __future__ import annotations

import re

import pytest

from airflow_iceberg.core.procedures import build_call, normalize_options, sql_string_literal
from airflow_iceberg.core.tables import InvalidCallError, TableName

EVENTS = TableName("lake", "demo", "events")


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
    article = "" if expected.startswith("one of") else "a "
    assert f"option {name!r} must be {article}{expected}" in str(error.value)
    assert repr(value) in str(error.value)


def test_option_values_are_normalised_to_the_strings_spark_takes():
    assert normalize_options(
        "rewrite_data_files",
        {"rewrite-all": "TRUE", "max-concurrent-file-group-rewrites": "200", "delete-ratio-threshold": "0.3"},
    ) == {"rewrite-all": "true", "max-concurrent-file-group-rewrites": "200", "delete-ratio-threshold": "0.3"}


def test_maintenance_procedures_take_their_typed_arguments():
    assert build_call(
        "expire_snapshots", EVENTS, arguments={"older_than": "2026-11-20 00:00:00", "retain_last": 5}
    ) == (
        "CALL `lake`.system.expire_snapshots(table => 'demo.events', "
        "older_than => TIMESTAMP '2026-11-20 00:00:00', retain_last => 5)"
    )
    assert build_call("remove_orphan_files", EVENTS, arguments={"older_than": "2026-11-20 01:02:03.5"}) == (
        "CALL `lake`.system.remove_orphan_files(table => 'demo.events', "
        "older_than => TIMESTAMP '2026-11-20 01:02:03.5')"
    )
    assert build_call("rewrite_manifests", EVENTS) == "CALL `lake`.system.rewrite_manifests(table => 'demo.events')"


def test_sort_strategy_and_order_are_arguments_of_rewrite_data_files():
    assert build_call("rewrite_data_files", EVENTS, arguments={"strategy": "sort", "sort_order": "zorder(id, ts)"}) == (
        "CALL `lake`.system.rewrite_data_files(table => 'demo.events', "
        "strategy => 'sort', sort_order => 'zorder(id, ts)')"
    )


@pytest.mark.parametrize(
    ("procedure", "arguments", "message"),
    [
        ("expire_snapshots", {"older_than": "yesterday"}, "argument 'older_than' must be a UTC timestamp"),
        ("expire_snapshots", {"older_than": "2026-11-20 00:00:00') ; DROP"}, "argument 'older_than' must be"),
        ("expire_snapshots", {"retain_last": 0}, "argument 'retain_last' must be a positive integer, got 0"),
        ("rewrite_data_files", {"strategy": "zorder"}, "argument 'strategy' must be one of binpack, sort"),
        ("rewrite_data_files", {"strategy": "sort", "sort_order": "id; DROP"}, "argument 'sort_order' must be"),
        ("rewrite_data_files", {"sort_order": "id"}, "'sort_order' needs strategy 'sort'"),
        ("rewrite_manifests", {"older_than": "2026-11-20 00:00:00"}, "does not take argument 'older_than'"),
    ],
)
def test_bad_procedure_arguments_are_refused_by_name(procedure, arguments, message):
    with pytest.raises(InvalidCallError, match=re.escape(message)):
        build_call(procedure, EVENTS, arguments=arguments)


def test_only_rewrites_take_a_where_predicate():
    with pytest.raises(InvalidCallError, match="expire_snapshots takes no where predicate"):
        build_call("expire_snapshots", EVENTS, where="ts > '2026-01-01'")
