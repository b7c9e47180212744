"""The write gate's one store: every change the gate's owner makes, and every read of the gate, in MySQL.

A DAG run's tasks (``WriteGateHook``), their triggers, a batch job that holds the gate itself (``GateHolder``) and
the rewrite's Spark driver (:class:`GateLease`) all go through :class:`GateStore`, so the gate's rules apply alike
to each: a change locks the table's row, decides by the pure rules of ``gate_state.py`` (and, for Spark slots,
``spark_slots.py``) from the row as locked, and writes the change and its audit row in the same transaction. Every
time is the database's. The owner's statements are here and nowhere else (a unit test holds them here); the
writer's are in ``gate_protocol.py``.

Depends on ``pymysql`` alone, like the writer's side, so it ships to Spark and to batch jobs with the core.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from airflow_iceberg.core.conflicts import (
    UNDESCRIBED,
    CommitKind,
    GuardedWork,
    PauseDecision,
    decide_pauses,
    summary,
    widest,
)
from airflow_iceberg.core.gate_protocol import (
    AUDIT_TABLE,
    GATE_TABLE,
    NO_SUCH_TABLE,
    UNKNOWN_COLUMN,
    WRITER_TABLE,
)
from airflow_iceberg.core.gate_state import (
    AuditAction,
    GateChange,
    GateOwner,
    GateState,
    WriterState,
    check_lease_seconds,
    check_pause_ceiling,
    database_time,
    decide_close,
    decide_open,
)
from airflow_iceberg.core.lease import Lease, LeaseLostError, lease_taken
from airflow_iceberg.core.spark_slots import SparkSlotQueue, SparkSlotRequest

#: The owner's statements. Each change locks the row (GATE_ENSURE_ROW_SQL, then GATE_SELECT_SQL FOR UPDATE),
#: decides by the rules of ``gate_state.py``, and writes the change and its audit row in one transaction.
GATE_ENSURE_ROW_SQL = f"""INSERT INTO {GATE_TABLE} (table_name) VALUES (%s)
    ON DUPLICATE KEY UPDATE table_name = table_name"""

GATE_SELECT_ALL_SQL = (
    "SELECT table_name, state, owner_dag_id, owner_run_id, closed_at, lease_expires_at, lease_seconds,"
    f" pause_deadline, opened_at, history_checked_ms, NOW(6) AS database_now FROM {GATE_TABLE}"
)
GATE_SELECT_SQL = f"{GATE_SELECT_ALL_SQL} WHERE table_name = %s"

WRITERS_SELECT_SQL = f"""SELECT writer_id, seen_at, ack_at, ack_snapshot_id, busy_until, commit_kind, iceberg_version,
        commits_as, observed_kind, observed_snapshot_id, observed_detail, exempt_closed_at, pause_reason
    FROM {WRITER_TABLE} WHERE table_name = %s ORDER BY writer_id"""

#: Applied only after decide_close allowed it, on the row locked as above, and followed by the owner's
#: renewal (OWNER_RENEW_SQL), which caps the lease at the pause's deadline. An owner's re-close keeps its
#: original close time and deadline.
OWNER_CLOSE_SQL = f"""UPDATE {GATE_TABLE}
    SET closed_at = IF(%(renew)s, closed_at, NOW(6)), state = 'closed',
        owner_dag_id = %(dag_id)s, owner_run_id = %(run_id)s, lease_seconds = %(lease_seconds)s,
        pause_deadline = CASE WHEN %(renew)s THEN pause_deadline
                              WHEN %(max_pause_seconds)s IS NULL THEN NULL
                              ELSE NOW(6) + INTERVAL %(max_pause_seconds)s SECOND END,
        lease_expires_at = NOW(6) + INTERVAL %(lease_seconds)s SECOND
    WHERE table_name = %(table)s"""

OWNER_OPEN_SQL = f"""UPDATE {GATE_TABLE}
    SET state = 'open', opened_at = NOW(6), lease_expires_at = NULL, owner_dag_id = NULL, owner_run_id = NULL,
        lease_seconds = NULL, pause_deadline = NULL
    WHERE table_name = %(table)s"""

AUDIT_INSERT_SQL = f"""INSERT INTO {AUDIT_TABLE}
    (table_name, action, owner_dag_id, owner_run_id, lease_expires_at, detail)
    VALUES (%s, %s, %s, %s, %s, %s)"""

#: How the run holding a gate renews its lease (parameters: table, owner DAG id, owner run id): by the lease it
#: closed with, never past the pause's deadline, and only while it still holds the gate. Run by the owner's
#: tasks, and by the rewrite's Spark driver (:class:`GateLease` in a :class:`LeaseKeeper`) while it works.
OWNER_RENEW_SQL = f"""UPDATE {GATE_TABLE}
SET lease_expires_at = LEAST(NOW(6) + INTERVAL lease_seconds SECOND,
                             COALESCE(pause_deadline, NOW(6) + INTERVAL lease_seconds SECOND))
