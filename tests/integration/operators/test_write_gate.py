"""close_gate on the machine's real MySQL: it waits for a gate another run holds, then closes or gives up."""

from __future__ import annotations

import re
import threading
import time

import pytest

from airflow_iceberg.core.gate_state import GateOwner
from airflow_iceberg.exceptions import WriteGateHeldError
from airflow_iceberg.operators.write_gate import CloseWriteGateOperator

RUN_A = GateOwner("iceberg_compact__lake__db__t", "scheduled__2026-11-22T00:00:00+00:00")
RUN_B = GateOwner("iceberg_compact__lake__db__t", "manual__2026-11-22T01:00:00+00:00")


def close_task(table: str, gate_wait_seconds: int) -> CloseWriteGateOperator:
    """close_gate of ``table``, with short waits."""
    return CloseWriteGateOperator(
        task_id="close_gate",
        table=table,
        lease_seconds=600,
        max_pause_seconds=600,
        gate_wait_seconds=gate_wait_seconds,
        poke_interval=0.2,
    )


def close_task_context(owner: GateOwner) -> dict:
    """The two context entries CloseWriteGateOperator reads: the DAG (for its id) and the run id."""
    return {"dag": type("Dag", (), {"dag_id": owner.dag_id}), "run_id": owner.run_id}


def test_close_task_waits_for_a_gate_another_run_holds_and_closes_once_it_is_free(gate_hook, gate_table):
    gate_hook.close_gate(gate_table, RUN_A, lease_seconds=600)
    opener = threading.Timer(1.5, gate_hook.open_gate, args=(gate_table, RUN_A))
    opener.start()
    task = close_task(gate_table, gate_wait_seconds=60)
    started = time.monotonic()
    result = task.execute(close_task_context(RUN_B))
    opener.join()
    assert time.monotonic() - started >= 1.4
    assert gate_hook.get_state(gate_table).owner == RUN_B and result["table"] == gate_table
    # While waiting it only read the gate: the trail has no refusals.
    assert [(r["action"], r["owner_run_id"]) for r in gate_hook.audit_trail(gate_table)] == [
        ("close", RUN_A.run_id),
        ("open", RUN_A.run_id),
        ("close", RUN_B.run_id),
    ]


def test_close_task_gives_up_after_its_wait_with_one_refusal_recorded(gate_hook, gate_table):
    gate_hook.close_gate(gate_table, RUN_A, lease_seconds=600)
    task = close_task(gate_table, gate_wait_seconds=1)
    with pytest.raises(WriteGateHeldError, match=re.escape(RUN_A.run_id)):
        task.execute(close_task_context(RUN_B))
    assert [r["action"] for r in gate_hook.audit_trail(gate_table)] == ["close", "close_refused"]
    assert gate_hook.get_state(gate_table).owner == RUN_A
