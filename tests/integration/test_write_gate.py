"""The write gate on the machine's real MySQL: close, re-close, refusal, open, lease expiry, audit."""

from __future__ import annotations

import re
import threading
import time

import pymysql
import pytest

from airflow_iceberg.hooks.write_gate import GateOwner, WriteGateHeldError, WriteGateHook
from spark_jobs.write_gate import WriteGateClient, check_gate

RUN_A = GateOwner("iceberg_compact__lake__db__t", "scheduled__2026-11-22T00:00:00+00:00")
RUN_B = GateOwner("iceberg_compact__lake__db__t", "manual__2026-11-22T01:00:00+00:00")


@pytest.fixture
def hook() -> WriteGateHook:
    return WriteGateHook()


@pytest.fixture
def table(unique_name: str) -> str:
    return f"lake.gate.{unique_name}"


def writer_paused(hook: WriteGateHook, table: str) -> bool:
    """What a writer running the protocol's query would decide right now."""
    with hook.get_conn() as connection:
        return check_gate(connection, table).paused


def actions(hook: WriteGateHook, table: str) -> list[tuple[str, str | None]]:
    return [(row["action"], row["owner_run_id"]) for row in hook.audit_trail(table)]


def test_closing_an_open_gate_pauses_writers_with_a_lease_from_the_database_clock(hook, table):
    assert not writer_paused(hook, table)
    state = hook.close_gate(table, RUN_A, lease_seconds=600)
    assert state.state == "closed" and state.owner == RUN_A and state.pauses_writers
    lease = (state.lease_expires_at - state.closed_at).total_seconds()
    assert 600 <= lease < 601
    assert abs((state.database_now - state.closed_at).total_seconds()) < 5
    assert writer_paused(hook, table)
    assert actions(hook, table) == [("close", RUN_A.run_id)]


def test_the_same_run_closing_again_succeeds_renews_the_lease_and_keeps_the_close_time(hook, table):
    first = hook.close_gate(table, RUN_A, lease_seconds=600)
    again = hook.close_gate(table, RUN_A, lease_seconds=900)
    assert again.closed_at == first.closed_at
    assert again.lease_expires_at > first.lease_expires_at
    assert actions(hook, table) == [("close", RUN_A.run_id), ("reclose", RUN_A.run_id)]


def test_another_run_cannot_close_a_held_gate_and_changes_nothing(hook, table):
    held = hook.close_gate(table, RUN_A, lease_seconds=600)
    with pytest.raises(WriteGateHeldError) as refused:
        hook.close_gate(table, RUN_B, lease_seconds=600)
    assert RUN_A.run_id in str(refused.value) and table in str(refused.value)
    after = hook.get_state(table)
    assert (after.owner, after.closed_at, after.lease_expires_at) == (RUN_A, held.closed_at, held.lease_expires_at)
    assert actions(hook, table) == [("close", RUN_A.run_id), ("close_refused", RUN_B.run_id)]


def test_a_run_cannot_open_a_gate_it_does_not_hold(hook, table):
    hook.close_gate(table, RUN_A, lease_seconds=600)
    opened, state = hook.open_gate(table, RUN_B)
    assert not opened
    assert state.state == "closed" and state.owner == RUN_A
    assert writer_paused(hook, table)
    assert actions(hook, table)[-1] == ("open_noop", RUN_B.run_id)


def test_the_holder_opens_the_gate_and_opening_again_changes_nothing(hook, table):
    hook.close_gate(table, RUN_A, lease_seconds=600)
    opened, state = hook.open_gate(table, RUN_A)
    assert opened and state.state == "open" and state.owner is None
    assert not writer_paused(hook, table)
    opened_again, _ = hook.open_gate(table, RUN_A)
    assert not opened_again
    trail = hook.audit_trail(table)
    assert [r["action"] for r in trail] == ["close", "open", "open_noop"]
    assert trail[2]["detail"] == "the gate is already open"


