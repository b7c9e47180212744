"""The write gate: one MySQL row per Iceberg table that tells its streaming writer to pause committing.

A DAG run closes the gate with a lease, compacts, and opens it again. Each change locks the table's row, decides
by the rules below (:func:`decide_close`, :func:`decide_open`) from the row as locked, and writes the change and
its audit row in the same transaction. Every time comes from the database clock, the one writers compare
against. Writers pause iff ``state = 'closed' AND lease_expires_at > NOW()`` (see
``docs/write-gate-protocol.md``), so a crashed run cannot pause them past its lease.

The tables are defined in ``write_gate.sql`` and created or upgraded by ``airflow-iceberg migrate``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, cast

import pymysql
from airflow.sdk import BaseHook

from airflow_iceberg.core.gate_protocol import (
    AUDIT_TABLE,
    GATE_TABLE,
    OWNER_RENEW_SQL,
    WRITER_SEEN_WINDOW_SECONDS,
    WRITER_TABLE,
    owner_connection,
)
from airflow_iceberg.core.lease import GateLease
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.exceptions import (
    LeaseLostError,
    SparkSlotsBusyError,
    WriteGateHeldError,
    WriteGateSchemaError,
    WriteGateUnreachableError,
)
from airflow_iceberg.hooks import write_gate_schema

_ENSURE_ROW = f"INSERT INTO {GATE_TABLE} (table_name) VALUES (%s) ON DUPLICATE KEY UPDATE table_name = table_name"

_SELECT_GATES = (
    "SELECT table_name, state, owner_dag_id, owner_run_id, closed_at, lease_expires_at, lease_seconds,"
    f" pause_deadline, opened_at, NOW(6) AS database_now FROM {GATE_TABLE}"
)
_SELECT = f"{_SELECT_GATES} WHERE table_name = %s"

_SELECT_WRITERS = f"""SELECT writer_id, seen_at, ack_at, ack_snapshot_id FROM {WRITER_TABLE}
    WHERE table_name = %s ORDER BY writer_id"""

# Applied only after decide_close allowed it, on the row locked by _locked_state, and followed by the owner's
# renewal (OWNER_RENEW_SQL), which caps the lease at the pause's deadline. An owner's re-close keeps its
# original close time and deadline.
_CLOSE = f"""UPDATE {GATE_TABLE}
    SET closed_at = IF(%(renew)s, closed_at, NOW(6)), state = 'closed',
        owner_dag_id = %(dag_id)s, owner_run_id = %(run_id)s, lease_seconds = %(lease_seconds)s,
        pause_deadline = CASE WHEN %(renew)s THEN pause_deadline
                              WHEN %(max_pause_seconds)s IS NULL THEN NULL
                              ELSE NOW(6) + INTERVAL %(max_pause_seconds)s SECOND END,
        lease_expires_at = NOW(6) + INTERVAL %(lease_seconds)s SECOND
    WHERE table_name = %(table)s"""

_OPEN = f"""UPDATE {GATE_TABLE}
    SET state = 'open', opened_at = NOW(6), lease_expires_at = NULL, owner_dag_id = NULL, owner_run_id = NULL,
        lease_seconds = NULL, pause_deadline = NULL
    WHERE table_name = %(table)s"""

_AUDIT = f"""INSERT INTO {AUDIT_TABLE} (table_name, action, owner_dag_id, owner_run_id, lease_expires_at, detail)
    VALUES (%s, %s, %s, %s, %s, %s)"""

_AUDIT_SELECT = f"""SELECT id, table_name, action, owner_dag_id, owner_run_id, at, lease_expires_at, detail
    FROM {AUDIT_TABLE} WHERE table_name = %s ORDER BY id"""

RUN_TABLE = "iceberg_compaction_run"
#: The columns of a run record a task may set; the rest are the database's (id, started_at).
RUN_COLUMNS = (
    "table_name", "dag_id", "run_id", "decision", "reason", "partitions", "data_files_before",
    "delete_files_before", "bytes_before", "data_files_after", "delete_files_after", "bytes_after", "health_score",
    "gate_closed_seconds", "rewrite_seconds", "outcome", "detail",
)  # fmt: skip
# One row per DAG run: the plan writes it, the run's last task completes it (a retry overwrites its own row).
# Column names come from RUN_COLUMNS only; every value is a parameter.
_RUN_INSERT = f"""INSERT INTO {RUN_TABLE} ({", ".join(RUN_COLUMNS)}, finished_at)
    VALUES ({", ".join(f"%({c})s" for c in RUN_COLUMNS)}, IF(%(finished)s, NOW(6), NULL))"""
_RUN_SELECT = f"""SELECT id, {", ".join(RUN_COLUMNS)}, started_at, finished_at FROM {RUN_TABLE}
    WHERE table_name = %s ORDER BY id"""
_RUN_SELECT_ONE = f"""SELECT {", ".join(RUN_COLUMNS)} FROM {RUN_TABLE}
    WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s"""

# The health watch's last check of each table (triggers/table_health.py): one upsert per sweep for all of them.
HEALTH_TABLE = "iceberg_health_check"
HEALTH_COLUMNS = ("table_name", "snapshot_id", "decision", "reason", "reading", "score", "data_files", "delete_files")
_HEALTH_UPSERT = f"""INSERT INTO {HEALTH_TABLE} ({", ".join(HEALTH_COLUMNS)}, checked_at, started_at)
    VALUES ({", ".join(["%s"] * len(HEALTH_COLUMNS))}, NOW(6), IF(%s, NOW(6), NULL))
    ON DUPLICATE KEY UPDATE {", ".join(f"{c} = VALUES({c})" for c in HEALTH_COLUMNS[1:])}, checked_at = NOW(6),
    started_at = IF(VALUES(decision) = 'started', NOW(6), started_at)"""
_HEALTH_SELECT = f"SELECT {', '.join(HEALTH_COLUMNS)}, checked_at, started_at FROM {HEALTH_TABLE}"
# The newest run record of each table, and how long ago it ended (or began, if it never ended), by the database
# clock. The IN list holds one placeholder per table.
_LAST_RUNS = f"""SELECT r.table_name, r.dag_id, r.run_id, r.decision, r.outcome, r.started_at, r.finished_at,
    TIMESTAMPDIFF(MICROSECOND, COALESCE(r.finished_at, r.started_at), NOW(6)) / 1e6 AS seconds_ago
    FROM {RUN_TABLE} r JOIN (SELECT MAX(id) AS id FROM {RUN_TABLE} WHERE table_name IN ({{}}) GROUP BY table_name) n
    ON r.id = n.id"""

# How many runs of each table failed in the last %s seconds, by the database clock.
_FAILED_RUNS = f"""SELECT table_name, COUNT(*) AS failed FROM {RUN_TABLE}
    WHERE outcome = 'failed' AND started_at >= NOW(6) - INTERVAL %s SECOND GROUP BY table_name"""

# Spark slots (tables with spark_pool_slots): at most N tables of one Spark connection have their gate closed at
# once. A run asks from close_gate, before it pauses anyone; the Spark connection's row lock orders the askers.
SLOT_CONN_TABLE = "iceberg_spark_conn"
SLOT_QUEUE_TABLE = "iceberg_spark_queue"
_SLOT_LOCK = [
    f"INSERT INTO {SLOT_CONN_TABLE} (spark_conn_id) VALUES (%s) ON DUPLICATE KEY UPDATE spark_conn_id = spark_conn_id",
    f"SELECT spark_conn_id FROM {SLOT_CONN_TABLE} WHERE spark_conn_id = %s FOR UPDATE",
]
# Every queue row of a connection, with whether its run still holds its table's gate and the database clock.
_SLOT_QUEUE = f"""SELECT q.table_name, q.owner_dag_id, q.owner_run_id, q.score, q.queued_at, q.expires_at,
        q.admitted_at, NOW(6) AS database_now,
        (g.state = 'closed' AND g.lease_expires_at > NOW(6) AND g.owner_dag_id = q.owner_dag_id
         AND g.owner_run_id = q.owner_run_id) AS holds_gate
    FROM {SLOT_QUEUE_TABLE} q LEFT JOIN {GATE_TABLE} g ON g.table_name = q.table_name
    WHERE q.spark_conn_id = %s"""
# A run's place: kept while the same run asks again (its retries too), taken anew by another run.
_SLOT_ASK = f"""INSERT INTO {SLOT_QUEUE_TABLE}
        (table_name, spark_conn_id, owner_dag_id, owner_run_id, score, queued_at, expires_at, admitted_at)
    VALUES (%(table)s, %(conn)s, %(dag_id)s, %(run_id)s, %(score)s, NOW(6), NOW(6) + INTERVAL %(patience)s SECOND,
        NULL)
    ON DUPLICATE KEY UPDATE
        queued_at = IF(owner_dag_id = VALUES(owner_dag_id) AND owner_run_id = VALUES(owner_run_id), queued_at,
                       VALUES(queued_at)),
        admitted_at = IF(owner_dag_id = VALUES(owner_dag_id) AND owner_run_id = VALUES(owner_run_id), admitted_at,
                         NULL),
        spark_conn_id = VALUES(spark_conn_id), owner_dag_id = VALUES(owner_dag_id),
        owner_run_id = VALUES(owner_run_id), score = VALUES(score), expires_at = VALUES(expires_at)"""
_SLOT_ADMIT = f"UPDATE {SLOT_QUEUE_TABLE} SET admitted_at = NOW(6) WHERE table_name = %s AND admitted_at IS NULL"
_SLOT_DROP = f"DELETE FROM {SLOT_QUEUE_TABLE} WHERE table_name = %s AND owner_dag_id = %s AND owner_run_id = %s"

# MySQL errors that mean the tables are missing or lack a column: the schema was not migrated.
_SCHEMA_ERRORS = {1146, 1054}


#: pymysql's codes for a MySQL that cannot be reached (2003, 2005, 2006, 2013) or refuses the login (1044, 1045).
_UNREACHABLE = {2003, 2005, 2006, 2013}
_LOGIN_REFUSED = {1044, 1045}


@dataclass(frozen=True)
class GateOwner:
    """Who holds a gate: one DAG run."""

    dag_id: str
    run_id: str

    def __str__(self) -> str:
        return f"dag {self.dag_id!r} run {self.run_id!r}"


def _utc(value: datetime | None) -> datetime | None:
    # The session time zone is UTC (see get_conn), so MySQL's naive TIMESTAMP values are UTC.
    return value.replace(tzinfo=timezone.utc) if value is not None else None


def _the_row(cursor: pymysql.cursors.DictCursor) -> dict[str, Any]:
    """The one row the statement just run always returns (a row this transaction created or locked)."""
    row = cursor.fetchone()
    if row is None:
        raise LookupError("the statement returned no row where one must be")
    return row


@dataclass(frozen=True)
class WriterState:
    """A writer of a gated table as it last reported: when it last read the gate, and its acknowledgement."""

    writer_id: str
    seen_at: datetime | None
    ack_at: datetime | None
    ack_snapshot_id: int | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> WriterState:
        return cls(row["writer_id"], _utc(row["seen_at"]), _utc(row["ack_at"]), row["ack_snapshot_id"])


@dataclass(frozen=True)
class GateState:
    """A gate row as read, its writers, and the database's clock at the moment of reading."""

    table: str
    state: str
    owner: GateOwner | None
    closed_at: datetime | None
    lease_expires_at: datetime | None
    opened_at: datetime | None
    database_now: datetime
    #: The lease the owner closed with; each renewal extends the lease by this much.
    lease_seconds: int | None = None
    #: No renewal extends the lease past this (``max_pause_seconds`` after closing), or None.
    pause_deadline: datetime | None = None
    writers: tuple[WriterState, ...] = ()

    @classmethod
    def from_row(cls, row: Mapping[str, Any], writers: tuple[WriterState, ...] = ()) -> GateState:
        owner = GateOwner(row["owner_dag_id"], row["owner_run_id"]) if row["owner_dag_id"] is not None else None
        return cls(
            table=row["table_name"],
            state=row["state"],
            owner=owner,
            closed_at=_utc(row["closed_at"]),
            lease_expires_at=_utc(row["lease_expires_at"]),
            opened_at=_utc(row["opened_at"]),
            database_now=_utc(row["database_now"]),  # type: ignore[arg-type]
            lease_seconds=row["lease_seconds"],
            pause_deadline=_utc(row["pause_deadline"]),
            writers=writers,
        )

    @classmethod
    def never_closed(cls, table: str, database_now: datetime, writers: tuple[WriterState, ...] = ()) -> GateState:
        """The state of a table that has no gate row: open."""
        return cls(table, "open", None, None, None, None, database_now, writers=writers)

    @property
    def pauses_writers(self) -> bool:
        """The writers' rule: closed and the lease not yet ended."""
        return (
            self.state == "closed" and self.lease_expires_at is not None and self.lease_expires_at > self.database_now
        )

    def held_by(self, owner: GateOwner) -> bool:
        return self.pauses_writers and self.owner == owner

    def require_held_by(self, owner: GateOwner) -> None:
        """Raise :class:`LeaseLostError` unless ``owner`` holds the gate: a writer may be committing."""
        if not self.held_by(owner):
            raise LeaseLostError(
                f"the write gate of {self.table} is not held by {owner} (state {self.state!r}, owner {self.owner}, "
                f"lease until {self.lease_expires_at}); the writer may be committing, so no rewrite may start"
            )

    def writers_to_wait_for(self) -> tuple[WriterState, ...]:
        """The writers a compaction waits for: those seen within a lease (at least a minute) before the closing,
        or since.

        A writer reads the gate before every commit and says it is there every few seconds, so one not seen in
        that time is not committing. A writer that left (stopped for good) is not waited for.
        """
        if self.closed_at is None:
            return ()
        if self.lease_seconds:
            lease = timedelta(seconds=self.lease_seconds)
        elif self.lease_expires_at is not None:  # a row from before lease_seconds was recorded
            lease = self.lease_expires_at - self.closed_at
        else:
            lease = timedelta(0)
        since = self.closed_at - max(lease, timedelta(seconds=WRITER_SEEN_WINDOW_SECONDS))
        return tuple(w for w in self.writers if w.seen_at is not None and w.seen_at >= since)

    def acknowledged_by(self, writer: WriterState) -> bool:
        """``writer`` acknowledged this closing of the gate (not an earlier one)."""
        return writer.ack_at is not None and self.closed_at is not None and writer.ack_at >= self.closed_at


