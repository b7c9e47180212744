"""The handshake between a run's gate and its pre-started work: the rewrite's Spark application comes up while the
writers still commit, says it is ready, and begins its ``CALL`` statements at the go that the idle wait gives once the
writers that must pause are done, with no scheduler round trip inside the pause.

One row per run attempt (a cleared run starts a new attempt, with a row of its own), in the gate's MySQL:

- the work (the Spark job) says it is ready and keeps saying it is alive (``ready_at``, ``seen_at``);
- ``close_gate`` closes only once it is ready and alive, so writers never pause while Spark starts;
- ``wait_until_snapshot_idle`` gives the go (``go_at``) when the writers are done, or a stop (``stop_reason``) when
  the run gives up before (the wait timed out, the gate could not be closed); the rewrite task writes a stop too
  when its application ends before it was ready;
- ``open_gate`` removes the row.

Until the go the work renews no lease: a run whose idle wait dies leaves the gate's lease to run out, and the work
then ends without a ``CALL`` (:func:`decide_go`). No Airflow here: the Spark job uses it too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_iceberg.core.gate_protocol import GATE_TABLE
from airflow_iceberg.core.gate_state import GateOwner, database_time

WORK_TABLE = "iceberg_gate_work"

_KEY = "owner_dag_id = %(dag_id)s AND owner_run_id = %(run_id)s AND attempt = %(attempt)s"
_INSERT = f"INSERT INTO {WORK_TABLE} (table_name, owner_dag_id, owner_run_id, attempt"
_VALUES = "VALUES (%(table)s, %(dag_id)s, %(run_id)s, %(attempt)s"

#: The work is up and waiting for the go: it says so, and that it is alive, every :data:`ALIVE_EVERY_SECONDS`.
WORK_READY_SQL = f"""{_INSERT}, ready_at, seen_at) {_VALUES}, NOW(6), NOW(6))
    ON DUPLICATE KEY UPDATE ready_at = NOW(6), seen_at = NOW(6)"""
WORK_ALIVE_SQL = f"UPDATE {WORK_TABLE} SET seen_at = NOW(6) WHERE {_KEY}"
#: The go, once: the writers that must pause are done (the idle wait's last look).
WORK_GO_SQL = f"""{_INSERT}, go_at) {_VALUES}, NOW(6))
    ON DUPLICATE KEY UPDATE go_at = COALESCE(go_at, NOW(6))"""
#: A stop, final for the attempt: the first reason stays.
WORK_STOP_SQL = f"""{_INSERT}, stop_reason) {_VALUES}, %(reason)s)
    ON DUPLICATE KEY UPDATE stop_reason = COALESCE(stop_reason, VALUES(stop_reason))"""
WORK_DONE_SQL = f"DELETE FROM {WORK_TABLE} WHERE owner_dag_id = %(dag_id)s AND owner_run_id = %(run_id)s"
#: The attempt's row beside its gate's, with the database's clock: one read decides.
WORK_LOOK_SQL = f"""SELECT w.ready_at, w.seen_at, w.go_at, w.stop_reason,
        g.state, g.owner_dag_id, g.owner_run_id, g.closed_at, g.lease_expires_at, g.lease_seconds,
        NOW(6) AS database_now
    FROM (SELECT %(table)s AS table_name) k
    LEFT JOIN {WORK_TABLE} w ON w.table_name = k.table_name AND w.{_KEY.replace(" AND ", " AND w.")}
    LEFT JOIN {GATE_TABLE} g ON g.table_name = k.table_name"""

#: How often waiting work looks for the go: the pause pays up to this much between the go and the first CALL.
LOOK_EVERY_SECONDS = 0.25
#: How often waiting work says it is alive.
ALIVE_EVERY_SECONDS = 2.0
#: Work not seen for this long is taken as gone: the gate does not close for it.
ALIVE_WITHIN_SECONDS = 10.0


class NoGo(RuntimeError):
    """The work must end without working: the run gave up before the go, or its gate is no longer its own."""


class WorkGoneError(RuntimeError):
    """The pre-started work the idle wait guards ended before the go: writers would pause for nothing, so the wait
    ends and the gate opens (:func:`work_gone`)."""


@dataclass(frozen=True)
class WorkLook:
    """One read of an attempt's handshake row and its table's gate, by the database's clock."""

    owner: GateOwner
    database_now: datetime
    ready_at: datetime | None = None
    seen_at: datetime | None = None
    go_at: datetime | None = None
    stop_reason: str | None = None
    #: The gate is closed by this run and its lease has not ended.
    held: bool = False
    closed_at: datetime | None = None
    lease_seconds: int | None = None

    @classmethod
    def from_row(cls, owner: GateOwner, row: dict[str, Any]) -> WorkLook:
        now = database_time(row["database_now"])
        assert now is not None  # NOW(6) is never NULL
        expires = database_time(row["lease_expires_at"])
        held = (
            row["state"] == "closed"
            and (row["owner_dag_id"], row["owner_run_id"]) == (owner.dag_id, owner.run_id)
            and expires is not None
            and expires > now
        )
        return cls(
            owner,
            now,
            database_time(row["ready_at"]),
            database_time(row["seen_at"]),
            database_time(row["go_at"]),
            row["stop_reason"],
            held,
            database_time(row["closed_at"]),
            row["lease_seconds"],
        )

    @property
    def alive(self) -> bool:
        """The work is ready and was seen lately."""
        return (
            self.ready_at is not None
            and self.seen_at is not None
            and (self.database_now - self.seen_at).total_seconds() <= ALIVE_WITHIN_SECONDS
        )


