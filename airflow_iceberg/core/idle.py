"""The idle rule: have a gated table's writers gone idle, or acknowledged, while a run holds its gate?

On values alone (the gate's state, the table's newest snapshot), so that the sensor, its trigger, a batch job that
holds the gate itself (``GateHolder``) and the tests decide alike; :mod:`airflow_iceberg.triggers.snapshot_idle`
reads those values from MySQL and the catalog.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, Literal

from airflow_iceberg.core.gate_state import GateOwner, GateState, WriterState


class Unread(Enum):
    """For :func:`decide_idle`'s ``newest``: the caller did not read the table's snapshots."""

    NOT_READ = "not read"


#: The table's snapshots were not read (a batch job that holds the gate has no catalog of its own): the writers are
#: done by their acknowledgements alone, and a writer not seen for a while counts as gone (``gone_seconds``).
NOT_READ = Unread.NOT_READ


@dataclass(frozen=True)
class Snapshot:
    """A snapshot of the table: its id, commit time, the writer that committed it as far as its summary names one
    (:func:`committed_by`), and the summary's entries that can name a writer (:data:`NAMING_KEYS`)."""

    snapshot_id: int
    committed_at: datetime
    committed_by: str | None = None
    names: tuple[tuple[str, str], ...] = ()
    #: Its summary's operation (``append``, ``overwrite``, ``delete``, ``replace``); None: not read.
    operation: str | None = None

    @classmethod
    def of(cls, snapshot_id: int, committed_at: datetime, summary: dict[str, str], operation: str | None = None):
        """A snapshot read with its summary and operation."""
        names = tuple((key, summary[key]) for key in NAMING_KEYS if key in summary)
        return cls(snapshot_id, committed_at, committed_by(summary), names, operation)

    @property
    def rewrite(self) -> bool:
        """A ``replace``: maintenance (a compaction's rewrite, a manifest rewrite), not a writer's commit."""
        return self.operation == "replace"

    def committed_as(self, commits_as: str | None) -> bool:
        """Its summary carries ``commits_as`` (``key=value``), what a writer said its snapshots carry."""
        return summary_names(dict(self.names), commits_as)


def summary_names(summary: Mapping[str, str], commits_as: str | None) -> bool:
    """A snapshot's ``summary`` carries ``commits_as`` (``key=value``), what a writer said its snapshots carry."""
    if not commits_as or "=" not in commits_as:
        return False
    key, _, value = commits_as.partition("=")
    return summary.get(key) == value


#: The snapshot summary's entries that name who committed it: Flink's sink writes its job's id, Spark its
#: application's (a procedure's commit ``app-id``), and a writer may set a property of its own.
NAMING_KEYS = ("flink.job-id", "spark.app.id", "app-id", "airflow-iceberg.writer")


def committed_by(summary: dict[str, str]) -> str | None:
    """The writer a snapshot's summary names: Flink's sink writes its job id (``flink.job-id``), Spark its
    application's id and name (``spark.app.id`` or ``app-id``, ``app-name``; a procedure's commit only the
    latter). None if it names none: pyiceberg's commits, and a Spark procedure's before Iceberg 1.6, which began to
    write the engine and application into the summary (apache/iceberg#9273)."""
    if job := summary.get("flink.job-id"):
        return f"Flink job {job}"
    engine = summary.get("engine-name")
    if app := summary.get("spark.app.id") or summary.get("app-id"):
        said = f"{'Spark' if engine in (None, 'spark') else engine} application {app}"
        return f"{said} ({summary['app-name']})" if summary.get("app-name") else said
    return f"a {engine} writer" if engine else None


