"""Spark slots on the machine's real MySQL: at most N tables of one Spark connection paused at once, the worst
table first, and no writer paused while its run waits for a slot.

The admission rule itself, on values alone, is in ``tests/unit/hooks/test_write_gate.py``.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from airflow.exceptions import TaskDeferred

from airflow_iceberg.core.gate_state import GateOwner
from airflow_iceberg.core.spark_slots import SparkSlotRequest
from airflow_iceberg.exceptions import SparkSlotsBusyError, WriteGateHeldError
from airflow_iceberg.operators.write_gate import CloseWriteGateOperator
from airflow_iceberg.triggers.close_gate import CloseGateTrigger
from tests.integration.hooks.test_write_gate import writer_paused


def owner(table: str) -> GateOwner:
    return GateOwner(f"iceberg_compact__{table.replace('.', '__')}", "manual__2026-11-25T12:00:00+00:00")


def wait_until(condition, timeout: float = 120, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} not reached in {timeout} s"
        time.sleep(0.2)


@pytest.fixture
def fleet(gate_table: str, unique_name: str) -> tuple[list[str], str]:
    """Three tables of this test's own, and a Spark connection id of its own, so its queue starts empty."""
    return [f"{gate_table}_{n}" for n in (1, 2, 3)], f"spark_{unique_name}"


def test_one_slot_pauses_one_table_at_a_time_and_the_worst_table_goes_next(gate_hook, fleet):
    (t1, t2, t3), conn = fleet

    def ask(table: str, score: int):
        return gate_hook.close_gate(table, owner(table), 600, 600, SparkSlotRequest(conn, 1, score, patience=60))

    assert ask(t1, 1).pauses_writers
    for table, score in ((t2, 5), (t3, 50)):
        with pytest.raises(SparkSlotsBusyError, match=f"1 of 1 Spark slots taken \\({t1}\\)"):
            ask(table, score)
        # Waiting for a slot pauses no writer and is no gate change: the audit trail stays empty.
        assert not writer_paused(gate_hook, table) and gate_hook.audit_trail(table) == []
    queue = gate_hook.spark_slots.queue(conn)
    assert [(e.table, e.holding, e.waiting) for e in queue] == [(t1, True, False), (t3, False, True), (t2, False, True)]

    gate_hook.open_gate(t1, owner(t1))  # frees the slot; t2 asked before t3 did, but t3 is in worse health
    with pytest.raises(SparkSlotsBusyError, match=f"ahead: {t3} \\(score 50\\)"):
        ask(t2, 5)
    assert ask(t3, 50).pauses_writers
    assert not writer_paused(gate_hook, t2)
    gate_hook.open_gate(t3, owner(t3))
    assert ask(t2, 5).pauses_writers
    assert [(e.table, e.holding) for e in gate_hook.spark_slots.queue(conn)] == [(t2, True)]


def test_a_dead_owners_slot_frees_when_its_lease_ends_and_a_waiter_that_stops_asking_loses_its_place(gate_hook, fleet):
    (t1, t2, t3), conn = fleet
    gate_hook.close_gate(t1, owner(t1), 2, 2, SparkSlotRequest(conn, 1, 0, patience=60))  # then its run dies
    with pytest.raises(SparkSlotsBusyError):  # the worst table asks once, then its run dies too
        gate_hook.close_gate(t2, owner(t2), 600, 600, SparkSlotRequest(conn, 1, 99, patience=1))
    with pytest.raises(SparkSlotsBusyError, match=f"ahead: {t2}"):
        gate_hook.close_gate(t3, owner(t3), 600, 600, SparkSlotRequest(conn, 1, 1, patience=60))

    wait_until(lambda: [e.table for e in gate_hook.spark_slots.queue(conn)] == [t3], what="only t3 left in the queue")
    assert gate_hook.close_gate(t3, owner(t3), 600, 600, SparkSlotRequest(conn, 1, 1, patience=60)).pauses_writers
    assert not writer_paused(gate_hook, t1) and not writer_paused(gate_hook, t2)


def test_two_slots_let_two_tables_pause_at_once_and_no_third(gate_hook, fleet):
    (t1, t2, t3), conn = fleet
    for table in (t1, t2):
        assert gate_hook.close_gate(table, owner(table), 600, 600, SparkSlotRequest(conn, 2, 0, 60)).pauses_writers
    with pytest.raises(SparkSlotsBusyError, match="2 of 2 Spark slots taken"):
        gate_hook.close_gate(t3, owner(t3), 600, 600, SparkSlotRequest(conn, 2, 1000, 60))
    # A retry of a run that holds its slot closes again (renews) without waiting.
    assert gate_hook.close_gate(t1, owner(t1), 600, 600, SparkSlotRequest(conn, 2, 0, 60)).pauses_writers


