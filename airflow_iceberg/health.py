"""Table health from Iceberg metadata alone, and the plan it gives: which partitions each rewrite should take.

:func:`read_health` reads the current snapshot's manifests through pyiceberg (the Iceberg provider's hook loads
the table): no Spark, no data file is opened. Per partition it counts data files and the small ones among them,
position and equality delete files with their records' share of the data, bytes, and the snapshots that added
files since the partition was last rewritten.

:func:`make_plan` applies the table's :class:`HealthThresholds` to that: a partition needs work when it holds
enough small files, or delete files that are too many or too old. No partition needing work means no gate is
closed and no Spark application starts. Otherwise each rewrite's predicate is narrowed to the partitions that
need it (:func:`partition_predicate`), intersected with the predicate the run would use anyway.

Pure functions over plain data, apart from :func:`read_health`, which only reads metadata files.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Any

from airflow_iceberg.core.procedures import sql_string_literal

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
      on a quiet partition; Amoro's ``self-optimizing.minor.trigger.interval`` (one hour).
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
    # Delete files that apply to no live data file any more: removed, never a reason to rewrite data.
    dangling_delete_files: int = 0
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
    # Per partition: the oldest live data file's sequence number, the live data files' paths, and the delete files.
    oldest_data: dict[tuple[int, tuple[Any, ...]], int] = {}
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
                    conditions=_conditions(spec, schema, values),
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
                data_paths.add(data_file.file_path)
                continue
            # A delete file whose snapshot was expired is at least as old as the oldest snapshot kept.
            born = snapshots[entry.snapshot_id].timestamp_ms if entry.snapshot_id in snapshots else oldest_known_ms
            deletes.append((key, sequence, data_file, born))
    for key, sequence, data_file, born in deletes:
        health = partitions[key]
        if not _may_apply(data_file, sequence, oldest_data.get(key), data_paths):
            health.dangling_delete_files += 1
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


def _may_apply(delete_file: Any, sequence: int, oldest_data: int | None, data_paths: set[str]) -> bool:
    """Whether a delete file can still delete a row of a live data file of its partition (else it is dangling).

    Iceberg's rule: an equality delete applies to the partition's data files of a lower sequence number, a
    position delete to those of a lower or equal one. A delete file that names its one data file
    (``referenced_data_file``) applies only while that file is live; pyiceberg 0.12 does not expose that field
    yet, so today the sequence rule decides for every file, which keeps a file-scoped position delete of a
    replaced file counted until a newer rewrite.
    """
    from pyiceberg.manifest import DataFileContent

    referenced = getattr(delete_file, "referenced_data_file", None)
    if referenced:
        return referenced in data_paths
    if oldest_data is None:
        return False
    if delete_file.content == DataFileContent.EQUALITY_DELETES:
        return oldest_data < sequence
    return oldest_data <= sequence


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


# --- Decisions -----------------------------------------------------------------------------------------------


def partition_reasons(health: PartitionHealth, thresholds: HealthThresholds, now_ms: int) -> list[str]:
    """Why ``health``'s partition needs a rewrite, one phrase per threshold met; empty when it is healthy."""
    reasons = []
    fragments = health.small_files + health.equality_delete_files
    if fragments >= thresholds.min_small_files:
        counted = f"{health.small_files} small files"
        if health.equality_delete_files:
            counted += f" and {health.equality_delete_files} equality-delete files"
        reasons.append(f"{counted} (>= {thresholds.min_small_files})")
    limit = thresholds.max_equality_delete_files
    if limit is not None and health.equality_delete_files and health.equality_delete_files >= limit:
        reasons.append(f"{health.equality_delete_files} equality-delete files (>= {limit})")
    limit = thresholds.max_equality_delete_records
    if limit is not None and health.equality_delete_records and health.equality_delete_records >= limit:
        reasons.append(f"{health.equality_delete_records} equality-delete records (>= {limit})")
    if health.delete_files and health.delete_ratio >= thresholds.max_delete_ratio:
        reasons.append(f"delete ratio {health.delete_ratio:.2f} (>= {thresholds.max_delete_ratio:g})")
    if health.oldest_delete_ms is not None:
        age_minutes = (now_ms - health.oldest_delete_ms) / 60_000
        if age_minutes >= thresholds.max_delete_age_minutes:
            reasons.append(f"a delete file {age_minutes:.0f} min old (>= {thresholds.max_delete_age_minutes:g})")
    return reasons


