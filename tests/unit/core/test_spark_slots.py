"""The Spark-slot rule on values alone: the free slots go to the worst tables first, then the longest waiting."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from airflow_iceberg.core.gate_state import (
    GateOwner,
)
from airflow_iceberg.core.spark_slots import SparkSlotClaim, decide_admission

RUN_A = GateOwner("iceberg_compact__lake__db__t", "scheduled__2026-11-22T00:00:00+00:00")

RUN_B = GateOwner("iceberg_compact__lake__db__t", "manual__2026-11-22T01:00:00+00:00")

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=timezone.utc)


def entry(table: str, score: int, *, waited: float = 0, holding: bool = False, waiting: bool = True) -> SparkSlotClaim:
    """A run of ``table`` in a Spark connection's queue, asking since ``waited`` seconds before NOW."""
    owner = GateOwner(f"iceberg_compact__lake__db__{table}", "manual__1")
    return SparkSlotClaim(
        f"lake.db.{table}",
        owner,
        score,
        NOW - timedelta(seconds=waited),
        waiting=waiting and not holding,
        holding=holding,
    )


def admission(queue: list[SparkSlotClaim], table: str, slots: int):
    me = next(e for e in queue if e.table == f"lake.db.{table}")
    return decide_admission(queue, me.table, me.owner, slots)


def test_the_free_slots_go_to_the_worst_tables_first_then_to_the_longest_waiting():
    queue = [entry("a", 5, waited=60), entry("b", 50, waited=1), entry("c", 5, waited=30), entry("d", 0, waited=90)]
    assert [admission(queue, t, 2).allowed for t in "abcd"] == [True, True, False, False]
    queue.append(entry("held", 1, holding=True))  # one slot taken: only the worst table may close
    assert [admission(queue, t, 2).allowed for t in "abcd"] == [False, True, False, False]
    refused = admission(queue, "c", 2)
    assert refused.action == "slot_wait"
    assert refused.detail == "1 of 2 Spark slots taken (lake.db.held); ahead: lake.db.b (score 50), lake.db.a (score 5)"


def test_runs_that_stopped_asking_or_let_go_of_their_gate_take_no_slot_and_no_place():
    queue = [entry("gone", 99, waiting=False), entry("released", 1, waiting=False), entry("a", 1)]
    assert admission(queue, "a", 1).allowed


def test_a_run_holding_a_slot_keeps_it_when_it_asks_again_even_with_every_slot_taken():
    queue = [entry("a", 1, holding=True), entry("b", 1, holding=True), entry("c", 99)]
    assert admission(queue, "a", 2).allowed
    assert not admission(queue, "c", 2).allowed
