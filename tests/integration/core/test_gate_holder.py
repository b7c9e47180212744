"""A batch job's own hold on the gate (``core/gate_holder.py``), against the machine's real MySQL: the writers pause
and acknowledge before its statement runs, a compaction cannot close the gate under it, and the gate is open after,
however the hold ends."""

from __future__ import annotations

import threading
import time

import pytest

from airflow_iceberg.core.gate_holder import GateBusyError, GateHolder, WritersNotAcknowledgedError
from airflow_iceberg.core.gate_protocol import owner_connection
from airflow_iceberg.core.gate_state import GateOwner
from airflow_iceberg.core.writer import check_gate
from airflow_iceberg.exceptions import WriteGateHeldError
from airflow_iceberg.hooks.write_gate import WriteGateHook

BATCH = GateOwner("gdpr-deletes", "run-1")
COMPACTION = GateOwner("iceberg_compact__lake__gate__t", "manual__2026-11-28T00:00:00+00:00")


def holder(gate_table: str, **kwargs) -> GateHolder:
    """A holder connected as Airflow's gate user: an owner's grants."""
    settings = WriteGateHook().connection_settings()
    return GateHolder(gate_table, lambda: owner_connection(**settings), BATCH, poke_interval=0.1, **kwargs)


def test_a_batch_job_runs_only_after_every_writer_acknowledged_and_no_compaction_closes_under_it(
    gate_hook, gate_writer, gate_table
):
    writer = gate_writer(gate_table, writer_id="cdc-stream", poke_interval=0.1)
    stop, resumed, commits = threading.Event(), threading.Event(), []
    held = [float("inf"), float("inf")]  # when the block began and ended

    def stream() -> None:  # before each commit, as a writer does: a closed gate is acknowledged and waited out
        while not stop.is_set():
            writer.wait_until_open(77)
            commits.append(time.monotonic())
            if commits[-1] > held[1]:
                resumed.set()
            stop.wait(0.1)

    streaming = threading.Thread(target=stream)
    streaming.start()
    try:
        with holder(gate_table).hold(acknowledge_timeout=30) as state:
            held[0] = time.monotonic()
            with gate_hook.get_conn() as connection:
                assert check_gate(connection, gate_table).paused
            with pytest.raises(WriteGateHeldError, match="gdpr-deletes"):
                gate_hook.close_gate(gate_table, COMPACTION, lease_seconds=60)
            time.sleep(1)  # the statement: the writer must stay paused through it
            held[1] = time.monotonic()
        assert resumed.wait(timeout=30), "the writer did not resume once the gate opened"
    finally:
        stop.set()
        streaming.join(timeout=30)
    assert not [t for t in commits if held[0] <= t <= held[1]], "the writer committed while the batch job held the gate"
    [acknowledged] = [w for w in state.writers if state.acknowledged_by(w)]
    assert (acknowledged.writer_id, acknowledged.ack_snapshot_id) == ("cdc-stream", 77)
    assert not gate_hook.get_state(gate_table).pauses_writers
    trail = [(r["action"], r["owner_dag_id"]) for r in gate_hook.audit_trail(gate_table)]
    compaction = COMPACTION.dag_id  # its refused close, as the compaction's task gives up, names who held the gate
    assert trail == [("close", "gdpr-deletes"), ("close_refused", compaction), ("open", "gdpr-deletes")]


def test_a_writer_that_never_acknowledges_leaves_the_statement_unrun_and_the_gate_open(
    gate_hook, gate_writer, gate_table
):
    assert gate_writer(gate_table, writer_id="stuck-writer").may_commit()  # registered, then never looks again
    ran = []
    with pytest.raises(WritersNotAcknowledgedError, match="stuck-writer"):
        with holder(gate_table).hold(acknowledge_timeout=1):
            ran.append(True)
    assert ran == []
    assert not gate_hook.get_state(gate_table).pauses_writers


def test_a_writer_not_seen_for_a_while_is_taken_as_gone_and_not_waited_for(gate_hook, gate_writer, gate_table):
    assert gate_writer(gate_table, writer_id="killed-job").may_commit()  # registered, then killed: never leaves
    ran = []
    with holder(gate_table, writer_gone_seconds=2).hold(acknowledge_timeout=30) as state:
        ran.append(state)
    [writer] = ran[0].writers
    assert writer.writer_id == "killed-job" and not ran[0].acknowledged_by(writer)
    assert (ran[0].database_now - writer.seen_at).total_seconds() >= 2


def test_a_gate_just_opened_is_closed_only_once_writers_could_see_it_open(gate_hook, gate_table):
    gate_hook.close_gate(gate_table, COMPACTION, lease_seconds=60)
    _, opened = gate_hook.open_gate(gate_table, COMPACTION)
    closed = holder(gate_table, settle_seconds=3).close(timeout=0)  # no wait for a held gate: the settle is not one
    assert (closed.closed_at - opened.opened_at).total_seconds() >= 3


def test_a_gate_a_compaction_holds_is_waited_for_by_reading_then_given_up_with_one_refusal(gate_hook, gate_table):
    gate_hook.close_gate(gate_table, COMPACTION, lease_seconds=60)
    with pytest.raises(GateBusyError, match="gave up after 0.5 s: .*iceberg_compact__lake__gate__t"):
        holder(gate_table).close(timeout=0.5)
    assert gate_hook.get_state(gate_table).owner == COMPACTION
    trail = [(r["action"], r["owner_dag_id"]) for r in gate_hook.audit_trail(gate_table)]
    assert trail == [("close", COMPACTION.dag_id), ("close_refused", BATCH.dag_id)]  # its looks only read the gate


def test_a_lost_lease_stops_the_statement(gate_hook, gate_table):
    lost = threading.Event()
    reasons = []

    def stop_statement(reason: str) -> None:
        reasons.append(reason)
        lost.set()

    with holder(gate_table, lease_seconds=4).hold(on_lost=stop_statement):
        gate_hook.force_open(gate_table, "the on-call engineer released the writers")
        assert lost.wait(timeout=30), "on_lost was never called"
    assert "no longer held by dag 'gdpr-deletes' run 'run-1'" in reasons[0]


def test_bad_settings_are_refused_before_any_connection():
    def no_connection():
        raise AssertionError("connected")

    with pytest.raises(ValueError, match="lease_seconds must be a positive integer, got 0"):
        GateHolder("lake.db.t", no_connection, BATCH, lease_seconds=0)
    with pytest.raises(ValueError, match=r"max_pause_seconds \(10\) must be at least the lease \(60\)"):
        GateHolder("lake.db.t", no_connection, BATCH, lease_seconds=60, max_pause_seconds=10)
