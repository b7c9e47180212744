"""Migrating the gate's schema on the real MySQL: from the first released schema, from the pre-versioning one,
and from nothing, through ``airflow-iceberg migrate``; and what a hook says on a database never migrated."""

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
from airflow_iceberg.hooks.write_gate_schema import gate_schema

#: The tables as the first release (commit 8115a02) created them: no acknowledgement, no version table.
FIRST_RELEASE_DDL = (
    """CREATE TABLE IF NOT EXISTS iceberg_write_gate (
        table_name VARCHAR(400) NOT NULL PRIMARY KEY COMMENT 'catalog.namespace.table',
        state VARCHAR(8) NOT NULL DEFAULT 'open',
        owner_dag_id VARCHAR(250) NULL,
        owner_run_id VARCHAR(250) NULL,
        closed_at TIMESTAMP(6) NULL DEFAULT NULL,
        lease_expires_at TIMESTAMP(6) NULL DEFAULT NULL,
        opened_at TIMESTAMP(6) NULL DEFAULT NULL,
        CONSTRAINT iceberg_write_gate_state CHECK (state IN ('open', 'closed'))
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    """CREATE TABLE IF NOT EXISTS iceberg_write_gate_audit (
        id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
        table_name VARCHAR(400) NOT NULL,
        action VARCHAR(16) NOT NULL,
        owner_dag_id VARCHAR(250) NULL,
        owner_run_id VARCHAR(250) NULL,
        at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
        lease_expires_at TIMESTAMP(6) NULL DEFAULT NULL,
        detail VARCHAR(1000) NULL,
        KEY iceberg_write_gate_audit_table_at (table_name, at)
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
)
#: What releases before versioned schemas added, on every hook instance, to a first-release database.
PRE_VERSIONING_ALTERS = (
    "ALTER TABLE iceberg_write_gate ADD COLUMN writer_ack_at TIMESTAMP(6) NULL DEFAULT NULL",
    "ALTER TABLE iceberg_write_gate ADD COLUMN writer_ack_snapshot_id BIGINT NULL",
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


def migrate_command() -> str:
    """``airflow-iceberg migrate --conn-id scratch_gate``, as a user runs it; its output."""
    script = Path(sys.executable).with_name("airflow-iceberg")
    done = subprocess.run(
        [str(script), "migrate", "--conn-id", "scratch_gate"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


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


def test_a_first_release_database_is_upgraded_in_place_keeping_its_gates(scratch_gate, mysql_server):
    run_sql(
        mysql_server,
        scratch_gate,
        *FIRST_RELEASE_DDL,
        "INSERT INTO iceberg_write_gate (table_name, state, owner_dag_id, owner_run_id, closed_at, lease_expires_at)"
        f" VALUES ('{TABLE}', 'closed', '{OWNER.dag_id}', '{OWNER.run_id}', NOW(6), NOW(6) + INTERVAL 1 HOUR)",
        f"INSERT INTO iceberg_write_gate_audit (table_name, action, owner_run_id) VALUES ('{TABLE}', 'close', 'r')",
    )
    hook = WriteGateHook("scratch_gate")
    assert hook.schema_version() == 1

    output = migrate_command()

    assert f"version 1 -> {gate_schema().latest}" in output
    assert hook.schema_version() == gate_schema().latest
    state = hook.get_state(TABLE)  # the gate closed under the first release is still closed, by the same run
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
    run_sql(mysql_server, scratch_gate, *FIRST_RELEASE_DDL)
    migrate_command()
    upgraded = columns(mysql_server, scratch_gate)
    # The suite's own gate database was migrated from nothing when the session started.
    fresh = columns(mysql_server, json.loads(os.environ["AIRFLOW_CONN_WRITE_GATE_DEFAULT"])["schema"])
    assert upgraded == fresh
    assert "pause_deadline" in upgraded["iceberg_write_gate"]
    assert "ack_snapshot_id" in upgraded["iceberg_write_gate_writer"]


def test_a_database_set_up_before_versions_were_recorded_is_recognised_not_altered_again(scratch_gate, mysql_server):
    run_sql(mysql_server, scratch_gate, *FIRST_RELEASE_DDL, *PRE_VERSIONING_ALTERS)
    output = migrate_command()
    # Recognised as version 2 by its columns: only what came later is applied, version 2's ALTER is not run again.
    assert f"version 2 -> {gate_schema().latest}" in output and "applied 3 " in output and "applied 2" not in output
    assert WriteGateHook("scratch_gate").schema_version() == gate_schema().latest


def test_a_hook_on_a_database_never_migrated_names_the_command_and_creates_nothing(scratch_gate, mysql_server):
    hook = WriteGateHook("scratch_gate")
    with pytest.raises(WriteGateSchemaError, match="run `airflow-iceberg migrate --conn-id scratch_gate`"):
        hook.close_gate(TABLE, OWNER, lease_seconds=60)
    assert columns(mysql_server, scratch_gate) == {}  # no table was created behind the user's back
    assert hook.schema_version() == 0
