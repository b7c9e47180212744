"""The gate operators: arguments checked at construction, before any DAG run can close a gate."""

from __future__ import annotations

import pytest
from airflow.sdk import TriggerRule

from airflow_iceberg.core.tables import InvalidCallError, TableName
from airflow_iceberg.operators.write_gate import CloseWriteGateOperator, OpenWriteGateOperator

CLOSE = {
    "table": "lake.demo.events",
    "lease_seconds": 600,
    "max_pause_seconds": 3600,
    "gate_wait_seconds": 60,
    "poke_interval": 5,
}


def test_close_operator_takes_the_table_as_a_value_and_its_settings_unchanged():
    op = CloseWriteGateOperator(task_id="c", **CLOSE)
    assert op.table == TableName("lake", "demo", "events")
    assert (op.lease_seconds, op.max_pause_seconds, op.gate_wait_seconds, op.poke_interval) == (600, 3600, 60, 5)
    assert op.write_gate_conn_id == "write_gate_default"


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"lease_seconds": 0}, "lease_seconds must be a positive integer, got 0"),
        ({"max_pause_seconds": 0}, "max_pause_seconds must be a positive integer, got 0"),
        ({"max_pause_seconds": 300}, r"max_pause_seconds \(300\) must be at least the lease \(600\)"),
        ({"gate_wait_seconds": -1}, "gate_wait_seconds must not be negative, got -1"),
        ({"poke_interval": 0}, "poke_interval must be positive, got 0"),
    ],
)
def test_close_operator_refuses_bad_settings_naming_them(bad, message):
    with pytest.raises(ValueError, match=message):
        CloseWriteGateOperator(task_id="c", **{**CLOSE, **bad})


def test_close_operator_refuses_a_bad_table():
    with pytest.raises(InvalidCallError, match="'lake.demo'"):
        CloseWriteGateOperator(task_id="c", **{**CLOSE, "table": "lake.demo"})


def test_close_operator_has_no_defaults_of_its_own_for_what_the_table_list_decides():
    with pytest.raises(TypeError, match="lease_seconds"):
        CloseWriteGateOperator(task_id="c", table="lake.demo.events")


def test_open_operator_runs_whatever_happened_upstream():
    assert OpenWriteGateOperator(task_id="o", table="lake.demo.events").trigger_rule == TriggerRule.ALL_DONE
