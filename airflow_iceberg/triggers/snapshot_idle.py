"""Has a gated table's writer gone idle? The decision, the look that feeds it, and the trigger that waits for it.

:func:`decide_idle` is the rule, on values alone; :func:`check_snapshot_idle` reads the gate (MySQL) and the
table's snapshots (pyiceberg, no Spark) and applies it. ``SnapshotIdleSensor`` and :class:`SnapshotIdleTrigger`
both call it, in a worker and in the triggerer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_iceberg.core.gate_state import GateOwner
from airflow_iceberg.core.gate_work import WorkGoneError, work_gone
from airflow_iceberg.core.idle import IdleCheck, Snapshot, decide_idle, why_not_idle
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.exceptions import LeaseLostError
from airflow_iceberg.hooks.catalogs import load_iceberg_table
from airflow_iceberg.hooks.write_gate import WriteGateHook

#: How many of the table's newest snapshots a look reads: the writers that keep committing through a closing may
#: commit many while it lasts, and the newest one of anybody else's is what the idle rule wants.
RECENT_SNAPSHOTS = 200


def recent_snapshots(iceberg_conn_id: str, table: TableName, limit: int = RECENT_SNAPSHOTS) -> list[Snapshot]:
    """The table's ``limit`` newest snapshots on any branch, newest first, read with pyiceberg (its metadata file
    lists them: no further read)."""
    metadata = load_iceberg_table(iceberg_conn_id, table).metadata
    newest = sorted(metadata.snapshots, key=lambda s: s.timestamp_ms, reverse=True)[:limit]
    return [
        Snapshot.of(
            s.snapshot_id,
            datetime.fromtimestamp(s.timestamp_ms / 1000, tz=timezone.utc),
            s.summary.additional_properties if s.summary is not None else {},
            s.summary.operation.value if s.summary is not None else None,
        )
        for s in newest
    ]


def check_snapshot_idle(
    *,
    table: TableName,
    owner: GateOwner,
    idle_seconds: int,
    iceberg_conn_id: str,
    write_gate_conn_id: str,
    attempt: int | None = None,
) -> IdleCheck:
    """Renew the run's lease, read the table's recent snapshots, then the gate, and :func:`decide_idle` on them.

    The renewal comes first (it fails at once if the run no longer holds the gate), and the gate with the
    database's clock is read after the catalog, so the time a slow catalog read takes counts as idle time.
    With ``attempt`` (the run's rewrite is pre-started and waits for the go), :class:`WorkGoneError` once that work
    has ended (:func:`work_gone`): the pause would guard nothing.
    """
    hook = WriteGateHook(write_gate_conn_id)
    hook.renew_lease(table, owner)
    if attempt is not None:
        handshake = hook.handshake(table, owner, attempt)
        try:
            gone = work_gone(handshake.look(), str(table))
        finally:
            handshake.close()
        if gone:
            raise WorkGoneError(gone)
    snapshots = recent_snapshots(iceberg_conn_id, table)
    return decide_idle(hook.get_state(table), owner, snapshots, idle_seconds)


class SnapshotIdleTrigger(BaseTrigger):
    """Fire once no snapshot has been committed to ``table`` for ``idle_seconds`` while ``owner`` holds its gate.

    Each check renews the run's lease. pyiceberg and pymysql are synchronous, so each check runs in a thread,
    off the event loop. The event is
    ``{"status": "success", "check": {...}}``, ``{"status": "not_held", "message": ...}`` when the run no longer
    holds the gate, ``{"status": "timeout", "message": ...}`` at ``ends_at`` (the message says why the writers had
    not gone idle, from the last look: :func:`why_not_idle`), or ``{"status": "error", "message": ...}``.

    :param table: The table, ``catalog.namespace.table``.
    :param dag_id: DAG id of the run that holds the gate.
    :param run_id: Run id of the run that holds the gate.
    :param idle_seconds: How long the table must have been idle.
    :param iceberg_conn_id: Iceberg connection that reads the table's snapshots.
    :param write_gate_conn_id: Connection of the gate's MySQL database.
    :param poke_interval: Longest pause between checks, in seconds.
    :param ends_at: When the wait times out (ISO 8601, with its zone); None: never, Airflow's own timeout decides.
    :param attempt: The run's attempt, when its rewrite is pre-started and waits for this wait's go.
    """

    def __init__(
        self,
        *,
        table: str,
        dag_id: str,
        run_id: str,
        idle_seconds: int,
        iceberg_conn_id: str,
        write_gate_conn_id: str,
        poke_interval: float,
        ends_at: str | None = None,
        attempt: int | None = None,
    ) -> None:
        super().__init__()
        self.table = table
        self.dag_id = dag_id
        self.run_id = run_id
        self.idle_seconds = idle_seconds
        self.iceberg_conn_id = iceberg_conn_id
        self.write_gate_conn_id = write_gate_conn_id
        self.poke_interval = poke_interval
        self.ends_at = ends_at
        self.attempt = attempt

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table": self.table,
                "dag_id": self.dag_id,
                "run_id": self.run_id,
                "idle_seconds": self.idle_seconds,
                "iceberg_conn_id": self.iceberg_conn_id,
                "write_gate_conn_id": self.write_gate_conn_id,
                "poke_interval": self.poke_interval,
                "ends_at": self.ends_at,
                "attempt": self.attempt,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        owner = GateOwner(self.dag_id, self.run_id)
        table = TableName.parse(self.table)
        ends_at = datetime.fromisoformat(self.ends_at) if self.ends_at else None
        while True:
            try:
                check = await asyncio.to_thread(
                    check_snapshot_idle,
                    table=table,
                    owner=owner,
                    idle_seconds=self.idle_seconds,
                    iceberg_conn_id=self.iceberg_conn_id,
                    write_gate_conn_id=self.write_gate_conn_id,
                    attempt=self.attempt,
                )
            except Exception as error:  # report, don't crash: the task fails with the message in its log
                status = (
                    "not_held"
                    if isinstance(error, LeaseLostError)
                    else "work_gone"
                    if isinstance(error, WorkGoneError)
                    else "error"
                )
                yield TriggerEvent({"status": status, "message": f"{type(error).__name__}: {error}"})
                return
            if check.done:
                yield TriggerEvent({"status": "success", "check": check.as_xcom()})
                return
            self.log.info(
                "%s idle for %.1f s of %d s; writing: %s",
                self.table,
                check.idle_for_seconds,
                check.idle_seconds,
                list(check.writers_busy),
            )
            # Wake at the moment the window would end, unless a poke is due sooner (a write under way ends it by an
            # acknowledgement, not by the window), or the wait ends.
            window_left = check.idle_seconds - check.idle_for_seconds
            pause = self.poke_interval if check.writers_busy else max(0.5, min(self.poke_interval, window_left))
            if ends_at is not None:
                left = (ends_at - datetime.now(timezone.utc)).total_seconds()
                if left <= 0:
                    why = why_not_idle(check, self.table, self.write_gate_conn_id)
                    yield TriggerEvent({"status": "timeout", "message": why})
                    return
                pause = min(pause, left)
            await asyncio.sleep(pause)