WHERE table_name = %s AND owner_dag_id = %s AND owner_run_id = %s
  AND state = 'closed' AND lease_expires_at > NOW(6)"""

#: What the owner's lease has left after a renewal (same parameters); no row: the run no longer holds the gate.
OWNER_LEASE_SQL = f"""SELECT TIMESTAMPDIFF(MICROSECOND, NOW(6), lease_expires_at) / 1000000 AS lease_seconds_left,
       lease_expires_at >= pause_deadline AS at_pause_deadline
FROM {GATE_TABLE}
WHERE table_name = %s AND owner_dag_id = %s AND owner_run_id = %s
  AND state = 'closed' AND lease_expires_at > NOW(6)"""

#: A closing's decision for one writer (parameters by name): whether it keeps committing through this closing
#: (``exempt_closed_at``, the closing's time) and why. It applies only to the row as the decision read it: a writer
#: that registered with another declaration meanwhile is left paused.
WRITER_PAUSE_SQL = f"""UPDATE {WRITER_TABLE}
    SET exempt_closed_at = IF(%(pause)s, NULL, %(closed_at)s), pause_reason = %(reason)s
    WHERE table_name = %(table)s AND writer_id = %(writer_id)s AND commit_kind <=> %(commit_kind)s
      AND iceberg_version <=> %(iceberg_version)s AND commits_as <=> %(commits_as)s
      AND observed_kind <=> %(observed_kind)s"""

#: What the table's history showed a writer commit (parameters by name), when wider than it declared: it is taken
#: as that from then on, whatever it declares.
WRITER_OBSERVED_SQL = f"""UPDATE {WRITER_TABLE}
    SET observed_kind = %(kind)s, observed_snapshot_id = %(snapshot_id)s, observed_detail = %(detail)s
    WHERE table_name = %(table)s AND writer_id = %(writer_id)s"""

#: How far a plan has checked the table's history for what its writers commit (parameters: the newest snapshot's
#: time it checked, epoch ms, and the table); a later plan reads only what came after. Never moves back.
HISTORY_CHECKED_SQL = f"""UPDATE {GATE_TABLE} SET history_checked_ms = GREATEST(COALESCE(history_checked_ms, 0), %s)
    WHERE table_name = %s"""

_AUDIT_SELECT_SQL = f"""SELECT id, table_name, action, owner_dag_id, owner_run_id, at, lease_expires_at, detail
    FROM {AUDIT_TABLE} WHERE table_name = %s ORDER BY id"""

_DATABASE_NOW_SQL = "SELECT NOW(6) AS database_now"

#: MySQL errors that mean the gate's tables are missing or lack a column: the schema was not migrated.
SCHEMA_ERRORS = frozenset({NO_SUCH_TABLE, UNKNOWN_COLUMN})

#: A gate opened less than this long ago is not closed again yet: a writer that acknowledged the closing before and
#: looks every second or so must see it open, or it would take the new closing for the one it acknowledged and
#: never acknowledge it (the new run would then wait out its idle window instead).
SETTLE_SECONDS = 2.0


class WriteGateHeldError(RuntimeError):
    """The gate is closed by another run whose lease has not expired."""


class GateBusyError(WriteGateHeldError, TimeoutError):
    """The gate stayed held by another owner (a compaction, a batch job) for as long as the closing would wait."""


class SparkSlotsBusyError(RuntimeError):
    """Every Spark slot of the table's connection is taken, or tables in worse health wait for the free ones."""


