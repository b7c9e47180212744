"""A job that holds a table's write gate itself: a batch statement that pauses the streaming writers while it commits.

A Spark ``DELETE`` or ``MERGE`` on a merge-on-read table validates, when it commits, against every file committed
since it read the table. Beside a CDC stream that commits every few seconds it meets the stream's own commits and
fails (``ValidationException: Found conflicting files that can contain records matching ...``), whatever the gate
does about compactions. A job that must not fail that way holds the gate for the statement, as a compaction's DAG
run does: it closes the gate, waits until every writer has acknowledged, runs the statement, and opens the gate. No
compaction starts meanwhile either, since the gate is held.

Depends on ``pymysql`` alone, like :mod:`airflow_iceberg.core.writer`, so a Spark job ships it with the core::

    holder = GateHolder("lake.db.events", lambda: owner_connection(**gate), GateOwner("gdpr-deletes", run_id))
    with holder.hold(on_lost=lambda reason: spark.sparkContext.cancelAllJobs()):
        spark.sql("DELETE FROM lake.db.events WHERE ...")

The job appears at the gate as its owner, in the columns a DAG run's id fills (``owner_dag_id``: the job's name,
``owner_run_id``: this run), and in the audit trail as ``close`` and ``open``. Its MySQL user needs the owner's
grants, not only a writer's (docs/write-gate-protocol.md). While it holds the gate it renews its lease
(:class:`LeaseKeeper`); if the lease is lost, ``on_lost`` must stop the statement before writers resume.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from airflow_iceberg.core.gate_protocol import (
    AUDIT_INSERT_SQL,
    GATE_ENSURE_ROW_SQL,
    GATE_SELECT_SQL,
    OWNER_CLOSE_SQL,
    OWNER_OPEN_SQL,
    OWNER_RENEW_SQL,
    REGISTER_EVERY_SECONDS,
    WRITERS_SELECT_SQL,
)
from airflow_iceberg.core.gate_state import (
    AuditAction,
    GateOwner,
    GateState,
    WriterState,
    check_pause_ceiling,
    decide_close,
    decide_open,
)
from airflow_iceberg.core.lease import GateLease, LeaseKeeper


class GateBusyError(TimeoutError):
    """The gate stayed held by another owner (a compaction, another batch job) for as long as the job would wait."""


class WritersNotAcknowledgedError(TimeoutError):
    """A writer of the table did not acknowledge the pause in time: the statement did not run, the gate is open."""


class GateHolder:
    """Close, hold and open one table's write gate from a job that is not a DAG run.

    :param table: The table, ``catalog.namespace.table``.
    :param connect: Returns a new pymysql connection to the gate's database, in the owner's session
        (:func:`airflow_iceberg.core.gate_protocol.owner_connection`).
    :param owner: Who holds the gate: the job's name and this run of it.
    :param lease_seconds: The lease it closes with and renews by; writers resume when a lease is not renewed.
    :param max_pause_seconds: No renewal extends the pause past this many seconds after closing (None: no cap).
    :param poke_interval: Seconds between two looks while it waits for the gate or for the writers.
    :param settle_seconds: A gate opened less than this long ago is not closed yet: a writer that acknowledged the
        closing before and looks every half second or so must see it open, or it would take the new closing for
        the one it acknowledged and never acknowledge it.
    :param writer_gone_seconds: A writer not seen for this long is taken as stopped without leaving (a killed
        job), not waited for: a running writer says it is there every :data:`REGISTER_EVERY_SECONDS`. One whose
        MySQL is away may still commit meanwhile, which at worst makes the statement fail; nothing is lost.
    :param clock: Monotonic clock, in seconds.
    :param sleep: Waits the given seconds.
    :param log: Where its messages go.
    """

    def __init__(
        self,
        table: str,
        connect: Callable[[], Any],
        owner: GateOwner,
        *,
        lease_seconds: int = 120,
        max_pause_seconds: int | None = None,
        poke_interval: float = 0.5,
        settle_seconds: float = 2.0,
        writer_gone_seconds: float = 3 * REGISTER_EVERY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        log: Callable[[str], None] = print,
    ) -> None:
        check_pause_ceiling(lease_seconds, max_pause_seconds)
        self.table = table
        self.owner = owner
        self.lease_seconds = lease_seconds
        self.max_pause_seconds = max_pause_seconds
        self.poke_interval = poke_interval
        self.settle_seconds = settle_seconds
        self.writer_gone_seconds = writer_gone_seconds
        self._connect = connect
        self._clock = clock
        self._sleep = sleep
        self._log = log

    def _transaction(self, work: Callable[[Any], Any]) -> Any:
        """``work(cursor)`` in one transaction on a new connection, committed if it returns."""
        import pymysql

        connection = self._connect()
        try:
            with connection.cursor(pymysql.cursors.DictCursor) as cursor:
                result = work(cursor)
            connection.commit()
            return result
        finally:
            connection.close()

    def _locked(self, cursor: Any) -> GateState:
        cursor.execute(GATE_ENSURE_ROW_SQL, (self.table,))
        cursor.execute(GATE_SELECT_SQL + " FOR UPDATE", (self.table,))
        return GateState.from_row(cursor.fetchone())

    def try_close(self) -> tuple[bool, GateState]:
        """Close the gate if the gate's rules allow it (:func:`decide_close`); return whether it did, and the state.

        A refusal changes nothing, the audit trail included: a waiting job, like a waiting run, writes no row. A gate
        opened less than ``settle_seconds`` ago is left open for now, too.
        """

        def close(cursor: Any) -> tuple[bool, GateState]:
            before = self._locked(cursor)
            change = decide_close(before, self.owner)
            if not change.allowed or self._just_opened(before):
                return False, before
            params = {
                "table": self.table,
                "dag_id": self.owner.dag_id,
                "run_id": self.owner.run_id,
                "lease_seconds": self.lease_seconds,
                "max_pause_seconds": self.max_pause_seconds,
                "renew": change.action == AuditAction.RECLOSE,
            }
            cursor.execute(OWNER_CLOSE_SQL, params)
            cursor.execute(OWNER_RENEW_SQL, (self.table, self.owner.dag_id, self.owner.run_id))
            cursor.execute(GATE_SELECT_SQL, (self.table,))
            after = GateState.from_row(cursor.fetchone())
            audit = (self.table, change.action, self.owner.dag_id, self.owner.run_id, after.lease_expires_at)
            cursor.execute(AUDIT_INSERT_SQL, (*audit, change.detail))
            return True, after

        return self._transaction(close)

    def _just_opened(self, state: GateState) -> bool:
        """The gate opened less than ``settle_seconds`` ago: writers may not have seen it open yet."""
        if state.state != "open" or state.opened_at is None:
            return False
        return (state.database_now - state.opened_at).total_seconds() < self.settle_seconds

    def close(self, timeout: float) -> GateState:
        """Close the gate, waiting up to ``timeout`` seconds while another owner holds it (:class:`GateBusyError`)."""
        deadline = self._clock() + timeout
        while True:
            closed, state = self.try_close()
            if closed:
                self._log(f"write gate of {self.table} closed by {self.owner} until {state.lease_expires_at} (UTC)")
                return state
            if self._clock() >= deadline:
                raise GateBusyError(
                    f"the write gate of {self.table} stayed held by {state.owner} for {timeout:g} s, so {self.owner} "
                    "did not close it and its statement did not run: try again later, or wait longer"
                )
            self._sleep(self.poke_interval)

    def state(self) -> GateState:
        """The gate row and its writers, read together."""

        def read(cursor: Any) -> GateState:
            cursor.execute(WRITERS_SELECT_SQL, (self.table,))
            writers = tuple(WriterState.from_row(row) for row in cursor.fetchall())
            cursor.execute(GATE_SELECT_SQL, (self.table,))
            return GateState.from_row(cursor.fetchone(), writers)

        return self._transaction(read)

    def wait_for_writers(self, timeout: float) -> GateState:
        """Wait until every writer the closing waits for (:meth:`GateState.writers_to_wait_for`) has acknowledged
        it or is gone (not seen for ``writer_gone_seconds``); raise :class:`WritersNotAcknowledgedError` after
        ``timeout`` seconds, or :class:`LeaseLostError` if the gate is no longer held."""
        deadline = self._clock() + timeout
        while True:
            state = self.state()
            state.require_held_by(self.owner)
            seen_since = state.database_now - timedelta(seconds=self.writer_gone_seconds)
            waiting = [
                w.writer_id
                for w in state.writers_to_wait_for()
                if not state.acknowledged_by(w) and w.seen_at is not None and w.seen_at >= seen_since
            ]
            if not waiting:
                return state
            if self._clock() >= deadline:
                raise WritersNotAcknowledgedError(
                    f"{len(waiting)} writer(s) of {self.table} did not acknowledge the pause within {timeout:g} s "
                    f"({', '.join(waiting)}), so the statement of {self.owner} did not run and the gate was opened: "
                    "is a writer stuck, or gone without leaving? (docs/write-gate-protocol.md)"
                )
            self._sleep(self.poke_interval)

    def open(self) -> bool:
        """Open the gate if this owner holds it (:func:`decide_open`); return whether it did."""

        def open_(cursor: Any) -> bool:
            change = decide_open(self._locked(cursor), self.owner)
            if change.allowed:
                cursor.execute(OWNER_OPEN_SQL, {"table": self.table})
            audit = (self.table, change.action, self.owner.dag_id, self.owner.run_id, None, change.detail)
            cursor.execute(AUDIT_INSERT_SQL, audit)
            return change.allowed

        opened = self._transaction(open_)
        self._log(f"write gate of {self.table} {'opened by' if opened else 'left as it was, not held by'} {self.owner}")
        return opened

    @contextmanager
    def hold(
        self,
        *,
        close_timeout: float = 600.0,
        acknowledge_timeout: float = 120.0,
        on_lost: Callable[[str], None] | None = None,
    ) -> Iterator[GateState]:
        """Hold the gate for the block: close it, renew its lease, wait for every writer's acknowledgement, and
        open it when the block ends, however it ends.

        :param close_timeout: Seconds to wait while another owner holds the gate.
        :param acknowledge_timeout: Seconds to wait for the writers' acknowledgements.
        :param on_lost: Called once, from another thread, if the lease cannot be kept while the block runs
            (someone forced the gate open, MySQL stayed away): it must stop the work, as writers resume.
        """
        self.close(close_timeout)
        lease = GateLease(self.table, self.owner.dag_id, self.owner.run_id, self._connect)
        keeper = LeaseKeeper.for_lease(lease, self.lease_seconds, on_lost or self._log, log=self._log)
        try:
            keeper.start()
            yield self.wait_for_writers(acknowledge_timeout)
        finally:
            keeper.stop()
            self.open()
