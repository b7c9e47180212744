"""Trust, then verify: what each registered writer committed, read from the table's own history (pyiceberg).

A writer says what it commits when it registers (``core/conflicts.py``), and a compaction lets it keep committing
when that cannot conflict. Before each compaction the plan reads the snapshots committed since the table's last run
and, for each writer whose snapshots' summaries name it (its ``commits_as``), what they did:

- a snapshot that removed data files (a copy-on-write ``MERGE``/``UPDATE``/``DELETE``, a delete of whole files)
  changed existing files: row-level;
- one that added position deletes or deletion vectors is read further: a delete that names one data file
  (file-scoped, ``health.referenced_data_file``) added by the same snapshot touches the writer's own new file;
  one that names an older file, or a partition-scoped one (it may name several), conflicts with a rewrite:
  row-level. A deletion vector whose file pyiceberg does not read leaves the snapshot untold;
- equality deletes alone: upserts; data files alone: appends.

A writer shown to commit more than it declared is taken as that from then on (``GateStore.observe``), so a
mis-declared writer costs at most the one compaction it was not paused for. Snapshots no writer is named by belong
to unknown writers, which the idle rule waits out. The cost is bounded: only the snapshots since the last run, at
most :data:`HISTORY_LIMIT`, of writers that could still be let keep committing, and only those whose summaries say
they added position deletes are read beyond their summary.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_iceberg.core.conflicts import KIND_WORDS, CommitKind, widest
from airflow_iceberg.core.gate_state import WriterState
from airflow_iceberg.core.idle import summary_names
from airflow_iceberg.planning.health import referenced_data_file

log = logging.getLogger(__name__)

#: At most this many of the newest snapshots are read, however long ago the last run was.
HISTORY_LIMIT = 200


@dataclass(frozen=True)
class Observation:
    """What one writer's snapshot showed it commit, when more than it declared."""

    writer_id: str
    kind: CommitKind
    snapshot_id: int
    detail: str

    def as_xcom(self) -> dict[str, Any]:
        return {
            "writer": self.writer_id,
            "kind": str(self.kind),
            "snapshot_id": self.snapshot_id,
            "detail": self.detail,
        }


def _count(summary: dict[str, str], key: str) -> int:
    try:
        return int(summary.get(key) or 0)
    except ValueError:
        return 0


def _is_deletion_vector(file: Any) -> bool:
    return str(getattr(file, "file_format", "")).upper().endswith("PUFFIN")


def _added_files(iceberg_table: Any, snapshot: Any) -> tuple[set[str], list[Any]]:
    """The data files ``snapshot`` added, and the delete files it added (pyiceberg's manifests of that snapshot)."""
    from pyiceberg.manifest import DataFileContent, ManifestContent, ManifestEntryStatus

    io = iceberg_table.io
    data: set[str] = set()
    deletes: list[Any] = []
    for manifest in snapshot.manifests(io):
        if manifest.added_snapshot_id != snapshot.snapshot_id:
            continue
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
            if entry.status != ManifestEntryStatus.ADDED:
                continue
            file = entry.data_file
            if manifest.content == ManifestContent.DATA:
                data.add(file.file_path)
            elif file.content == DataFileContent.POSITION_DELETES:
                deletes.append(file)
    return data, deletes


def classify(iceberg_table: Any, snapshot: Any) -> tuple[CommitKind, str] | None:
    """What ``snapshot`` did, as a commit kind and a sentence; None for a rewrite (``replace``: maintenance, not a
    writer) or a snapshot whose position deletes cannot be told apart (a deletion vector whose file pyiceberg does
    not name)."""
    summary = snapshot.summary.additional_properties if snapshot.summary is not None else {}
    operation = getattr(snapshot.summary, "operation", None)
    operation = str(getattr(operation, "value", operation) or "").lower()
    if operation == "replace":
        return None
    said = f"snapshot {snapshot.snapshot_id} ({operation})"
    removed = _count(summary, "deleted-data-files")
    if removed:
        return CommitKind.ROW_LEVEL, f"{said} removed {removed} data files: it rewrote or deleted existing files"
    if _count(summary, "added-position-delete-files") or _count(summary, "added-dvs"):
        own, deletes = _added_files(iceberg_table, snapshot)
        older, scoped, unnamed = set(), 0, 0
        for file in deletes:
            named = referenced_data_file(file)
            if named is not None:
                older |= {named} - own
            elif _is_deletion_vector(file):
                unnamed += 1  # a deletion vector names one file, but pyiceberg may not read which
            else:
                scoped += 1  # bounds dropped or unequal: it may name several files (partition-scoped)
        if older:
            return (
                CommitKind.ROW_LEVEL,
                f"{said} deleted rows in {len(older)} data files older than its own commit (such as {min(older)})",
            )
        if scoped:
            return (
                CommitKind.ROW_LEVEL,
                f"{said} added {scoped} partition-scoped position-delete files, which conflict with every file a "
                "rewrite replaces in their partitions",
            )
        if unnamed:
            return None
        return CommitKind.UPSERTS, f"{said} deleted rows only in data files it added itself"
    if _count(summary, "added-equality-delete-files"):
        return CommitKind.UPSERTS, f"{said} added equality deletes"
    return CommitKind.APPENDS, f"{said} added data files only"


def observe_writers(
    iceberg_table: Any, writers: Iterable[WriterState], since_ms: int | None, limit: int = HISTORY_LIMIT
) -> list[Observation]:
    """For each writer of ``writers`` that declared a kind, the widest thing its snapshots committed after
    ``since_ms`` (epoch milliseconds; None: the newest ``limit``) showed, where wider than it is taken to commit.

    Writers taken as row-level already, or that declared nothing (they pause at every closing), and writers that
    name nothing their snapshots carry, are not looked for.
    """
    watched = [
        w
        for w in writers
        if w.commit_kind is not None and w.commits_as and widest(w.commit_kind, w.observed_kind) != CommitKind.ROW_LEVEL
    ]
    if not watched:
        return []
    snapshots: Sequence[Any] = sorted(iceberg_table.metadata.snapshots, key=lambda s: s.timestamp_ms)
    if since_ms is not None:
        snapshots = [s for s in snapshots if s.timestamp_ms > since_ms]
    snapshots = snapshots[-limit:]
    found: dict[str, Observation] = {}
    for snapshot in snapshots:
        summary = snapshot.summary.additional_properties if snapshot.summary is not None else {}
        owners = [w for w in watched if summary_names(summary, w.commits_as)]
        if not owners:
            continue
        classified = classify(iceberg_table, snapshot)
        if classified is None:
            continue
        kind, detail = classified
        for writer in owners:
            taken = widest(
                writer.commit_kind, writer.observed_kind, *(o.kind for o in [found.get(writer.writer_id)] if o)
            )
            if widest(taken, kind) != taken:
                found[writer.writer_id] = Observation(writer.writer_id, kind, snapshot.snapshot_id, detail)
    observations = list(found.values())
    for observation in observations:
        log.warning(
            "Writer %s committed %s (%s): it is taken as %s from now on, whatever it declares",
            observation.writer_id,
            KIND_WORDS[observation.kind],
            observation.detail,
            observation.kind,
        )
    return observations
