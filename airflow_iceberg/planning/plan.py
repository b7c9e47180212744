"""The plan a table's health gives: skip (and why), or which partitions each rewrite takes.

:func:`make_plan` applies the table's :class:`HealthThresholds` to its health: a partition needs work when it
holds enough small files, or delete files that are too many or too old (:func:`partition_reasons`). No
partition needing work means no gate is closed and no Spark application starts. Otherwise each rewrite's
predicate is narrowed to the partitions that need it (:func:`.partition_predicate.partition_predicate`),
intersected with the predicate the run would use anyway. :func:`plan_table` reads the health and plans: the one
rule that ``plan_compaction`` and the health watch both apply.

Pure functions over plain data, apart from :func:`plan_table`, which reads metadata files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from airflow_iceberg.planning.health import (
    HealthThresholds,
    PartitionHealth,
    TableHealth,
    read_health,
    target_file_size,
)
from airflow_iceberg.planning.partition_predicate import partition_predicate


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
    if health.dangling_position_delete_files:
        reasons.append(dangling_reason(health))
    return reasons


def dangling_reason(health: PartitionHealth) -> str:
    """The reason a partition with position-delete files that name no live data file gets work.

    ``rewrite_position_delete_files`` keeps only the deletes that name a live data file (Iceberg's rewriter joins
    them with the table's data files), so rewriting such a file drops it; on every supported Iceberg, 1.5
    included. Deletion vectors and equality deletes that apply to nothing are left to ``remove-dangling-deletes``
    (Iceberg 1.7 and later), which runs after each data rewrite.
    """
    return f"{health.dangling_position_delete_files} position-delete files that apply to nothing"


def needs(procedure: str, health: PartitionHealth, reasons: list[str]) -> bool:
    """Whether ``procedure`` has work in a partition that needs a rewrite for ``reasons``.

    A partition whose only fault is position-delete files that apply to nothing needs only the cheap one,
    ``rewrite_position_delete_files``: no data file is rewritten for it.
    """
    if not reasons:
        return False
    if procedure == "rewrite_position_delete_files":
        return health.position_delete_files + health.dangling_position_delete_files > 0
    return health.data_files > 0 and reasons != [dangling_reason(health)]


class Decision(StrEnum):
    """What a run decided when it planned: the ``decision`` of its run record."""

    COMPACT = "compact"  # the partitions that need work, or the whole where when health planning is off
    SKIP = "skip"  # nothing needs work: the gate stays shut out of it
    FORCE = "force"  # forced by the run's Params: health not consulted
    FULL = "full"  # the daily full rewrite, whatever the health
    NONE = "none"  # the run failed before it planned


#: The decisions that rewrite.
COMPACTING = (Decision.COMPACT, Decision.FORCE, Decision.FULL)


@dataclass
class Plan:
    """What a run does: skip (and why), or which partitions each rewrite takes, with its predicate."""

    decision: Decision
    reason: str
    predicates: dict[str, str | None]  # procedure -> where it runs with; only the procedures that run
    partitions: dict[str, list[str]]  # procedure -> partition labels it takes (all of them when not narrowed)
    health: dict[str, Any]  # totals, and the partitions that need work with their reasons
    score: int = 0  # how bad the table is: small files plus delete files in the partitions needing work
    options: dict[str, dict[str, Any]] = field(default_factory=dict)  # procedure -> options the plan adds

    def as_xcom(self) -> dict[str, Any]:
        return {**asdict(self), "decision": self.decision.value}


def partition_scope(iceberg_table: Any, where: str) -> Callable[[PartitionHealth], bool] | None:
    """Whether a partition can hold rows matching ``where`` (its projection on the partition spec, by pyiceberg).

    None when pyiceberg cannot evaluate ``where``: every partition is then in scope, and Spark applies it.
    """
    from pyiceberg.expressions.visitors import expression_evaluator, inclusive_projection
    from pyiceberg.schema import Schema
    from pyiceberg.typedef import Record

    from airflow_iceberg.exceptions import PredicateError
    from airflow_iceberg.planning.predicates import parse_predicate, to_pyiceberg

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
            Decision.FORCE,
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
        return Plan(Decision.SKIP, reason, {}, {}, report, score)
    taken = sorted({label for labels in partitions.values() for label in labels})
    reason = f"{len(taken)} of {len(health.partitions)} partitions need work"
    return Plan(Decision.COMPACT, reason, predicates, partitions, report, score, options)


def _and(first: str | None, second: str | None) -> str | None:
    if first and second:
        return f"({first}) AND ({second})"
    return first or second
