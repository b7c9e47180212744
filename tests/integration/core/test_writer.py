"""The writer's gate client against the machine's real MySQL, as a writer connects to it.

Its rule and outage logic on a fake clock and connection are in ``tests/unit/core/test_writer.py``.
"""

from __future__ import annotations

import threading
import time

import pymysql

from airflow_iceberg.core import writer as writer_module
from airflow_iceberg.core.gate_state import GateOwner
from airflow_iceberg.core.idle import Snapshot, decide_idle
from airflow_iceberg.core.writer import WriteGateClient, check_gate
from airflow_iceberg.hooks.write_gate import WriteGateHook

RUN_A = GateOwner("iceberg_compact__lake__db__t", "scheduled__2026-11-22T00:00:00+00:00")
RUN_B = GateOwner("iceberg_compact__lake__db__t", "manual__2026-11-22T01:00:00+00:00")


def test_writer_check_reads_a_never_gated_table_as_open(gate_hook, unique_name):
    with gate_hook.get_conn() as connection:
        verdict = check_gate(connection, f"lake.never.{unique_name}")
    assert not verdict.paused and verdict.lease_expires_at is None


def test_writer_check_treats_missing_gate_tables_as_open(mysql_server, unique_name):
    database = f"gate_{unique_name}"
    with mysql_server.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE `{database}`")
    try:
        mysql_server.select_db(database)
        assert check_gate(mysql_server, "lake.db.t").paused is False
    finally:
        with mysql_server.cursor() as cursor:
            cursor.execute(f"DROP DATABASE `{database}`")


def gate_client(gate_hook: WriteGateHook, gate_table: str, **kwargs) -> WriteGateClient:
    """A writer-side client on the suite's gate database, connected as the writer user, with only its grants."""
    return WriteGateClient.connect(gate_table, **WriteGateHook("write_gate_writer").connection_settings(), **kwargs)


def test_writer_client_follows_the_rule_and_its_acknowledgement_is_recorded(gate_hook, gate_table):
    client = gate_client(gate_hook, gate_table)
    assert client.may_commit()
    assert client.acknowledge_pause(41) is False  # nothing to acknowledge while the gate is open
    gate_hook.close_gate(gate_table, RUN_A, lease_seconds=600)
    assert not client.may_commit()
    assert client.acknowledge_pause(42) is True
    state = gate_hook.get_state(gate_table)
    [writer] = state.writers
    assert (writer.writer_id, writer.ack_snapshot_id) == (client.writer_id, 42) and state.acknowledged_by(writer)
    gate_hook.open_gate(gate_table, RUN_A)
    assert client.may_commit()
    client.leave()
    [left] = gate_hook.get_state(gate_table).writers
    assert left.seen_at is None and left.ack_at is None  # it stopped for good: nobody waits for it


def test_each_writer_registers_and_acknowledges_under_its_own_id(gate_hook, gate_table):
    ingest = gate_client(gate_hook, gate_table, writer_id="ingest")
    batch = gate_client(gate_hook, gate_table, writer_id="batch")
    assert ingest.may_commit() and batch.may_commit()
    state = gate_hook.close_gate(gate_table, RUN_A, lease_seconds=600)
    assert [w.writer_id for w in gate_hook.get_state(gate_table).writers_to_wait_for()] == ["batch", "ingest"]
    assert ingest.acknowledge_pause(5)
    state = gate_hook.get_state(gate_table)
    assert [w.writer_id for w in state.writers if state.acknowledged_by(w)] == ["ingest"]
    assert batch.acknowledge_pause(6)
    state = gate_hook.get_state(gate_table)
    acknowledged = {w.writer_id: w.ack_snapshot_id for w in state.writers if state.acknowledged_by(w)}
    assert acknowledged == {"ingest": 5, "batch": 6}


def test_an_acknowledgement_of_an_earlier_closing_does_not_count(gate_hook, gate_table):
    client = gate_client(gate_hook, gate_table)
    gate_hook.close_gate(gate_table, RUN_A, lease_seconds=1)
    assert client.acknowledge_pause(7)
    deadline = time.monotonic() + 10
    while gate_hook.get_state(gate_table).pauses_writers:  # let RUN_A's lease run out without opening
        assert time.monotonic() < deadline
        time.sleep(0.1)
    gate_hook.close_gate(gate_table, RUN_B, lease_seconds=600)
    state = gate_hook.get_state(gate_table)
    [writer] = state.writers
    assert writer.ack_snapshot_id == 7 and not state.acknowledged_by(writer)