def needs(procedure: str, health: PartitionHealth, reasons: list[str]) -> bool:
    """Whether ``procedure`` has work in a partition that needs a rewrite for ``reasons``."""
    if not reasons:
        return False
    if procedure == "rewrite_position_delete_files":
        return health.position_delete_files > 0
    return health.data_files > 0


@dataclass
class Plan:
    """What a run does: skip (and why), or which partitions each rewrite takes, with its predicate."""

    decision: str  # "compact", "skip" or "force"
    reason: str
    predicates: dict[str, str | None]  # procedure -> where it runs with; only the procedures that run
    partitions: dict[str, list[str]]  # procedure -> partition labels it takes (all of them when not narrowed)
    health: dict[str, Any]  # totals, and the partitions that need work with their reasons
    score: int = 0  # how bad the table is: small files plus delete files in the partitions needing work
    options: dict[str, dict[str, Any]] = field(default_factory=dict)  # procedure -> options the plan adds

    def as_xcom(self) -> dict[str, Any]:
        return asdict(self)


def partition_scope(iceberg_table: Any, where: str) -> Callable[[PartitionHealth], bool] | None:
    """Whether a partition can hold rows matching ``where`` (its projection on the partition spec, by pyiceberg).

    None when pyiceberg cannot evaluate ``where``: every partition is then in scope, and Spark applies it.
    """
    from pyiceberg.expressions.visitors import expression_evaluator, inclusive_projection
    from pyiceberg.schema import Schema
    from pyiceberg.typedef import Record

    from airflow_iceberg.exceptions import PredicateError
    from airflow_iceberg.predicates import parse_predicate, to_pyiceberg

    schema, specs = iceberg_table.schema(), iceberg_table.specs()
    try:
        expression = to_pyiceberg(parse_predicate(where), schema)
    except PredicateError:
        return None
    evaluators: dict[int, Callable[[Any], bool]] = {}

    def in_scope(partition: PartitionHealth) -> bool:
        evaluate = evaluators.get(partition.spec_id)
        if evaluate is None:
            spec = specs[partition.spec_id]
            projected = inclusive_projection(schema, spec)(expression)
            evaluate = expression_evaluator(Schema(*spec.partition_type(schema).fields), projected, True)
            evaluators[partition.spec_id] = evaluate
        return evaluate(Record(*partition.values))

    return in_scope


def plan_table(
    iceberg_table: Any,
    table: str,
    thresholds: HealthThresholds,
    where: Mapping[str, str | None],
    options: Mapping[str, Any] | None = None,
    *,
    force: bool = False,
) -> tuple[TableHealth, Plan]:
    """Read ``iceberg_table``'s health and plan a run with each procedure's predicate (``where``): the one rule that
    ``plan_compaction`` applies when a run starts and the health watch applies before it starts one.

    ``options`` are the run's ``rewrite_data_files`` options: their target file size defines small files.
    """
    health = read_health(
        iceberg_table,
        table,
        small_file_ratio=thresholds.small_file_ratio,
        target=target_file_size(iceberg_table, options),
    )
    scopes = {p: partition_scope(iceberg_table, w) for p, w in where.items() if w}
    in_scope = {p: s for p, s in scopes.items() if s is not None}
    return health, make_plan(health, thresholds, where, in_scope=in_scope, force=force)


#: The most partitions a rewrite's predicate names one by one; with more, it takes its whole ``where``.
MAX_NARROWED_PARTITIONS = 200


