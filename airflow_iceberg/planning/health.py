"""A table's health from Iceberg metadata alone: per partition, its data files and the small ones among them,
position and equality delete files with their records' share of the data, bytes, and the snapshots that added
files since the partition was last rewritten.

:func:`read_health` reads the current snapshot's manifests through pyiceberg (the Iceberg provider's hook loads
the table): no Spark, no data file is opened. :class:`HealthThresholds` are the table's limits, which
:mod:`.plan` applies.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_iceberg.planning.partition_predicate import partition_conditions

#: Iceberg's default ``write.target-file-size-bytes``.
DEFAULT_TARGET_FILE_SIZE = 512 * 1024 * 1024


@dataclass(frozen=True)
class HealthThresholds:
    """When a partition needs a rewrite. The defaults follow Apache Amoro's self-optimizing, Iceberg and Flink.

    Only delete files that can still apply count (see :func:`read_health`); dangling ones never trigger a rewrite.

    - ``small_file_ratio`` (0.75): a data file is small below this share of the target file size. Iceberg's
      binpack rewrite takes files under 75 % of the target (its ``min-file-size-bytes`` default), so a small
      file here is one the rewrite would pick.
    - ``min_small_files`` (12): this many small files plus equality-delete files in a partition trigger a
      rewrite; Amoro's ``self-optimizing.minor.trigger.file-count``, which counts an equality-delete file as a
      fragment file (its ``CommonPartitionEvaluator``).
    - ``max_delete_ratio`` (0.1): delete records over a tenth of the partition's data records trigger one;
      Amoro's ``self-optimizing.major.trigger.duplicate-ratio``.
    - ``max_delete_age_minutes`` (60): any delete file older than this triggers one, so deletes never pile up
      on a partition that gets no more writes; Amoro's ``self-optimizing.minor.trigger.interval`` (one hour).
    - ``max_equality_delete_files`` and ``max_equality_delete_records`` (unset): this many equality-delete files,
      or records in them, trigger one; Flink ``TableMaintenance``'s ``eqDeleteFileCount`` and
      ``eqDeleteRecordCount``, which are unset by default there too.
    """

    small_file_ratio: float = 0.75
    min_small_files: int = 12
    max_delete_ratio: float = 0.1
    max_delete_age_minutes: float = 60.0
    max_equality_delete_files: int | None = None
    max_equality_delete_records: int | None = None


@dataclass
class PartitionHealth:
    """One partition's files, from the manifests of the table's current snapshot."""

    spec_id: int
    partition: dict[str, Any]  # partition field -> value as Iceberg writes it in paths (e.g. dt=20240620)
    data_files: int = 0
    small_files: int = 0
    data_bytes: int = 0
    data_records: int = 0
    # Delete files that can still apply: each has a live data file older than itself (see read_health).
    position_delete_files: int = 0
    deletion_vectors: int = 0  # of the position deletes, those that are format-v3 deletion vectors
    equality_delete_files: int = 0
    delete_records: int = 0
    equality_delete_records: int = 0
    delete_bytes: int = 0
    oldest_delete_ms: int | None = None
    # Delete files that apply to no live data file any more: removed, never a reason to rewrite data. Of them,
    # the position-delete files (not deletion vectors): rewrite_position_delete_files drops them (see plan).
    dangling_delete_files: int = 0
    dangling_position_delete_files: int = 0
    snapshots_since_rewrite: int = 0
    # Spark SQL conditions selecting the partition's rows (see partition_predicate), and the raw partition
    # tuple (for pyiceberg's evaluators); not reported.
    conditions: list[str] = field(default_factory=list, repr=False)
    values: tuple[Any, ...] = field(default=(), repr=False)

    @property
    def delete_files(self) -> int:
        return self.position_delete_files + self.equality_delete_files

    @property
    def delete_ratio(self) -> float:
        """Delete records per data record (0 without deletes; 1 when there are deletes but no data records)."""
        if not self.delete_records:
            return 0.0
        return self.delete_records / self.data_records if self.data_records else 1.0

    @property
    def label(self) -> str:
        return "/".join(f"{k}={v}" for k, v in self.partition.items()) or "(unpartitioned)"

    def report(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k not in ("conditions", "values")}
        out["partition"] = self.label
        out["delete_files"] = self.delete_files
        out["delete_ratio"] = round(self.delete_ratio, 4)
        return out


@dataclass
class TableHealth:
    """Every partition's health at one snapshot, and how long reading it took."""

    table: str
    snapshot_id: int | None
    target_file_size: int
    small_file_bytes: int
    partitions: list[PartitionHealth]
    snapshots_since_rewrite: int
    read_seconds: float
    read_at_ms: int

    @property
    def data_files(self) -> int:
        return sum(p.data_files for p in self.partitions)

    @property
    def delete_files(self) -> int:
        return sum(p.delete_files for p in self.partitions)

    @property
    def data_bytes(self) -> int:
        return sum(p.data_bytes for p in self.partitions)

    @property
    def equality_delete_files(self) -> int:
        return sum(p.equality_delete_files for p in self.partitions)

    @property
    def dangling_delete_files(self) -> int:
        return sum(p.dangling_delete_files for p in self.partitions)

    @property
    def all_delete_files(self) -> int:
        """Every delete file of the snapshot, dangling ones too: its summary's ``total-delete-files``, the count the
        run records and the health watch's rows give."""
        return self.delete_files + self.dangling_delete_files

    def totals(self) -> dict[str, int]:
        return {
            "data_files": self.data_files,
            "delete_files": self.delete_files,
            "equality_delete_files": self.equality_delete_files,
            "dangling_delete_files": self.dangling_delete_files,
            "bytes": self.data_bytes,
        }


