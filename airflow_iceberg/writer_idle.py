"""Has the streaming writer of a gated table gone quiet? Shared by the sensor and its trigger."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

from airflow_iceberg.hooks.write_gate import GateOwner, WriteGateHook
from spark_jobs.iceberg_call import TableName


class WriteGateNotHeldError(RuntimeError):
    """The run no longer holds the gate it closed (its lease ended, or someone opened it): stop, don't rewrite."""


@dataclass(frozen=True)
class IdleCheck:
    """One look at the gate and the table's snapshots."""

    done: bool
    quiet_seconds: float
    idle_seconds: int
    gate_closed_at: datetime
    newest_snapshot_id: int | None
    newest_snapshot_at: datetime | None
    #: The writer acknowledged this closing and no snapshot is newer than the one it acknowledged.
    acknowledged: bool = False

    def as_xcom(self) -> dict[str, Any]:
        return {
            "done_by": "writer acknowledgement" if self.acknowledged else "idle window",
            "quiet_seconds": round(self.quiet_seconds, 3),
            "idle_seconds": self.idle_seconds,
            "gate_closed_at": self.gate_closed_at.isoformat(),
            "newest_snapshot_id": self.newest_snapshot_id,
            "newest_snapshot_at": self.newest_snapshot_at.isoformat() if self.newest_snapshot_at else None,
        }


def newest_snapshot(iceberg_conn_id: str, table: TableName) -> tuple[int | None, datetime | None]:
    """The id and commit time of the table's newest snapshot on any branch, read with pyiceberg."""
    try:
        metadata = IcebergHook(iceberg_conn_id).load_table(table.in_catalog).metadata
    except (NoSuchTableError, NoSuchNamespaceError):
        raise LookupError(
            f"table {table.in_catalog!r} not found through Iceberg connection {iceberg_conn_id!r}; for a SQL "
            f"(JDBC) catalog the connection id must equal the Spark catalog name {table.catalog!r}, because "
            "pyiceberg keys the catalog's rows by the name IcebergHook gives it, which is the connection id"
        ) from None
    if not metadata.snapshots:
        return None, None
    newest = max(metadata.snapshots, key=lambda s: s.timestamp_ms)
    return newest.snapshot_id, datetime.fromtimestamp(newest.timestamp_ms / 1000, tz=timezone.utc)


def check_writer_idle(
    *,
    table: str,
    owner: GateOwner,
    idle_seconds: int,
    iceberg_conn_id: str,
    write_gate_conn_id: str,
) -> IdleCheck:
    """Whether the writer has gone quiet while ``owner`` holds the gate.

    Quiet means either: the writer acknowledged this closing of the gate and the table's newest snapshot is
    the one it acknowledged as its last commit; or, for writers that never acknowledge, no snapshot has been
    committed for ``idle_seconds``, counted from the later of the gate's close time and the newest snapshot,
    by the database clock.

    Raises :class:`WriteGateNotHeldError` if ``owner`` no longer holds the gate: a writer may be committing.
    """
    name = TableName.parse(table)
    gate = WriteGateHook(write_gate_conn_id).get_state(str(name))
    if not gate.held_by(owner):
        raise WriteGateNotHeldError(
            f"the write gate of {name} is not held by {owner} (state {gate.state!r}, owner {gate.owner}, "
            f"lease until {gate.lease_expires_at}); the writer may be committing, so no rewrite may start"
        )
    snapshot_id, snapshot_at = newest_snapshot(iceberg_conn_id, name)
    assert gate.closed_at is not None  # a held gate has a close time
    quiet_since = max(gate.closed_at, snapshot_at) if snapshot_at else gate.closed_at
    quiet_seconds = (gate.database_now - quiet_since).total_seconds()
    acknowledged = gate.writer_acknowledged and snapshot_id == gate.writer_ack_snapshot_id
    return IdleCheck(
        done=acknowledged or quiet_seconds >= idle_seconds,
        acknowledged=acknowledged,
        quiet_seconds=quiet_seconds,
        idle_seconds=idle_seconds,
        gate_closed_at=gate.closed_at,
        newest_snapshot_id=snapshot_id,
        newest_snapshot_at=snapshot_at,
    )
