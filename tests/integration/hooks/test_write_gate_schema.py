"""Migrating the gate's schema on the real MySQL: from an older version, and from nothing, through
``airflow-iceberg migrate``; what it says of gate tables it did not make; and what a hook says on a database never
migrated."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_iceberg.core.gate_state import GateOwner
from airflow_iceberg.core.writer import WriteGateClient
from airflow_iceberg.exceptions import WriteGateSchemaError
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.hooks.write_gate_schema import Schema, gate_schema, migrate

#: Gate tables made by hand, not by ``airflow-iceberg migrate``: no schema version is recorded with them.
HAND_MADE_DDL = (
    """CREATE TABLE iceberg_write_gate (
        table_name VARCHAR(400) NOT NULL PRIMARY KEY,
        state VARCHAR(8) NOT NULL DEFAULT 'open'
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
)
OWNER = GateOwner("iceberg_compact__lake__db__events", "scheduled__2026-11-01T00:00:00+00:00")
TABLE = "lake.db.events"


@pytest.fixture
def scratch_gate(mysql_server, unique_name, monkeypatch):
    """A database of this test's own, and an ``iceberg_write_gate`` connection ``scratch_gate`` to it, with the
    DDL rights of the explicit schema step."""
    database = f"gate_schema_{unique_name}"[:64]
    with mysql_server.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{database}`")
    connection = json.loads(os.environ["AIRFLOW_CONN_WRITE_GATE_ADMIN"])
    monkeypatch.setenv("AIRFLOW_CONN_SCRATCH_GATE", json.dumps({**connection, "schema": database}))
    yield database
    with mysql_server.cursor() as cursor:
        cursor.execute(f"DROP DATABASE `{database}`")


def run_sql(mysql_server, database: str, *statements: str) -> None:
    mysql_server.select_db(database)
    with mysql_server.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)


def migrate_command(*, succeeds: bool = True) -> str:
    """``airflow-iceberg migrate --conn-id scratch_gate``, as a user runs it; its output."""
    script = Path(sys.executable).with_name("airflow-iceberg")
    done = subprocess.run(
        [str(script), "migrate", "--conn-id", "scratch_gate"], capture_output=True, text=True, timeout=300
    )
    assert (done.returncode == 0) is succeeds, done.stdout + done.stderr
    return done.stdout + done.stderr


def migrate_to_version_one() -> None:
    """The scratch database at schema version 1, as this provider's schema file defines it: an older install."""
    shipped = gate_schema()
    with WriteGateHook("scratch_gate").get_conn() as db:
        assert migrate(db, Schema(shipped.always, shipped.versions[:1])) == (0, 1)


def columns(mysql_server, database: str) -> dict[str, dict[str, tuple]]:
    """table -> column -> (type, nullable, default), as information_schema describes them."""
    with mysql_server.cursor() as cursor:
        cursor.execute(
            "SELECT table_name, column_name, column_type, is_nullable, column_default"
            " FROM information_schema.columns WHERE table_schema = %s",
            (database,),
        )
        described: dict[str, dict[str, tuple]] = {}
        for table, column, kind, nullable, default in cursor.fetchall():
            described.setdefault(table, {})[column] = (kind, nullable, default)
    return described


def test_a_database_at_an_older_version_is_upgraded_in_place_keeping_its_gates(scratch_gate, mysql_server):
    migrate_to_version_one()
    run_sql(
        mysql_server,
        scratch_gate,
        "INSERT INTO iceberg_write_gate (table_name, state, owner_dag_id, owner_run_id, closed_at, lease_expires_at)"
        f" VALUES ('{TABLE}', 'closed', '{OWNER.dag_id}', '{OWNER.run_id}', NOW(6), NOW(6) + INTERVAL 1 HOUR)",
        f"INSERT INTO iceberg_write_gate_audit (table_name, action, owner_run_id) VALUES ('{TABLE}', 'close', 'r')",
    )
    hook = WriteGateHook("scratch_gate")
    assert hook.schema_version() == 1

    output = migrate_command()

    assert f"version 1 -> {gate_schema().latest}" in output
    assert hook.schema_version() == gate_schema().latest
    state = hook.get_state(TABLE)  # the gate closed under version 1 is still closed, by the same run
    assert state.held_by(OWNER) and state.writers == ()
    assert [row["action"] for row in hook.audit_trail(TABLE)] == ["close"]
    # What the later versions added works: the writer registers and acknowledges, the owner opens.
    connection = hook.get_connection("scratch_gate")
    writer = WriteGateClient.connect(
        TABLE,
        host=connection.host,
        port=connection.port,
        user=connection.login,
        password=connection.password or "",
        database=connection.schema,
    )
    try:
        assert writer.acknowledge_pause(17)
    finally:
        writer.close()
    [acknowledged] = hook.get_state(TABLE).writers
    assert acknowledged.ack_snapshot_id == 17
    assert hook.open_gate(TABLE, OWNER)[0]

    assert "nothing to do" in migrate_command()


def test_a_migrated_database_has_the_same_tables_as_a_new_one(scratch_gate, mysql_server):
    migrate_to_version_one()
    migrate_command()
    upgraded = columns(mysql_server, scratch_gate)
    # The suite's own gate database was migrated from nothing when the session started.
    fresh = columns(mysql_server, json.loads(os.environ["AIRFLOW_CONN_WRITE_GATE_DEFAULT"])["schema"])
    assert upgraded == fresh
    assert "pause_deadline" in upgraded["iceberg_write_gate"]
    assert "ack_snapshot_id" in upgraded["iceberg_write_gate_writer"]


def test_gate_tables_it_did_not_make_are_refused_naming_what_to_do_and_left_as_they_were(scratch_gate, mysql_server):
    run_sql(mysql_server, scratch_gate, *HAND_MADE_DDL)
    before = columns(mysql_server, scratch_gate)["iceberg_write_gate"]
    output = migrate_command(succeeds=False)
    assert "holds iceberg_write_gate but no schema version in iceberg_write_gate_schema" in output
    assert "drop its gate tables" in output
    assert columns(mysql_server, scratch_gate)["iceberg_write_gate"] == before  # nothing altered


def test_a_hook_on_a_database_never_migrated_names_the_command_and_creates_nothing(scratch_gate, mysql_server):
    hook = WriteGateHook("scratch_gate")
    with pytest.raises(WriteGateSchemaError, match="run `airflow-iceberg migrate --conn-id scratch_gate`"):
        hook.close_gate(TABLE, OWNER, lease_seconds=60)
    assert columns(mysql_server, scratch_gate) == {}  # no table was created behind the user's back
    assert hook.schema_version() == 0
