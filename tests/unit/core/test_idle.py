"""The idle rule on values alone: idle time, acknowledgements, busy writers, and what a wait that ran out says."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_iceberg.core.gate_state import GateOwner, GateState, WriterState
from airflow_iceberg.core.idle import NOT_READ, Snapshot, committed_by, decide_idle, why_not_idle
from airflow_iceberg.exceptions import LeaseLostError

RUN = GateOwner("iceberg_compact__lake__db__t", "manual__1")
CLOSED_AT = datetime(2026, 11, 22, 12, 0, 0, tzinfo=timezone.utc)


def writer(
    name: str, *, seen: float | None = -5, ack_after: float | None = None, ack_snapshot=None, busy: float | None = None
) -> WriterState:
    """A writer last seen ``seen`` seconds after CLOSED_AT (None: it left), acknowledging ``ack_after`` s after it,
    and writing until ``busy`` s after it (None: between writes)."""
    at = lambda seconds: None if seconds is None else CLOSED_AT + timedelta(seconds=seconds)  # noqa: E731
    return WriterState(name, at(seen), at(ack_after), ack_snapshot, at(busy))


def gate(seconds_after_close: float, *, owner=RUN, writers: tuple[WriterState, ...] = ()) -> GateState:
    """A gate closed by ``owner`` at CLOSED_AT with an hour's lease, read ``seconds_after_close`` later."""
    return GateState(
        table="lake.db.t",
        state="closed",
        owner=owner,
        closed_at=CLOSED_AT,
        lease_expires_at=CLOSED_AT + timedelta(hours=1),
        opened_at=None,
        database_now=CLOSED_AT + timedelta(seconds=seconds_after_close),
        lease_seconds=3600,
        writers=writers,
    )


def snapshot(snapshot_id: int, seconds_after_close: float) -> Snapshot:
    return Snapshot(snapshot_id, CLOSED_AT + timedelta(seconds=seconds_after_close))


def test_idle_time_counts_from_the_close_when_the_newest_snapshot_is_older():
    check = decide_idle(gate(30), RUN, snapshot(7, -100), idle_seconds=60)
    assert (check.done, check.idle_for_seconds) == (False, 30)
    assert decide_idle(gate(60), RUN, snapshot(7, -100), idle_seconds=60).done


def test_a_snapshot_summary_names_the_flink_job_or_spark_application_that_committed_it():
    flink = {"flink.job-id": "5e2c0b7a", "flink.max-committed-checkpoint-id": "12", "engine-name": "flink"}
    assert committed_by(flink) == "Flink job 5e2c0b7a"
    assert committed_by({"spark.app.id": "local-1764", "engine-name": "spark"}) == "Spark application local-1764"
    rewrite = {"app-id": "local-1795", "app-name": "iceberg-rewrite_data_files-lake.db.t", "engine-name": "spark"}
    assert committed_by(rewrite) == "Spark application local-1795 (iceberg-rewrite_data_files-lake.db.t)"
    assert committed_by({"engine-name": "trino"}) == "a trino writer"
    assert committed_by({"added-data-files": "1"}) is None  # pyiceberg names no writer
    newest = Snapshot(9, CLOSED_AT + timedelta(seconds=12), committed_by(flink))
    check = decide_idle(gate(20), RUN, newest, idle_seconds=60)
    assert check.newest_snapshot_by == check.as_xcom()["newest_snapshot_by"] == "Flink job 5e2c0b7a"


def test_idle_time_counts_from_a_snapshot_committed_after_the_close():
    check = decide_idle(gate(30), RUN, snapshot(8, 20), idle_seconds=15)
    assert (check.done, check.idle_for_seconds, check.newest_snapshot_id) == (False, 10, 8)
    assert decide_idle(gate(35), RUN, snapshot(8, 20), idle_seconds=15).done


