"""A gate as its row says, and the rules that change it: pure functions of the row as locked, tested without MySQL.

The hook applies them inside the transaction that locked the row (``hooks/write_gate.py``); the sensor, its trigger
and the UI read the same state. Every time is the database's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from enum import StrEnum
from typing import Any

from airflow_iceberg.core.conflicts import CommitKind, WriterCommits
from airflow_iceberg.core.gate_protocol import WRITER_SEEN_WINDOW_SECONDS
from airflow_iceberg.core.lease import LeaseLostError


def database_time(value: datetime | None) -> datetime | None:
    # The session time zone is UTC (see get_conn), so MySQL's naive TIMESTAMP values are UTC.
    return value.replace(tzinfo=timezone.utc) if value is not None else None


@dataclass(frozen=True)
class GateOwner:
    """Who holds a gate: one DAG run."""

    dag_id: str
    run_id: str

    def __str__(self) -> str:
        return f"dag {self.dag_id!r} run {self.run_id!r}"


@dataclass(frozen=True)
class WriterState:
    """A writer of a gated table as it last reported: when it last read the gate, its acknowledgement, until when a
    write of its is under way, what it says it commits, what the table's history showed it commit, and what the last
    closing decided for it."""

    writer_id: str
    seen_at: datetime | None
    ack_at: datetime | None
    ack_snapshot_id: int | None
    busy_until: datetime | None = None
    #: As it declared (``appends``, ``upserts``, ``row-level``); None: nothing, so it pauses at every closing.
    commit_kind: CommitKind | None = None
    iceberg_version: str | None = None
    #: What its snapshots' summaries name it by (``flink.job-id=...``): how its commits are told from others'.
    commits_as: str | None = None
    observed_kind: CommitKind | None = None
    observed_snapshot_id: int | None = None
    observed_detail: str | None = None
    #: The closing (its close time) that let it keep committing; any other closing pauses it.
    exempt_closed_at: datetime | None = None
    pause_reason: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> WriterState:
        return cls(
            row["writer_id"],
            database_time(row["seen_at"]),
            database_time(row["ack_at"]),
            row["ack_snapshot_id"],
            database_time(row["busy_until"]),
            _kind(row["commit_kind"]),
            row["iceberg_version"],
            row["commits_as"],
            _kind(row["observed_kind"]),
            row["observed_snapshot_id"],
            row["observed_detail"],
            database_time(row["exempt_closed_at"]),
            row["pause_reason"],
        )

    def commits(self) -> WriterCommits:
        """What the conflict rule reads of this writer."""
        return WriterCommits(
            self.writer_id,
            self.commit_kind,
            self.iceberg_version,
            self.commits_as,
            self.observed_kind,
            self.observed_detail,
        )


def _kind(value: str | None) -> CommitKind | None:
    """A kind as the table holds it (its CHECK constraint admits the kinds and NULL alone)."""
    return None if value is None else CommitKind(value)


@dataclass(frozen=True)
class GateState:
    """A gate row as read, its writers, and the database's clock at the moment of reading."""

    table: str
    state: str
    owner: GateOwner | None
    closed_at: datetime | None
    lease_expires_at: datetime | None
    opened_at: datetime | None
    database_now: datetime
    #: The lease the owner closed with; each renewal extends the lease by this much.
    lease_seconds: int | None = None
    #: No renewal extends the lease past this (``max_pause_seconds`` after closing), or None.
    pause_deadline: datetime | None = None
    writers: tuple[WriterState, ...] = ()
    #: The newest snapshot (its time, epoch ms) whose writer a plan has checked; None: none yet.
    history_checked_ms: int | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any], writers: tuple[WriterState, ...] = ()) -> GateState:
        owner = GateOwner(row["owner_dag_id"], row["owner_run_id"]) if row["owner_dag_id"] is not None else None
        return cls(
            table=row["table_name"],
            state=row["state"],
            owner=owner,
            closed_at=database_time(row["closed_at"]),
            lease_expires_at=database_time(row["lease_expires_at"]),
            opened_at=database_time(row["opened_at"]),
            database_now=database_time(row["database_now"]),  # type: ignore[arg-type]
            lease_seconds=row["lease_seconds"],
            pause_deadline=database_time(row["pause_deadline"]),
            writers=writers,
            history_checked_ms=row.get("history_checked_ms"),
        )

    @classmethod
    def never_closed(cls, table: str, database_now: datetime, writers: tuple[WriterState, ...] = ()) -> GateState:
        """The state of a table that has no gate row: open."""
        return cls(table, "open", None, None, None, None, database_now, writers=writers)

    @property
    def pauses_writers(self) -> bool:
        """The writers' rule: closed and the lease not yet ended."""
        return (
            self.state == "closed" and self.lease_expires_at is not None and self.lease_expires_at > self.database_now
        )

    def held_by(self, owner: GateOwner) -> bool:
        return self.pauses_writers and self.owner == owner

    def held_by_another(self, owner: GateOwner) -> bool:
        """Closed for a run other than ``owner``, its lease not yet ended: ``owner`` must wait to close it."""
        return self.pauses_writers and self.owner != owner

    def close_times(self) -> dict[str, str | None]:
        """A closed gate's close time, lease end and pause deadline (database clock; None: no ceiling), as ISO text."""
        return {
            "closed_at": self.closed_at.isoformat(),  # type: ignore[union-attr]
            "lease_expires_at": self.lease_expires_at.isoformat(),  # type: ignore[union-attr]
            "pause_deadline": self.pause_deadline.isoformat() if self.pause_deadline else None,
        }

    def require_held_by(self, owner: GateOwner) -> None:
        """Raise :class:`LeaseLostError` unless ``owner`` holds the gate: a writer may be committing."""
        if not self.held_by(owner):
            raise LeaseLostError(
                f"the write gate of {self.table} is not held by {owner} (state {self.state!r}, owner {self.owner}, "
                f"lease until {self.lease_expires_at}); the writer may be committing, so no rewrite may start"
            )

    def exempt(self, writer: WriterState) -> bool:
        """This closing let ``writer`` keep committing: it cannot conflict with the closing's work."""
        return self.closed_at is not None and writer.exempt_closed_at == self.closed_at

    def writers_keeping_on(self) -> tuple[WriterState, ...]:
        """The writers this closing lets keep committing."""
        return tuple(w for w in self.writers if self.exempt(w))

    def writers_to_wait_for(self) -> tuple[WriterState, ...]:
        """The writers a compaction waits for: those seen within a lease (at least a minute) before the closing,
        or since, that this closing pauses.

        A writer reads the gate before every commit and says it is there every few seconds, so one not seen in
        that time is not committing. A writer that left (stopped for good) is not waited for, nor one the closing
        lets keep committing.
        """
        if self.closed_at is None:
            return ()
        if self.lease_seconds:
            lease = timedelta(seconds=self.lease_seconds)
        elif self.lease_expires_at is not None:  # a row from before lease_seconds was recorded
            lease = self.lease_expires_at - self.closed_at
        else:
            lease = timedelta(0)
        since = self.closed_at - max(lease, timedelta(seconds=WRITER_SEEN_WINDOW_SECONDS))
        return tuple(w for w in self.writers if w.seen_at is not None and w.seen_at >= since and not self.exempt(w))

    def writers_busy(self) -> tuple[WriterState, ...]:
        """The writers waited for whose write is under way (their mark not yet ended) and who have not acknowledged
        this closing: the table may look idle, but each is about to commit."""
        return tuple(
            w
            for w in self.writers_to_wait_for()
            if w.busy_until is not None and w.busy_until > self.database_now and not self.acknowledged_by(w)
        )

    def acknowledged_by(self, writer: WriterState) -> bool:
        """``writer`` acknowledged this closing of the gate (not an earlier one)."""
        return writer.ack_at is not None and self.closed_at is not None and writer.ack_at >= self.closed_at


