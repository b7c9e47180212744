"""Predicates parsed before any gate closes, checked against the table's columns, and translated for dry runs."""

from __future__ import annotations

import pytest
from pyiceberg import expressions as ice
from pyiceberg.schema import Schema
from pyiceberg.types import DateType, LongType, NestedField, StringType, TimestampType, TimestamptzType

from airflow_iceberg.exceptions import PredicateError
from airflow_iceberg.planning.predicates import check_columns, parse_predicate, to_pyiceberg

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
        ("dt = '2026", "is not valid Spark SQL: the ' at character 6 opens a string that is never closed: add the "
                       "closing '"),
        ("(dt = '2026' OR id > 3", r"its parentheses do not balance \(1 '\(' and 0 '\)'\): add the missing one"),
        ("dt >= >= 3", r"it cannot be read near character 8 \('= 3'\): write one condition on the table's columns"),
        ("id > 0; DROP TABLE lake.db.t", r"must be one condition, but it holds a ';' \(2 statements\): remove the "
                                         "';' and what follows it"),
        ("id > 0;", r"must be one condition, but it holds a ';' \(1 statement\): remove the ';'\."),
        ("id > 0; CALL lake.system.rewrite_data_files('db.t')", "must be one condition"),
        ("CALL lake.system.expire_snapshots('db.t')", "is a procedure CALL, not a condition: the DAG calls Iceberg's "
                                                      "procedures itself"),
        ("id IN (SELECT id FROM lake.db.other)", "not hold a"),
        ("id + 1", "is not a condition"),
        ("t.id > 0", "qualifies column 't.id': name the table's columns alone, such as 'id'"),
        ("", "is empty"),
        ("   ", "is empty"),
        ("java_method('java.lang.System', 'exit', 0) = 1", "calls the function 'java_method'"),
        ("reflect('java.lang.Thread', 'sleep', 100000) IS NULL", "calls the function 'reflect'"),
        ("upper(dt) = 'EU'", "calls the function 'upper', which Spark would run"),
        ("dt >= date_sub('2026-11-20', 2)", "calls the function 'date_sub'"),  # as written, not sqlglot's DATE_ADD
        ("CAST(dt AS INT) > 3", "calls the function 'CAST'"),
        ("dt >= '20261120' -- last week", "holds a comment"),
        ("dt >= '20261120' /* last week */", "holds a comment"),
        ("dt >= '{{ ds }}'", "holds a template, but a run's own where is taken as written, never rendered: write "
                             "the value itself"),
        ("dt >= {{ macros.ds_add(ds, -2) }}", "holds a template"),
        ("dt >= '{% if true %}x{% endif %}'", "holds a template"),
    ],
    ids=["unbalanced-quote", "unbalanced-parenthesis", "unreadable", "separator", "trailing-separator",
         "separator-call", "call", "subquery", "not-a-condition", "qualified", "empty", "blank", "java-method",
         "reflect", "function", "renamed-function", "cast", "line-comment", "block-comment", "template",
         "unquoted-template", "block-template"],
)  # fmt: skip
def test_a_predicate_that_is_not_one_filter_on_the_tables_rows_is_refused_naming_it(text, message):
    with pytest.raises(PredicateError, match=message) as refused:
        parse_predicate(text, what="param 'where'")
    assert str(refused.value).startswith("param 'where'")
    if text.strip():
        assert repr(text) in str(refused.value)


def test_advice_on_templates_is_given_only_where_a_template_is_rendered():
    text = "dt >= date_sub('2026-11-20', 2)"
    with pytest.raises(PredicateError) as own:
        parse_predicate(text, what="param 'where'")
    assert "{{" not in str(own.value) and "a run's own where is taken as written, never rendered" in str(own.value)
    with pytest.raises(PredicateError) as table:
        parse_predicate(text, what="the table's where for rewrite_data_files", rendered=True)
    assert "in the table list, a template such as '{{ macros.ds_add(ds, -2) }}'" in str(table.value)


def test_braces_that_jinja_would_not_render_are_data():
    assert parse_predicate("note = 'a {{ b'").text == "note = 'a {{ b'"


def test_a_very_long_predicate_is_quoted_cut_in_its_error():
    text = "id = '" + "x" * 10_000
    with pytest.raises(PredicateError, match=r"\.\.\. \(10006 characters\) is not valid Spark SQL") as refused:
        parse_predicate(text)
    assert len(str(refused.value)) < 400


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