def test_a_table_without_snapshots_is_idle_since_the_close():
    check = decide_idle(gate(5), RUN, None, idle_seconds=5)
    assert check.done and check.newest_snapshot_id is None and check.newest_snapshot_at is None


def test_the_writers_acknowledgement_ends_the_wait_at_once():
    state = gate(1, writers=(writer("ingest", ack_after=0.5, ack_snapshot=7),))
    check = decide_idle(state, RUN, snapshot(7, -100), idle_seconds=1800)
    assert check.done and check.acknowledged
    assert check.as_xcom()["done_by"] == "writer acknowledgement"
    assert check.as_xcom()["writers_acknowledged"] == ["ingest"]


def test_an_acknowledgement_with_a_newer_snapshot_after_it_falls_back_to_the_window():
    state = gate(2, writers=(writer("ingest", ack_after=0.5, ack_snapshot=7),))
    check = decide_idle(state, RUN, snapshot(8, 1), idle_seconds=1800)
    assert not check.done and not check.acknowledged


def test_an_acknowledgement_of_an_earlier_closing_does_not_count():
    state = gate(2, writers=(writer("ingest", ack_after=-10, ack_snapshot=7),))
    check = decide_idle(state, RUN, snapshot(7, -100), idle_seconds=1800)
    assert not check.done and check.writers == ("ingest",) and check.writers_acknowledged == ()


def test_the_writer_of_an_empty_table_acknowledges_with_no_snapshot():
    state = gate(1, writers=(writer("ingest", ack_after=0.5, ack_snapshot=None),))
    assert decide_idle(state, RUN, None, idle_seconds=1800).done


def test_with_two_writers_one_acknowledgement_is_not_enough():
    ingest = writer("ingest", ack_after=0.5, ack_snapshot=7)
    batch = writer("batch", seen=-30)
    check = decide_idle(gate(2, writers=(ingest, batch)), RUN, snapshot(7, -100), idle_seconds=1800)
    assert not check.done and check.writers == ("ingest", "batch") and check.writers_acknowledged == ("ingest",)
    both = (ingest, writer("batch", seen=1, ack_after=1, ack_snapshot=5))
    check = decide_idle(gate(2, writers=both), RUN, snapshot(7, -100), idle_seconds=1800)
    assert check.done and check.acknowledged  # the newest snapshot is the one "ingest" acknowledged


def test_writers_not_seen_within_a_lease_of_the_closing_or_gone_are_not_waited_for():
    ingest = writer("ingest", ack_after=0.5, ack_snapshot=7)
    stale = writer("stale", seen=-3601)  # last read the gate more than a lease before the closing
    gone = writer("gone", seen=None)  # its client closed: it left
    check = decide_idle(gate(2, writers=(ingest, stale, gone)), RUN, snapshot(7, -100), idle_seconds=1800)
    assert check.done and check.writers == ("ingest",)


def test_a_newest_snapshot_nobody_acknowledged_falls_back_to_the_window():
    # Both writers acknowledged, but a snapshot neither of them committed last is the newest: someone else writes.
    writers = (writer("a", ack_after=1, ack_snapshot=5), writer("b", ack_after=1, ack_snapshot=6))
    assert not decide_idle(gate(2, writers=writers), RUN, snapshot(9, 0.5), idle_seconds=1800).done


def test_a_writer_in_the_middle_of_a_write_keeps_a_table_with_no_new_commit_from_counting_as_idle():
    """A batch DELETE has committed nothing yet: the table has no new commit, but its commit is to come."""
    deleting = writer("gdpr-delete", seen=100, busy=125)  # renewed its mark 100 s after the closing
    check = decide_idle(gate(110, writers=(deleting,)), RUN, snapshot(7, -100), idle_seconds=60)
    assert (check.done, check.idle_for_seconds, check.writers_busy) == (False, 110, ("gdpr-delete",))
    assert check.as_xcom()["writers_busy"] == ["gdpr-delete"]
    done = writer("gdpr-delete", seen=120, ack_after=120, ack_snapshot=8)  # committed 8, then acknowledged
    check = decide_idle(gate(121, writers=(done,)), RUN, snapshot(8, 119), idle_seconds=60)
    assert check.done and check.acknowledged and check.writers_busy == ()