def test_an_expired_lease_stops_pausing_writers_and_another_run_may_close(hook, table):
    hook.close_gate(table, RUN_A, lease_seconds=1)
    assert writer_paused(hook, table)
    deadline = time.monotonic() + 10
    while writer_paused(hook, table):  # the database clock passes the lease within about a second
        assert time.monotonic() < deadline, "the lease did not expire by the database clock"
        time.sleep(0.1)
    state = hook.get_state(table)
    assert state.state == "closed" and not state.pauses_writers
    taken = hook.close_gate(table, RUN_B, lease_seconds=600)
    assert taken.owner == RUN_B and taken.closed_at > state.closed_at
    assert hook.audit_trail(table)[-1]["detail"] == f"took over the expired lease of {RUN_A}"
    # The run whose lease expired can no longer open the gate now held by another run.
    assert hook.open_gate(table, RUN_A)[0] is False
    assert writer_paused(hook, table)


def test_force_open_releases_writers_whoever_holds_the_gate(hook, table):
    hook.close_gate(table, RUN_A, lease_seconds=600)
    assert hook.force_open(table, "run died; releasing writers by hand") is True
    assert not writer_paused(hook, table)
    assert hook.audit_trail(table)[-1]["detail"] == "run died; releasing writers by hand"


def test_schema_creation_is_idempotent(hook):
    hook.ensure_schema()
    WriteGateHook().ensure_schema()  # a second hook, same tables: no error


def test_bad_table_or_lease_is_refused_before_any_change(hook, table):
    with pytest.raises(ValueError, match="'lake.gate'"):
        hook.close_gate("lake.gate", RUN_A, lease_seconds=60)
    with pytest.raises(ValueError, match="lease_seconds must be a positive integer, got -1"):
        hook.close_gate(table, RUN_A, lease_seconds=-1)
    assert hook.audit_trail(table) == []
    assert not writer_paused(hook, table)


def test_sql_metacharacters_in_an_owner_are_data_not_sql(hook, table):
    sneaky = GateOwner("d", "run'); UPDATE iceberg_write_gate SET state='open'; --")
    hook.close_gate(table, sneaky, lease_seconds=600)
    state = hook.get_state(table)
    assert state.owner == sneaky and state.pauses_writers


def test_writer_check_reads_a_never_gated_table_as_open(hook, unique_name):
    with hook.get_conn() as connection:
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


def gate_client(hook: WriteGateHook, table: str, **kwargs) -> WriteGateClient:
    """A writer-side client on the suite's gate database, connected the way a writer connects."""
    connection = hook.get_connection(hook.write_gate_conn_id)
    return WriteGateClient.connect(
        table,
        host=connection.host,
        port=connection.port,
        user=connection.login,
        password=connection.password or "",
        database=connection.schema,
        **kwargs,
    )


def test_writer_client_follows_the_rule_and_its_acknowledgement_is_recorded(hook, table):
    client = gate_client(hook, table)
    assert client.may_commit()
    assert client.acknowledge_pause(41) is False  # nothing to acknowledge while the gate is open
    hook.close_gate(table, RUN_A, lease_seconds=600)
    assert not client.may_commit()
    assert client.acknowledge_pause(42) is True
    state = hook.get_state(table)
    assert state.writer_ack_snapshot_id == 42 and state.writer_acknowledged
    hook.open_gate(table, RUN_A)
    assert client.may_commit()
    assert hook.get_state(table).writer_ack_at is None  # opening clears it for the next closing


def test_an_acknowledgement_of_an_earlier_closing_does_not_count(hook, table):
    client = gate_client(hook, table)
    hook.close_gate(table, RUN_A, lease_seconds=1)
    assert client.acknowledge_pause(7)
    deadline = time.monotonic() + 10
    while hook.get_state(table).pauses_writers:  # let RUN_A's lease run out without opening
        assert time.monotonic() < deadline
        time.sleep(0.1)
    state = hook.close_gate(table, RUN_B, lease_seconds=600)
    assert state.writer_ack_snapshot_id == 7 and not state.writer_acknowledged