def test_writer_waits_while_closed_acknowledges_and_resumes_when_opened(gate_hook, gate_table):
    client = gate_client(gate_hook, gate_table, poke_interval=0.1, log=lambda message: None)
    gate_hook.close_gate(gate_table, RUN_A, lease_seconds=600)
    seen_while_paused = []

    def look_then_open():
        seen_while_paused.append(gate_hook.get_state(gate_table))
        gate_hook.open_gate(gate_table, RUN_A)

    opener = threading.Timer(1.0, look_then_open)
    opener.start()
    waited = client.wait_until_open(last_snapshot_id=99)
    opener.join()
    assert waited >= 0.9
    [paused] = seen_while_paused
    [writer] = paused.writers
    assert paused.acknowledged_by(writer) and writer.ack_snapshot_id == 99
    assert [r["action"] for r in gate_hook.audit_trail(gate_table)] == ["close", "open"]
    assert client.may_commit()


def test_during_a_mysql_outage_the_writer_obeys_a_closed_gate_only_until_its_lease_ends(gate_hook, gate_table):
    gate_hook.close_gate(gate_table, RUN_A, lease_seconds=2)
    reachable = {"yes": True}
    real = gate_client(gate_hook, gate_table)._connect

    def connect_unless_down():
        if not reachable["yes"]:  # a real refused connection: nothing listens on port 1
            return pymysql.connect(host="127.0.0.1", port=1, connect_timeout=2)
        return real()

    client = WriteGateClient(gate_table, connect_unless_down, poke_interval=0.1, log=lambda message: None)
    assert not client.may_commit()
    client._drop_connection()
    reachable["yes"] = False
    verdict = client.verdict()
    assert verdict.paused and verdict.from_cache  # still inside the lease: keep pausing
    started = time.monotonic()
    waited = client.wait_until_open()
    assert waited <= 3.0 and time.monotonic() - started <= 3.0  # the lease, not the outage, ends the pause
    assert client.may_commit() and client.verdict().from_cache


def test_during_a_mysql_outage_a_writer_whose_gate_was_open_keeps_committing(gate_hook, gate_table):
    down = {"yes": False}
    real = gate_client(gate_hook, gate_table)._connect
    client = WriteGateClient(
        gate_table, lambda: pymysql.connect(host="127.0.0.1", port=1) if down["yes"] else real(), log=lambda m: None
    )
    assert client.may_commit()
    client._drop_connection()
    down["yes"] = True
    assert client.may_commit()


def _await(condition, timeout: float = 10.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"{what} not met in {timeout} s"
        time.sleep(0.05)
    return value


def test_a_write_under_way_holds_a_compaction_back_until_it_commits_and_acknowledges(
    gate_hook, gate_table, monkeypatch
):
    """A batch statement has committed nothing yet: no new commit, but the closing waits for the writer."""
    monkeypatch.setattr(writer_module, "REGISTER_EVERY_SECONDS", 0.2)  # renew the mark every 0.2 s, not 10
    client = gate_client(gate_hook, gate_table, writer_id="gdpr-delete", poke_interval=0.1, log=lambda m: None)
    with client.writing(lambda: 42) as waited:  # 42: the snapshot the write commits
        assert waited == 0.0
        gate_hook.close_gate(gate_table, RUN_A, lease_seconds=600)
        state = gate_hook.get_state(gate_table)
        check = decide_idle(state, RUN_A, Snapshot(41, state.database_now), idle_seconds=0)
        assert (check.done, check.writers_busy) == (False, ("gdpr-delete",))
        marked = state.writers[0].busy_until
        _await(lambda: gate_hook.get_state(gate_table).writers[0].busy_until > marked, what="a renewal of the mark")
    state = gate_hook.get_state(gate_table)
    [writer] = state.writers
    assert writer.busy_until is None and state.acknowledged_by(writer) and writer.ack_snapshot_id == 42
    check = decide_idle(state, RUN_A, Snapshot(42, state.database_now), idle_seconds=3600)
    assert check.done and check.acknowledged and check.writers_busy == ()


def test_a_write_begun_while_the_gate_is_closed_waits_for_it_to_open_acknowledging_first(gate_hook, gate_table):
    client = gate_client(gate_hook, gate_table, writer_id="gdpr-delete", poke_interval=0.1, log=lambda m: None)
    gate_hook.close_gate(gate_table, RUN_A, lease_seconds=600)
    ran = threading.Event()
    waits: list[float] = []

    def write() -> None:
        with client.writing(lambda: 7) as waited:
            waits.append(waited)
            ran.set()

    thread = threading.Thread(target=write)
    thread.start()
    state = _await(
        lambda: (s := gate_hook.get_state(gate_table)).writers and s.acknowledged_by(s.writers[0]) and s,
        what="the writer's acknowledgement",
    )
    assert state.writers[0].ack_snapshot_id == 7 and not ran.is_set()
    assert decide_idle(state, RUN_A, Snapshot(7, state.database_now), idle_seconds=3600).done
    gate_hook.open_gate(gate_table, RUN_A)
    thread.join(timeout=10)
    assert ran.is_set() and waits[0] > 0
    assert gate_hook.get_state(gate_table).writers[0].busy_until is None