class AuditAction(StrEnum):
    """What a row of the gate's audit trail (``iceberg_write_gate_audit.action``) records."""

    CLOSE = "close"
    RECLOSE = "reclose"  # the holder renewed its lease
    CLOSE_REFUSED = "close_refused"  # another run holds the gate
    OPEN = "open"
    OPEN_NOOP = "open_noop"  # already open, or held by another run: nothing changed
    FORCE_OPEN = "force_open"  # a user opened it from the UI
    SLOT_WAIT = "slot_wait"  # not audited: the close waits for a Spark slot, and changes nothing yet


@dataclass(frozen=True)
class GateChange:
    """What a close or an open does to a gate, decided from its locked row: the audit action and its detail."""

    allowed: bool
    action: AuditAction
    detail: str | None = None


def decide_close(before: GateState, owner: GateOwner) -> GateChange:
    """Closing is allowed if the gate is open, its lease has ended, or ``owner`` holds it (a renewal)."""
    if before.held_by(owner):
        return GateChange(True, AuditAction.RECLOSE, "lease renewed by its owner")
    if before.pauses_writers:
        until = f"{before.lease_expires_at:%Y-%m-%d %H:%M:%S.%f}"
        return GateChange(False, AuditAction.CLOSE_REFUSED, f"held by {before.owner} until {until} UTC")
    if before.state == "closed":
        return GateChange(True, AuditAction.CLOSE, f"took over the expired lease of {before.owner}")
    return GateChange(True, AuditAction.CLOSE)


def decide_open(before: GateState, owner: GateOwner) -> GateChange:
    """Opening is allowed only to the run that closed the gate, so it never opens another run's gate."""
    if before.state == "closed" and before.owner == owner:
        return GateChange(True, AuditAction.OPEN)
    if before.state == "open":
        return GateChange(False, AuditAction.OPEN_NOOP, "the gate is already open")
    return GateChange(False, AuditAction.OPEN_NOOP, f"the gate is held by {before.owner}, not by {owner}")


def check_lease_seconds(seconds: object, name: str = "lease_seconds") -> int:
    """``seconds`` if it is a positive integer; a ValueError naming the setting and the value otherwise."""
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds <= 0:
        raise ValueError(f"{name} must be a positive integer, got {seconds!r}")
    return seconds


def check_pause_ceiling(lease_seconds: object, max_pause_seconds: object) -> None:
    """A valid lease and pause ceiling (None: no ceiling), the ceiling no shorter than the lease; a ValueError
    naming the setting and the value otherwise."""
    lease = check_lease_seconds(lease_seconds)
    if max_pause_seconds is not None and check_lease_seconds(max_pause_seconds, "max_pause_seconds") < lease:
        raise ValueError(f"max_pause_seconds ({max_pause_seconds}) must be at least the lease ({lease_seconds})")
