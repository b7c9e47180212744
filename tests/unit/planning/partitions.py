"""Partition and table health built by hand, for the planning rules' tests."""

from __future__ import annotations

from airflow_iceberg.planning.health import PartitionHealth, TableHealth

NOW_MS = 1_800_000_000_000
MINUTE_MS = 60_000


def partition(dt: str, **counts) -> PartitionHealth:
    return PartitionHealth(spec_id=0, partition={"dt": dt}, conditions=[f"`dt` = '{dt}'"], values=(dt,), **counts)


def table_health(*partitions: PartitionHealth) -> TableHealth:
    return TableHealth("lake.db.t", 1, 1024, 768, list(partitions), 3, 0.01, NOW_MS)
