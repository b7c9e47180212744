"""Spark slots: at most N tables of one Spark connection paused and rewritten at once, the worst health first.

:func:`decide_admission` is the rule, on the queue as locked. :class:`SparkSlotQueue` keeps the queue beside the
gates, in the same database (``iceberg_spark_queue``): the gate's store asks from its close, inside that transaction
and before it pauses anyone, and lets go from its open; the Spark connection's row lock orders the askers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_iceberg.core.gate_protocol import GATE_TABLE
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


class SparkSlotQueue:
    """The slot queue of one gate database; its :class:`~airflow_iceberg.core.gate_store.GateStore` gives the
    transaction, and asks and lets go from its close and open."""

    def __init__(self, transaction: Callable[[], AbstractContextManager[Any]]) -> None:
        self._transaction = transaction

    @staticmethod
    def lock(cursor: Any, spark_conn_id: str) -> None:
        """Within close_gate's transaction: lock the Spark connection's row, before the gate's row, as every path
        locks them."""
        for statement in _SLOT_LOCK:
            cursor.execute(statement, (spark_conn_id,))

    @staticmethod
    def release(cursor: Any, table: str, owner: GateOwner) -> None:
        """Within open_gate's transaction: ``owner``'s place for ``table``, and the slot it took, let go."""
        cursor.execute(_SLOT_DROP, (table, owner.dag_id, owner.run_id))

    def ask(self, cursor: Any, name: str, owner: GateOwner, slot: SparkSlotRequest) -> GateChange:
        """Within close_gate's transaction, under the connection's lock: queue ``owner`` (or keep its place), drop
        the entries of runs that stopped asking or let go of their gate, and take a slot if it is its turn.

        Every run that takes a slot does so under the connection's lock, so none is missed here. The queue is
        read without locking the gate rows it joins: an owner renewing its lease in the same instant may be
        read as one whose lease just ended, which only an owner already at its lease's end can be (owners renew
        a quarter lease early).
        """
        cursor.execute(_SLOT_QUEUE, (slot.spark_conn_id,))
        queue = [SparkSlotClaim.from_row(row) for row in cursor.fetchall()]
        mine = next((e for e in queue if e.table == name), None)
        if mine is not None and mine.owner != owner and mine.waiting:
            return GateChange(False, AuditAction.SLOT_WAIT, f"another run of the same table, {mine.owner}, asked first")
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
        queue = [SparkSlotClaim.from_row(row) for row in cursor.fetchall()]
        admission = decide_admission(queue, name, owner, slot.slots)
        if admission.allowed:
            cursor.execute(_SLOT_ADMIT, (name,))
        return admission

    def queue(self, spark_conn_id: str) -> list[SparkSlotClaim]:
        """The runs holding a Spark slot of ``spark_conn_id`` and those waiting for one, in the order they go."""
        with self._transaction() as cursor:
            cursor.execute(_SLOT_QUEUE, (spark_conn_id,))
            queue = [SparkSlotClaim.from_row(row) for row in cursor.fetchall()]
        live = [e for e in queue if e.holding or e.waiting]
        return sorted(live, key=lambda e: (not e.holding, claim_order(e)))
