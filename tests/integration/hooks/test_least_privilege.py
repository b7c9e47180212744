"""The gate works with least privilege, and the grants really are that small.

The suite's Airflow connection (``write_gate_default``) is a MySQL user with data rights only on the gate's
database; its writers connect as a user that may read the gate and report about itself. Every other test of the
suite runs with them; these tests show what those users may not do, and that a user without grants is an error,
never taken for an outage.
"""

from __future__ import annotations

import pymysql
import pytest

from airflow_iceberg.core.gate_protocol import WriteGateAccessError
from airflow_iceberg.core.gate_state import GateOwner
from airflow_iceberg.core.writer import WriteGateClient
from airflow_iceberg.hooks.write_gate import WriteGateHook
from tests.integration.conftest import GATE_DB, GATE_USERS

RUN = GateOwner("iceberg_compact__lake__grants__t", "manual__1")
ACCESS_DENIED = {1044, 1142, 1143}


def connect_as(role: str) -> pymysql.connections.Connection:
    settings = WriteGateHook(f"write_gate_{'default' if role == 'airflow' else role}").connection_settings()
    return pymysql.connect(**settings, autocommit=True)


def refused(connection: pymysql.connections.Connection, statement: str) -> int:
    """The MySQL error number ``statement`` fails with (it must fail)."""
    with pytest.raises(pymysql.err.MySQLError) as error, connection.cursor() as cursor:
        cursor.execute(statement)
    return error.value.args[0]


def test_airflows_user_runs_the_gate_but_may_not_change_its_schema(gate_table):
    hook = WriteGateHook()
    hook.close_gate(gate_table, RUN, lease_seconds=60, max_pause_seconds=120)
    hook.renew_lease(gate_table, RUN)
    assert hook.open_gate(gate_table, RUN)[0]
    with connect_as("airflow") as airflow:
        assert refused(airflow, "CREATE TABLE iceberg_write_gate_extra (x INT)") in ACCESS_DENIED
        assert refused(airflow, "ALTER TABLE iceberg_write_gate ADD COLUMN x INT") in ACCESS_DENIED
        assert refused(airflow, "DROP TABLE iceberg_write_gate_audit") in ACCESS_DENIED
    with pytest.raises(pymysql.err.MySQLError):
        hook.migrate()  # the explicit schema step needs a connection with DDL rights


def test_a_writers_user_reads_the_gate_and_reports_about_itself_and_nothing_more(gate_table, gate_writer):
    WriteGateHook().close_gate(gate_table, RUN, lease_seconds=60, max_pause_seconds=120)
    writer = gate_writer(gate_table, writer_id="grants-test")
    assert not writer.may_commit()
    assert writer.acknowledge_pause(7)
    writer.leave()
    with connect_as("writer") as connection:
        # It can neither open, close nor renew a gate, nor read the audit trail.
        assert refused(connection, f"UPDATE iceberg_write_gate SET state = 'open' WHERE table_name = '{gate_table}'")
        assert refused(connection, "SELECT * FROM iceberg_write_gate_audit") in ACCESS_DENIED
        assert refused(connection, "DELETE FROM iceberg_write_gate_writer") in ACCESS_DENIED
    assert WriteGateHook().get_state(gate_table).pauses_writers


def test_a_writer_without_the_grants_is_an_error_not_an_outage(mysql_server, gate_table):
    login, password = f"{GATE_USERS['writer'][0]}_none"[:80], "No-grants-pw-1"
    with mysql_server.cursor() as cursor:
        cursor.execute(f"DROP USER IF EXISTS '{login}'@'%'")
        cursor.execute(f"CREATE USER '{login}'@'%%' IDENTIFIED BY %s", (password,))  # %% is a literal %
    try:
        settings = {**WriteGateHook("write_gate_writer").connection_settings(), "user": login, "password": password}
        client = WriteGateClient.connect(gate_table, **settings)
        with pytest.raises(WriteGateAccessError, match=f"refused this writer's MySQL user .*{GATE_DB}"):
            client.may_commit()  # an outage would let it commit; missing grants must not
    finally:
        with mysql_server.cursor() as cursor:
            cursor.execute(f"DROP USER IF EXISTS '{login}'@'%'")
