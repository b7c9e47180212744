"""Partition predicates in Spark SQL: the rows of a set of partitions, as exactly as their transforms allow.

A rewrite narrowed to the partitions that need work gets the predicate :func:`partition_predicate` builds from
their values; a partition whose transform cannot be inverted widens it to the whole table.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from airflow_iceberg.core.procedures import sql_string_literal

if TYPE_CHECKING:
    from airflow_iceberg.planning.health import PartitionHealth

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


def partition_conditions(spec: Any, schema: Any, values: tuple[Any, ...]) -> list[str]:
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