def target_file_size(iceberg_table: Any, options: Mapping[str, Any] | None = None) -> int:
    """The rewrite's target: its ``target-file-size-bytes`` option, else the table's property, else Iceberg's."""
    if options and options.get("target-file-size-bytes") is not None:
        return int(options["target-file-size-bytes"])
    return int(iceberg_table.properties.get("write.target-file-size-bytes", DEFAULT_TARGET_FILE_SIZE))


def read_health(
    iceberg_table: Any, table: str, *, small_file_ratio: float, target: int | None = None, threads: int = 8
) -> TableHealth:
    """Read ``iceberg_table``'s (a pyiceberg table) current manifests into per-partition health.

    Manifests are read in ``threads`` threads (as pyiceberg's own scan planning does); only live entries count.
    """
    from pyiceberg.manifest import DataFileContent

    started = time.monotonic()
    target = target or target_file_size(iceberg_table)
    small_below = int(small_file_ratio * target)
    metadata = iceberg_table.metadata
    snapshot = iceberg_table.current_snapshot()
    now_ms = int(time.time() * 1000)
    if snapshot is None:
        return TableHealth(table, None, target, small_below, [], 0, time.monotonic() - started, now_ms)
    io = iceberg_table.io
    schema = iceberg_table.schema()
    specs = iceberg_table.specs()
    snapshots = {s.snapshot_id: s for s in metadata.snapshots}
    rewrites = {sid for sid, s in snapshots.items() if _operation(s) == "replace"}
    oldest_known_ms = min((s.timestamp_ms for s in metadata.snapshots), default=now_ms)

    manifests = snapshot.manifests(io)
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(manifests) or 1))) as pool:
        read = list(pool.map(lambda m: (m, m.fetch_manifest_entry(io, discard_deleted=True)), manifests))

    partitions: dict[tuple[int, tuple[Any, ...]], PartitionHealth] = {}
    # Per partition: (sequence number, snapshot id, added by a rewrite) of each live file.
    added: dict[tuple[int, tuple[Any, ...]], list[tuple[int, int, bool]]] = {}
    # Per partition: the lowest data sequence number and the lowest file sequence number of its live data files (a
    # file's file sequence number is the commit that added it: a rewrite's files carry its starting data sequence
    # number but their own commit's file sequence number); the live data files' paths, and the delete files.
    oldest_data: dict[tuple[int, tuple[Any, ...]], int] = {}
    oldest_added: dict[tuple[int, tuple[Any, ...]], int] = {}
    data_paths: set[str] = set()
    deletes: list[tuple[tuple[int, tuple[Any, ...]], int, Any, int]] = []
    for manifest, entries in read:
        spec = specs[manifest.partition_spec_id]
        for entry in entries:
            data_file = entry.data_file
            values = tuple(data_file.partition) if data_file.partition is not None else ()
            key = (spec.spec_id, values)
            health = partitions.get(key)
            if health is None:
                health = partitions[key] = PartitionHealth(
                    spec.spec_id,
                    _human_partition(spec, schema, values),
                    conditions=partition_conditions(spec, schema, values),
                    values=values,
                )
                added[key] = []
            sequence = entry.sequence_number if entry.sequence_number is not None else -1
            added[key].append((sequence, entry.snapshot_id, entry.snapshot_id in rewrites))
            if data_file.content == DataFileContent.DATA:
                health.data_files += 1
                health.data_bytes += data_file.file_size_in_bytes
                health.data_records += data_file.record_count
                if data_file.file_size_in_bytes < small_below:
                    health.small_files += 1
                oldest_data[key] = min(oldest_data.get(key, sequence), sequence)
                committed = entry.file_sequence_number if entry.file_sequence_number is not None else sequence
                oldest_added[key] = min(oldest_added.get(key, committed), committed)
                data_paths.add(data_file.file_path)
                continue
            # A delete file whose snapshot was expired is at least as old as the oldest snapshot kept.
            born = snapshots[entry.snapshot_id].timestamp_ms if entry.snapshot_id in snapshots else oldest_known_ms
            deletes.append((key, sequence, data_file, born))
    for key, sequence, data_file, born in deletes:
        health = partitions[key]
        if not _may_apply(data_file, sequence, oldest_data.get(key), data_paths, oldest_added.get(key)):
            health.dangling_delete_files += 1
            if data_file.content == DataFileContent.POSITION_DELETES and not _is_deletion_vector(data_file):
                health.dangling_position_delete_files += 1
            continue
        if data_file.content == DataFileContent.POSITION_DELETES:
            health.position_delete_files += 1
            health.deletion_vectors += _is_deletion_vector(data_file)
        else:
            health.equality_delete_files += 1
            health.equality_delete_records += data_file.record_count
        health.delete_records += data_file.record_count
        health.delete_bytes += data_file.file_size_in_bytes
        if health.oldest_delete_ms is None or born < health.oldest_delete_ms:
            health.oldest_delete_ms = born
    for key, health in partitions.items():
        last_rewrite = max((seq for seq, _, by_rewrite in added[key] if by_rewrite), default=-1)
        health.snapshots_since_rewrite = len(
            {sid for seq, sid, by_rewrite in added[key] if seq > last_rewrite and not by_rewrite}
        )
    ordered = sorted(partitions.values(), key=lambda p: (p.spec_id, p.label))
    return TableHealth(
        table=table,
        snapshot_id=snapshot.snapshot_id,
        target_file_size=target,
        small_file_bytes=small_below,
        partitions=ordered,
        snapshots_since_rewrite=_snapshots_since_rewrite(metadata, snapshot),
        read_seconds=time.monotonic() - started,
        read_at_ms=now_ms,
    )