@dataclass(frozen=True)
class Decision:
    """What waiting work does after a look: ``go``, ``wait`` or ``stop`` (with why)."""

    action: str
    reason: str | None = None


def decide_go(look: WorkLook, table: str, *, was_held: bool) -> Decision:
    """The rule waiting work follows: stop at a stop; go at the go while its run holds the gate, closed at or
    before the go; stop once the gate it saw held by its run is no longer (its lease ended: nobody renews it before
    the go); wait otherwise. ``was_held``: an earlier look saw the gate held by the run."""
    if look.stop_reason:
        return Decision("stop", look.stop_reason)
    if look.held:
        given = look.go_at is not None and (look.closed_at is None or look.go_at >= look.closed_at)
        return Decision("go" if given else "wait")
    if was_held or look.go_at is not None:
        return Decision(
            "stop",
            f"the write gate of {table} is no longer held by {look.owner}: its lease ended before the go (the idle "
            "wait stopped renewing it), or someone forced it open",
        )
    return Decision("wait")


def work_gone(look: WorkLook, table: str) -> str | None:
    """Why the pre-started work of ``look``'s attempt is gone, for the idle wait that would give it the go; None
    while it waits. Gone: it stopped (its task failed for good, and said so), or it was ready and has not said it
    is alive for :data:`ALIVE_WITHIN_SECONDS` (its task or its application was killed: nobody said anything)."""
    if look.stop_reason:
        return f"the rewrite of {table} ended before the go: {look.stop_reason}"
    if look.ready_at is not None and not look.alive:
        silent = (look.database_now - (look.seen_at or look.ready_at)).total_seconds()
        return (
            f"the rewrite's Spark application for {table} has not said it is alive for {silent:.0f} s (it says so "
            f"every {ALIVE_EVERY_SECONDS:g} s while it waits): its task or application ended before the go, so no "
            "work needs the writers paused"
        )
    return None


