"""The gate's rules on values alone: when writers pause, who may close and open a gate, and what a row says.

The same rules against the real MySQL are in ``tests/integration/hooks/test_write_gate.py``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_iceberg.core.conflicts import CommitKind, WriterCommits
from airflow_iceberg.core.gate_state import (
    GateOwner,
    GateState,
    WriterState,
    check_lease_seconds,
    decide_close,
    decide_open,
)

RUN_A = GateOwner("iceberg_compact__lake__db__t", "scheduled__2026-11-22T00:00:00+00:00")

RUN_B = GateOwner("iceberg_compact__lake__db__t", "manual__2026-11-22T01:00:00+00:00")

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=timezone.utc)


def closed(owner: GateOwner, lease_left: float, **fields) -> GateState:
    """A gate ``owner`` closed ten minutes ago, with ``lease_left`` seconds of lease at NOW (negative: ended)."""
    return GateState(
        table="lake.db.t",
        state="closed",
        owner=owner,
        closed_at=NOW - timedelta(minutes=10),
        lease_expires_at=NOW + timedelta(seconds=lease_left),
        opened_at=None,
        database_now=NOW,
        **fields,
    )


OPEN = GateState.never_closed("lake.db.t", NOW)


def test_writers_pause_only_while_the_gate_is_closed_and_its_lease_runs():
    assert closed(RUN_A, 60).pauses_writers
    assert not closed(RUN_A, 0).pauses_writers  # the lease ends at its instant: the rule is lease > NOW()
    assert not closed(RUN_A, -60).pauses_writers
    assert not OPEN.pauses_writers


def test_only_the_owner_holds_a_gate_and_only_while_its_lease_runs():
    assert closed(RUN_A, 60).held_by(RUN_A)
    assert not closed(RUN_A, 60).held_by(RUN_B)
    assert not closed(RUN_A, -1).held_by(RUN_A)


def test_an_acknowledgement_counts_only_for_the_closing_it_was_made_in():
    gate = closed(RUN_A, 60)  # closed at NOW - 10 min
    during = WriterState("ingest", NOW, NOW - timedelta(minutes=5), 3)
    before = WriterState("ingest", NOW, NOW - timedelta(minutes=15), 3)
    assert gate.acknowledged_by(during) and not gate.acknowledged_by(before)
    assert not gate.acknowledged_by(WriterState("ingest", NOW, None, None))


def test_the_writers_waited_for_are_those_seen_within_the_owners_lease_before_the_closing_or_since():
    seen = lambda minutes: WriterState(f"w{minutes}", NOW + timedelta(minutes=minutes), None, None)  # noqa: E731
    writers = (seen(-5), seen(-15), seen(-25), WriterState("left", None, None, None))
    gate = closed(RUN_A, 60, lease_seconds=600, writers=writers)  # closed at -10 min with a 10-minute lease
    assert [w.writer_id for w in gate.writers_to_wait_for()] == ["w-5", "w-15"]


def test_an_open_gate_may_be_closed():
    change = decide_close(OPEN, RUN_A)
    assert (change.allowed, change.action, change.detail) == (True, "close", None)


def test_the_owner_closing_again_renews_its_lease():
    change = decide_close(closed(RUN_A, 60), RUN_A)
    assert (change.allowed, change.action) == (True, "reclose")


def test_a_gate_another_run_holds_may_not_be_closed_and_the_refusal_names_the_owner():
    change = decide_close(closed(RUN_A, 60), RUN_B)
    assert not change.allowed and change.action == "close_refused"
    assert change.detail == f"held by {RUN_A} until 2026-11-22 12:01:00.000000 UTC"


@pytest.mark.parametrize("closer", [RUN_A, RUN_B], ids=["its-own", "another-runs"])
def test_an_ended_lease_may_be_taken_over(closer):
    change = decide_close(closed(RUN_A, -1), closer)
    assert (change.allowed, change.action) == (True, "close")
    assert change.detail == f"took over the expired lease of {RUN_A}"


def test_only_the_run_that_closed_a_gate_opens_it_even_after_its_lease_ended():
    assert decide_open(closed(RUN_A, 60), RUN_A).allowed
    assert decide_open(closed(RUN_A, -60), RUN_A).allowed  # still its gate: nobody took it over
    refused = decide_open(closed(RUN_A, 60), RUN_B)
    assert (refused.allowed, refused.action) == (False, "open_noop")
    assert refused.detail == f"the gate is held by {RUN_A}, not by {RUN_B}"


def test_opening_an_open_gate_changes_nothing_and_says_so():
    change = decide_open(OPEN, RUN_A)
    assert (change.allowed, change.action, change.detail) == (False, "open_noop", "the gate is already open")


def test_a_row_is_read_by_column_name_with_times_in_utc():
    naive = datetime(2026, 11, 22, 12, 0, 0)
    row = {  # in no particular order, as a dict cursor returns it
        "database_now": naive + timedelta(seconds=5),
        "lease_seconds": 3600,
        "pause_deadline": naive + timedelta(hours=2),
        "state": "closed",
        "table_name": "lake.db.t",
        "lease_expires_at": naive + timedelta(hours=1),
        "owner_run_id": RUN_A.run_id,
        "owner_dag_id": RUN_A.dag_id,
        "opened_at": None,
        "closed_at": naive,
    }
    writer_row = {
        "ack_snapshot_id": 42,
        "writer_id": "ingest",
        "seen_at": naive,
        "ack_at": naive + timedelta(seconds=2),
        "busy_until": naive + timedelta(seconds=30),
        "commit_kind": "upserts",
        "iceberg_version": "1.11.0",
        "commits_as": "flink.job-id=f00",
        "observed_kind": None,
        "observed_snapshot_id": None,
        "observed_detail": None,
        "exempt_closed_at": None,
        "pause_reason": "it declares nothing",
    }

    state = GateState.from_row(row, (WriterState.from_row(writer_row),))
    assert state.owner == RUN_A and state.lease_seconds == 3600
    assert state.closed_at == NOW and state.closed_at.tzinfo is timezone.utc
    assert state.pause_deadline == NOW + timedelta(hours=2)
    assert state.held_by(RUN_A) and state.acknowledged_by(state.writers[0])
    assert state.writers[0].ack_snapshot_id == 42 and state.writers[0].seen_at.tzinfo is timezone.utc
    assert state.writers[0].busy_until == NOW + timedelta(seconds=30)
    assert state.writers[0].commits() == WriterCommits("ingest", CommitKind.UPSERTS, "1.11.0", "flink.job-id=f00")
    assert state.writers_to_wait_for() == state.writers and not state.writers_keeping_on()


def test_a_writer_the_closing_let_keep_committing_is_not_waited_for_and_a_later_closing_pauses_it():
    keeps_on = WriterState("cdc#0", NOW - timedelta(seconds=5), None, None, exempt_closed_at=NOW)
    paused = WriterState("merge", NOW - timedelta(seconds=5), None, None)
    earlier = WriterState("cdc#1", NOW - timedelta(seconds=5), None, None, exempt_closed_at=NOW - timedelta(hours=1))
    gate = GateState("lake.db.t", "closed", RUN_A, NOW, NOW + timedelta(minutes=5), None, NOW, 300)
    gate = GateState(**{**vars(gate), "writers": (keeps_on, paused, earlier)})
    assert gate.writers_keeping_on() == (keeps_on,)
    assert gate.writers_to_wait_for() == (paused, earlier)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "60", True, None])
def test_a_lease_must_be_a_positive_whole_number_of_seconds(bad):
    with pytest.raises(ValueError, match=f"lease_seconds must be a positive integer, got {bad!r}"):
        check_lease_seconds(bad)


def test_a_short_lease_still_waits_for_writers_seen_within_the_last_minute():
    writers = (WriterState("seen-50s-before", NOW - timedelta(minutes=10, seconds=50), None, None),)
    gate = closed(RUN_A, 60, lease_seconds=10, writers=writers)  # a 10 s lease, closed 10 min before NOW
    assert [w.writer_id for w in gate.writers_to_wait_for()] == ["seen-50s-before"]  # it registers every 10 s
