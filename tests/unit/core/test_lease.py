"""The owner's side of the gate on a fake clock: the keeper renews the lease, and stops the work before it ends."""

from __future__ import annotations

import threading

import pymysql
import pytest

from airflow_iceberg.core.gate_store import GateLease
from airflow_iceberg.core.lease import Lease, LeaseKeeper, LeaseLostError, lease_loss
from tests.unit.core.fake_clock import FakeClock

TABLE = "lake.db.events"


class FakeLease:
    """An owner's lease whose renewals answer from a script: seconds left, a lost gate, or MySQL away."""

    def __init__(self, *answers) -> None:
        self.table = TABLE
        self.answers = list(answers)
        self.renewals = 0

    def renew(self) -> Lease:
        self.renewals += 1
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return Lease(seconds_left=answer, at_pause_deadline=False)


def keeper(lease: FakeLease, clock: FakeClock, lost: list[str]) -> LeaseKeeper:
    def wait(seconds: float) -> bool:
        clock.sleep(seconds)
        return False  # never stopped: the keeper ends only by losing the lease

    return LeaseKeeper(lease, lost.append, every=30, margin=10, clock=clock, wait=wait, log=lambda message: None)


def test_the_keeper_renews_every_interval_while_the_run_holds_the_gate():
    lease, clock, lost = FakeLease(120, 120, 120, LeaseLostError("forced open")), FakeClock(), []
    keep = keeper(lease, clock, lost)
    assert keep.renew_now().seconds_left == 120
    keep._run()  # returns once the lease is lost
    assert lease.renewals == 4 and clock.sleeps == [30, 30, 30]
    assert lost == ["forced open"] and keep.lost == "forced open"


def test_with_mysql_away_the_keeper_stops_the_work_a_margin_before_the_last_lease_ends():
    away = pymysql.err.OperationalError(2003, "Can't connect to MySQL server")
    lease, clock, lost = FakeLease(60, away), FakeClock(), []
    keep = keeper(lease, clock, lost)
    started = clock()
    keep.renew_now()  # 60 s left, by the database's clock
    keep._watch()
    assert clock() - started == 50  # stopped 10 s (the margin) before the lease ends, never after
    assert "ends in under 10 s and could not be renewed" in lost[0]


def test_a_lease_capped_at_the_pauses_deadline_stops_the_work_before_writers_resume():
    lease, clock, lost = FakeLease(45, 15, 5), FakeClock(), []
    keep = keeper(lease, clock, lost)
    keep.renew_now()
    keep._run()
    assert clock.sleeps == [30, 5]  # woke at the margin before the capped lease's end, not a whole interval later
    assert "reached the pause's ceiling" in lost[0]


def test_a_renewal_that_hangs_does_not_hold_the_work_past_the_lease():
    """The watch stops the work at the margin while a renewal still waits (a dead network, a locked row)."""
    hang, stopped = threading.Event(), threading.Event()

    class HangingLease(FakeLease):
        def renew(self) -> Lease:
            if self.renewals:
                hang.wait(60)
            return super().renew()

    lost: list[str] = []
    keep = LeaseKeeper(
        HangingLease(0.6),
        lambda reason: (lost.append(reason), stopped.set()),
        every=0.05,
        margin=0.2,
        log=lambda message: None,
    )
    keep.start()
    try:
        assert stopped.wait(30), "the work was never stopped"
        assert not hang.is_set() and "could not be renewed" in lost[0]  # the second renewal still hangs
    finally:
        hang.set()
        keep.stop()
    assert len(lost) == 1


def test_no_work_starts_on_a_lease_that_is_gone_or_nearly_gone():
    with pytest.raises(LeaseLostError, match="no longer held"):
        keeper(FakeLease(LeaseLostError("no longer held")), FakeClock(), []).start()
    with pytest.raises(LeaseLostError, match="has 4.0 s of lease left"):
        keeper(FakeLease(4), FakeClock(), []).start()


def test_work_after_the_first_starts_on_a_renewed_lease_or_on_the_last_one_while_it_has_time_left():
    away = pymysql.err.OperationalError(2003, "Can't connect to MySQL server")
    lease, clock, lost = FakeLease(60, away), FakeClock(), []
    keep = keeper(lease, clock, lost)
    keep.renew_now()  # 60 s left
    clock.sleep(45)
    keep.renew_before_work()  # MySQL away, 15 s left: more than the 10 s margin
    clock.sleep(6)
    with pytest.raises(LeaseLostError, match="ends in under 10 s and could not be renewed"):
        keep.renew_before_work()
    forced = keeper(FakeLease(60, LeaseLostError("forced open")), FakeClock(), [])
    forced.renew_now()
    forced._run()  # the next renewal finds the gate forced open
    with pytest.raises(LeaseLostError, match="forced open"):
        forced.renew_before_work()


class NoRowConnection:
    """A gate database whose owner query finds no row: the run no longer holds the gate."""

    def cursor(self, *args):
        class Cursor:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def execute(self, *args):
                pass

            def fetchone(self):
                return None

        return Cursor()

    def commit(self):
        pass

    def close(self):
        pass


def test_each_way_of_losing_a_lease_is_told_apart_by_its_reason():
    with pytest.raises(LeaseLostError) as taken:
        GateLease("lake.db.t", "dag", "run", NoRowConnection).renew()
    with pytest.raises(LeaseLostError) as ceiling:
        keeper(FakeLease(4), FakeClock(), []).start()
    away = pymysql.err.OperationalError(2003, "Can't connect to MySQL server")
    lease, clock, lost = FakeLease(60, away), FakeClock(), []
    keep = keeper(lease, clock, lost)
    keep.renew_now()
    keep._watch()
    assert [lease_loss(str(taken.value)), lease_loss(str(ceiling.value)), lease_loss(lost[0])] == [
        "taken",
        "ceiling",
        "not renewed",
    ]
    assert lease_loss("something else") == "unknown"
