"""Close a run's write gate from the triggerer, once the gate is free and, with Spark slots, the run has one.

``CloseWriteGateOperator`` with ``deferrable`` waits here instead of in its worker. In a burst (many tables needing
work at once on few Spark slots), close_gate tasks that wait in their workers can fill every worker Airflow has:
the runs that got a slot then cannot run their next task, and nothing moves until the waiters give up. A run
waiting here holds no worker.

Each look is the gate store's close (:meth:`GateStore.close`), as each of the task's own looks is: while another run
holds the gate it only reads it, and the look at the deadline is a real attempt whose refusal is audited; otherwise
one transaction takes the gate (and a slot) or changes nothing. A look asks for the slot again, which keeps the
run's place in the queue.
A triggerer that dies after closing and before the task resumes is harmless: the next triggerer's first look finds
the gate this run's and renews it, keeping the close time; if none does, the lease ends and writers resume.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_iceberg.core.conflicts import UNDESCRIBED, GuardedWork
from airflow_iceberg.core.gate_state import GateOwner
from airflow_iceberg.core.gate_store import CloseAttempt, Closing
from airflow_iceberg.core.spark_slots import SparkSlotRequest


class CloseGateTrigger(BaseTrigger):
    """Look every ``poke_interval`` seconds until the run closes ``table``'s gate, or ``deadline`` passes.

    The event is ``{"closed": true, "closed_at", "lease_expires_at", "pause_deadline", "writers", ...}`` (ISO times,
    the database's clock; :meth:`CloseAttempt.as_xcom`), or ``{"closed": false, "error", "message"}`` with the last
    look's reason: the gate held by another run (``WriteGateHeldError``), the slots busy (``SparkSlotsBusyError``),
    or the gate's database unreachable.

    :param slot: The run's Spark slot request (``SparkSlotRequest``'s fields), or None.
    :param work: What the run does while it holds the gate (``GuardedWork.as_xcom()``); None: not said, so every
        writer pauses.
    :param deadline: When to stop looking (ISO, UTC).
    """

    def __init__(
        self,
        *,
        table: str,
        dag_id: str,
        run_id: str,
        write_gate_conn_id: str,
        lease_seconds: int,
        max_pause_seconds: int,
        poke_interval: float,
        deadline: str,
        slot: dict[str, Any] | None = None,
        work: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.table = table
        self.owner = GateOwner(dag_id, run_id)
        self.write_gate_conn_id = write_gate_conn_id
        self.lease_seconds = int(lease_seconds)
        self.max_pause_seconds = int(max_pause_seconds)
        self.poke_interval = float(poke_interval)
        self.deadline = datetime.fromisoformat(deadline)
        self.slot = SparkSlotRequest(**slot) if slot else None
        self.work = GuardedWork.from_xcom(work) if work is not None else UNDESCRIBED

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table": self.table,
                "dag_id": self.owner.dag_id,
                "run_id": self.owner.run_id,
                "write_gate_conn_id": self.write_gate_conn_id,
                "lease_seconds": self.lease_seconds,
                "max_pause_seconds": self.max_pause_seconds,
                "poke_interval": self.poke_interval,
                "deadline": self.deadline.isoformat(),
                "slot": None if self.slot is None else vars(self.slot).copy(),
                "work": self.work.as_xcom(),
            },
        )

    def _look(self, last: bool) -> CloseAttempt:
        from airflow_iceberg.hooks.write_gate import WriteGateHook

        closing = Closing(self.lease_seconds, self.max_pause_seconds, self.slot, self.work)
        return WriteGateHook(self.write_gate_conn_id).store.close(
            self.table, self.owner, closing, only_if_free=not last
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            last = datetime.now(timezone.utc) >= self.deadline
            try:
                attempt = await asyncio.to_thread(self._look, last)
                if attempt.closed:
                    yield TriggerEvent({"closed": True, **attempt.as_xcom()})
                    return
                error, message = attempt.refused.__name__ if attempt.refused else "RuntimeError", attempt.detail
                self.log.info("%s; the gate stays open meanwhile", message)
            except Exception as failed:  # the gate's database unreachable: look again until the deadline
                error, message = type(failed).__name__, str(failed)
                self.log.warning("Could not close the gate of %s: %s: %s", self.table, error, message)
            if last:
                yield TriggerEvent({"closed": False, "error": error, "message": message})
                return
            left = (self.deadline - datetime.now(timezone.utc)).total_seconds()
            await asyncio.sleep(max(0.0, min(self.poke_interval, left)))
