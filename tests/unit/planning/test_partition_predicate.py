"""Partition predicates in Spark SQL: the condition each partition value becomes, and when the predicate widens."""

from __future__ import annotations

import pytest

from airflow_iceberg.planning.health import PartitionHealth
from airflow_iceberg.planning.partition_predicate import _condition, partition_conditions, partition_predicate
from tests.unit.planning.partitions import partition


@pytest.mark.parametrize(
    ("transform", "source", "value", "condition"),
    [
        ("identity", "string", "20240620", "`dt` = '20240620'"),
        ("identity", "string", "it's", "`dt` = 'it\\'s'"),
        ("identity", "long", 42, "`dt` = 42"),
        ("identity", "boolean", True, "`dt` = true"),
        ("identity", "date", 19894, "`dt` = DATE '2024-06-20'"),
        ("identity", "string", None, "`dt` IS NULL"),
        ("day", "date", 19894, "`dt` >= DATE '2024-06-20' AND `dt` < DATE '2024-06-21'"),
        ("day", "timestamptz", 19894,
         "`dt` >= TIMESTAMP '2024-06-20 00:00:00+00:00' AND `dt` < TIMESTAMP '2024-06-21 00:00:00+00:00'"),
        ("day", "timestamp", 19894,
         "`dt` >= TIMESTAMP_NTZ '2024-06-20 00:00:00' AND `dt` < TIMESTAMP_NTZ '2024-06-21 00:00:00'"),
        ("hour", "timestamptz", 19894 * 24 + 13,
         "`dt` >= TIMESTAMP '2024-06-20 13:00:00+00:00' AND `dt` < TIMESTAMP '2024-06-20 14:00:00+00:00'"),
        ("month", "date", (2024 - 1970) * 12 + 11, "`dt` >= DATE '2024-12-01' AND `dt` < DATE '2025-01-01'"),
        ("year", "date", 54, "`dt` >= DATE '2024-01-01' AND `dt` < DATE '2025-01-01'"),
        ("bucket[16]", "long", 3, None),
        ("truncate[4]", "string", "2024", None),
    ],
)  # fmt: skip
def test_a_partition_value_becomes_the_condition_that_selects_its_rows(transform, source, value, condition):
    assert _condition(transform, ("dt",), source, value) == condition


def test_a_partition_of_a_nested_column_selects_rows_by_its_whole_path():
    """``day(payload.ts)`` narrows on `payload`.`ts`, never on a top-level `ts`; an ambiguous dotted name on none."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import DayTransform, IdentityTransform
    from pyiceberg.types import NestedField, StringType, StructType, TimestamptzType

    payload = StructType(NestedField(3, "ts", TimestamptzType()), NestedField(4, "a.b", StringType()))
    schema = Schema(NestedField(1, "ts", StringType()), NestedField(2, "payload", payload))
    spec = PartitionSpec(
        PartitionField(source_id=3, field_id=1000, transform=DayTransform(), name="ts_day"),
        PartitionField(source_id=4, field_id=1001, transform=IdentityTransform(), name="ab"),
    )
    assert partition_conditions(spec, schema, (19894, "x")) == [
        "`payload`.`ts` >= TIMESTAMP '2024-06-20 00:00:00+00:00' "
        "AND `payload`.`ts` < TIMESTAMP '2024-06-21 00:00:00+00:00'"
    ]


def test_a_partition_whose_transform_cannot_be_inverted_widens_the_predicate_to_the_whole_table():
    narrow = partition("20240620")
    bucketed = PartitionHealth(spec_id=0, partition={"id_bucket": 3}, conditions=[])
    assert partition_predicate([narrow]) == "`dt` = '20240620'"
    assert partition_predicate([narrow, bucketed]) is None  # never fewer rows than the partitions hold