@dataclass(frozen=True)
class CloseAttempt:
    """What one attempt to close a gate did: closed it (``state`` is the gate after), or not, and why not.

    A refusal changed no gate: ``refused`` is the error it stands for (:class:`WriteGateHeldError`, or
    :class:`SparkSlotsBusyError` while the run waits for a Spark slot), and ``detail`` says who holds the gate or
    the slots.
    """

    closed: bool
    state: GateState
    refused: type[Exception] | None = None
    detail: str = ""
    #: A gate that opened less than the settle time ago: seconds until it may close.
    settle_left: float = 0.0
    #: For a closing: each writer of the table, whether it pauses, and why.
    pauses: tuple[PauseDecision, ...] = ()

    def as_xcom(self) -> dict[str, Any]:
        """A closing's close times and what it decided for each writer."""
        return {
            **self.state.close_times(),
            "writers": [decision.as_xcom() for decision in self.pauses],
            "paused": [d.writer_id for d in self.pauses if d.pause],
            "pauses": summary(self.pauses),
        }

    def refusal(self, gave_up_after: float | None = None) -> Exception:
        """The error for this refusal; after a wait of ``gave_up_after`` seconds, one that says so."""
        assert self.refused is not None, "a refusal was asked of a closing that closed"
        if gave_up_after is None:
            return self.refused(self.detail)
        error = GateBusyError if self.refused is WriteGateHeldError else self.refused
        return error(f"gave up after {gave_up_after:g} s: {self.detail}")


@dataclass(frozen=True)
class Closing:
    """What an owner asks of a closing: its lease, the ceiling on the whole pause, a Spark slot, and what it will do
    while it holds the gate (which decides who pauses). Checked when made: a bad value is refused naming it.

    :param lease_seconds: The lease it closes with; the owner renews it while it works, and writers resume when a
        lease is not renewed.
    :param max_pause_seconds: No renewal extends the lease past this many seconds after the closing (None: none).
    :param slot: The Spark slot the run's rewrites take (:class:`SparkSlotRequest`); None: no limit.
    :param work: What the owner does while it holds the gate; without it every writer pauses.
    """

    lease_seconds: int
    max_pause_seconds: int | None = None
    slot: SparkSlotRequest | None = None
    work: GuardedWork = UNDESCRIBED

    def __post_init__(self) -> None:
        check_pause_ceiling(self.lease_seconds, self.max_pause_seconds)
        if self.slot is not None:
            check_lease_seconds(self.slot.slots, "spark_slots")
            check_lease_seconds(self.slot.patience, "the slot request's patience")