@dataclass(frozen=True)
class IdleCheck:
    """One look at the gate and the table's snapshots, and what it decided."""

    done: bool
    idle_for_seconds: float
    idle_seconds: int
    gate_closed_at: datetime
    newest_snapshot_id: int | None
    newest_snapshot_at: datetime | None
    #: The writer that committed the newest snapshot, as its summary names it.
    newest_snapshot_by: str | None = None
    #: Every writer waited for acknowledged this closing, and the newest snapshot is one they acknowledged.
    acknowledged: bool = False
    #: The writers waited for (seen within a lease of the closing), and those that acknowledged it.
    writers: tuple[str, ...] = ()
    writers_acknowledged: tuple[str, ...] = ()
    #: The writers waited for whose write was under way, unacknowledged: a table with no new commit is not idle
    #: while one is.
    writers_busy: tuple[str, ...] = ()
    #: The writers waited for that were not seen for ``gone_seconds`` and had not acknowledged: taken as stopped.
    writers_gone: tuple[str, ...] = ()
    #: The writers the closing lets keep committing, and how many of the snapshots read were theirs.
    writers_keeping_on: tuple[str, ...] = ()
    snapshots_keeping_on: int = 0

    @property
    def writers_waited_for(self) -> tuple[str, ...]:
        """The writers still waited for: neither acknowledged nor gone."""
        done = set(self.writers_acknowledged) | set(self.writers_gone)
        return tuple(w for w in self.writers if w not in done)

    def as_xcom(self) -> dict[str, Any]:
        return {
            "done_by": "writer acknowledgement" if self.acknowledged else "idle window",
            "writers": list(self.writers),
            "writers_acknowledged": list(self.writers_acknowledged),
            "writers_busy": list(self.writers_busy),
            "writers_gone": list(self.writers_gone),
            "writers_keeping_on": list(self.writers_keeping_on),
            "snapshots_keeping_on": self.snapshots_keeping_on,
            "idle_for_seconds": round(self.idle_for_seconds, 3),
            "idle_seconds": self.idle_seconds,
            "gate_closed_at": self.gate_closed_at.isoformat(),
            "newest_snapshot_id": self.newest_snapshot_id,
            "newest_snapshot_at": self.newest_snapshot_at.isoformat() if self.newest_snapshot_at else None,
            "newest_snapshot_by": self.newest_snapshot_by,
        }


def why_not_idle(check: IdleCheck | None, table: object, write_gate_conn_id: str) -> str:
    """Why the writers of ``table`` had not gone idle, from the last look that finished (``check``), and what to
    do: for the message of a wait that ran out of time."""
    if check is None:
        return (
            f"no look at {table} finished: the catalog or the gate's MySQL (connection {write_gate_conn_id!r}) "
            "did not answer"
        )
    waited_for = f"writers waited for: {list(check.writers) or 'none reported'}; acknowledged: " + str(
        list(check.writers_acknowledged)
    )
    newest = check.newest_snapshot_at
    if newest is not None and newest > check.gate_closed_at:
        after = (newest - check.gate_closed_at).total_seconds()
        by = check.newest_snapshot_by or "a writer whose snapshot summary names no Flink job or Spark application"
        return (
            f"a writer kept committing to {table} while its gate was closed: the newest snapshot, "
            f"{check.newest_snapshot_id}, was committed by {by} {after:.0f} s after the gate closed (at "
            f"{check.gate_closed_at:%Y-%m-%d %H:%M:%S} UTC) ({waited_for}). A writer that commits through a closed "
            f"gate does not read it: check that every writer of {table} reads its write gate, from the database of "
            f"connection {write_gate_conn_id!r}"
        )
    missing = sorted(set(check.writers) - set(check.writers_acknowledged))
    if check.writers_busy:
        return (
            f"writers {list(check.writers_busy)} of {table} were still in the middle of a write (a batch statement "
            f"or a MERGE that had not committed) when the wait ran out, {check.idle_for_seconds:.0f} s after the "
            f"table's last commit ({waited_for}). Each acknowledges the pause once its write commits: give the wait "
            "more time (half of the table's max_pause_seconds), or run such writes between compactions"
        )
    return (
        f"{table} was idle for {check.idle_for_seconds:.0f} s of the {check.idle_seconds} s required, and "
        f"{'writers ' + str(missing) + ' did not acknowledge the pause' if missing else 'no writer acknowledged it'}"
        f" ({waited_for}). Give the wait more time (half of the table's max_pause_seconds), or a shorter "
        "idle_seconds"
    )