class WorkHandshake:
    """One run attempt's handshake row, over one connection to the gate's MySQL (opened again after an error).

    :param connect: Returns a new pymysql connection in an owner's session (``gate_protocol.owner_connection``).
    :param table: The table, ``catalog.namespace.table``.
    :param owner: The run.
    :param attempt: The run's attempt: its clear number (a cleared run is a new attempt).
    """

    def __init__(self, connect: Callable[[], Any], table: str, owner: GateOwner, attempt: int) -> None:
        self._connect = connect
        self._connection: Any = None
        self.table = table
        self.owner = owner
        self.attempt = attempt

    def copy(self) -> WorkHandshake:
        """The same handshake over a connection of its own, for another thread."""
        return WorkHandshake(self._connect, self.table, self.owner, self.attempt)

    def _execute(self, sql: str, **extra: Any) -> dict[str, Any] | None:
        import pymysql

        params: dict[str, Any] = {"table": self.table, "dag_id": self.owner.dag_id, "run_id": self.owner.run_id}
        params.update(attempt=self.attempt, **extra)
        if self._connection is None:
            self._connection = self._connect()
        try:
            with self._connection.cursor(pymysql.cursors.DictCursor) as cursor:
                cursor.execute(sql, params)
                row = cursor.fetchone() if cursor.description else None
            self._connection.commit()
            return row
        except Exception:
            self.close()
            raise

    def close(self) -> None:
        if self._connection is not None:
            try:
                self._connection.close()
            except Exception:  # already gone
                pass
            self._connection = None

    def look(self) -> WorkLook:
        row = self._execute(WORK_LOOK_SQL)
        assert row is not None  # the SELECT always yields its one row
        return WorkLook.from_row(self.owner, row)

    def ready(self) -> None:
        self._execute(WORK_READY_SQL)

    def alive(self) -> None:
        self._execute(WORK_ALIVE_SQL)

    def go(self) -> None:
        self._execute(WORK_GO_SQL)

    def stop(self, reason: str) -> None:
        self._execute(WORK_STOP_SQL, reason=reason[:1000])

    def done(self) -> None:
        """The run is over: its rows go (every attempt's)."""
        self._execute(WORK_DONE_SQL)


def await_go(
    handshake: WorkHandshake,
    timeout: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    say_alive: bool = True,
    log: Callable[[str], None] = print,
) -> WorkLook:
    """Wait for the go (:func:`decide_go`) and return the look that gave it; :class:`NoGo` on a stop, or when
    ``timeout`` seconds pass without one. With ``say_alive``, the waiter is the work: it says it is ready first, and
    alive while it waits. A MySQL error is retried until the timeout: while it lasts nobody can give the go, and the
    gate's lease, which nobody renews before the go, runs out."""
    import pymysql

    deadline = clock() + timeout
    was_held = False
    said_alive = clock()
    if say_alive:
        handshake.ready()
    while True:
        try:
            look = handshake.look()
            if say_alive and clock() - said_alive >= ALIVE_EVERY_SECONDS:
                handshake.alive()
                said_alive = clock()
        except (pymysql.err.MySQLError, OSError) as error:
            log(f"could not read the handshake of {handshake.table} ({error}); trying again")
        else:
            decision = decide_go(look, handshake.table, was_held=was_held)
            if decision.action == "go":
                return look
            if decision.action == "stop":
                raise NoGo(decision.reason)
            was_held = was_held or look.held
        if clock() >= deadline:
            raise NoGo(f"no go for the work on {handshake.table} within {timeout:.0f} s")
        sleep(LOOK_EVERY_SECONDS)


def await_ready(
    handshake: WorkHandshake,
    timeout: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> WorkLook:
    """Wait until the work is ready and alive (:attr:`WorkLook.alive`); :class:`NoGo` if it stopped (its
    application ended before it was ready), or when ``timeout`` seconds pass. Nothing is closed meanwhile."""
    deadline = clock() + timeout
    while True:
        look = handshake.look()
        if look.stop_reason:
            raise NoGo(look.stop_reason)
        if look.alive:
            return look
        if clock() >= deadline:
            raise NoGo(
                f"the rewrite's Spark application for {handshake.table} was not ready within {timeout:.0f} s, so the "
                "gate was not closed"
            )
        sleep(LOOK_EVERY_SECONDS)