@dataclass(eq=False, repr=False)
class GateStore:
    """The gates of one MySQL database, changed and read by their owners (never by writers).

    :param connect: Returns a new pymysql connection to the gate's database in an owner's session
        (:func:`airflow_iceberg.core.gate_protocol.owner_connection`); each transaction takes one and closes it.
    :param schema_error: Turns a MySQL error that says the gate's tables are missing or older than a statement
        into the error to raise instead (one that says to migrate); None raises MySQL's.
    :param settle_seconds: A gate opened less than this long ago is closed only once this much has passed
        (:data:`SETTLE_SECONDS`).
    :param clock: Monotonic clock, in seconds.
    :param sleep: Waits the given seconds; with ``clock``, replaceable to wait on a fake clock.
    """

    connect: Callable[[], Any]
    _: KW_ONLY
    schema_error: Callable[[Exception], Exception] | None = None
    settle_seconds: float = SETTLE_SECONDS
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    #: The queue of runs for each Spark connection's slots, in the same database and transactions.
    spark_slots: SparkSlotQueue = field(init=False)

    def __post_init__(self) -> None:
        self.spark_slots = SparkSlotQueue(self.transaction)

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """A dict cursor in one transaction on a new connection, committed if the block ends normally."""
        import pymysql

        connection = self.connect()
        try:
            with connection.cursor(pymysql.cursors.DictCursor) as cursor:
                try:
                    yield cursor
                except (pymysql.err.ProgrammingError, pymysql.err.OperationalError) as error:
                    if self.schema_error is not None and error.args and error.args[0] in SCHEMA_ERRORS:
                        raise self.schema_error(error) from error
                    raise
            connection.commit()
        finally:
            connection.close()

    # --- reading ------------------------------------------------------------------------------------------------

    @staticmethod
    def _read(cursor: Any, table: str) -> GateState:
        """The gate row of ``table`` and its writers, read together; a table never gated reads as open."""
        cursor.execute(WRITERS_SELECT_SQL, (table,))
        writers = tuple(WriterState.from_row(row) for row in cursor.fetchall())
        cursor.execute(GATE_SELECT_SQL, (table,))
        row = cursor.fetchone()
        if row is None:
            cursor.execute(_DATABASE_NOW_SQL)
            return GateState.never_closed(table, database_time(cursor.fetchone()["database_now"]), writers)  # type: ignore[arg-type]
        return GateState.from_row(row, writers)

    def state(self, table: str) -> GateState:
        """The gate of ``table`` and its writers; a table never gated reads as open."""
        with self.transaction() as cursor:
            return self._read(cursor, table)

    def states(self) -> dict[str, GateState]:
        """Every gate row of the database, by table name, without its writers: every table at a glance."""
        with self.transaction() as cursor:
            cursor.execute(GATE_SELECT_ALL_SQL)
            return {row["table_name"]: GateState.from_row(row) for row in cursor.fetchall()}

    def audit_trail(self, table: str) -> list[dict[str, Any]]:
        """Every recorded close, open and refusal for ``table``, oldest first, times in UTC."""
        with self.transaction() as cursor:
            cursor.execute(_AUDIT_SELECT_SQL, (table,))
            rows = list(cursor.fetchall())
        for row in rows:
            row["at"] = database_time(row["at"])
            row["lease_expires_at"] = database_time(row["lease_expires_at"])
        return rows

    # --- changing -----------------------------------------------------------------------------------------------

    @staticmethod
    def _locked(cursor: Any, table: str) -> GateState:
        """The gate row of ``table``, created if missing and locked until the transaction ends."""
        cursor.execute(GATE_ENSURE_ROW_SQL, (table,))
        cursor.execute(GATE_SELECT_SQL + " FOR UPDATE", (table,))
        return GateState.from_row(cursor.fetchone())

    @staticmethod
    def _audit(cursor: Any, table: str, action: str, owner: GateOwner | None, lease: Any, detail: str | None) -> None:
        owner_ids = (owner.dag_id, owner.run_id) if owner is not None else (None, None)
        cursor.execute(AUDIT_INSERT_SQL, (table, action, *owner_ids, lease, detail))

    def close(self, table: str, owner: GateOwner, closing: Closing, *, only_if_free: bool = False) -> CloseAttempt:
        """Close the gate of ``table`` for ``owner`` as ``closing`` asks, if the gate's rules allow it.

        The closing pauses only the writers that can conflict with ``closing.work``, what the owner does while it
        holds the gate (:func:`~airflow_iceberg.core.conflicts.decide_pauses`, on each writer's row as read in the
        close's transaction): the others keep committing through this closing.

        The owner renews the lease while it works (:meth:`renew`), never past ``closing.max_pause_seconds`` after
        this closing, which caps how long the owner pauses writers. Closing succeeds if the gate is open, its lease
        has expired, or ``owner`` already holds it (then the lease is renewed and the original close time and
        deadline kept); a refusal is audited and changes nothing else. A gate opened less than the settle time ago
        is waited for first, here.

        With ``closing.slot``, the gate closes only if the run also gets one of the Spark connection's slots
        (:func:`~airflow_iceberg.core.spark_slots.decide_admission`); otherwise the run keeps its place in the queue,
        the gate stays as it was, and nothing is audited. The slot is the run's until it opens the gate or its
        lease ends. With ``only_if_free``, a gate another owner holds is only read, not audited: a look while
        waiting for it.
        """
        while True:
            attempt = self._close_once(table, owner, closing, only_if_free)
            if not attempt.settle_left:
                return attempt
            self.sleep(attempt.settle_left)

    def _close_once(self, table: str, owner: GateOwner, closing: Closing, only_if_free: bool) -> CloseAttempt:
        slot = closing.slot
        with self.transaction() as cursor:
            if only_if_free:
                cursor.execute(GATE_SELECT_SQL, (table,))
                row = cursor.fetchone()
                if row is not None and (held := GateState.from_row(row)).held_by_another(owner):
                    return self._held(held, owner)
            if slot is not None:  # the connection's lock first, then the gate's row: every path locks in that order
                self.spark_slots.lock(cursor, slot.spark_conn_id)
            before = self._locked(cursor, table)
            change = decide_close(before, owner)
            if not change.allowed:
                self._audit(cursor, table, change.action, owner, before.lease_expires_at, change.detail)
                return self._held(before, owner)
            if settle_left := self._settle_left(before):
                return CloseAttempt(False, before, settle_left=settle_left)
            if slot is not None:
                admission = self.spark_slots.ask(cursor, table, owner, slot)
                if not admission.allowed:  # a wait for a slot changes no gate: the queue shows it, not the audit
                    detail = f"{table} waits for a Spark slot of {slot.spark_conn_id!r}: {admission.detail}"
                    return CloseAttempt(False, before, SparkSlotsBusyError, detail)
            params = {
                "table": table,
                "dag_id": owner.dag_id,
                "run_id": owner.run_id,
                "lease_seconds": closing.lease_seconds,
                "max_pause_seconds": closing.max_pause_seconds,
                "renew": change.action == AuditAction.RECLOSE,
            }
            cursor.execute(OWNER_CLOSE_SQL, params)
            cursor.execute(OWNER_RENEW_SQL, (table, owner.dag_id, owner.run_id))
            pauses = self._decide_pauses(cursor, table, closing.work)
            after = self._read(cursor, table)
            detail = "; ".join(filter(None, [change.detail, summary(pauses) if pauses else None]))[:1000]
            self._audit(cursor, table, change.action, owner, after.lease_expires_at, detail)
            return CloseAttempt(True, after, pauses=pauses)

    def _decide_pauses(self, cursor: Any, table: str, work: GuardedWork) -> tuple[PauseDecision, ...]:
        """Within a closing, after its close: decide for each writer of ``table`` whether it pauses, and record it."""
        gate = self._read(cursor, table)
        pauses = decide_pauses(work, [writer.commits() for writer in gate.writers])
        for writer, decision in zip(gate.writers, pauses, strict=True):
            cursor.execute(
                WRITER_PAUSE_SQL,
                {
                    "table": table,
                    "writer_id": writer.writer_id,
                    "pause": decision.pause,
                    "closed_at": gate.closed_at,
                    "reason": decision.reason[:1000],
                    "commit_kind": writer.commit_kind,
                    "iceberg_version": writer.iceberg_version,
                    "commits_as": writer.commits_as,
                    "observed_kind": writer.observed_kind,
                },
            )
        return pauses

    @staticmethod
    def _held(state: GateState, owner: GateOwner) -> CloseAttempt:
        until = f"{state.lease_expires_at:%Y-%m-%d %H:%M:%S.%f}"
        detail = f"the write gate of {state.table} is held by {state.owner} until {until} UTC, not by {owner}"
        return CloseAttempt(False, state, WriteGateHeldError, detail)

    def _settle_left(self, before: GateState) -> float:
        """Seconds until a gate that opened recently may close: writers may not have seen it open yet."""
        if before.state != "open" or before.opened_at is None:
            return 0.0
        return max(0.0, self.settle_seconds - (before.database_now - before.opened_at).total_seconds())

    def close_waiting(
        self,
        table: str,
        owner: GateOwner,
        closing: Closing,
        *,
        timeout: float,
        poke_interval: float,
        log: Callable[[str], None] = print,
    ) -> CloseAttempt:
        """Close the gate (:meth:`close`), waiting up to ``timeout`` seconds while another owner holds it or, with
        ``closing.slot``, until the run gets a Spark slot; the closing that did it.

        While it waits the gate is only read, so the audit trail keeps real attempts: the last look, at the
        timeout, is a real one, and its refusal is raised (:class:`GateBusyError`, or :class:`SparkSlotsBusyError`).
        A ``timeout`` of 0 makes that one look.
        """
        deadline = self.clock() + timeout
        while True:
            last = self.clock() >= deadline
            attempt = self.close(table, owner, closing, only_if_free=not last)
            if attempt.closed:
                return attempt
            if last:
                raise attempt.refusal(gave_up_after=timeout if timeout else None)
            log(f"{attempt.detail}; waiting, the gate open meanwhile")
            self.sleep(max(0.0, min(poke_interval, deadline - self.clock())))

    def observe(self, table: str, writer_id: str, kind: CommitKind, snapshot_id: int, detail: str) -> bool:
        """Record that the table's history showed ``writer_id`` commit ``kind`` in snapshot ``snapshot_id``, when that
        is wider than what it declared and was seen to commit before; whether it was recorded."""
        with self.transaction() as cursor:
            writer = next((w for w in self._read(cursor, table).writers if w.writer_id == writer_id), None)
            if writer is None or widest(writer.commit_kind, writer.observed_kind, kind) != kind:
                return False
            if kind in (writer.commit_kind, writer.observed_kind):
                return False
            params = {"table": table, "writer_id": writer_id, "kind": kind, "snapshot_id": snapshot_id}
            cursor.execute(WRITER_OBSERVED_SQL, {**params, "detail": detail[:1000]})
        return True

    def history_checked(self, table: str, up_to_ms: int) -> None:
        """A plan has checked what the writers of ``table`` committed, up to the snapshot of ``up_to_ms``."""
        with self.transaction() as cursor:
            cursor.execute(GATE_ENSURE_ROW_SQL, (table,))
            cursor.execute(HISTORY_CHECKED_SQL, (up_to_ms, table))

    def renew(self, table: str, owner: GateOwner) -> GateState:
        """Extend the lease of a gate ``owner`` holds by the lease it closed with, never past the pause's deadline;
        the gate and its writers after.

        Raises :class:`LeaseLostError` if ``owner`` no longer holds the gate (its lease ended, another run took it
        over, or it was forced open): whatever the owner was doing must stop.
        """
        with self.transaction() as cursor:
            cursor.execute(OWNER_RENEW_SQL, (table, owner.dag_id, owner.run_id))
            state = self._read(cursor, table)
        state.require_held_by(owner)
        return state

    def renew_lease(self, table: str, owner: GateOwner) -> Lease:
        """Renew as :meth:`renew` does; what the lease has left, for a :class:`LeaseKeeper`.

        MySQL errors propagate: an unreachable database is not a lost lease, but the caller must stop working
        before the last lease it got runs out.
        """
        with self.transaction() as cursor:
            cursor.execute(OWNER_RENEW_SQL, (table, owner.dag_id, owner.run_id))
            cursor.execute(OWNER_LEASE_SQL, (table, owner.dag_id, owner.run_id))
            row = cursor.fetchone()
        if row is None:
            raise LeaseLostError(lease_taken(table, owner))
        return Lease(float(row["lease_seconds_left"]), bool(row["at_pause_deadline"]))

    def open(self, table: str, owner: GateOwner) -> tuple[GateChange, GateState]:
        """Open the gate of ``table`` if ``owner`` holds it (:func:`decide_open`), and let go of its Spark slot;
        what it decided (whether it opened, and if not why), and the gate after. A gate held by another owner, or
        already open, is left as it is."""
        with self.transaction() as cursor:
            change = decide_open(self._locked(cursor, table), owner)
            if change.allowed:
                cursor.execute(OWNER_OPEN_SQL, {"table": table})
                self.spark_slots.release(cursor, table, owner)  # its Spark slot, if it took one
            self._audit(cursor, table, change.action, owner, None, change.detail)
            cursor.execute(GATE_SELECT_SQL, (table,))
            after = GateState.from_row(cursor.fetchone())
        return change, after

    def force_open(self, table: str, reason: str) -> tuple[bool, GateOwner | None]:
        """Open the gate of ``table`` whoever holds it, recording ``reason``; whether it was closed, and its owner.

        For people, not DAGs: releasing writers at once after a run died, instead of waiting out its lease. The
        audit row names the run that held the gate and the lease it had.
        """
        with self.transaction() as cursor:
            before = self._locked(cursor, table)
            was_closed = before.state == "closed"
            if was_closed:
                cursor.execute(OWNER_OPEN_SQL, {"table": table})
            self._audit(cursor, table, AuditAction.FORCE_OPEN, before.owner, before.lease_expires_at, reason[:1000])
        return was_closed, before.owner


class GateLease:
    """The lease of a gate one owner holds, renewed through its store: what a :class:`LeaseKeeper` keeps.

    :param table: The table, ``catalog.namespace.table``.
    :param dag_id: DAG id (or job name) of the owner that holds the gate.
    :param run_id: Run id of the owner that holds the gate.
    :param connect: Returns a new pymysql connection to the gate's database.
    """

    def __init__(self, table: str, dag_id: str, run_id: str, connect: Callable[[], Any]) -> None:
        self.table = table
        self.owner = GateOwner(dag_id, run_id)
        self._store = GateStore(connect)

    def renew(self) -> Lease:
        """Renew the lease (:meth:`GateStore.renew_lease`); :class:`LeaseLostError` if the owner no longer holds it."""
        return self._store.renew_lease(self.table, self.owner)