def test_a_busy_mark_that_ran_out_or_an_acknowledged_one_holds_nothing_back():
    died = writer("gdpr-delete", seen=10, busy=40)  # stopped renewing its mark mid-write: it ends 30 s later
    check = decide_idle(gate(70, writers=(died,)), RUN, snapshot(7, -100), idle_seconds=60)
    assert check.done and check.writers_busy == ()
    between = writer("ingest", seen=-1, busy=None)  # a stream between two batches: the window applies
    assert decide_idle(gate(60, writers=(between,)), RUN, snapshot(7, -100), idle_seconds=60).done
    paused = writer("ingest", seen=1, ack_after=1, ack_snapshot=6, busy=30)  # marked, then found the gate closed
    other = writer("batch", seen=-5)
    check = decide_idle(gate(60, writers=(paused, other)), RUN, snapshot(7, -100), idle_seconds=60)
    assert check.done and not check.acknowledged and check.writers_busy == ()


def test_a_wait_that_ends_while_a_writer_is_busy_says_so():
    check = decide_idle(gate(200, writers=(writer("gdpr-delete", seen=195, busy=220),)), RUN, None, idle_seconds=60)
    message = why_not_idle(check, "lake.db.t", "write_gate_default")
    assert message.startswith(
        "writers ['gdpr-delete'] of lake.db.t were still in the middle of a write (a batch statement or a MERGE "
        "that had not committed) when the wait ran out, 200 s after the table's last commit"
    )


@pytest.mark.parametrize(
    "state",
    [
        gate(10, owner=GateOwner("other", "run")),  # another run holds it
        gate(3601),  # our lease has ended: the writer may be committing
    ],
    ids=["other-owner", "lease-ended"],
)
def test_a_gate_this_run_does_not_hold_stops_the_wait(state):
    with pytest.raises(LeaseLostError, match=f"not held by {RUN}"):
        decide_idle(state, RUN, snapshot(7, -100), idle_seconds=0)


# --- writers a closing lets keep committing ---------------------------------------------------------------------


def keeping_on(name: str = "cdc#0", job: str = "flink.job-id=f00") -> WriterState:
    """A writer the closing at CLOSED_AT let keep committing, whose snapshots carry ``job``."""
    return WriterState(name, CLOSED_AT + timedelta(seconds=1), None, None, commits_as=job, exempt_closed_at=CLOSED_AT)


def theirs(snapshot_id: int, seconds_after_close: float, job: str = "f00") -> Snapshot:
    at = CLOSED_AT + timedelta(seconds=seconds_after_close)
    return Snapshot.of(snapshot_id, at, {"flink.job-id": job, "engine-name": "flink"})


def test_the_commits_of_a_writer_the_closing_lets_keep_committing_do_not_hold_the_wait_back():
    merge = writer("merge", ack_after=1, ack_snapshot=5)
    state = gate(30, writers=(keeping_on(), merge))
    snapshots = [theirs(9, 25), theirs(8, 15), snapshot(5, -10)]  # the stream commits on; 5 is merge's last
    check = decide_idle(state, RUN, snapshots, idle_seconds=1800)
    assert check.done and check.acknowledged
    assert check.writers == ("merge",) and check.writers_keeping_on == ("cdc#0",)
    assert (check.newest_snapshot_id, check.snapshots_keeping_on) == (5, 2)
    assert check.as_xcom()["writers_keeping_on"] == ["cdc#0"]