def decide_idle(
    gate: GateState,
    owner: GateOwner,
    snapshots: Snapshot | Sequence[Snapshot] | None | Literal[Unread.NOT_READ],
    idle_seconds: int,
    *,
    gone_seconds: float | None = None,
) -> IdleCheck:
    """Whether the table's writers that must pause have gone idle while ``owner`` holds the gate.

    ``snapshots`` are the table's recent snapshots (one, the newest, will do; None: the table has none). Those the
    writers that keep committing through this closing committed (their summaries carry the writer's ``commits_as``)
    are left out: the rule is about everything else, "the newest snapshot" below.

    Idle means either: every writer seen within a lease of the closing that the closing pauses
    (:meth:`GateState.writers_to_wait_for`) acknowledged this closing, and the newest snapshot is none newer than
    the newest they acknowledged as their last commits; or, when some writer has not acknowledged (or none reports
    at all), no snapshot has been committed for ``idle_seconds``, counted from the later of the gate's close time and
    the newest snapshot, by the database clock, and no writer that has not acknowledged is in the middle of a write
    (:meth:`GateState.writers_busy`): its commit is still to come. A commit no registered writer owns is an unknown
    writer's, and the idle window waits it out. When the closing pauses none of its registered writers (each keeps
    committing), the window counts back from now, from the newest snapshot of anyone else: no paused writer can be
    mid-commit, and an unknown writer does not read the gate.

    With ``snapshots`` :data:`NOT_READ` there is no newest snapshot to compare and no idle window: the writers are
    done once every one waited for has acknowledged, or is gone, not seen for ``gone_seconds`` (a running writer
    says it is there every few seconds). A caller that reads the snapshots leaves ``gone_seconds`` None: its idle
    window covers a writer that stopped without leaving, and a writer that only lost its way to MySQL is still
    waited for.

    Raises :class:`LeaseLostError` if ``owner`` no longer holds the gate: a writer may be committing.
    """
    gate.require_held_by(owner)
    assert gate.closed_at is not None  # a held gate has a close time
    expected = gate.writers_to_wait_for()
    gone: tuple[WriterState, ...] = ()
    if gone_seconds is not None:
        seen_since = gate.database_now - timedelta(seconds=gone_seconds)
        gone = tuple(
            w for w in expected if not gate.acknowledged_by(w) and (w.seen_at is None or w.seen_at < seen_since)
        )
    present = tuple(w for w in expected if w not in gone)
    acknowledging = tuple(w for w in present if gate.acknowledged_by(w))
    every_one = len(acknowledging) == len(present)
    keeping_on = gate.writers_keeping_on()
    read = snapshots is not NOT_READ
    listed: list[Snapshot] = []
    if isinstance(snapshots, Snapshot):
        listed = [snapshots]
    elif read and snapshots is not None:
        listed = list(snapshots)  # type: ignore[arg-type]  # a sequence here: NOT_READ and None are out
    theirs = [s for s in listed if any(s.committed_as(w.commits_as) for w in keeping_on)]
    # Everybody else's commits; a rewrite (an earlier compaction's) is nobody's that a pause could hold back.
    others = [s for s in listed if s not in theirs and not s.rewrite]
    newest = max(others, key=lambda s: s.committed_at, default=None)
    if keeping_on and not expected:
        # The closing paused no registered writer: none can be mid-commit, so the window looks back from now, over
        # the commits of anyone else (an unknown writer does not read the gate: waiting after the close would
        # protect nothing more).
        idle_since = newest.committed_at if newest else gate.closed_at - timedelta(seconds=idle_seconds)
    else:
        idle_since = max(gate.closed_at, newest.committed_at) if newest else gate.closed_at
    idle_for_seconds = (gate.database_now - idle_since).total_seconds()
    newest_id = newest.snapshot_id if newest else None  # a writer of an empty table acknowledges with None
    busy = gate.writers_busy()
    if read:
        acked = {w.ack_snapshot_id for w in acknowledging}
        acked_at = [s.committed_at for s in listed if s.snapshot_id in acked]
        # Nobody else's snapshot is newer than the newest the paused writers acknowledged (a writer acknowledges with
        # its last commit, or with the table's current snapshot, which may be one of a writer that keeps committing).
        covered = newest is None or newest_id in acked or (bool(acked_at) and newest.committed_at <= max(acked_at))
        acknowledged = bool(present) and every_one and covered
        done = acknowledged or (idle_for_seconds >= idle_seconds and not busy)
    else:
        acknowledged = done = every_one
    return IdleCheck(
        writers=tuple(w.writer_id for w in expected),
        writers_acknowledged=tuple(w.writer_id for w in acknowledging),
        writers_busy=tuple(w.writer_id for w in busy),
        writers_gone=tuple(w.writer_id for w in gone),
        writers_keeping_on=tuple(w.writer_id for w in keeping_on),
        snapshots_keeping_on=sum(1 for s in theirs if s.committed_at >= gate.closed_at),
        done=done,
        acknowledged=acknowledged,
        idle_for_seconds=idle_for_seconds,
        idle_seconds=idle_seconds,
        gate_closed_at=gate.closed_at,
        newest_snapshot_id=newest_id,
        newest_snapshot_at=newest.committed_at if newest else None,
        newest_snapshot_by=newest.committed_by if newest else None,
    )
