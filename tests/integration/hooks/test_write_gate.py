"""The write gate on the machine's real MySQL: close, re-close, refusal, open, lease expiry, audit.

The rules themselves, on values alone, are in ``tests/unit/hooks/test_write_gate.py``.
"""

from __future__ import annotations

import time

import pytest

from airflow_iceberg.core.gate_state import GateOwner
from airflow_iceberg.core.writer import check_gate
from airflow_iceberg.exceptions import WriteGateHeldError
from airflow_iceberg.hooks.write_gate import WriteGateHook

RUN_A = GateOwner("iceberg_compact__lake__db__t", "scheduled__2026-11-22T00:00:00+00:00")
RUN_B = GateOwner("iceberg_compact__lake__db__t", "manual__2026-11-22T01:00:00+00:00")


def writer_paused(gate_hook: WriteGateHook, gate_table: str) -> bool:
    """What a writer running the protocol's query would decide right now."""
    with gate_hook.get_conn() as connection:
        return check_gate(connection, gate_table).paused


def actions(gate_hook: WriteGateHook, gate_table: str) -> list[tuple[str, str | None]]:
    return [(row["action"], row["owner_run_id"]) for row in gate_hook.audit_trail(gate_table)]


def test_closing_an_open_gate_pauses_writers_with_a_lease_from_the_database_clock(gate_hook, gate_table):
    assert not writer_paused(gate_hook, gate_table)
    state = gate_hook.close_gate(gate_table, RUN_A, lease_seconds=600)
    assert state.state == "closed" and state.owner == RUN_A and state.pauses_writers
    lease = (state.lease_expires_at - state.closed_at).total_seconds()
    assert 600 <= lease < 601
    assert abs((state.database_now - state.closed_at).total_seconds()) < 5
    assert writer_paused(gate_hook, gate_table)
    assert actions(gate_hook, gate_table) == [("close", RUN_A.run_id)]


def test_the_same_run_closing_again_succeeds_renews_the_lease_and_keeps_the_close_time(gate_hook, gate_table):
    first = gate_hook.close_gate(gate_table, RUN_A, lease_seconds=600)
    again = gate_hook.close_gate(gate_table, RUN_A, lease_seconds=900)
    assert again.closed_at == first.closed_at
    assert again.lease_expires_at > first.lease_expires_at
    assert actions(gate_hook, gate_table) == [("close", RUN_A.run_id), ("reclose", RUN_A.run_id)]


def test_another_run_cannot_close_a_held_gate_and_changes_nothing(gate_hook, gate_table):
    held = gate_hook.close_gate(gate_table, RUN_A, lease_seconds=600)
    with pytest.raises(WriteGateHeldError) as refused:
        gate_hook.close_gate(gate_table, RUN_B, lease_seconds=600)
    assert RUN_A.run_id in str(refused.value) and gate_table in str(refused.value)
    after = gate_hook.get_state(gate_table)
    assert (after.owner, after.closed_at, after.lease_expires_at) == (RUN_A, held.closed_at, held.lease_expires_at)
    assert actions(gate_hook, gate_table) == [("close", RUN_A.run_id), ("close_refused", RUN_B.run_id)]


def test_a_run_cannot_open_a_gate_it_does_not_hold(gate_hook, gate_table):
    gate_hook.close_gate(gate_table, RUN_A, lease_seconds=600)
    opened, state = gate_hook.open_gate(gate_table, RUN_B)
    assert not opened
    assert state.state == "closed" and state.owner == RUN_A
    assert writer_paused(gate_hook, gate_table)
    assert actions(gate_hook, gate_table)[-1] == ("open_noop", RUN_B.run_id)


def test_the_owner_opens_the_gate_and_opening_again_changes_nothing(gate_hook, gate_table):
    gate_hook.close_gate(gate_table, RUN_A, lease_seconds=600)
    opened, state = gate_hook.open_gate(gate_table, RUN_A)
    assert opened and state.state == "open" and state.owner is None
    assert not writer_paused(gate_hook, gate_table)
    opened_again, _ = gate_hook.open_gate(gate_table, RUN_A)
    assert not opened_again
    trail = gate_hook.audit_trail(gate_table)
    assert [r["action"] for r in trail] == ["close", "open", "open_noop"]
    assert trail[2]["detail"] == "the gate is already open"


