"""Maintenance after the gate reopens: expire old snapshots and remove orphan files, safely for streaming writers."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from airflow.sdk import Context

from airflow_iceberg.core.maintenance import ORPHAN_MARGIN, minimum_orphan_age
from airflow_iceberg.hooks.catalogs import load_iceberg_table
from airflow_iceberg.operators.procedure import IcebergProcedureOperator


def _run_time(context: Context) -> datetime:
    """The run's logical date (or, for runs without one, the time it started), in UTC."""
    moment = context.get("logical_date") or context["dag_run"].start_date
    if moment is None:
        raise ValueError(f"DAG run {context['run_id']} has neither a logical date nor a start date")
    return moment.astimezone(timezone.utc)


def _snapshot_time(timestamp_ms: int) -> datetime:
    return datetime.fromtimestamp(timestamp_ms / 1000, tz=timezone.utc)


def _timestamp(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")


class ExpireSnapshotsOperator(IcebergProcedureOperator):
    """``expire_snapshots`` that never expires the newest snapshot carrying a streaming writer's checkpoint.

    Snapshots older than ``older_than_hours`` before the table's current snapshot are expired (keeping at
    least ``retain_last``); the cut-off is measured on the table's own commit times, not a worker's clock, so a
    backfilled run behaves like a scheduled one. It never passes the newest snapshot whose summary carries
    ``checkpoint_marker``: that snapshot, and every newer one, survives. Files that no surviving snapshot
    references (the small files a rewrite replaced, once the snapshots before it are gone) are deleted.

    :param older_than_hours: Expire snapshots older than this, counted back from the current snapshot.
    :param retain_last: Keep at least this many of the newest snapshots.
    :param checkpoint_marker: Snapshot-summary key a streaming writer sets at each commit, e.g.
        :data:`FLINK_CHECKPOINT_MARKER`.
    """

    def __init__(
        self,
        *,
        older_than_hours: float,
        retain_last: int,
        checkpoint_marker: str,
        **kwargs: Any,
    ) -> None:
        if older_than_hours < 0:
            raise ValueError(f"older_than_hours must not be negative, got {older_than_hours!r}")
        kwargs.setdefault("procedures", ["expire_snapshots"])
        kwargs.setdefault("arguments", {"expire_snapshots": {"retain_last": retain_last}})
        super().__init__(**kwargs)
        self.older_than_hours = older_than_hours
        self.retain_last = retain_last
        self.checkpoint_marker = checkpoint_marker

    def execute(self, context: Context) -> dict[str, Any] | None:  # type: ignore[override]  # results to XCom
        metadata = load_iceberg_table(self.iceberg_conn_id, self.table).metadata
        current = metadata.snapshot_by_id(metadata.current_snapshot_id) if metadata.current_snapshot_id else None
        if current is None:
            self.log.info("%s has no snapshot: nothing to expire", self.table)
            return None
        cutoff = _snapshot_time(current.timestamp_ms) - timedelta(hours=self.older_than_hours)
        marker = self._newest_marked_snapshot(metadata)
        if marker is not None and marker[1] < cutoff:
            self.log.info(
                "Keeping snapshot %s, the newest with %s: expiring only snapshots older than it",
                marker[0],
                self.checkpoint_marker,
            )
            cutoff = marker[1]
        self.arguments = {"expire_snapshots": {"older_than": _timestamp(cutoff), "retain_last": self.retain_last}}
        return super().execute(context)

    def _newest_marked_snapshot(self, metadata: Any) -> tuple[int, datetime] | None:
        marked = [
            s
            for s in metadata.snapshots
            if s.summary is not None and self.checkpoint_marker in s.summary.additional_properties
        ]
        if not marked:
            return None
        newest = max(marked, key=lambda s: s.timestamp_ms)
        return newest.snapshot_id, _snapshot_time(newest.timestamp_ms)


class RemoveOrphanFilesOperator(IcebergProcedureOperator):
    """``remove_orphan_files`` for files older than ``older_than_hours``, never within a gate's longest pause.

    A closed gate keeps a writer's freshly written files uncommitted for up to its longest pause, and to this
    procedure they look like orphans: removing them loses data. So ``older_than_hours`` must cover the longest
    pause of the table's gate (``max_pause_seconds``) plus :data:`ORPHAN_MARGIN`, and Iceberg's own 24-hour
    floor; a shorter value is refused when the DAG is parsed.

    :param older_than_hours: Remove unreferenced files older than this, before the run's logical date.
    :param max_pause_seconds: The longest the table's gate keeps writers paused.
    """

    def __init__(self, *, older_than_hours: float, max_pause_seconds: int, **kwargs: Any) -> None:
        minimum = minimum_orphan_age(max_pause_seconds)
        if timedelta(hours=older_than_hours) < minimum:
            raise ValueError(
                f"remove_orphan_files older_than_hours={older_than_hours!r} is too short: it must be at least the "
                f"gate's longest pause ({max_pause_seconds} s) plus a margin of {ORPHAN_MARGIN}, and at least "
                f"Iceberg's own 24 hours, i.e. {minimum.total_seconds() / 3600:.2f} hours, because a closed gate "
                "keeps a writer's files uncommitted for up to its longest pause and removing them would lose data"
            )
        kwargs.setdefault("procedures", ["remove_orphan_files"])
        super().__init__(**kwargs)
        self.older_than_hours = older_than_hours

    def execute(self, context: Context) -> dict[str, Any] | None:  # type: ignore[override]  # results to XCom
        cutoff = _run_time(context) - timedelta(hours=self.older_than_hours)
        self.arguments = {"remove_orphan_files": {"older_than": _timestamp(cutoff)}}
        return super().execute(context)
