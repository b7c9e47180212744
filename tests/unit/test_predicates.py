"""Predicates parsed before any gate closes, checked against the table's columns, and translated for dry runs."""

from __future__ import annotations

import pytest
from pyiceberg import expressions as ice
from pyiceberg.schema import Schema
from pyiceberg.types import DateType, LongType, NestedField, StringType, TimestampType, TimestamptzType

from airflow_iceberg.predicates import PredicateError, check_columns, parse_predicate, to_pyiceberg

SCHEMA = Schema(
    NestedField(1, "id", LongType()),
    NestedField(2, "ts", TimestamptzType()),
    NestedField(3, "dt", StringType()),
    NestedField(4, "day", DateType()),
    NestedField(5, "local_ts", TimestampType()),
)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("dt = '2026", "is not valid Spark SQL"),  # an unbalanced quote
        ("id > 0; DROP TABLE lake.db.t", "must be one expression; it holds 2 statements"),
        ("id > 0; CALL lake.system.rewrite_data_files('db.t')", "must be one expression"),
        ("CALL lake.system.expire_snapshots('db.t')", "not hold a command"),
        ("id IN (SELECT id FROM lake.db.other)", "not hold a"),
        ("id + 1", "is not a condition"),
        ("t.id > 0", "qualifies column 't.id'"),
        ("", "is empty"),
        ("   ", "is empty"),
        ("java_method('java.lang.System', 'exit', 0) = 1", "calls a function"),
        ("reflect('java.lang.Thread', 'sleep', 100000) IS NULL", "calls a function"),
        ("upper(dt) = 'EU'", r"calls a function \('UPPER\(dt\)'\)"),
        ("CAST(dt AS INT) > 3", "calls a function"),
        ("dt >= '20261120' -- last week", "holds a comment"),
        ("dt >= '20261120' /* last week */", "holds a comment"),
    ],
    ids=["unbalanced-quote", "separator", "separator-call", "call", "subquery", "not-a-condition", "qualified",
         "empty", "blank", "java-method", "reflect", "function", "cast", "line-comment", "block-comment"],
)  # fmt: skip
def test_a_predicate_that_is_not_one_filter_on_the_tables_rows_is_refused_naming_it(text, message):
    with pytest.raises(PredicateError, match=message) as refused:
        parse_predicate(text, what="param 'where'")
    assert str(refused.value).startswith("param 'where'")
    if text.strip():
        assert repr(text) in str(refused.value)


def test_a_predicate_is_kept_as_written_with_the_columns_it_names():
    predicate = parse_predicate("dt >= \"20240620\" AND `ts` < TIMESTAMP '2026-11-21 00:00:00' OR id IN (1, 2)")
    assert predicate.text == "dt >= \"20240620\" AND `ts` < TIMESTAMP '2026-11-21 00:00:00' OR id IN (1, 2)"
    assert predicate.columns == ("dt", "ts", "id")


def test_a_column_the_table_lacks_is_refused_naming_it_and_the_tables_columns():
    check_columns(parse_predicate("ID > 3 and Dt = 'x'"), SCHEMA, "lake.db.t")  # Spark matches case-insensitively
    with pytest.raises(PredicateError, match="names 'region', which table lake.db.t does not have; its columns: id,"):
        check_columns(parse_predicate("region = 'eu' AND id > 3"), SCHEMA, "lake.db.t")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("dt >= '20240620'", ice.GreaterThanOrEqual("dt", "20240620")),
        ('dt >= "20240620"', ice.GreaterThanOrEqual("dt", "20240620")),
        ("5 < id", ice.GreaterThan("id", 5)),
        ("id BETWEEN -1 AND 3", ice.And(ice.GreaterThanOrEqual("id", -1), ice.LessThanOrEqual("id", 3))),
        ("ts >= '2026-11-20'", ice.GreaterThanOrEqual("ts", "2026-11-20T00:00:00+00:00")),
        ("`ts` < TIMESTAMP '2026-11-21 00:00:00'", ice.LessThan("ts", "2026-11-21T00:00:00+00:00")),
        ("local_ts >= '2026-11-20 06:00:00'", ice.GreaterThanOrEqual("local_ts", "2026-11-20T06:00:00")),
        ("day = DATE '2026-11-20'", ice.EqualTo("day", "2026-11-20")),
        ("dt IN ('a', 'b') AND NOT id IS NULL", ice.And(ice.In("dt", {"a", "b"}), ice.Not(ice.IsNull("id")))),
        ("dt LIKE '2026%' OR id <> 4", ice.Or(ice.StartsWith("dt", "2026"), ice.NotEqualTo("id", 4))),
        ("DT = 'x'", ice.EqualTo("dt", "x")),
    ],
)
def test_a_dry_run_applies_the_same_selection_through_pyiceberg(text, expected):
    assert to_pyiceberg(parse_predicate(text), SCHEMA) == expected


@pytest.mark.parametrize(
    ("text", "part"),
    [
        ("id = id", "is not a literal value"),
        ("id + 1 > 3", "compares no column"),
        ("dt LIKE '%x'", "only LIKE 'prefix%'"),
        ("ts >= 'yesterday'", "'yesterday' is not a timestamptz value for column 'ts'"),
    ],
)
def test_a_dry_run_predicate_pyiceberg_cannot_evaluate_fails_naming_it(text, part):
    with pytest.raises(PredicateError, match="cannot be applied to the table's metadata for a dry run") as failed:
        to_pyiceberg(parse_predicate(text), SCHEMA)
    assert repr(text) in str(failed.value) and part in str(failed.value)


def test_a_dry_run_predicate_whose_value_does_not_fit_its_column_fails_naming_it():
    with pytest.raises(PredicateError, match="does not fit the table's columns") as failed:
        to_pyiceberg(parse_predicate("dt = 20261120"), SCHEMA)  # a number for the string column dt
    assert "'dt = 20261120'" in str(failed.value)


def test_typed_literals_and_strings_that_look_like_comments_are_values():
    parse_predicate("day = DATE '2026-11-20' AND ts < TIMESTAMP '2026-11-21 00:00:00' AND dt = 'a--b/*c*/'")
