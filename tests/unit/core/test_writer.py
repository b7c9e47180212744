"""The writer's side of the gate, on a fake clock and a fake MySQL connection: the rule, the acknowledgement,
and what a writer does while MySQL is away.

The same client against the real MySQL is in ``tests/integration/core/test_writer.py``.
"""

from __future__ import annotations

import re
from datetime import datetime

import pymysql
import pytest

from airflow_iceberg.core.gate_protocol import (
    WRITER_ACK_SQL,
    WRITER_CHECK_SQL,
    WRITER_LEAVE_SQL,
    WRITER_REGISTER_SQL,
    WriteGateAccessError,
)
from airflow_iceberg.core.writer import WriteGateClient, check_gate
from tests.unit.core.fake_clock import FakeClock

TABLE = "lake.db.events"

WRITER = "events-ingest"

LEASE_END = datetime(2026, 11, 22, 13, 0, 0)


class FakeGateDatabase:
    """What the writer's two statements see: a gate row (or none, or no table), and whether MySQL answers.

    ``paused_for`` is how many more checks find the gate closed; each check uses one up.
    """

    def __init__(self, *, paused_for: int = 0, lease_seconds_left: float = 60.0, row: bool = True) -> None:
        self.paused_for = paused_for
        self.lease_seconds_left = lease_seconds_left
        self.row = row
        self.table_exists = True
        self.down = False
        #: A MySQL error number every statement fails with (an access-denied one, say), or None.
        self.refuse_with: int | None = None
        self.acknowledgements: list[tuple] = []
        #: What each registration declared: commit kind, Iceberg release, commits_as.
        self.registrations: list[tuple] = []
        #: Every statement run, in order: ("register" | "check" | "ack" | "leave", committed so far?).
        self.log: list[str] = []
        self.connections = 0

    def connect(self) -> FakeConnection:
        if self.down:
            raise pymysql.err.OperationalError(2003, "Can't connect to MySQL server on '127.0.0.1'")
        self.connections += 1
        return FakeConnection(self)


