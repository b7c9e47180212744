"""Spark slots: at most N tables of one Spark connection paused and rewritten at once, the worst health first.

:func:`decide_admission` is the rule, on the queue as locked; the hook keeps the queue beside the gate
(``iceberg_spark_queue``) and applies the rule when a run closes its gate.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_iceberg.core.gate_state import AuditAction, GateChange, GateOwner, database_time


@dataclass(frozen=True)
class SparkSlotRequest:
    """A run's request for one of ``slots`` Spark slots of ``spark_conn_id``, with its table's health ``score``.

    :param patience: Seconds the request keeps its place without being asked again; a run that stops asking
        (it failed, or was killed) frees its place after this.
    """

    spark_conn_id: str
    slots: int
    score: int
    patience: int


@dataclass(frozen=True)
class SparkSlotClaim:
    """A table in a Spark connection's queue: a run waiting for a slot, or holding one while it holds its gate."""

    table: str
    owner: GateOwner
    score: int
    queued_at: datetime
    waiting: bool  # asking, and its patience has not run out
    holding: bool  # admitted, and its run still holds the table's gate

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> SparkSlotClaim:
        return cls(
            table=row["table_name"],
            owner=GateOwner(row["owner_dag_id"], row["owner_run_id"]),
            score=int(row["score"]),
            queued_at=database_time(row["queued_at"]),  # type: ignore[arg-type]
            waiting=row["admitted_at"] is None and row["expires_at"] > row["database_now"],
            holding=row["admitted_at"] is not None and bool(row["holds_gate"]),
        )


def claim_order(entry: SparkSlotClaim) -> tuple[int, datetime, str]:
    """Worst health first (highest score), then the longest waiting, then by name."""
    return (-entry.score, entry.queued_at, entry.table)


def decide_admission(queue: list[SparkSlotClaim], table: str, owner: GateOwner, slots: int) -> GateChange:
    """Whether ``owner``'s run of ``table`` may close its gate now, taking one of ``slots`` Spark slots.

    It may if it holds a slot already (a retry), or if, of the slots the owners leave free, one is its turn:
    the waiters in :func:`claim_order` take the free slots first to last.
    """
    owners = [e for e in queue if e.holding]
    if any(e.table == table and e.owner == owner for e in owners):
        return GateChange(True, AuditAction.CLOSE, "holds a Spark slot already")
    free = slots - len(owners)
    waiters = sorted((e for e in queue if e.waiting), key=claim_order)
    place = next((i for i, e in enumerate(waiters) if e.table == table and e.owner == owner), None)
    if place is None:
        raise ValueError(f"{owner} is not in the queue of its Spark connection for {table}")
    if place < free:
        return GateChange(True, AuditAction.CLOSE, f"Spark slot {len(owners) + 1} of {slots}")
    held = ", ".join(e.table for e in owners) or "none"
    ahead = ", ".join(f"{e.table} (score {e.score})" for e in waiters[:place]) or "none"
    return GateChange(
        False, AuditAction.SLOT_WAIT, f"{len(owners)} of {slots} Spark slots taken ({held}); ahead: {ahead}"
    )
