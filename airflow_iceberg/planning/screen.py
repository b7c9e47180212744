"""Screening: what a snapshot's summary alone says, so that healthy tables cost no manifest read.

The health watch reads a table's metadata file JSON (:class:`SnapshotFacts`) and, from it and its last manifest
read (:class:`ManifestRead`), decides whether the manifests need reading at all (:func:`screen`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_iceberg.planning.health import HealthThresholds, TableHealth
from airflow_iceberg.planning.plan import Decision, Plan


@dataclass(frozen=True)
class SnapshotFacts:
    """A table's current snapshot as its metadata file's JSON gives it, read without building pyiceberg's model.

    ``data_files`` and ``delete_files`` are the summary's totals (None if the writer left them out);
    ``added_since`` maps each ancestor snapshot id still in the metadata to the data files its descendants added,
    up to the current snapshot; ``only_added_since`` holds the ancestors after which no snapshot, up to the current
    one, removed a file (no rewrite, no delete of a file): the table only grew since.
    """

    snapshot_id: int | None
    data_files: int | None = None
    delete_files: int | None = None
    added_since: Mapping[int, int] = field(default_factory=dict)
    only_added_since: frozenset[int] = frozenset()

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any]) -> SnapshotFacts:
        current = metadata.get("current-snapshot-id")
        snapshots = {s["snapshot-id"]: s for s in metadata.get("snapshots") or ()}
        if current is None or current == -1 or current not in snapshots:
            return cls(None)
        summary = snapshots[current].get("summary") or {}
        added_since: dict[int, int] = {}
        only_added: set[int] = set()
        added, grew, snapshot = 0, True, snapshots[current]
        while True:
            # Iceberg writes a count only when it is not zero.
            count = int((snapshot.get("summary") or {}).get("added-data-files", 0))
            grew = grew and not removes_files(snapshot.get("summary"))
            parent = snapshot.get("parent-snapshot-id")
            if parent is None or parent not in snapshots:
                break
            added += count
            added_since[parent] = added
            if grew:
                only_added.add(parent)
            snapshot = snapshots[parent]
        return cls(
            current,
            _int(summary.get("total-data-files")),
            _int(summary.get("total-delete-files")),
            added_since,
            frozenset(only_added),
        )


#: The snapshot summary's counts of files a commit removed (Iceberg's ``SnapshotSummary``), written when not zero.
_REMOVED_FILE_COUNTS = ("deleted-data-files", "removed-delete-files", "removed-dvs")


def removes_files(summary: Mapping[str, Any] | None) -> bool:
    """Whether a snapshot may have removed a data or delete file (a rewrite, a delete of whole files); True when its
    summary says too little to tell."""
    if not summary or "operation" not in summary:
        return True
    if summary["operation"] in ("replace", "delete"):
        return True
    return any(int(summary.get(key, 0)) for key in _REMOVED_FILE_COUNTS)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True)
class ManifestRead:
    """What one read of a table's manifests found, kept so that later snapshots can be screened against it."""

    snapshot_id: int
    max_small_files: int  # the most small files in one partition
    oldest_delete_ms: int | None
    plan: Plan

    @classmethod
    def of(cls, health: TableHealth, plan: Plan) -> ManifestRead:
        deletes = [p.oldest_delete_ms for p in health.partitions if p.oldest_delete_ms is not None]
        return cls(
            snapshot_id=health.snapshot_id if health.snapshot_id is not None else -1,
            max_small_files=max((p.small_files for p in health.partitions), default=0),
            oldest_delete_ms=min(deletes, default=None),
            plan=plan,
        )

    def delete_age_due(self, thresholds: HealthThresholds, now_ms: int) -> bool:
        """Whether its oldest delete file has come of age since (the one threshold that time alone can meet)."""
        if self.oldest_delete_ms is None or self.plan.decision == Decision.COMPACT:
            return False
        return (now_ms - self.oldest_delete_ms) / 60_000 >= thresholds.max_delete_age_minutes


def screen(facts: SnapshotFacts, last_read: ManifestRead | None, thresholds: HealthThresholds) -> tuple[bool, str]:
    """Whether the table may need work, so that its manifests must be read (True), or is healthy for sure (False),
    from its snapshot summary alone; and why, in words.

    Conservative: it never says healthy when :func:`make_plan` could find work. Delete files always call for a
    read (their ratio and age live in the manifests). Otherwise no partition can hold more small files than the
    table holds data files, nor more than it held at the last read plus every data file added since.
    """
    if facts.snapshot_id is None:
        return False, "no snapshot yet"
    if facts.data_files is None or facts.delete_files is None:
        return True, "its snapshot summary has no file totals"
    if facts.delete_files:
        return True, f"{facts.delete_files} delete files"
    bound, basis = facts.data_files, f"{facts.data_files} data files in all"
    if last_read is not None and last_read.snapshot_id in facts.added_since:
        since = last_read.max_small_files + facts.added_since[last_read.snapshot_id]
        if since < bound:
            bound = since
            basis = (
                f"at most {last_read.max_small_files} small in a partition at the last read, "
                f"{facts.added_since[last_read.snapshot_id]} data files added since"
            )
    if bound >= thresholds.min_small_files:
        return True, f"up to {bound} small files in a partition ({basis}; needs {thresholds.min_small_files})"
    return False, f"healthy: no delete files, {basis} (a partition needs {thresholds.min_small_files} small files)"