def make_plan(
    health: TableHealth,
    thresholds: HealthThresholds,
    where: Mapping[str, str | None],
    *,
    in_scope: Mapping[str, Callable[[PartitionHealth], bool]] | None = None,
    force: bool = False,
) -> Plan:
    """The plan for a run, from ``health`` and the predicate each procedure would use (``where``).

    ``in_scope`` says, per procedure, whether a partition is within that procedure's predicate (from the
    predicate's projection on the partition spec); a procedure without one takes every partition. A procedure
    with more than :data:`MAX_NARROWED_PARTITIONS` partitions needing work keeps its predicate unchanged. With
    ``force`` the health is reported but ignored: each procedure runs with its predicate unchanged.
    """
    in_scope = in_scope or {}
    unhealthy = []
    for partition in health.partitions:
        reasons = partition_reasons(partition, thresholds, health.read_at_ms)
        if reasons:
            unhealthy.append((partition, reasons))
    report = {
        "snapshot_id": health.snapshot_id,
        "target_file_size": health.target_file_size,
        "small_file_bytes": health.small_file_bytes,
        "partitions": len(health.partitions),
        "snapshots_since_rewrite": health.snapshots_since_rewrite,
        "read_seconds": round(health.read_seconds, 3),
        **health.totals(),
        "unhealthy": [{**p.report(), "reasons": r} for p, r in unhealthy],
    }
    score = sum(p.small_files + p.delete_files for p, _ in unhealthy)
    if force:
        return Plan(
            "force",
            "forced by the run's Params: health not consulted",
            dict(where),
            {p: ["(all within its where)"] for p in where},
            report,
            score,
        )
    predicates: dict[str, str | None] = {}
    partitions: dict[str, list[str]] = {}
    options: dict[str, dict[str, Any]] = {}
    for procedure, predicate in where.items():
        scope = in_scope.get(procedure, lambda _: True)
        chosen = [p for p, reasons in unhealthy if needs(procedure, p, reasons) and scope(p)]
        if not chosen:
            continue
        labels = [p.label for p in chosen]
        if len(chosen) > MAX_NARROWED_PARTITIONS:
            # Spelled out, so many partitions would make a predicate too long for a command line, and a record
            # too long for its column: the rewrite takes its whole where, and Iceberg picks the files in it.
            predicates[procedure] = predicate
            labels = [*labels[:MAX_NARROWED_PARTITIONS], f"... {len(chosen) - MAX_NARROWED_PARTITIONS} more"]
        else:
            predicates[procedure] = _and(predicate, partition_predicate(chosen))
        partitions[procedure] = labels
        if procedure == "rewrite_data_files" and any(p.equality_delete_files for p in chosen):
            # An equality delete applies to every older data file of its partition, whatever it holds: it goes away
            # only once they are all rewritten (then it dangles, and remove-dangling-deletes drops it). Iceberg's
            # delete-file-threshold picks only the files whose key ranges it overlaps, and would leave it behind.
            options[procedure] = {"rewrite-all": True}
    if not predicates:
        if not health.partitions:
            reason = "the table has no files"
        elif unhealthy:
            reason = "the partitions that need work are outside every rewrite's where"
        else:
            reason = (
                f"no partition needs work: none has {thresholds.min_small_files} small files (under "
                f"{health.small_file_bytes} bytes) and equality-delete files, or deletes over ratio "
                f"{thresholds.max_delete_ratio:g} or {thresholds.max_delete_age_minutes:g} min old"
            )
        return Plan("skip", reason, {}, {}, report, score)
    taken = sorted({label for labels in partitions.values() for label in labels})
    reason = f"{len(taken)} of {len(health.partitions)} partitions need work"
    return Plan("compact", reason, predicates, partitions, report, score, options)


def _and(first: str | None, second: str | None) -> str | None:
    if first and second:
        return f"({first}) AND ({second})"
    return first or second


# --- Partition predicates in Spark SQL ------------------------------------------------------------------------

_EPOCH = date(1970, 1, 1)


def partition_predicate(partitions: Iterable[PartitionHealth]) -> str | None:
    """A Spark SQL predicate covering ``partitions``' rows, as exactly as their transforms allow.

    Identity partitions and ``year``/``month``/``day``/``hour`` of a date or timestamp become equalities or
    ranges on the source column; ``bucket`` and ``truncate`` cannot be inverted, so their fields add no
    condition (the predicate then covers more rows than the partitions: never fewer). None when a partition
    cannot be narrowed at all (an unpartitioned table), which means the whole table.
    """
    clauses = []
    for partition in partitions:
        if not partition.conditions:
            return None
        clauses.append(" AND ".join(partition.conditions))
    unique = list(dict.fromkeys(clauses))
    if not unique:
        return None
    return unique[0] if len(unique) == 1 else " OR ".join(f"({c})" for c in unique)


def _conditions(spec: Any, schema: Any, values: tuple[Any, ...]) -> list[str]:
    conditions = []
    for spec_field, value in zip(spec.fields, values, strict=False):
        path = _column_path(schema, spec_field.source_id)
        if path is None:  # no condition widens the predicate, never narrows it
            continue
        source = schema.find_field(spec_field.source_id)
        condition = _condition(str(spec_field.transform), path, str(source.field_type), value)
        if condition:
            conditions.append(condition)
    return conditions


