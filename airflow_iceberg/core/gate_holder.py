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
(:class:`LeaseKeeper`); if the lease is lost, ``on_lost`` must stop the statement before writers resume. It closes,
renews and opens through the gate's store (:class:`GateStore`), as a DAG run does, and decides that the writers are
done by the same idle rule (:func:`decide_idle`), on their acknowledgements alone: it reads no snapshots.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from airflow_iceberg.core.conflicts import UNDESCRIBED, GuardedWork, summary
from airflow_iceberg.core.gate_protocol import WRITER_GONE_SECONDS
from airflow_iceberg.core.gate_state import GateOwner, GateState, check_pause_ceiling
from airflow_iceberg.core.gate_store import Closing, GateBusyError, GateLease, GateStore
from airflow_iceberg.core.idle import NOT_READ, decide_idle
from airflow_iceberg.core.lease import LeaseKeeper

__all__ = ["GateBusyError", "GateHolder", "WritersNotAcknowledgedError"]


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
    :param settle_seconds: A gate opened less than this long ago is not closed yet (the store's settle rule,
        :data:`~airflow_iceberg.core.gate_store.SETTLE_SECONDS`).
    :param writer_gone_seconds: A writer not seen for this long is taken as stopped without leaving (a killed
        job), not waited for: a running writer says it is there every :data:`REGISTER_EVERY_SECONDS`. One whose
        MySQL is away may still commit meanwhile, which at worst makes the statement fail; nothing is lost.
    :param work: What the job does while it holds the gate (its :class:`BatchStatement`, say): the closing pauses
        only the writers that can conflict with it. Without it, every writer pauses.
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
        writer_gone_seconds: float = WRITER_GONE_SECONDS,
        work: GuardedWork = UNDESCRIBED,
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
        self.writer_gone_seconds = writer_gone_seconds
        self.work = work
        self._connect = connect
        self._store = GateStore(connect, settle_seconds=settle_seconds, clock=clock, sleep=sleep)
        self._clock = clock
        self._sleep = sleep
        self._log = log

    def close(self, timeout: float) -> GateState:
        """Close the gate, waiting up to ``timeout`` seconds while another owner holds it (:class:`GateBusyError`)."""
        attempt = self._store.close_waiting(
            self.table,
            self.owner,
            Closing(self.lease_seconds, self.max_pause_seconds, work=self.work),
            timeout=timeout,
            poke_interval=self.poke_interval,
            log=lambda message: None,  # a wait is not news; giving up is, and raises
        )
        state = attempt.state
        self._log(
            f"write gate of {self.table} closed by {self.owner} until {state.lease_expires_at} (UTC): "
            f"{summary(attempt.pauses)}"
        )
        return state

    def state(self) -> GateState:
        """The gate row and its writers, read together."""
        return self._store.state(self.table)

    def wait_for_writers(self, timeout: float) -> GateState:
        """Wait until every writer the closing waits for (:meth:`GateState.writers_to_wait_for`) has acknowledged
        it or is gone (not seen for ``writer_gone_seconds``); raise :class:`WritersNotAcknowledgedError` after
        ``timeout`` seconds, or :class:`LeaseLostError` if the gate is no longer held."""
        deadline = self._clock() + timeout
        while True:
            state = self.state()
            check = decide_idle(state, self.owner, NOT_READ, 0, gone_seconds=self.writer_gone_seconds)
            if check.done:
                return state
            if self._clock() >= deadline:
                waiting = check.writers_waited_for
                raise WritersNotAcknowledgedError(
                    f"{len(waiting)} writer(s) of {self.table} did not acknowledge the pause within {timeout:g} s "
                    f"({', '.join(waiting)}), so the statement of {self.owner} did not run and the gate was opened: "
                    "is a writer stuck, or gone without leaving? (docs/write-gate-protocol.md)"
                )
            self._sleep(self.poke_interval)

    def open(self) -> bool:
        """Open the gate if this owner holds it; return whether it did."""
        opened = self._store.open(self.table, self.owner)[0].allowed
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