#: The field id of a position-delete file's ``file_path`` column (Iceberg's ``MetadataColumns.DELETE_FILE_PATH``).
DELETE_FILE_PATH_ID = 2147483546


def referenced_data_file(delete_file: Any) -> str | None:
    """The one data file a position-delete file names, or None if it may name several (or is no position delete).

    Its ``referenced_data_file`` where the writer set it (format v3); else, as Iceberg's
    ``ContentFileUtil.referencedDataFile`` reads it, equal lower and upper bounds of its ``file_path`` column: a
    writer keeps those bounds only for a delete file that names one data file (Iceberg 1.4 and later), and in
    full (since 1.2), so equal bounds are that file's path.
    """
    from pyiceberg.manifest import DataFileContent

    referenced = getattr(delete_file, "referenced_data_file", None)
    if referenced or delete_file.content != DataFileContent.POSITION_DELETES:
        return referenced or None
    lower = (getattr(delete_file, "lower_bounds", None) or {}).get(DELETE_FILE_PATH_ID)
    upper = (getattr(delete_file, "upper_bounds", None) or {}).get(DELETE_FILE_PATH_ID)
    return bytes(lower).decode() if lower is not None and lower == upper else None


def _may_apply(
    delete_file: Any, sequence: int, oldest_data: int | None, data_paths: set[str], oldest_added: int | None = None
) -> bool:
    """Whether a delete file can still delete a row of a live data file of its partition (else it is dangling).

    Iceberg's rule: an equality delete applies to the partition's data files of a lower data sequence number, a
    position delete to those of a lower or equal one. A position delete that names its one data file
    (:func:`referenced_data_file`) applies only while that file is live: after a rewrite of that file it dangles,
    though its sequence number may equal the rewritten files' (a rewrite keeps its starting one). One that may name
    several (Flink's partition-scoped position deletes before Iceberg 1.6) names only files that existed when it was
    committed: once every live data file of its partition was added by a later commit (``oldest_added``, the
    oldest file sequence number), it names none of them.
    """
    from pyiceberg.manifest import DataFileContent

    referenced = referenced_data_file(delete_file)
    if referenced:
        return referenced in data_paths
    if oldest_data is None:
        return False
    if delete_file.content == DataFileContent.EQUALITY_DELETES:
        return oldest_data < sequence
    return oldest_data <= sequence and (oldest_added is None or oldest_added <= sequence)


def _is_deletion_vector(delete_file: Any) -> bool:
    file_format = getattr(delete_file, "file_format", None)
    return str(getattr(file_format, "value", file_format)).upper() == "PUFFIN"


def _operation(snapshot: Any) -> str | None:
    summary = snapshot.summary
    operation = getattr(summary, "operation", None) if summary is not None else None
    return getattr(operation, "value", operation)


def _snapshots_since_rewrite(metadata: Any, current: Any) -> int:
    """Snapshots in the current snapshot's ancestry since the newest rewrite (``replace``), or all kept ones."""
    by_id = {s.snapshot_id: s for s in metadata.snapshots}
    count, snapshot = 0, current
    while snapshot is not None and _operation(snapshot) != "replace":
        count += 1
        snapshot = by_id.get(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id is not None else None
    return count


def _human_partition(spec: Any, schema: Any, values: tuple[Any, ...]) -> dict[str, Any]:
    human = {}
    for spec_field, value in zip(spec.fields, values, strict=False):
        source = schema.find_field(spec_field.source_id).field_type
        human[spec_field.name] = spec_field.transform.to_human_string(source, value)
    return human