def _column_path(schema: Any, field_id: int) -> tuple[str, ...] | None:
    """The names from the top-level column down to ``field_id`` (``payload``, ``ts``); None if a name holds a dot,
    which makes pyiceberg's dotted name ambiguous."""
    parts = tuple(schema.find_column_name(field_id).split("."))
    accessor, depth = schema.accessor_for_field(field_id), 1
    while accessor.inner is not None:
        accessor, depth = accessor.inner, depth + 1
    return parts if len(parts) == depth else None


def _quote(path: tuple[str, ...]) -> str:
    return ".".join("`" + name.replace("`", "``") + "`" for name in path)


def _condition(transform: str, column: tuple[str, ...], source_type: str, value: Any) -> str | None:
    """The condition selecting one partition value of one field of ``column`` (its path from the top-level
    column), or None if the transform cannot be inverted."""
    col = _quote(column)
    if value is None:
        return f"{col} IS NULL" if transform in ("identity", "year", "month", "day", "hour") else None
    if transform == "identity":
        if source_type == "string":
            return f"{col} = {sql_string_literal(value)}"
        if source_type in ("int", "long") or source_type.startswith("decimal"):
            return f"{col} = {value}"
        if source_type == "boolean":
            return f"{col} = {'true' if value else 'false'}"
        if source_type == "date":
            return f"{col} = DATE '{_EPOCH + timedelta(days=int(value))}'"
        return None
    if transform not in ("year", "month", "day", "hour") or source_type not in ("date", "timestamp", "timestamptz"):
        return None
    start, end = _period(transform, int(value))
    if source_type == "date":
        return f"{col} >= DATE '{start.date()}' AND {col} < DATE '{end.date()}'"
    kind, suffix = ("TIMESTAMP", "+00:00") if source_type == "timestamptz" else ("TIMESTAMP_NTZ", "")
    return f"{col} >= {kind} '{start:%Y-%m-%d %H:%M:%S}{suffix}' AND {col} < {kind} '{end:%Y-%m-%d %H:%M:%S}{suffix}'"


def _period(transform: str, value: int) -> tuple[datetime, datetime]:
    """The [start, end) of one ``year``/``month``/``day``/``hour`` partition value (counted from 1970)."""
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    if transform == "hour":
        start = epoch + timedelta(hours=value)
        return start, start + timedelta(hours=1)
    if transform == "day":
        start = epoch + timedelta(days=value)
        return start, start + timedelta(days=1)
    months = value * 12 if transform == "year" else value
    step = 12 if transform == "year" else 1
    start = datetime(1970 + months // 12, months % 12 + 1, 1, tzinfo=timezone.utc)
    after = months + step
    return start, datetime(1970 + after // 12, after % 12 + 1, 1, tzinfo=timezone.utc)


# --- Screening: what the snapshot summary alone says, so that healthy tables cost no manifest read --------------


@dataclass(frozen=True)
class SnapshotFacts:
    """A table's current snapshot as its metadata file's JSON gives it, read without building pyiceberg's model.

    ``data_files`` and ``delete_files`` are the summary's totals (None if the writer left them out);
    ``added_since`` maps each ancestor snapshot id still in the metadata to the data files its descendants added,
    up to the current snapshot.
    """

    snapshot_id: int | None
    data_files: int | None = None
    delete_files: int | None = None
    added_since: Mapping[int, int] = field(default_factory=dict)

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any]) -> SnapshotFacts:
        current = metadata.get("current-snapshot-id")
        snapshots = {s["snapshot-id"]: s for s in metadata.get("snapshots") or ()}
        if current is None or current == -1 or current not in snapshots:
            return cls(None)
        summary = snapshots[current].get("summary") or {}
        added_since: dict[int, int] = {}
        added, snapshot = 0, snapshots[current]
        while True:
            # Iceberg writes a count only when it is not zero.
            count = int((snapshot.get("summary") or {}).get("added-data-files", 0))
            parent = snapshot.get("parent-snapshot-id")
            if parent is None or parent not in snapshots:
                break
            added += count
            added_since[parent] = added
            snapshot = snapshots[parent]
        return cls(current, _int(summary.get("total-data-files")), _int(summary.get("total-delete-files")), added_since)


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
        if self.oldest_delete_ms is None or self.plan.decision == "compact":
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
