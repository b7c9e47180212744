"""The write gate: one MySQL row per Iceberg table that tells its streaming writer to pause committing.

A DAG run closes the gate with a lease, compacts, and opens it again. Each change locks the table's row, decides by
the gate's rules (``core/gate_state.py``: :func:`decide_close`, :func:`decide_open`; and for Spark slots
``core/spark_slots.py``) from the row as locked, and writes the change and its audit row in the same transaction.
The stores kept beside the gates, in the same database and transactions: the run records and health checks
(``hooks/run_records.py``, :attr:`WriteGateHook.records`) and the Spark-slot queue (``hooks/spark_slots.py``,
:attr:`WriteGateHook.spark_slots`). Every time comes from the
database clock, the one writers compare against. Writers pause iff ``state = 'closed' AND lease_expires_at > NOW()``
(see ``docs/write-gate-protocol.md``), so a crashed run cannot pause them past its lease.

The tables are defined in ``write_gate.sql`` and created or upgraded by ``airflow-iceberg migrate``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, cast

import pymysql
from airflow.sdk import BaseHook

from airflow_iceberg.core.gate_protocol import (
    AUDIT_INSERT_SQL,
    AUDIT_TABLE,
    GATE_ENSURE_ROW_SQL,
    GATE_SELECT_ALL_SQL,
    GATE_SELECT_SQL,
    OWNER_CLOSE_SQL,
    OWNER_OPEN_SQL,
    OWNER_RENEW_SQL,
    WRITE_GATE_DEFAULT_CONN_ID,
    WRITERS_SELECT_SQL,
    owner_connection,
)
from airflow_iceberg.core.gate_state import (
    AuditAction,
    GateOwner,
    GateState,
    WriterState,
    check_lease_seconds,
    check_pause_ceiling,
    database_time,
    decide_close,
    decide_open,
)
from airflow_iceberg.core.job_secrets import GateOwnerSecrets
from airflow_iceberg.core.lease import GateLease
from airflow_iceberg.core.spark_slots import SparkSlotRequest
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.exceptions import (
    SparkSlotsBusyError,
    WriteGateHeldError,
    WriteGateSchemaError,
    WriteGateUnreachableError,
)
from airflow_iceberg.hooks import write_gate_schema
from airflow_iceberg.hooks.run_records import RunRecords, the_row
from airflow_iceberg.hooks.spark_slots import SparkSlotQueue

_AUDIT_SELECT = f"""SELECT id, table_name, action, owner_dag_id, owner_run_id, at, lease_expires_at, detail
    FROM {AUDIT_TABLE} WHERE table_name = %s ORDER BY id"""

# MySQL errors that mean the tables are missing or lack a column: the schema was not migrated.
_SCHEMA_ERRORS = {1146, 1054}


#: pymysql's codes for a MySQL that cannot be reached (2003, 2005, 2006, 2013) or refuses the login (1044, 1045).
_UNREACHABLE = {2003, 2005, 2006, 2013}
_LOGIN_REFUSED = {1044, 1045}


def run_owner(context: Mapping[str, Any]) -> GateOwner:
    """The gate owner for the DAG run that ``context`` belongs to."""
    return GateOwner(dag_id=context["dag"].dag_id, run_id=context["run_id"])


class WriteGateHook(BaseHook):
    """Close and open Iceberg write gates kept in MySQL, and read their state and audit trail.

    The connection is of type ``iceberg_write_gate``: host, port, login, password and, as *schema*, the MySQL
    database that holds the gate tables. :meth:`migrate` creates or upgrades them; run it once per database
    (``airflow-iceberg migrate``), not per task.

    :param write_gate_conn_id: Airflow connection id of the gate's MySQL database.
    """

    conn_name_attr = "write_gate_conn_id"
    default_conn_name = WRITE_GATE_DEFAULT_CONN_ID
    conn_type = "iceberg_write_gate"
    hook_name = "Iceberg Write Gate (MySQL)"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        from airflow_iceberg.get_provider_info import WRITE_GATE_FORM

        return {key.replace("-", "_"): value for key, value in WRITE_GATE_FORM.items()}

    def __init__(self, write_gate_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.write_gate_conn_id = write_gate_conn_id

    @functools.cached_property
    def records(self) -> RunRecords:
        """The run records and health checks kept beside this connection's gates."""
        return RunRecords(self._transaction, self.log)

    @functools.cached_property
    def spark_slots(self) -> SparkSlotQueue:
        """The queue of runs for each Spark connection's slots, kept beside this connection's gates."""
        return SparkSlotQueue(self._transaction)

    def connection_settings(self) -> dict[str, Any]:
        """Host, port, user, password and database of the gate's MySQL, from the connection.

        A connection without a database or without a login is an error naming the connection: it never falls
        back to ``root``.
        """
        conn = self.get_connection(self.write_gate_conn_id)
        if not conn.schema:
            raise ValueError(
                f"connection {self.write_gate_conn_id!r} names no database: set its schema to the gate database"
            )
        if not conn.login:
            raise ValueError(
                f"connection {self.write_gate_conn_id!r} has no login: set the MySQL user Airflow uses for the gate"
            )
        return {
            "host": conn.host or "127.0.0.1",
            "port": int(conn.port or 3306),
            "user": conn.login,
            "password": conn.password or "",
            "database": conn.schema,
        }

    def get_conn(self) -> pymysql.connections.Connection:
        """A new connection in UTC, returning rows as dicts, with autocommit off, in a gate owner's session (a
        frozen owner's row lock is dropped within seconds: see ``OWNER_SESSION_SETTINGS``)."""
        settings = self.connection_settings()
        try:
            return owner_connection(**settings, cursorclass=pymysql.cursors.DictCursor)
        except pymysql.err.OperationalError as error:
            code = error.args[0] if error.args else None
            where = f"{settings['host']}:{settings['port']}, database {settings['database']!r}"
            if code in _LOGIN_REFUSED:
                raise WriteGateUnreachableError(
                    code,
                    (
                        f"the write gate's MySQL ({where}) refused user {settings['user']!r} of connection "
                        f"{self.write_gate_conn_id!r}: {error.args[-1]}. Nothing in the gate changed. Check the "
                        f"connection's login and password, and that the user has the grants the README gives it."
                    ),
                ) from error
            if code in _UNREACHABLE:
                raise WriteGateUnreachableError(
                    code,
                    (
                        f"the write gate's MySQL ({where}) of connection {self.write_gate_conn_id!r} did not answer: "
                        f"{error.args[-1]}. Nothing in the gate changed. Check that MySQL runs and that the connection "
                        f"points at it (`airflow connections get {self.write_gate_conn_id}`); once it answers, clear "
                        f"the task to run it again."
                    ),
                ) from error
            raise

    def lease(self, table: TableName | str, owner: GateOwner) -> GateLease:
        """``owner``'s lease on the gate of ``table``, for a :class:`LeaseKeeper` that renews it while work runs."""
        settings = self.connection_settings()
        return GateLease(str(TableName.of(table)), owner.dag_id, owner.run_id, lambda: owner_connection(**settings))

    def owner_settings(self, table: TableName | str, owner: GateOwner, lease_seconds: int) -> GateOwnerSecrets:
        """What a Spark job needs to renew ``owner``'s lease of ``lease_seconds`` itself (``LeaseKeeper``): the
        connection and the owner.

        Holds the gate's password: it belongs in a job's secrets file, never on a command line.
        """
        connection = self.connection_settings()
        return GateOwnerSecrets(
            host=connection["host"],
            port=connection["port"],
            user=connection["user"],
            password=connection["password"],
            database=connection["database"],
            table=str(TableName.of(table)),
            dag_id=owner.dag_id,
            run_id=owner.run_id,
            lease_seconds=lease_seconds,
        )

    @contextmanager
    def _transaction(self) -> Iterator[pymysql.cursors.DictCursor]:
        """A cursor in one transaction, committed if the block ends normally; missing tables are named."""
        with self.get_conn() as db, db.cursor() as cursor:
            try:
                yield cast(pymysql.cursors.DictCursor, cursor)  # get_conn's cursor class
            except (pymysql.err.ProgrammingError, pymysql.err.OperationalError) as error:
                if error.args and error.args[0] in _SCHEMA_ERRORS:
                    raise WriteGateSchemaError(
                        f"the write gate tables of connection {self.write_gate_conn_id!r} are missing or older "
                        f"than this provider's schema version {write_gate_schema.gate_schema().latest}: run "
                        f"`airflow-iceberg migrate --conn-id {self.write_gate_conn_id}` ({error.args[-1]})"
                    ) from error
                raise
            db.commit()

    def migrate(self) -> tuple[int, int]:
        """Create or upgrade the gate tables to this provider's schema; return the versions before and after."""
        with self.get_conn() as db:
            return write_gate_schema.migrate(db)

    def schema_version(self) -> int:
        """The schema version of the connection's database (0 if it has no gate tables yet)."""
        with self.get_conn() as db, db.cursor() as cursor:
            return write_gate_schema.recorded_version(cursor)

    def get_state(self, table: TableName | str) -> GateState:
        """The gate row of ``table`` and its writers, read together; a table never gated reads as open."""
        name = str(TableName.of(table))
        with self._transaction() as cursor:
            cursor.execute(WRITERS_SELECT_SQL, (name,))
            writers = tuple(WriterState.from_row(row) for row in cursor.fetchall())
            cursor.execute(GATE_SELECT_SQL, (name,))
            row = cursor.fetchone()
            if row is None:
                cursor.execute("SELECT NOW(6) AS database_now")
                now: datetime = the_row(cursor)["database_now"].replace(tzinfo=timezone.utc)  # UTC: see database_time
                return GateState.never_closed(name, now, writers)
        return GateState.from_row(row, writers)

    def gate_states(self) -> dict[str, GateState]:
        """Every gate row of the connection's database, by table name, without its writers: every table at a glance."""
        with self._transaction() as cursor:
            cursor.execute(GATE_SELECT_ALL_SQL)
            return {row["table_name"]: GateState.from_row(row) for row in cursor.fetchall()}

    @staticmethod
    def _locked_state(cursor: pymysql.cursors.DictCursor, name: str) -> GateState:
        """The gate row of ``name``, created if missing and locked until the transaction ends."""
        cursor.execute(GATE_ENSURE_ROW_SQL, (name,))
        cursor.execute(GATE_SELECT_SQL + " FOR UPDATE", (name,))
        return GateState.from_row(the_row(cursor))

    def close_gate(
        self,
        table: TableName | str,
        owner: GateOwner,
        lease_seconds: int,
        max_pause_seconds: int | None = None,
        slot: SparkSlotRequest | None = None,
    ) -> GateState:
        """Close the gate of ``table`` for ``owner`` with a lease of ``lease_seconds``.

        The owner renews the lease while it works (:meth:`renew_lease`); with ``max_pause_seconds``, no
        renewal extends it past that many seconds after this closing, which caps how long this run pauses
        writers. Succeeds if the gate is open, its lease has expired, or ``owner`` already holds it (then the
        lease is renewed and the original close time and deadline kept). Raises :class:`WriteGateHeldError`
        otherwise, changing nothing but the audit trail.

        With ``slot``, the gate closes only if the run also gets one of the Spark connection's slots
        (:func:`decide_admission`); otherwise the run keeps its place in the queue, the gate stays as it was,
        and :class:`SparkSlotsBusyError` says who holds the slots and who is ahead. The slot is the run's until
        it opens the gate or its lease ends.
        """
        name = str(TableName.of(table))
        check_pause_ceiling(lease_seconds, max_pause_seconds)
        if slot is not None:
            check_lease_seconds(slot.slots, "spark_slots")
            check_lease_seconds(slot.patience, "the slot request's patience")
        waiting = None
        with self._transaction() as cursor:
            if slot is not None:  # the connection's lock first, then the gate's row: every path locks in that order
                self.spark_slots.lock(cursor, slot.spark_conn_id)
            before = self._locked_state(cursor, name)
            change = decide_close(before, owner)
            if change.allowed and slot is not None:
                admission = self.spark_slots.ask(cursor, name, owner, slot)
                if not admission.allowed:
                    waiting = f"{name} waits for a Spark slot of {slot.spark_conn_id!r}: {admission.detail}"
            if waiting is None and change.allowed:
                params = {
                    "table": name,
                    "dag_id": owner.dag_id,
                    "run_id": owner.run_id,
                    "lease_seconds": lease_seconds,
                    "max_pause_seconds": max_pause_seconds,
                    "renew": change.action == AuditAction.RECLOSE,
                }
                cursor.execute(OWNER_CLOSE_SQL, params)
                cursor.execute(OWNER_RENEW_SQL, (name, owner.dag_id, owner.run_id))
                cursor.execute(GATE_SELECT_SQL, (name,))
                after = GateState.from_row(the_row(cursor))
                lease = after.lease_expires_at
            else:
                lease = before.lease_expires_at
            if waiting is None:  # a wait for a slot changes no gate: the queue shows it, not the audit trail
                cursor.execute(
                    AUDIT_INSERT_SQL, (name, change.action, owner.dag_id, owner.run_id, lease, change.detail)
                )
        if waiting is not None:
            raise SparkSlotsBusyError(waiting)
        if not change.allowed:
            raise WriteGateHeldError(f"cannot close the write gate of {name} for {owner}: it is {change.detail}")
        self.log.info("Write gate of %s closed by %s until %s (database time)", name, owner, after.lease_expires_at)
        return after

    def renew_lease(self, table: TableName | str, owner: GateOwner) -> GateState:
        """Extend the lease of a gate ``owner`` holds by the lease it closed with, never past the pause's deadline.

        Raises :class:`LeaseLostError` if ``owner`` no longer holds the gate (its lease ended, another
        run took it over, or it was forced open): whatever the owner was doing must stop.
        """
        name = str(TableName.of(table))
        with self._transaction() as cursor:
            cursor.execute(OWNER_RENEW_SQL, (name, owner.dag_id, owner.run_id))
            cursor.execute(WRITERS_SELECT_SQL, (name,))
            writers = tuple(WriterState.from_row(row) for row in cursor.fetchall())
            cursor.execute(GATE_SELECT_SQL, (name,))
            row = cursor.fetchone()
        state = GateState.from_row(row, writers) if row else GateState.never_closed(name, datetime.now(timezone.utc))
        state.require_held_by(owner)
        return state

    def open_gate(self, table: TableName | str, owner: GateOwner) -> tuple[bool, GateState]:
        """Open the gate of ``table`` if ``owner`` holds it; return whether it did and the state after.

        A gate held by another owner, or already open, is left as it is and the log says why.
        """
        name = str(TableName.of(table))
        with self._transaction() as cursor:
            before = self._locked_state(cursor, name)
            change = decide_open(before, owner)
            if change.allowed:
                cursor.execute(OWNER_OPEN_SQL, {"table": name})
                self.spark_slots.release(cursor, name, owner)  # its Spark slot, if it took one
            cursor.execute(AUDIT_INSERT_SQL, (name, change.action, owner.dag_id, owner.run_id, None, change.detail))
            cursor.execute(GATE_SELECT_SQL, (name,))
            after = GateState.from_row(the_row(cursor))
        if change.allowed:
            self.log.info("Write gate of %s opened by %s", name, owner)
        else:
            self.log.warning("Write gate of %s left as it is: %s", name, change.detail)
        return change.allowed, after

    def force_open(self, table: TableName | str, reason: str) -> bool:
        """Open the gate of ``table`` whoever holds it, recording ``reason``; return whether it was closed.

        For people, not DAGs: releasing writers at once after a run died, instead of waiting out its lease.
        The audit row names the run that held the gate and the lease it had.
        """
        name = str(TableName.of(table))
        with self._transaction() as cursor:
            before = self._locked_state(cursor, name)
            was_closed = before.state == "closed"
            if was_closed:
                cursor.execute(OWNER_OPEN_SQL, {"table": name})
            owner = before.owner
            cursor.execute(
                AUDIT_INSERT_SQL,
                (
                    name,
                    AuditAction.FORCE_OPEN,
                    owner and owner.dag_id,
                    owner and owner.run_id,
                    before.lease_expires_at,
                    reason[:1000],
                ),
            )
        if was_closed:
            self.log.warning("Write gate of %s, held by %s, forced open: %s", name, owner, reason)
        else:
            self.log.info("Write gate of %s was already open: %s", name, reason)
        return was_closed

    def audit_trail(self, table: TableName | str) -> list[dict[str, Any]]:
        """Every recorded close, open and refusal for ``table``, oldest first, times in UTC."""
        name = str(TableName.of(table))
        with self._transaction() as cursor:
            cursor.execute(_AUDIT_SELECT, (name,))
            rows = list(cursor.fetchall())
        for row in rows:
            row["at"] = database_time(row["at"])
            row["lease_expires_at"] = database_time(row["lease_expires_at"])
        return rows
