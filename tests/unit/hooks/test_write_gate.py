"""The hook's connection to the gate's MySQL: refused without a login, and named when it does not answer.

The gate's rules on values alone are in ``tests/unit/core/test_gate_state.py``; the hook against the real MySQL in
``tests/integration/hooks/test_write_gate.py``.
"""

from __future__ import annotations

import json

import pytest


def test_a_gate_connection_without_a_login_is_refused_naming_it_never_taken_for_root(monkeypatch):
    from airflow_iceberg.hooks.write_gate import WriteGateHook

    connection = {"conn_type": "iceberg_write_gate", "host": "db", "schema": "gates"}
    monkeypatch.setenv("AIRFLOW_CONN_GATE_NO_LOGIN", json.dumps(connection))
    with pytest.raises(ValueError, match="connection 'gate_no_login' has no login"):
        WriteGateHook("gate_no_login").connection_settings()
    monkeypatch.setenv("AIRFLOW_CONN_GATE_NO_SCHEMA", json.dumps({**connection, "schema": None, "login": "a"}))
    with pytest.raises(ValueError, match="connection 'gate_no_schema' names no database"):
        WriteGateHook("gate_no_schema").connection_settings()


def test_a_gate_mysql_that_does_not_answer_is_named_with_its_connection_and_what_to_do(monkeypatch):
    import pymysql

    from airflow_iceberg.exceptions import WriteGateUnreachableError
    from airflow_iceberg.hooks.write_gate import WriteGateHook

    nothing_listens = {
        "conn_type": "iceberg_write_gate",
        "host": "127.0.0.1",
        "port": 1,
        "schema": "gates",
        "login": "airflow",
        "password": "Gate-secret-77",
    }
    monkeypatch.setenv("AIRFLOW_CONN_GATE_DOWN", json.dumps(nothing_listens))
    with pytest.raises(WriteGateUnreachableError) as down:
        WriteGateHook("gate_down").get_state("lake.db.t")
    message = str(down.value)
    assert message.startswith(
        "the write gate's MySQL (127.0.0.1:1, database 'gates') of connection 'gate_down' did not answer: "
    )
    assert "Nothing in the gate changed." in message and "`airflow connections get gate_down`" in message
    assert "Gate-secret-77" not in message
    assert isinstance(down.value, pymysql.err.OperationalError) and down.value.args[0] == 2003  # still retried


class StopRecorder:
    table = "lake.db.t"

    def __init__(self):
        self.stops: list[str] = []
        self.closed = False

    def stop(self, reason):
        self.stops.append(reason)

    def close(self):
        self.closed = True


class TryNumber:
    def __init__(self, try_number):
        self.try_number = try_number


@pytest.mark.parametrize(
    ("error", "try_number", "retries", "stops"),
    [
        (RuntimeError("MySQL went away"), 1, 3, False),  # a retry follows: the work keeps waiting for it
        (RuntimeError("MySQL went away"), 4, 3, True),  # the last try
        ("fail", 1, 3, True),  # not retried (AirflowFailException)
        ("timeout", 1, 3, True),  # the idle wait's time-out is never retried
    ],
)
def test_pre_started_work_is_told_to_stop_only_when_no_try_follows(error, try_number, retries, stops):
    from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout

    from airflow_iceberg.hooks.write_gate import telling_the_work

    error = {"fail": AirflowFailException("no"), "timeout": AirflowSensorTimeout("late")}.get(error, error)
    handshake = StopRecorder()
    with pytest.raises(type(error)), telling_the_work(handshake, {"ti": TryNumber(try_number)}, retries, "close_gate"):
        raise error
    assert bool(handshake.stops) == stops
    if stops:
        assert handshake.stops[0].startswith("close_gate failed: ") and handshake.closed


def test_a_reschedule_a_skip_or_a_deferral_tells_the_work_nothing():
    from airflow.sdk.exceptions import AirflowRescheduleException, AirflowSkipException, TaskDeferred

    from airflow_iceberg.hooks.write_gate import telling_the_work

    deferred = TaskDeferred(trigger=None, method_name="execute_complete")
    for error in (AirflowRescheduleException(None), AirflowSkipException("skip"), deferred):
        handshake = StopRecorder()
        with pytest.raises(type(error)), telling_the_work(handshake, {"ti": TryNumber(9)}, 0, "wait"):
            raise error
        assert handshake.stops == [] and handshake.closed
