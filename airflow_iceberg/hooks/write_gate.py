"""The write gate: one MySQL row per Iceberg table that tells its streaming writer to pause committing.

A DAG run closes the gate with a lease, compacts, and opens it again. Closing is one conditional ``UPDATE`` that
succeeds only if the gate is open, its lease has expired, or this same run already holds it; opening is a
compare-and-set on the owner, so a run can never open a gate that another run holds. Every time comes from the
database clock, the one writers compare against. Writers pause iff ``state = 'closed' AND lease_expires_at >
NOW()`` (see ``docs/write-gate-protocol.md``), so a crashed run cannot pause them past its lease.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pymysql
from airflow.sdk import BaseHook
from pymysql.constants import CLIENT

from spark_jobs.iceberg_call import TableName
from spark_jobs.write_gate import AUDIT_TABLE, GATE_TABLE

_SCHEMA = (
    f"""CREATE TABLE IF NOT EXISTS {GATE_TABLE} (
        table_name VARCHAR(400) NOT NULL PRIMARY KEY COMMENT 'catalog.namespace.table',
        state VARCHAR(8) NOT NULL DEFAULT 'open',
        owner_dag_id VARCHAR(250) NULL,
        owner_run_id VARCHAR(250) NULL,
        closed_at TIMESTAMP(6) NULL DEFAULT NULL,
        lease_expires_at TIMESTAMP(6) NULL DEFAULT NULL,
        opened_at TIMESTAMP(6) NULL DEFAULT NULL,
        writer_ack_at TIMESTAMP(6) NULL DEFAULT NULL COMMENT 'when the writer acknowledged the pause',
        writer_ack_snapshot_id BIGINT NULL COMMENT 'the writer''s last committed snapshot at that moment',
        CONSTRAINT {GATE_TABLE}_state CHECK (state IN ('open', 'closed'))
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    f"""CREATE TABLE IF NOT EXISTS {AUDIT_TABLE} (
        id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
        table_name VARCHAR(400) NOT NULL,
        action VARCHAR(16) NOT NULL,
        owner_dag_id VARCHAR(250) NULL,
        owner_run_id VARCHAR(250) NULL,
        at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
        lease_expires_at TIMESTAMP(6) NULL DEFAULT NULL,
        detail VARCHAR(1000) NULL,
        KEY {AUDIT_TABLE}_table_at (table_name, at)
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
)

# Columns added after the first release, with their definitions: ensure_schema adds them to older tables.
_LATER_COLUMNS = {
    "writer_ack_at": "TIMESTAMP(6) NULL DEFAULT NULL",
    "writer_ack_snapshot_id": "BIGINT NULL",
}
_EXISTING_COLUMNS = (
    "SELECT column_name FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = %s"
)

_ENSURE_ROW = f"INSERT INTO {GATE_TABLE} (table_name) VALUES (%s) ON DUPLICATE KEY UPDATE table_name = table_name"

_SELECT = (
    "SELECT table_name, state, owner_dag_id, owner_run_id, closed_at, lease_expires_at, opened_at,"
    f" writer_ack_at, writer_ack_snapshot_id, NOW(6) FROM {GATE_TABLE} WHERE table_name = %s"
)

# MySQL evaluates SET assignments left to right, each seeing the previous ones: closed_at is computed first,
# from the row as it was, so a re-close by the holder keeps the original close time.
_CLOSE = f"""UPDATE {GATE_TABLE}
    SET closed_at = IF(state = 'closed' AND lease_expires_at > NOW(6)
                       AND owner_dag_id = %(dag_id)s AND owner_run_id = %(run_id)s, closed_at, NOW(6)),
        state = 'closed',
        owner_dag_id = %(dag_id)s,
        owner_run_id = %(run_id)s,
        lease_expires_at = NOW(6) + INTERVAL %(lease_seconds)s SECOND
    WHERE table_name = %(table)s
      AND (state = 'open' OR lease_expires_at <= NOW(6)
           OR (owner_dag_id = %(dag_id)s AND owner_run_id = %(run_id)s))"""

_OPEN = f"""UPDATE {GATE_TABLE}
    SET state = 'open', opened_at = NOW(6), lease_expires_at = NULL, owner_dag_id = NULL, owner_run_id = NULL,
        writer_ack_at = NULL, writer_ack_snapshot_id = NULL
    WHERE table_name = %(table)s AND state = 'closed'
      AND owner_dag_id = %(dag_id)s AND owner_run_id = %(run_id)s"""

_FORCE_OPEN = f"""UPDATE {GATE_TABLE}
    SET state = 'open', opened_at = NOW(6), lease_expires_at = NULL, owner_dag_id = NULL, owner_run_id = NULL,
        writer_ack_at = NULL, writer_ack_snapshot_id = NULL
    WHERE table_name = %s AND state = 'closed'"""

_AUDIT = f"""INSERT INTO {AUDIT_TABLE} (table_name, action, owner_dag_id, owner_run_id, lease_expires_at, detail)
    VALUES (%s, %s, %s, %s, %s, %s)"""

_AUDIT_SELECT = f"""SELECT id, table_name, action, owner_dag_id, owner_run_id, at, lease_expires_at, detail
    FROM {AUDIT_TABLE} WHERE table_name = %s ORDER BY id"""


class WriteGateHeldError(RuntimeError):
    """The gate is closed by another owner whose lease has not expired."""


@dataclass(frozen=True)
class GateOwner:
    """Who holds a gate: one DAG run."""

    dag_id: str
    run_id: str

    def __str__(self) -> str:
        return f"dag {self.dag_id!r} run {self.run_id!r}"


@dataclass(frozen=True)
class GateState:
    """A gate row as read, with the database's clock at the moment of reading."""

    table: str
    state: str
    owner: GateOwner | None
    closed_at: datetime | None
    lease_expires_at: datetime | None
    opened_at: datetime | None
    writer_ack_at: datetime | None
    writer_ack_snapshot_id: int | None
    database_now: datetime

    @property
    def pauses_writers(self) -> bool:
        """The writers' rule: closed and the lease not yet ended."""
        return (
            self.state == "closed" and self.lease_expires_at is not None and self.lease_expires_at > self.database_now
        )

    def held_by(self, owner: GateOwner) -> bool:
        return self.pauses_writers and self.owner == owner

    @property
    def writer_acknowledged(self) -> bool:
        """The writer acknowledged the pause of this closing (not of an earlier one)."""
        return self.writer_ack_at is not None and self.closed_at is not None and self.writer_ack_at >= self.closed_at


def _utc(value: datetime | None) -> datetime | None:
    # The session time zone is UTC (see get_conn), so MySQL's naive TIMESTAMP values are UTC.
    return value.replace(tzinfo=timezone.utc) if value is not None else None


def _gate_state(row: tuple[Any, ...]) -> GateState:
    table, state, dag_id, run_id, closed_at, lease, opened_at, ack_at, ack_snapshot_id, now = row
    return GateState(
        table=table,
        state=state,
        owner=GateOwner(dag_id, run_id) if dag_id is not None else None,
        closed_at=_utc(closed_at),
        lease_expires_at=_utc(lease),
        opened_at=_utc(opened_at),
        writer_ack_at=_utc(ack_at),
        writer_ack_snapshot_id=ack_snapshot_id,
        database_now=_utc(now),  # type: ignore[arg-type]
    )


def _conditional_update(
    cursor: pymysql.cursors.Cursor, table: str, statement: str, params: dict[str, Any]
) -> tuple[bool, GateState, GateState]:
    """Run a conditional UPDATE of ``table``'s gate row; return whether it matched, and the row before and after.

    The row is created if missing and locked first, so "before" is exactly what the UPDATE's condition saw.
    The caller commits, together with its audit row.
    """
    cursor.execute(_ENSURE_ROW, (table,))
    cursor.execute(_SELECT + " FOR UPDATE", (table,))
    before = _gate_state(cursor.fetchone())
    cursor.execute(statement, params)
    matched = cursor.rowcount == 1  # matched, not changed: the connection sets CLIENT.FOUND_ROWS
    cursor.execute(_SELECT, (table,))
    return matched, before, _gate_state(cursor.fetchone())


def check_lease_seconds(lease_seconds: object) -> int:
    """``lease_seconds`` if it is a positive integer; a ValueError naming the value otherwise."""
    if isinstance(lease_seconds, bool) or not isinstance(lease_seconds, int) or lease_seconds <= 0:
        raise ValueError(f"lease_seconds must be a positive integer, got {lease_seconds!r}")
    return lease_seconds


class WriteGateHook(BaseHook):
    """Close and open Iceberg write gates kept in MySQL, and read their state and audit trail.

    The connection is of type ``iceberg_write_gate``: host, port, login, password and, as *schema*, the MySQL
    database that holds the gate tables. The hook creates the tables if they are missing.

    :param write_gate_conn_id: Airflow connection id of the gate's MySQL database.
    """

    conn_name_attr = "write_gate_conn_id"
    default_conn_name = "write_gate_default"
    conn_type = "iceberg_write_gate"
    hook_name = "Iceberg Write Gate (MySQL)"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["extra"],
            "relabeling": {"schema": "Database"},
            "placeholders": {"host": "127.0.0.1", "port": "3306", "schema": "airflow_iceberg"},
        }

    def __init__(self, write_gate_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.write_gate_conn_id = write_gate_conn_id
        self._schema_ready = False

    def get_conn(self) -> pymysql.connections.Connection:
        """A new connection in UTC, reporting matched (not changed) rows, with autocommit off."""
        conn = self.get_connection(self.write_gate_conn_id)
        if not conn.schema:
            raise ValueError(
                f"connection {self.write_gate_conn_id!r} names no database: set its schema to the gate database"
            )
        return pymysql.connect(
            host=conn.host or "127.0.0.1",
            port=int(conn.port or 3306),
            user=conn.login or "root",
            password=conn.password or "",
            database=conn.schema,
            autocommit=False,
            client_flag=CLIENT.FOUND_ROWS,
            init_command="SET time_zone = '+00:00'",
            connect_timeout=10,
        )

    def ensure_schema(self) -> None:
        """Create the gate and audit tables if they do not exist; safe to call any number of times."""
        if self._schema_ready:
            return
        with self.get_conn() as db, db.cursor() as cursor:
            for statement in _SCHEMA:
                cursor.execute(statement)
            cursor.execute(_EXISTING_COLUMNS, (GATE_TABLE,))
            existing = {row[0].lower() for row in cursor.fetchall()}
            for column, definition in _LATER_COLUMNS.items():
                if column not in existing:
                    cursor.execute(f"ALTER TABLE {GATE_TABLE} ADD COLUMN {column} {definition}")
        self._schema_ready = True

    def get_state(self, table: str) -> GateState:
        """The gate row of ``table``; a table never gated reads as open."""
        name = str(TableName.parse(table))
        self.ensure_schema()
        with self.get_conn() as db, db.cursor() as cursor:
            cursor.execute(_SELECT, (name,))
            row = cursor.fetchone()
            if row is None:
                cursor.execute("SELECT NOW(6)")
                row = (name, "open", None, None, None, None, None, None, None, cursor.fetchone()[0])
            db.commit()
        return _gate_state(row)

    def close_gate(self, table: str, owner: GateOwner, lease_seconds: int) -> GateState:
        """Close the gate of ``table`` for ``owner`` with a lease of ``lease_seconds``.

        Succeeds if the gate is open, its lease has expired, or ``owner`` already holds it (then the lease is
        renewed and the original close time kept). Raises :class:`WriteGateHeldError` otherwise, changing
        nothing but the audit trail.
        """
        name = str(TableName.parse(table))
        check_lease_seconds(lease_seconds)
        self.ensure_schema()
        params = {"table": name, "dag_id": owner.dag_id, "run_id": owner.run_id, "lease_seconds": lease_seconds}
        with self.get_conn() as db, db.cursor() as cursor:
            closed, before, after = _conditional_update(cursor, name, _CLOSE, params)
            if closed:
                if before.held_by(owner):
                    action, detail = "reclose", "lease renewed by its holder"
                elif before.state == "closed":
                    action, detail = "close", f"took over the expired lease of {before.owner}"
                else:
                    action, detail = "close", None
                cursor.execute(_AUDIT, (name, action, owner.dag_id, owner.run_id, after.lease_expires_at, detail))
            else:
                detail = f"held by {before.owner} until {before.lease_expires_at:%Y-%m-%d %H:%M:%S.%f} UTC"
                cursor.execute(
                    _AUDIT, (name, "close_refused", owner.dag_id, owner.run_id, before.lease_expires_at, detail)
                )
            db.commit()
        if not closed:
            raise WriteGateHeldError(f"cannot close the write gate of {name} for {owner}: it is {detail}")
        self.log.info("Write gate of %s closed by %s until %s (database time)", name, owner, after.lease_expires_at)
        return after

    def open_gate(self, table: str, owner: GateOwner) -> tuple[bool, GateState]:
        """Open the gate of ``table`` if ``owner`` holds it; return whether it did and the state after.

        A gate held by another owner, or already open, is left as it is and the log says why.
        """
        name = str(TableName.parse(table))
        self.ensure_schema()
        params = {"table": name, "dag_id": owner.dag_id, "run_id": owner.run_id}
        with self.get_conn() as db, db.cursor() as cursor:
            opened, before, after = _conditional_update(cursor, name, _OPEN, params)
            if opened:
                cursor.execute(_AUDIT, (name, "open", owner.dag_id, owner.run_id, None, None))
            else:
                if before.state == "open":
                    why = "the gate is already open"
                else:
                    why = f"the gate is held by {before.owner}, not by {owner}"
                cursor.execute(_AUDIT, (name, "open_noop", owner.dag_id, owner.run_id, None, why))
            db.commit()
        if opened:
            self.log.info("Write gate of %s opened by %s", name, owner)
        else:
            self.log.warning("Write gate of %s left as it is: %s", name, why)
        return opened, after

    def force_open(self, table: str, reason: str) -> bool:
        """Open the gate of ``table`` whoever holds it, recording ``reason``; return whether it was closed.

        For people, not DAGs: releasing writers at once after a run died, instead of waiting out its lease.
        """
        name = str(TableName.parse(table))
        self.ensure_schema()
        with self.get_conn() as db, db.cursor() as cursor:
            cursor.execute(_FORCE_OPEN, (name,))
            was_closed = cursor.rowcount == 1
            cursor.execute(_AUDIT, (name, "force_open", None, None, None, reason[:1000]))
            db.commit()
        if was_closed:
            self.log.warning("Write gate of %s forced open: %s", name, reason)
        else:
            self.log.info("Write gate of %s was already open: %s", name, reason)
        return was_closed

    def audit_trail(self, table: str) -> list[dict[str, Any]]:
        """Every recorded close, open and refusal for ``table``, oldest first, times in UTC."""
        name = str(TableName.parse(table))
        self.ensure_schema()
        with self.get_conn() as db, db.cursor(pymysql.cursors.DictCursor) as cursor:
            cursor.execute(_AUDIT_SELECT, (name,))
            rows = cursor.fetchall()
            db.commit()
        for row in rows:
            row["at"] = _utc(row["at"])
            row["lease_expires_at"] = _utc(row["lease_expires_at"])
        return list(rows)