def test_when_the_closing_pauses_nobody_the_window_looks_back_over_everybody_elses_commits_at_once():
    """No paused writer can be mid-commit, and an unknown writer does not read the gate: waiting after the close
    would protect nothing more."""
    state = gate(1, writers=(keeping_on(),))
    check = decide_idle(state, RUN, [theirs(9, 0.5), theirs(8, -30), snapshot(5, -300)], idle_seconds=60)
    assert check.done and not check.acknowledged and check.writers == ()
    assert (check.idle_for_seconds, check.newest_snapshot_id) == (301, 5)
    assert decide_idle(gate(1, writers=(keeping_on(),)), RUN, [theirs(9, 0.5)], idle_seconds=60).done


def test_an_unknown_writers_commit_among_theirs_is_waited_out():
    state = gate(61, writers=(keeping_on(),))
    unknown = Snapshot.of(7, CLOSED_AT + timedelta(seconds=20), {"spark.app.id": "local-1"})
    check = decide_idle(state, RUN, [theirs(9, 60), unknown], idle_seconds=60)
    assert not check.done and (check.newest_snapshot_id, check.idle_for_seconds) == (7, 41)
    older = Snapshot.of(7, CLOSED_AT - timedelta(seconds=20), {"spark.app.id": "local-1"})
    check = decide_idle(gate(30, writers=(keeping_on(),)), RUN, [theirs(9, 20), older], idle_seconds=60)
    assert not check.done and check.idle_for_seconds == 50  # counted back from now, not from the close


def test_a_table_nobody_registered_for_still_waits_out_the_window_after_the_close():
    check = decide_idle(gate(30), RUN, [snapshot(5, -300)], idle_seconds=60)
    assert not check.done and check.idle_for_seconds == 30


def test_an_acknowledgement_with_the_tables_current_snapshot_covers_older_commits_of_others():
    """GatedSource acknowledges with the table's current snapshot, which may be one of a writer that keeps on."""
    paused = writer("merge", ack_after=2, ack_snapshot=9)
    snapshots = [theirs(9, 1.5), snapshot(6, 0.5)]  # merge's own last commit (6) came before the stream's 9
    assert decide_idle(gate(3, writers=(keeping_on(), paused)), RUN, snapshots, idle_seconds=1800).acknowledged
    later = [*snapshots, snapshot(10, 2.5)]  # a commit nobody acknowledged, after the acknowledgement
    assert not decide_idle(gate(3, writers=(keeping_on(), paused)), RUN, later, idle_seconds=1800).done


def test_a_writer_let_keep_committing_by_an_earlier_closing_is_waited_for_now():
    earlier = WriterState(
        "cdc#0", CLOSED_AT, None, None, commits_as="flink.job-id=f00", exempt_closed_at=CLOSED_AT - timedelta(hours=1)
    )
    check = decide_idle(gate(30, writers=(earlier,)), RUN, [theirs(9, 25)], idle_seconds=60)
    assert check.writers == ("cdc#0",) and check.writers_keeping_on == () and not check.done


def test_a_job_holding_the_gate_reads_no_snapshots_and_takes_a_writer_not_seen_for_a_while_as_gone():
    acked = writer("cdc#0", seen=1, ack_after=1, ack_snapshot=3)
    killed = writer("killed", seen=-20)
    assert not decide_idle(gate(5, writers=(acked, killed)), RUN, NOT_READ, 0, gone_seconds=30).done
    check = decide_idle(gate(11, writers=(acked, killed)), RUN, NOT_READ, 0, gone_seconds=30)
    assert check.done and check.writers_gone == ("killed",) and check.writers_waited_for == ()


def test_an_earlier_compactions_rewrite_is_nobodys_commit_to_wait_out():
    rewrite = Snapshot.of(8, CLOSED_AT - timedelta(seconds=20), {"app-id": "local-9"}, "replace")
    check = decide_idle(gate(1, writers=(keeping_on(),)), RUN, [theirs(9, 0.5), rewrite], idle_seconds=600)
    assert check.done and check.newest_snapshot_id is None
    assert rewrite.rewrite and not snapshot(5, 0).rewrite