@dataclass(frozen=True)
class GateChange:
    """What a close or an open does to a gate, decided from its locked row: the audit action and its detail."""

    allowed: bool
    action: str
    detail: str | None = None


def decide_close(before: GateState, owner: GateOwner) -> GateChange:
    """Closing is allowed if the gate is open, its lease has ended, or ``owner`` holds it (a renewal)."""
    if before.held_by(owner):
        return GateChange(True, "reclose", "lease renewed by its owner")
    if before.pauses_writers:
        until = f"{before.lease_expires_at:%Y-%m-%d %H:%M:%S.%f}"
        return GateChange(False, "close_refused", f"held by {before.owner} until {until} UTC")
    if before.state == "closed":
        return GateChange(True, "close", f"took over the expired lease of {before.owner}")
    return GateChange(True, "close")


def decide_open(before: GateState, owner: GateOwner) -> GateChange:
    """Opening is allowed only to the run that closed the gate, so it never opens another run's gate."""
    if before.state == "closed" and before.owner == owner:
        return GateChange(True, "open")
    if before.state == "open":
        return GateChange(False, "open_noop", "the gate is already open")
    return GateChange(False, "open_noop", f"the gate is held by {before.owner}, not by {owner}")


@dataclass(frozen=True)
class SlotRequest:
    """A run's request for one of ``slots`` Spark slots of ``spark_conn_id``, with its table's health ``score``.

    :param patience: Seconds the request keeps its place without being asked again; a run that stops asking
        (it failed, or was killed) frees its place after this.
    """

    spark_conn_id: str
    slots: int
    score: int
    patience: int