def test_close_task_keeps_the_gate_open_while_it_waits_for_a_slot_and_closes_when_one_frees(gate_hook, fleet):
    (t1, t2, _), conn = fleet
    gate_hook.close_gate(t1, owner(t1), 600, 600, SparkSlotRequest(conn, 1, 0, 60))
    task = close_task(t2, conn, deferrable=False, plan_task_id="plan_compaction")
    plan = {"score": 7}
    context = {
        **context_of(t2),
        "ti": type("TI", (), {"xcom_pull": staticmethod(lambda task_ids, key: plan if key == "plan" else None)}),
    }
    result: dict = {}
    closing = threading.Thread(target=lambda: result.update(task.execute(context)))
    closing.start()
    wait_until(lambda: [e.table for e in gate_hook.spark_slots.queue(conn)] == [t1, t2], what="t2 waiting for a slot")
    assert [(e.table, e.score) for e in gate_hook.spark_slots.queue(conn)][1] == (t2, 7)  # its plan's health score
    assert closing.is_alive() and not writer_paused(gate_hook, t2)

    _, opened = gate_hook.open_gate(t1, owner(t1))
    closing.join(120)
    assert not closing.is_alive() and result["table"] == t2
    [close] = gate_hook.audit_trail(t2)  # one close, after the slot was freed; nothing while it waited
    assert close["action"] == "close" and close["at"] >= gate_hook.get_state(t1).opened_at
    assert writer_paused(gate_hook, t2)


def test_close_task_gives_up_after_its_wait_naming_the_slots_and_changes_nothing(gate_hook, fleet):
    (t1, t2, _), conn = fleet
    gate_hook.close_gate(t1, owner(t1), 600, 600, SparkSlotRequest(conn, 1, 0, 60))
    task = close_task(t2, conn, deferrable=False, gate_wait_seconds=1)
    with pytest.raises(SparkSlotsBusyError, match=f"gave up after 1 s: {t2} waits for a Spark slot of '{conn}'"):
        task.execute(context_of(t2))
    assert not writer_paused(gate_hook, t2) and gate_hook.audit_trail(t2) == []


def close_task(table: str, conn: str, **overrides) -> CloseWriteGateOperator:
    settings = {
        "task_id": "close_gate",
        "table": table,
        "lease_seconds": 600,
        "max_pause_seconds": 600,
        "gate_wait_seconds": 120,
        "poke_interval": 0.2,
        "spark_conn_id": conn,
        "spark_slots": 1,
        "deferrable": True,
        **overrides,
    }
    return CloseWriteGateOperator(**settings)


def context_of(table: str) -> dict:
    return {"dag": type("Dag", (), {"dag_id": owner(table).dag_id}), "run_id": owner(table).run_id}


def first_event(trigger: CloseGateTrigger) -> dict:
    async def first() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(first())


def test_a_deferrable_close_task_waits_for_its_slot_in_the_triggerer_and_closes_when_one_frees(gate_hook, fleet):
    (t1, t2, _), conn = fleet
    gate_hook.close_gate(t1, owner(t1), 600, 600, SparkSlotRequest(conn, 1, 0, 60))
    task = close_task(t2, conn)
    with pytest.raises(TaskDeferred) as deferred:
        task.execute(context_of(t2))  # one look in the worker, then the worker is free
    trigger = deferred.value.trigger
    assert isinstance(trigger, CloseGateTrigger) and deferred.value.method_name == "execute_complete"
    assert [e.table for e in gate_hook.spark_slots.queue(conn)] == [t1, t2] and not writer_paused(gate_hook, t2)

    event: dict = {}
    waiting = threading.Thread(target=lambda: event.update(first_event(trigger)))
    waiting.start()
    time.sleep(1)  # several looks of the trigger while the slot is taken
    assert waiting.is_alive() and not writer_paused(gate_hook, t2) and gate_hook.audit_trail(t2) == []
    gate_hook.open_gate(t1, owner(t1))
    waiting.join(60)
    assert event["closed"] is True and writer_paused(gate_hook, t2)
    result = task.execute_complete(context_of(t2), event)
    assert result["table"] == t2 and result["closed_at"] == gate_hook.get_state(t2).closed_at.isoformat()
    assert [a["action"] for a in gate_hook.audit_trail(t2)] == ["close"]


def test_a_deferrable_close_task_closes_in_the_worker_when_it_need_not_wait(gate_hook, fleet):
    (t1, _, _), conn = fleet
    result = close_task(t1, conn).execute(context_of(t1))
    assert result["table"] == t1 and writer_paused(gate_hook, t1)


def test_the_trigger_gives_up_at_its_deadline_with_one_refusal_having_only_read_the_gate_before(gate_hook, fleet):
    (t1, _, _), conn = fleet
    other = GateOwner("iceberg_full_rewrite__x", "scheduled__1")
    gate_hook.close_gate(t1, other, 600, 600)
    task = close_task(t1, conn, spark_slots=None, gate_wait_seconds=1)
    with pytest.raises(TaskDeferred) as deferred:
        task.execute(context_of(t1))
    event = first_event(deferred.value.trigger)
    assert (event["closed"], event["error"]) == (False, "WriteGateHeldError")
    assert gate_hook.get_state(t1).owner == other
    # The other run's close, and the last look's refusal at the deadline, as a close task in its worker gives up.
    assert [(a["action"], a["owner_dag_id"]) for a in gate_hook.audit_trail(t1)] == [
        ("close", other.dag_id),
        ("close_refused", owner(t1).dag_id),
    ]
    with pytest.raises(WriteGateHeldError, match=f"gave up after 1 s: the write gate of {t1} is held by"):
        task.execute_complete(context_of(t1), event)