def test_an_expired_lease_stops_pausing_writers_and_another_run_may_close(gate_hook, gate_table):
    gate_hook.close_gate(gate_table, RUN_A, lease_seconds=1)
    assert writer_paused(gate_hook, gate_table)
    deadline = time.monotonic() + 10
    while writer_paused(gate_hook, gate_table):  # the database clock passes the lease within about a second
        assert time.monotonic() < deadline, "the lease did not expire by the database clock"
        time.sleep(0.1)
    state = gate_hook.get_state(gate_table)
    assert state.state == "closed" and not state.pauses_writers
    taken = gate_hook.close_gate(gate_table, RUN_B, lease_seconds=600)
    assert taken.owner == RUN_B and taken.closed_at > state.closed_at
    assert gate_hook.audit_trail(gate_table)[-1]["detail"] == f"took over the expired lease of {RUN_A}"
    # The run whose lease expired can no longer open the gate now held by another run.
    assert gate_hook.open_gate(gate_table, RUN_A)[0] is False
    assert writer_paused(gate_hook, gate_table)


def test_force_open_releases_writers_whoever_holds_the_gate_and_records_who_held_it(gate_hook, gate_table):
    held = gate_hook.close_gate(gate_table, RUN_A, lease_seconds=600)
    assert gate_hook.force_open(gate_table, "run died; releasing writers by hand") is True
    assert not writer_paused(gate_hook, gate_table)
    forced = gate_hook.audit_trail(gate_table)[-1]
    assert forced["action"] == "force_open" and forced["detail"] == "run died; releasing writers by hand"
    assert (forced["owner_dag_id"], forced["owner_run_id"]) == (RUN_A.dag_id, RUN_A.run_id)
    assert forced["lease_expires_at"] == held.lease_expires_at
    assert gate_hook.force_open(gate_table, "again") is False  # already open: recorded, nothing held it
    assert gate_hook.audit_trail(gate_table)[-1]["owner_run_id"] is None


def test_bad_table_or_lease_is_refused_before_any_change(gate_hook, gate_table):
    with pytest.raises(ValueError, match="'lake.gate'"):
        gate_hook.close_gate("lake.gate", RUN_A, lease_seconds=60)
    with pytest.raises(ValueError, match="lease_seconds must be a positive integer, got -1"):
        gate_hook.close_gate(gate_table, RUN_A, lease_seconds=-1)
    assert gate_hook.audit_trail(gate_table) == []
    assert not writer_paused(gate_hook, gate_table)


def test_sql_metacharacters_in_an_owner_are_data_not_sql(gate_hook, gate_table):
    sneaky = GateOwner("d", "run'); UPDATE iceberg_write_gate SET state='open'; --")
    gate_hook.close_gate(gate_table, sneaky, lease_seconds=600)
    state = gate_hook.get_state(gate_table)
    assert state.owner == sneaky and state.pauses_writers


def test_the_force_open_command_opens_a_held_gate_and_records_the_reason(gate_hook, gate_table, capsys):
    from airflow_iceberg.surface.cli import main

    gate_hook.close_gate(gate_table, RUN_A, lease_seconds=600)
    assert main(["force-open", gate_table, "--reason", "run died at 03:10; paging ingest"]) == 0
    assert f"write gate of {gate_table}: forced open" in capsys.readouterr().out
    assert not writer_paused(gate_hook, gate_table)
    forced = gate_hook.audit_trail(gate_table)[-1]
    assert (forced["action"], forced["detail"]) == ("force_open", "run died at 03:10; paging ingest")
    assert forced["owner_run_id"] == RUN_A.run_id
    with pytest.raises(SystemExit):  # no reason: refused before anything is changed
        main(["force-open", gate_table, "--reason", " "])
    assert len(gate_hook.audit_trail(gate_table)) == 2


def test_an_owner_frozen_inside_its_transaction_does_not_keep_the_gate_locked(gate_hook, gate_table):
    """An owner that stops mid-transaction (SIGSTOP, a paused VM) holds the gate row's lock only until the server
    drops its idle connection, so the next run's close and a force-open still get through instead of timing out."""
    import pymysql

    gate_hook.close_gate(gate_table, RUN_A, lease_seconds=1)
    frozen = gate_hook.get_conn()
    with frozen.cursor() as cursor:  # the frozen owner: the row locked, the transaction never ended
        cursor.execute("SELECT state FROM iceberg_write_gate WHERE table_name = %s FOR UPDATE", (gate_table,))
    while gate_hook.get_state(gate_table).pauses_writers:  # A's lease runs out (reading takes no lock)
        time.sleep(0.1)

    state = gate_hook.close_gate(gate_table, RUN_B, lease_seconds=600)  # waits for the lock, then takes over

    assert state.owner == RUN_B and state.pauses_writers
    assert gate_hook.force_open(gate_table, "the frozen owner is gone")
    with pytest.raises(pymysql.err.OperationalError):  # the server dropped the frozen owner's connection
        with frozen.cursor() as cursor:
            cursor.execute("SELECT 1")
