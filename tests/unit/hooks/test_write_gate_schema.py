"""The gate's schema file: how it is read, and that it defines what the writers and the hook use.

Migrating real databases, from the first released schema on, is in tests/integration/hooks/test_write_gate_schema.py.
"""

from __future__ import annotations

import re

import pytest

from airflow_iceberg.core import gate_protocol, gate_store
from airflow_iceberg.core.gate_protocol import AUDIT_TABLE, GATE_TABLE, WRITER_TABLE
from airflow_iceberg.hooks.write_gate_schema import SCHEMA_TABLE, gate_schema, parse_schema

#: Every statement a writer runs, and every statement the gate's owner runs.
PROTOCOL_STATEMENTS = {
    name: value
    for module in (gate_protocol, gate_store)
    for name, value in vars(module).items()
    if name.endswith("_SQL")
}


def created_tables(statements) -> set[str]:
    return {m.group(1) for s in statements for m in [re.match(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", s)] if m}


def test_the_shipped_schema_has_consecutive_versions_each_with_statements():
    schema = gate_schema()
    assert [v.number for v in schema.versions] == list(range(1, schema.latest + 1))
    assert all(v.statements and v.summary for v in schema.versions)


def test_version_one_creates_the_tables_the_writer_and_hook_name_and_the_version_table_comes_first():
    schema = gate_schema()
    assert created_tables(schema.always) == {SCHEMA_TABLE}
    assert created_tables(schema.versions[0].statements) == {GATE_TABLE, AUDIT_TABLE}


def test_version_three_adds_the_writers_table():
    assert created_tables(gate_schema().versions[2].statements) == {WRITER_TABLE}


def test_every_table_and_column_the_protocols_statements_use_exists_in_the_newest_schema():
    text = " ".join(s for v in gate_schema().versions for s in v.statements)
    assert {"WRITER_REGISTER_SQL", "WRITER_CHECK_SQL", "WRITER_ACK_SQL", "WRITER_LEAVE_SQL"} <= set(PROTOCOL_STATEMENTS)
    for name, statement in PROTOCOL_STATEMENTS.items():
        # Lower-case names with an underscore are the schema's own (keywords are upper case); aliases and named
        # parameters (%(lease_seconds)s) are not.
        plain = re.sub(r"\bAS \w+|%\(\w+\)s", "", statement)
        for identifier in set(re.findall(r"\b[a-z]+(?:_[a-z]+)+\b", plain)):
            assert re.search(rf"\b{identifier}\b", text), f"{name} uses {identifier}, which the schema lacks"


def test_sections_and_statements_are_split_where_the_file_says():
    schema = parse_schema(
        """-- a comment
        CREATE TABLE IF NOT EXISTS v (version INT);
        -- version 1: first
        CREATE TABLE a (x INT,
            y INT);
        CREATE TABLE b (z INT);
        -- version 2: second
        ALTER TABLE a ADD COLUMN w INT;
        """
    )
    assert schema.always == ("CREATE TABLE IF NOT EXISTS v (version INT)",)
    assert [(v.number, v.summary, len(v.statements)) for v in schema.versions] == [(1, "first", 2), (2, "second", 1)]
    assert schema.versions[0].statements[0].endswith("y INT)")
    assert schema.latest == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-- version 1: a\nCREATE TABLE a (x INT)\n-- version 2: b\nSELECT 1;", "line 3: a statement before it"),
        ("-- version 1: a\nSELECT 1;\n-- version 3: c\nSELECT 1;", "line 3: version 3 follows 1"),
        ("-- version 1: a\nSELECT 1", "the last statement lacks its final ';'"),
        ("CREATE TABLE v (x INT);", "needs at least one version"),
        ("-- version 1: a\n-- version 2: b\nSELECT 1;", "needs at least one version, each with a statement"),
    ],
)
def test_a_malformed_schema_file_is_refused_naming_the_problem(text, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_schema(text)