@dataclass(frozen=True)
class SlotQueueEntry:
    """A table in a Spark connection's queue: a run waiting for a slot, or holding one while it holds its gate."""

    table: str
    owner: GateOwner
    score: int
    queued_at: datetime
    waiting: bool  # asking, and its patience has not run out
    holding: bool  # admitted, and its run still holds the table's gate

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> SlotQueueEntry:
        return cls(
            table=row["table_name"],
            owner=GateOwner(row["owner_dag_id"], row["owner_run_id"]),
            score=int(row["score"]),
            queued_at=_utc(row["queued_at"]),  # type: ignore[arg-type]
            waiting=row["admitted_at"] is None and row["expires_at"] > row["database_now"],
            holding=row["admitted_at"] is not None and bool(row["holds_gate"]),
        )


def slot_order(entry: SlotQueueEntry) -> tuple[int, datetime, str]:
    """Worst health first (highest score), then the longest waiting, then by name."""
    return (-entry.score, entry.queued_at, entry.table)


def decide_admission(queue: list[SlotQueueEntry], table: str, owner: GateOwner, slots: int) -> GateChange:
    """Whether ``owner``'s run of ``table`` may close its gate now, taking one of ``slots`` Spark slots.

    It may if it holds a slot already (a retry), or if, of the slots the owners leave free, one is its turn:
    the waiters in :func:`slot_order` take the free slots first to last.
    """
    owners = [e for e in queue if e.holding]
    if any(e.table == table and e.owner == owner for e in owners):
        return GateChange(True, "close", "holds a Spark slot already")
    free = slots - len(owners)
    waiters = sorted((e for e in queue if e.waiting), key=slot_order)
    place = next((i for i, e in enumerate(waiters) if e.table == table and e.owner == owner), None)
    if place is None:
        raise ValueError(f"{owner} is not in the queue of its Spark connection for {table}")
    if place < free:
        return GateChange(True, "close", f"Spark slot {len(owners) + 1} of {slots}")
    held = ", ".join(e.table for e in owners) or "none"
    ahead = ", ".join(f"{e.table} (score {e.score})" for e in waiters[:place]) or "none"
    return GateChange(False, "slot_wait", f"{len(owners)} of {slots} Spark slots taken ({held}); ahead: {ahead}")