def test_writer_waits_while_closed_acknowledges_and_resumes_when_opened(hook, table):
    client = gate_client(hook, table, poll_seconds=0.1, log=lambda message: None)
    hook.close_gate(table, RUN_A, lease_seconds=600)
    seen_while_paused = []

    def look_then_open():
        seen_while_paused.append(hook.get_state(table))
        hook.open_gate(table, RUN_A)

    opener = threading.Timer(1.0, look_then_open)
    opener.start()
    waited = client.wait_until_open(last_snapshot_id=99)
    opener.join()
    assert waited >= 0.9
    [paused] = seen_while_paused
    assert paused.writer_acknowledged and paused.writer_ack_snapshot_id == 99
    assert [r["action"] for r in hook.audit_trail(table)] == ["close", "open"]
    assert client.may_commit()


def test_during_a_mysql_outage_the_writer_obeys_a_closed_gate_only_until_its_lease_ends(hook, table):
    hook.close_gate(table, RUN_A, lease_seconds=2)
    reachable = {"yes": True}
    real = gate_client(hook, table)._connect

    def connect_unless_down():
        if not reachable["yes"]:  # a real refused connection: nothing listens on port 1
            return pymysql.connect(host="127.0.0.1", port=1, connect_timeout=2)
        return real()

    client = WriteGateClient(table, connect_unless_down, poll_seconds=0.1, log=lambda message: None)
    assert not client.may_commit()
    client._drop_connection()
    reachable["yes"] = False
    verdict = client.verdict()
    assert verdict.paused and verdict.from_cache  # still inside the lease: keep pausing
    started = time.monotonic()
    waited = client.wait_until_open()
    assert waited <= 3.0 and time.monotonic() - started <= 3.0  # the lease, not the outage, ends the pause
    assert client.may_commit() and client.verdict().from_cache


def test_during_a_mysql_outage_a_writer_whose_gate_was_open_keeps_committing(hook, table):
    down = {"yes": False}
    real = gate_client(hook, table)._connect
    client = WriteGateClient(
        table, lambda: pymysql.connect(host="127.0.0.1", port=1) if down["yes"] else real(), log=lambda m: None
    )
    assert client.may_commit()
    client._drop_connection()
    down["yes"] = True
    assert client.may_commit()


def close_task_context(owner: GateOwner) -> dict:
    """The two context entries CloseWriteGateOperator reads: the DAG (for its id) and the run id."""
    return {"dag": type("Dag", (), {"dag_id": owner.dag_id}), "run_id": owner.run_id}


def test_close_task_waits_for_a_gate_another_run_holds_and_closes_once_it_is_free(hook, table):
    from airflow_iceberg.operators.write_gate import CloseWriteGateOperator

    hook.close_gate(table, RUN_A, lease_seconds=600)
    opener = threading.Timer(1.5, hook.open_gate, args=(table, RUN_A))
    opener.start()
    task = CloseWriteGateOperator(task_id="close_gate", table=table, wait_for_gate_seconds=60, poll_seconds=0.2)
    started = time.monotonic()
    result = task.execute(close_task_context(RUN_B))
    opener.join()
    assert time.monotonic() - started >= 1.4
    assert hook.get_state(table).owner == RUN_B and result["table"] == table
    # While waiting it only read the gate: the trail has no refusals.
    assert [(r["action"], r["owner_run_id"]) for r in hook.audit_trail(table)] == [
        ("close", RUN_A.run_id),
        ("open", RUN_A.run_id),
        ("close", RUN_B.run_id),
    ]


def test_close_task_gives_up_after_its_wait_with_one_refusal_recorded(hook, table):
    from airflow_iceberg.operators.write_gate import CloseWriteGateOperator

    hook.close_gate(table, RUN_A, lease_seconds=600)
    task = CloseWriteGateOperator(task_id="close_gate", table=table, wait_for_gate_seconds=1, poll_seconds=0.2)
    with pytest.raises(WriteGateHeldError, match=re.escape(RUN_A.run_id)):
        task.execute(close_task_context(RUN_B))
    assert [r["action"] for r in hook.audit_trail(table)] == ["close", "close_refused"]
    assert hook.get_state(table).owner == RUN_A
