"""The handshake's rules between a run's gate and its pre-started work: when the work begins, waits or ends."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_iceberg.core.gate_state import GateOwner
from airflow_iceberg.core.gate_work import (
    ALIVE_WITHIN_SECONDS,
    NoGo,
    WorkLook,
    await_go,
    await_ready,
    decide_go,
    work_gone,
)

OWNER = GateOwner("iceberg_compact__lake__db__t", "manual__1")
NOW = datetime(2026, 12, 3, 8, 0, tzinfo=timezone.utc)
CLOSED = NOW - timedelta(seconds=5)


def look(**fields) -> WorkLook:
    return WorkLook(OWNER, NOW, **fields)


@pytest.mark.parametrize(
    ("fields", "was_held", "action"),
    [
        ({}, False, "wait"),  # the gate is not closed yet
        ({"held": True, "closed_at": CLOSED}, False, "wait"),  # closed, the writers not done
        ({"held": True, "closed_at": CLOSED, "go_at": NOW}, True, "go"),
        # A go from before this closing (the gate's lease ran out and it closed again) is no go for it.
        ({"held": True, "closed_at": CLOSED, "go_at": CLOSED - timedelta(seconds=1)}, True, "wait"),
        ({"held": True, "go_at": NOW, "stop_reason": "close_gate failed"}, True, "stop"),  # a stop wins
        ({"stop_reason": "wait_until_snapshot_idle failed: timed out"}, False, "stop"),
        ({}, True, "stop"),  # the gate was the run's and is no more: its lease ran out before the go
        ({"go_at": NOW}, False, "stop"),  # a go, and the gate no longer the run's
    ],
)
def test_the_work_begins_only_at_the_go_while_its_run_holds_the_gate(fields, was_held, action):
    assert decide_go(look(**fields), "lake.db.t", was_held=was_held).action == action


def test_a_lost_gate_before_the_go_says_why():
    decision = decide_go(look(), "lake.db.t", was_held=True)
    assert "lease ended before the go" in decision.reason and "lake.db.t" in decision.reason


class FakeHandshake:
    """Looks in the order given, and what the waiter said."""

    table = "lake.db.t"

    def __init__(self, looks):
        self.looks = list(looks)
        self.said: list[str] = []

    def look(self):
        return self.looks.pop(0) if len(self.looks) > 1 else self.looks[0]

    def ready(self):
        self.said.append("ready")

    def alive(self):
        self.said.append("alive")


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_the_work_says_it_is_ready_then_waits_through_the_closing_for_the_go():
    closed = look(held=True, closed_at=CLOSED)
    went = look(held=True, closed_at=CLOSED, go_at=NOW, lease_seconds=60)
    handshake, clock = FakeHandshake([look(), look(), closed, closed, went]), FakeClock()
    assert await_go(handshake, 60, clock=clock, sleep=clock.sleep) == went
    assert handshake.said[0] == "ready"


def test_the_work_ends_without_working_when_the_gate_it_saw_closed_lapses_before_the_go():
    handshake, clock = FakeHandshake([look(held=True, closed_at=CLOSED), look()]), FakeClock()
    with pytest.raises(NoGo, match="lease ended before the go"):
        await_go(handshake, 60, clock=clock, sleep=clock.sleep)


def test_the_work_ends_at_a_stop_and_at_its_deadline():
    clock = FakeClock()
    with pytest.raises(NoGo, match="timed out"):
        await_go(FakeHandshake([look(stop_reason="wait_until_snapshot_idle failed: timed out")]), 60, clock=clock)
    with pytest.raises(NoGo, match="no go for the work on lake.db.t within 30 s"):
        await_go(FakeHandshake([look()]), 30, clock=clock, sleep=clock.sleep)
    assert clock.now >= 30


def test_waiting_work_keeps_saying_it_is_alive():
    handshake, clock = FakeHandshake([look()]), FakeClock()
    with pytest.raises(NoGo):
        await_go(handshake, 10, clock=clock, sleep=clock.sleep)
    assert handshake.said.count("alive") >= 4  # every 2 s for 10 s


def test_the_gate_closes_only_for_work_that_is_ready_and_was_seen_lately():
    ready = NOW - timedelta(seconds=30)
    assert look(ready_at=ready, seen_at=NOW - timedelta(seconds=1)).alive
    assert not look(ready_at=ready, seen_at=NOW - timedelta(seconds=ALIVE_WITHIN_SECONDS + 1)).alive
    assert not look(seen_at=NOW).alive
    clock = FakeClock()
    alive = look(ready_at=ready, seen_at=NOW)
    assert await_ready(FakeHandshake([look(), look(), alive]), 60, clock=clock, sleep=clock.sleep) == alive
    with pytest.raises(NoGo, match="was not ready within 20 s, so the gate was not closed"):
        await_ready(FakeHandshake([look()]), 20, clock=clock, sleep=clock.sleep)
    with pytest.raises(NoGo, match="rewrite_files failed"):
        await_ready(FakeHandshake([look(stop_reason="rewrite_files failed: boom")]), 20, clock=clock)


def test_the_idle_wait_sees_work_that_ended_before_the_go():
    ready = NOW - timedelta(seconds=30)
    # Waiting and alive, or not ready yet (the gate does not close for it then): not gone.
    assert work_gone(look(ready_at=ready, seen_at=NOW - timedelta(seconds=2)), "lake.db.t") is None
    assert work_gone(look(), "lake.db.t") is None
    # Killed: nobody said anything, and it has been silent for longer than it may be.
    silent = work_gone(look(ready_at=ready, seen_at=NOW - timedelta(seconds=ALIVE_WITHIN_SECONDS + 3)), "lake.db.t")
    assert silent is not None and "has not said it is alive for 13 s" in silent and "lake.db.t" in silent
    # Its task failed for good and said so: gone at once, however lately it was seen.
    stopped = work_gone(look(ready_at=ready, seen_at=NOW, stop_reason="rewrite_files failed: killed"), "lake.db.t")
    assert stopped == "the rewrite of lake.db.t ended before the go: rewrite_files failed: killed"
