"""The idle rule: have a gated table's writers gone idle, or acknowledged, while a run holds its gate?

On values alone (the gate's state, the table's newest snapshot), so that the sensor, its trigger and the tests
decide alike; :mod:`airflow_iceberg.triggers.snapshot_idle` reads those values from MySQL and the catalog.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_iceberg.core.gate_state import GateOwner, GateState


@dataclass(frozen=True)
class Snapshot:
    """A table's newest snapshot: its id, commit time, and the writer that committed it, as far as its summary
    names one (:func:`committed_by`)."""

    snapshot_id: int
    committed_at: datetime
    committed_by: str | None = None


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

    def as_xcom(self) -> dict[str, Any]:
        return {
            "done_by": "writer acknowledgement" if self.acknowledged else "idle window",
            "writers": list(self.writers),
            "writers_acknowledged": list(self.writers_acknowledged),
            "writers_busy": list(self.writers_busy),
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


def decide_idle(gate: GateState, owner: GateOwner, newest: Snapshot | None, idle_seconds: int) -> IdleCheck:
    """Whether the table's writers have gone idle while ``owner`` holds the gate.

    Idle means either: every writer seen within a lease of the closing (:meth:`GateState.writers_to_wait_for`)
    acknowledged this closing, and the table's newest snapshot is one of the snapshots they acknowledged as
    their last commits; or, when some writer has not acknowledged (or none reports at all), no snapshot has
    been committed for ``idle_seconds``, counted from the later of the gate's close time and the newest
    snapshot, by the database clock, and no writer that has not acknowledged is in the middle of a write
    (:meth:`GateState.writers_busy`): its commit is still to come.

    Raises :class:`LeaseLostError` if ``owner`` no longer holds the gate: a writer may be committing.
    """
    gate.require_held_by(owner)
    assert gate.closed_at is not None  # a held gate has a close time
    idle_since = max(gate.closed_at, newest.committed_at) if newest else gate.closed_at
    idle_for_seconds = (gate.database_now - idle_since).total_seconds()
    newest_id = newest.snapshot_id if newest else None  # a writer of an empty table acknowledges with None
    expected = gate.writers_to_wait_for()
    acknowledging = tuple(w for w in expected if gate.acknowledged_by(w))
    busy = gate.writers_busy()
    acknowledged = (
        bool(expected)
        and len(acknowledging) == len(expected)
        and newest_id in {w.ack_snapshot_id for w in acknowledging}
    )
    return IdleCheck(
        writers=tuple(w.writer_id for w in expected),
        writers_acknowledged=tuple(w.writer_id for w in acknowledging),
        writers_busy=tuple(w.writer_id for w in busy),
        done=acknowledged or (idle_for_seconds >= idle_seconds and not busy),
        acknowledged=acknowledged,
        idle_for_seconds=idle_for_seconds,
        idle_seconds=idle_seconds,
        gate_closed_at=gate.closed_at,
        newest_snapshot_id=newest_id,
        newest_snapshot_at=newest.committed_at if newest else None,
        newest_snapshot_by=newest.committed_by if newest else None,
    )
