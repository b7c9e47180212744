"""The gated Flink source runs the writer statements of ``airflow_iceberg/core/gate_protocol.py``, word for word."""

from __future__ import annotations

import re
from pathlib import Path

from airflow_iceberg.core import gate_protocol

JAVA = Path(__file__).resolve().parents[3] / "flink/src/main/java/airflowiceberg/flink/WriteGate.java"
_CONSTANT = re.compile(r"static final String (\w+_SQL)\s*=\s*(.*?);\n", re.DOTALL)
_LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "'": "'", "\\": "\\"}


def java_string_constants(source: str) -> dict[str, str]:
    """Each ``static final String *_SQL`` of ``source``, a concatenation of string literals, as its value."""
    constants = {}
    for name, expression in _CONSTANT.findall(source):
        between = _LITERAL.sub("", expression)
        assert set(between) <= set(" \n+"), f"{name} is not made of string literals alone: {expression!r}"
        literals = _LITERAL.findall(expression)
        constants[name] = "".join(re.sub(r"\\(.)", lambda m: _ESCAPES[m.group(1)], part) for part in literals)
    return constants


#: The writer statements only writes that run longer than a look at the gate need (a batch statement, a MERGE in
#: ``foreachBatch``); the Flink source's writes are its checkpoints, whose commits it acknowledges.
PYTHON_ONLY = {"WRITER_BUSY_SQL", "WRITER_DONE_SQL"}


def python_statements() -> dict[str, str]:
    """Every writer statement of the Python client that the Flink source runs too, by name."""
    return {
        name: sql
        for name, sql in vars(gate_protocol).items()
        if name.startswith("WRITER_") and name.endswith("_SQL") and name not in PYTHON_ONLY
    }


def test_the_java_writer_runs_every_python_writer_statement_with_jdbc_placeholders():
    java = java_string_constants(JAVA.read_text())
    expected = {name: sql.replace("%s", "?") for name, sql in python_statements().items()}
    assert set(expected) == {"WRITER_REGISTER_SQL", "WRITER_CHECK_SQL", "WRITER_ACK_SQL", "WRITER_LEAVE_SQL"}
    assert java == expected


def test_a_changed_java_statement_is_caught():
    source = JAVA.read_text().replace("NOW(6), ?, ?, ?)", "NOW(), ?, ?, ?)")
    assert source != JAVA.read_text()
    changed = java_string_constants(source)["WRITER_REGISTER_SQL"]
    assert changed != python_statements()["WRITER_REGISTER_SQL"].replace("%s", "?")


def test_java_string_literals_are_read_with_their_escapes():
    source = 'static final String X_SQL = "a\\n"\n    + "b \\"c\\" \\\\";\n'
    assert java_string_constants(source) == {"X_SQL": 'a\nb "c" \\'}