class FakeConnection:
    def __init__(self, database: FakeGateDatabase) -> None:
        self.database = database
        self.closed = False

    def cursor(self, cursor_class=None) -> FakeCursor:
        return FakeCursor(self.database, dictionaries=cursor_class is pymysql.cursors.DictCursor)

    def commit(self) -> None:
        self._answer()
        self.database.log.append("commit")

    def rollback(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def _answer(self) -> None:
        if self.database.down:
            raise pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query")


class FakeCursor:
    def __init__(self, database: FakeGateDatabase, *, dictionaries: bool) -> None:
        self.database = database
        self.dictionaries = dictionaries
        self.rowcount = 0
        self._row = None

    def __enter__(self) -> FakeCursor:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def execute(self, statement: str, params: tuple) -> None:
        db = self.database
        if db.down:
            raise pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query")
        if db.refuse_with is not None:
            raise pymysql.err.OperationalError(db.refuse_with, "SELECT command denied to user 'writer'@'localhost'")
        if not db.table_exists:
            raise pymysql.err.ProgrammingError(1146, "Table 'gates.iceberg_write_gate' doesn't exist")
        paused = db.row and db.paused_for > 0
        if statement == WRITER_REGISTER_SQL:
            assert params[:2] == (TABLE, WRITER)
            db.registrations.append(params[2:])
            db.log.append("register")
        elif statement == WRITER_LEAVE_SQL:
            assert params == (TABLE, WRITER)
            db.log.append("leave")
        elif statement == WRITER_CHECK_SQL:
            assert params in ((WRITER, TABLE), (None, TABLE))
            db.log.append("check")
            db.paused_for -= 1 if paused else 0
            self._row = None
            if db.row:
                self._row = {
                    "paused": int(paused),
                    "lease_expires_at": LEASE_END,
                    "lease_seconds_left": db.lease_seconds_left,
                }
        elif statement == WRITER_ACK_SQL:
            db.log.append("ack")
            self.rowcount = 1 if paused else 0
            if paused:
                db.acknowledgements.append(params)
        else:
            raise AssertionError(f"unexpected statement {statement!r}")

    def fetchone(self):
        assert self.dictionaries, "the writer reads rows by column name"
        return self._row


def client(
    database: FakeGateDatabase, clock: FakeClock, messages: list[str] | None = None, **declared
) -> WriteGateClient:
    log = messages.append if messages is not None else (lambda message: None)
    return WriteGateClient(
        TABLE,
        database.connect,
        writer_id=WRITER,
        poke_interval=1.0,
        clock=clock,
        sleep=clock.sleep,
        log=log,
        **declared,
    )


def test_a_table_without_a_gate_row_or_gate_tables_may_commit():
    assert not check_gate(FakeConnection(FakeGateDatabase(row=False)), TABLE).paused
    database = FakeGateDatabase(paused_for=5)
    database.table_exists = False
    assert not check_gate(FakeConnection(database), TABLE).paused


def test_a_closed_gate_pauses_the_writer_until_it_opens_with_one_acknowledgement():
    database, clock = FakeGateDatabase(paused_for=4), FakeClock()
    gate = client(database, clock)
    waited = gate.wait_until_open(last_snapshot_id=42)
    assert waited == 4.0 and clock.sleeps == [1.0] * 4  # 4 closed answers, a poke interval after each
    assert database.acknowledgements == [(42, TABLE, WRITER)]  # once, with the last committed snapshot
    assert gate.may_commit()


def test_an_open_gate_costs_one_check_and_no_wait():
    database, clock = FakeGateDatabase(), FakeClock()
    assert client(database, clock).wait_until_open(7) == 0.0
    assert clock.sleeps == [] and database.acknowledgements == []


def test_during_an_outage_a_closed_verdict_holds_only_until_its_lease_ends():
    database, clock = FakeGateDatabase(paused_for=1000, lease_seconds_left=2.5), FakeClock()
    messages: list[str] = []
    gate = client(database, clock, messages)
    assert not gate.may_commit()  # closed, 2.5 s of lease left by the writer's own clock
    database.down = True
    verdict = gate.verdict()
    assert verdict.paused and verdict.from_cache and verdict.lease_expires_at == LEASE_END
    waited = gate.wait_until_open()
    assert waited == 3.0  # polled each second while MySQL was away, released once 2.5 s had passed
    assert gate.may_commit() and gate.verdict().from_cache
    assert any("obeying the last closed verdict until its lease ends" in m for m in messages)
    assert messages[-1].endswith("committing")


def test_during_an_outage_a_writer_whose_gate_was_open_keeps_committing():
    database, clock = FakeGateDatabase(), FakeClock()
    gate = client(database, clock)
    assert gate.may_commit()
    database.down = True
    assert gate.may_commit() and gate.verdict().from_cache


def test_a_writer_that_starts_during_an_outage_commits():
    database, clock = FakeGateDatabase(paused_for=10), FakeClock()
    database.down = True
    assert client(database, clock).may_commit()


def test_after_an_outage_the_client_reconnects_and_obeys_the_gate_again():
    database, clock = FakeGateDatabase(), FakeClock()
    gate = client(database, clock)
    assert gate.may_commit() and database.connections == 1
    database.down = True
    assert gate.may_commit()
    database.down = False
    database.paused_for = 1
    assert not gate.may_commit() and database.connections == 2  # the broken connection was replaced


def test_an_acknowledgement_during_an_outage_is_reported_not_raised():
    database, clock = FakeGateDatabase(paused_for=10), FakeClock()
    messages: list[str] = []
    gate = client(database, clock, messages)
    database.down = True
    assert gate.acknowledge_pause(5) is False
    assert "could not acknowledge the pause of lake.db.events" in messages[-1]


@pytest.mark.parametrize("paused_for", [0, 3])
def test_the_acknowledgement_is_taken_only_while_the_gate_pauses_writers(paused_for):
    database = FakeGateDatabase(paused_for=paused_for)
    assert client(database, FakeClock()).acknowledge_pause(9) is (paused_for > 0)


def test_the_writer_registers_at_its_first_look_and_commits_that_before_reading_the_gate():
    database, clock = FakeGateDatabase(paused_for=1), FakeClock()
    client(database, clock).wait_until_open(3)
    # A compaction that reads the writers after closing the gate sees this writer before it can decide to commit.
    assert database.log[:4] == ["register", "commit", "check", "commit"]
    assert database.log.count("check") == 2  # closed, then open
    assert database.log.count("register") == 2  # at the first look, and before the acknowledgement


def test_the_writer_says_it_is_there_again_every_few_seconds_not_at_every_look():
    database, clock = FakeGateDatabase(), FakeClock()
    gate = client(database, clock)
    for _ in range(25):  # a look every second, as a writer committing every second does
        gate.may_commit()
        clock.sleep(1.0)
    assert database.log.count("check") == 25
    assert database.log.count("register") == 3  # at 0 s, 10 s and 20 s: well inside the sensor's minute


def test_a_writer_that_stops_for_good_leaves_the_gate_and_closing_alone_does_not():
    database, clock = FakeGateDatabase(), FakeClock()
    gate = client(database, clock)
    gate.may_commit()
    gate.close()
    assert "leave" not in database.log
    gate.leave()
    assert database.log[-2:] == ["leave", "commit"]


@pytest.mark.parametrize("error", [1044, 1045, 1142, 1143])
def test_a_user_without_the_protocols_grants_is_an_error_not_an_outage(error):
    database, clock = FakeGateDatabase(), FakeClock()
    database.refuse_with = error
    with pytest.raises(WriteGateAccessError, match="SELECT on iceberg_write_gate"):
        client(database, clock).may_commit()
    with pytest.raises(WriteGateAccessError):
        client(database, clock).acknowledge_pause(1)


def test_a_writer_registers_what_it_commits_and_one_that_says_nothing_registers_nothing():
    database, clock = FakeGateDatabase(), FakeClock()
    said = client(database, clock, commit_kind="upserts", iceberg_version="1.11.0", commits_as="flink.job-id=f00")
    silent = client(database, clock)
    assert said.may_commit() and silent.may_commit()
    assert database.registrations == [("upserts", "1.11.0", "flink.job-id=f00"), (None, None, None)]


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        ({"commit_kind": "merges"}, "unknown commit_kind 'merges': a writer commits one of 'appends' (appends only)"),
        ({"commit_kind": "appends", "commits_as": "job 7"}, "commits_as must be key=value"),
    ],
)
def test_a_bad_declaration_is_refused_naming_the_value_before_the_gate_is_reached(declared, message):
    database = FakeGateDatabase()
    with pytest.raises(ValueError, match=re.escape(message)):
        client(database, FakeClock(), **declared)
    assert database.connections == 0 and database.log == []