def check_lease_seconds(seconds: object, name: str = "lease_seconds") -> int:
    """``seconds`` if it is a positive integer; a ValueError naming the setting and the value otherwise."""
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds <= 0:
        raise ValueError(f"{name} must be a positive integer, got {seconds!r}")
    return seconds


class WriteGateHook(BaseHook):
    """Close and open Iceberg write gates kept in MySQL, and read their state and audit trail.

    The connection is of type ``iceberg_write_gate``: host, port, login, password and, as *schema*, the MySQL
    database that holds the gate tables. :meth:`migrate` creates or upgrades them; run it once per database
    (``airflow-iceberg migrate``), not per task.

    :param write_gate_conn_id: Airflow connection id of the gate's MySQL database.
    """

    conn_name_attr = "write_gate_conn_id"
    default_conn_name = "write_gate_default"
    conn_type = "iceberg_write_gate"
    hook_name = "Iceberg Write Gate (MySQL)"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        from airflow_iceberg.get_provider_info import WRITE_GATE_FORM

        return {key.replace("-", "_"): value for key, value in WRITE_GATE_FORM.items()}

    def __init__(self, write_gate_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.write_gate_conn_id = write_gate_conn_id

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

    def owner_settings(self, table: TableName | str, owner: GateOwner) -> dict[str, Any]:
        """What a Spark job needs to renew ``owner``'s lease itself (``LeaseKeeper``): the connection and the owner.

        Holds the gate's password: it belongs in a job's secrets file, never on a command line.
        """
        return {
            **self.connection_settings(),
            "table": str(TableName.of(table)),
            "dag_id": owner.dag_id,
            "run_id": owner.run_id,
        }

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
            cursor.execute(_SELECT_WRITERS, (name,))
            writers = tuple(WriterState.from_row(row) for row in cursor.fetchall())
            cursor.execute(_SELECT, (name,))
            row = cursor.fetchone()
            if row is None:
                cursor.execute("SELECT NOW(6) AS database_now")
                now: datetime = _the_row(cursor)["database_now"].replace(tzinfo=timezone.utc)  # UTC: see _utc
                return GateState.never_closed(name, now, writers)
        return GateState.from_row(row, writers)

    def gate_states(self) -> dict[str, GateState]:
        """Every gate row of the connection's database, by table name, without its writers: a fleet at a glance."""
        with self._transaction() as cursor:
            cursor.execute(_SELECT_GATES)
            return {row["table_name"]: GateState.from_row(row) for row in cursor.fetchall()}

    @staticmethod
    def _locked_state(cursor: pymysql.cursors.DictCursor, name: str) -> GateState:
        """The gate row of ``name``, created if missing and locked until the transaction ends."""
        cursor.execute(_ENSURE_ROW, (name,))
        cursor.execute(_SELECT + " FOR UPDATE", (name,))
        return GateState.from_row(_the_row(cursor))

    def close_gate(
        self,
        table: TableName | str,
        owner: GateOwner,
        lease_seconds: int,
        max_pause_seconds: int | None = None,
        slot: SlotRequest | None = None,
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
        check_lease_seconds(lease_seconds)
        ceiling = max_pause_seconds
        if ceiling is not None and check_lease_seconds(ceiling, "max_pause_seconds") < lease_seconds:
            raise ValueError(f"max_pause_seconds ({max_pause_seconds}) must be at least the lease ({lease_seconds})")
        if slot is not None:
            check_lease_seconds(slot.slots, "spark_pool_slots")
            check_lease_seconds(slot.patience, "the slot request's patience")
        waiting = None
        with self._transaction() as cursor:
            if slot is not None:  # the connection's lock first, then the gate's row: every path locks in that order
                for statement in _SLOT_LOCK:
                    cursor.execute(statement, (slot.spark_conn_id,))
            before = self._locked_state(cursor, name)
            change = decide_close(before, owner)
            if change.allowed and slot is not None:
                admission = self._ask_for_slot(cursor, name, owner, slot)
                if not admission.allowed:
                    waiting = f"{name} waits for a Spark slot of {slot.spark_conn_id!r}: {admission.detail}"
            if waiting is None and change.allowed:
                params = {
                    "table": name,
                    "dag_id": owner.dag_id,
                    "run_id": owner.run_id,
                    "lease_seconds": lease_seconds,
                    "max_pause_seconds": max_pause_seconds,
                    "renew": change.action == "reclose",
                }
                cursor.execute(_CLOSE, params)
                cursor.execute(OWNER_RENEW_SQL, (name, owner.dag_id, owner.run_id))
                cursor.execute(_SELECT, (name,))
                after = GateState.from_row(_the_row(cursor))
                lease = after.lease_expires_at
            else:
                lease = before.lease_expires_at
            if waiting is None:  # a wait for a slot changes no gate: the queue shows it, not the audit trail
                cursor.execute(_AUDIT, (name, change.action, owner.dag_id, owner.run_id, lease, change.detail))
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
            cursor.execute(_SELECT_WRITERS, (name,))
            writers = tuple(WriterState.from_row(row) for row in cursor.fetchall())
            cursor.execute(_SELECT, (name,))
            row = cursor.fetchone()
        state = GateState.from_row(row, writers) if row else GateState.never_closed(name, datetime.now(timezone.utc))
        state.require_held_by(owner)
        return state

    @staticmethod
    def _ask_for_slot(cursor: pymysql.cursors.DictCursor, name: str, owner: GateOwner, slot: SlotRequest) -> GateChange:
        """Within close_gate's transaction, under the connection's lock: queue ``owner`` (or keep its place), drop
        the entries of runs that stopped asking or let go of their gate, and take a slot if it is its turn.

        Every run that takes a slot does so under the connection's lock, so none is missed here. The queue is
        read without locking the gate rows it joins: an owner renewing its lease in the same instant may be
        read as one whose lease just ended, which only an owner already at its lease's end can be (owners renew
        a quarter lease early).
        """
        cursor.execute(_SLOT_QUEUE, (slot.spark_conn_id,))
        queue = [SlotQueueEntry.from_row(row) for row in cursor.fetchall()]
        mine = next((e for e in queue if e.table == name), None)
        if mine is not None and mine.owner != owner and mine.waiting:
            return GateChange(False, "slot_wait", f"another run of the same table, {mine.owner}, asked first")
        for entry in queue:
            if not (entry.waiting or entry.holding) and entry.table != name:
                cursor.execute(_SLOT_DROP, (entry.table, entry.owner.dag_id, entry.owner.run_id))
        params = {
            "table": name,
            "conn": slot.spark_conn_id,
            "dag_id": owner.dag_id,
            "run_id": owner.run_id,
            "score": slot.score,
            "patience": slot.patience,
        }
        cursor.execute(_SLOT_ASK, params)
        cursor.execute(_SLOT_QUEUE, (slot.spark_conn_id,))
        queue = [SlotQueueEntry.from_row(row) for row in cursor.fetchall()]
        admission = decide_admission(queue, name, owner, slot.slots)
        if admission.allowed:
            cursor.execute(_SLOT_ADMIT, (name,))
        return admission

    def spark_queue(self, spark_conn_id: str) -> list[SlotQueueEntry]:
        """The runs holding a Spark slot of ``spark_conn_id`` and those waiting for one, in the order they go."""
        with self._transaction() as cursor:
            cursor.execute(_SLOT_QUEUE, (spark_conn_id,))
            queue = [SlotQueueEntry.from_row(row) for row in cursor.fetchall()]
        live = [e for e in queue if e.holding or e.waiting]
        return sorted(live, key=lambda e: (not e.holding, slot_order(e)))

    def open_gate(self, table: TableName | str, owner: GateOwner) -> tuple[bool, GateState]:
        """Open the gate of ``table`` if ``owner`` holds it; return whether it did and the state after.

        A gate held by another owner, or already open, is left as it is and the log says why.
        """
        name = str(TableName.of(table))
        with self._transaction() as cursor:
            before = self._locked_state(cursor, name)
            change = decide_open(before, owner)
            if change.allowed:
                cursor.execute(_OPEN, {"table": name})
                cursor.execute(_SLOT_DROP, (name, owner.dag_id, owner.run_id))  # its Spark slot, if it took one
            cursor.execute(_AUDIT, (name, change.action, owner.dag_id, owner.run_id, None, change.detail))
            cursor.execute(_SELECT, (name,))
            after = GateState.from_row(_the_row(cursor))
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
                cursor.execute(_OPEN, {"table": name})
            owner = before.owner
            cursor.execute(
                _AUDIT,
                (
                    name,
                    "force_open",
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
            row["at"] = _utc(row["at"])
            row["lease_expires_at"] = _utc(row["lease_expires_at"])
        return rows

    def record_run(self, record: Mapping[str, Any], *, finished: bool) -> None:
        """Write or complete the run record of ``record['dag_id']``/``record['run_id']``.

        Columns ``record`` leaves out (or sets to None) keep what an earlier write of the same run put there. A
        ``finished`` record is sent, whole, to Airflow's metrics (:mod:`airflow_iceberg.metrics`).
        """
        unknown = set(record) - set(RUN_COLUMNS)
        if unknown:
            raise ValueError(f"unknown run record columns {sorted(unknown)}")
        values = {column: record.get(column) for column in RUN_COLUMNS}
        values["table_name"] = str(TableName.of(record["table_name"]))  # required
        values["finished"] = finished
        given = [c for c in RUN_COLUMNS if values[c] is not None and c not in ("dag_id", "run_id")]
        update = f"""UPDATE {RUN_TABLE} SET {", ".join(f"{c} = %({c})s" for c in given)},
            finished_at = IF(%(finished)s, NOW(6), NULL) WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s"""
        with self._transaction() as cursor:
            cursor.execute(
                f"SELECT id FROM {RUN_TABLE} WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s FOR UPDATE", values
            )
            cursor.execute(update if cursor.fetchone() else _RUN_INSERT, values)
            if finished:
                cursor.execute(_RUN_SELECT_ONE, values)
                complete = _the_row(cursor)
        if finished:  # the whole record, as written, goes to Airflow's metrics (airflow_iceberg.metrics)
            from airflow_iceberg import metrics

            metrics.emit_run(complete)

    def record_failed_run(
        self, table: TableName | str, dag_id: str, run_id: str, task_id: str, error: BaseException
    ) -> None:
        """Record a run that failed before it planned (``task_id`` raised ``error``), so no run goes unrecorded.

        The record names the error's type only: its text stays in the task's log, since it may quote a catalog URI.
        A record that cannot be written is logged, never raised over ``error``.
        """
        record = {
            "table_name": table,
            "dag_id": dag_id,
            "run_id": run_id,
            "decision": "none",
            "outcome": "failed",
            "reason": f"{task_id} failed ({type(error).__name__}); see its log",
        }
        try:
            self.record_run(record, finished=True)
        except Exception:
            self.log.exception("Could not record the failed run %s of %s", run_id, table)

    def run_records(self, table: TableName | str) -> list[dict[str, Any]]:
        """Every recorded run of ``table``, oldest first, times in UTC."""
        with self._transaction() as cursor:
            cursor.execute(_RUN_SELECT, (str(TableName.of(table)),))
            rows = list(cursor.fetchall())
        for row in rows:
            row["started_at"], row["finished_at"] = _utc(row["started_at"]), _utc(row["finished_at"])
        return rows

    def record_health_checks(self, checks: list[Mapping[str, Any]]) -> None:
        """Write each table's latest health check (``HEALTH_COLUMNS``), stamped with the database clock.

        A check whose decision is ``started`` also stamps ``started_at``: the watch started a run for it.
        """
        if not checks:
            return
        rows = [
            (*(str(c[k]) if k == "table_name" else c.get(k) for k in HEALTH_COLUMNS), c["decision"] == "started")
            for c in checks
        ]
        with self._transaction() as cursor:
            cursor.executemany(_HEALTH_UPSERT, rows)

    def health_checks(self, table: TableName | str | None = None) -> dict[str, dict[str, Any]]:
        """Every table's latest health check (or only ``table``'s), by table name, times in UTC."""
        with self._transaction() as cursor:
            if table is None:
                cursor.execute(_HEALTH_SELECT)
            else:
                cursor.execute(f"{_HEALTH_SELECT} WHERE table_name = %s", (str(TableName.of(table)),))
            rows = list(cursor.fetchall())
        for row in rows:
            row["checked_at"], row["started_at"] = _utc(row["checked_at"]), _utc(row["started_at"])
        return {row["table_name"]: row for row in rows}

    def failed_runs(self, seconds: int) -> dict[str, int]:
        """How many runs of each table that has any failed among those that began in the last ``seconds``."""
        with self._transaction() as cursor:
            cursor.execute(_FAILED_RUNS, (int(seconds),))
            return {row["table_name"]: int(row["failed"]) for row in cursor.fetchall()}

    def last_runs(self, tables: list[TableName | str]) -> dict[str, dict[str, Any]]:
        """The newest run record of each of ``tables`` that has one, with ``seconds_ago``: since it ended, or
        since it began if it never ended."""
        names = sorted({str(TableName.of(t)) for t in tables})
        if not names:
            return {}
        with self._transaction() as cursor:
            cursor.execute(_LAST_RUNS.format(", ".join(["%s"] * len(names))), names)
            rows = list(cursor.fetchall())
        for row in rows:
            row["started_at"], row["finished_at"] = _utc(row["started_at"]), _utc(row["finished_at"])
            row["seconds_ago"] = float(row["seconds_ago"])
        return {row["table_name"]: row for row in rows}
