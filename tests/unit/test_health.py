"""Table health and the plan: the thresholds, the skip, partition predicates, reading real metadata, and screening."""

from __future__ import annotations

from datetime import date

import pyarrow as pa
import pytest

from airflow_iceberg.health import (
    MAX_NARROWED_PARTITIONS,
    HealthThresholds,
    ManifestRead,
    PartitionHealth,
    Plan,
    SnapshotFacts,
    TableHealth,
    _condition,
    _conditions,
    make_plan,
    partition_predicate,
    partition_reasons,
    read_health,
    screen,
)

NOW_MS = 1_800_000_000_000
MINUTE_MS = 60_000
THRESHOLDS = HealthThresholds(small_file_ratio=0.75, min_small_files=4, max_delete_ratio=0.1, max_delete_age_minutes=60)


def partition(dt: str, **counts) -> PartitionHealth:
    return PartitionHealth(spec_id=0, partition={"dt": dt}, conditions=[f"`dt` = '{dt}'"], values=(dt,), **counts)


def table_health(*partitions: PartitionHealth) -> TableHealth:
    return TableHealth("lake.db.t", 1, 1024, 768, list(partitions), 3, 0.01, NOW_MS)


@pytest.mark.parametrize(
    ("counts", "reasons"),
    [
        ({"data_files": 3, "small_files": 3}, []),
        ({"data_files": 4, "small_files": 4}, ["4 small files (>= 4)"]),
        (
            {
                "data_files": 4,
                "small_files": 1,
                "position_delete_files": 1,
                "data_records": 100,
                "delete_records": 5,
                "oldest_delete_ms": NOW_MS - 59 * MINUTE_MS,
            },
            [],
        ),
        (
            {
                "data_files": 4,
                "position_delete_files": 1,
                "data_records": 100,
                "delete_records": 10,
                "oldest_delete_ms": NOW_MS,
            },
            ["delete ratio 0.10 (>= 0.1)"],
        ),
        (
            {
                "data_files": 4,
                "equality_delete_files": 1,
                "data_records": 100,
                "delete_records": 1,
                "oldest_delete_ms": NOW_MS - 61 * MINUTE_MS,
            },
            ["a delete file 61 min old (>= 60)"],
        ),
        (
            {
                "data_files": 4,
                "small_files": 1,
                "equality_delete_files": 3,
                "data_records": 100,
                "delete_records": 3,
                "equality_delete_records": 3,
                "oldest_delete_ms": NOW_MS,
            },
            ["1 small files and 3 equality-delete files (>= 4)"],
        ),
        (
            {"data_files": 4, "small_files": 3, "dangling_delete_files": 9},
            [],
        ),
    ],
    ids=[
        "three-small",
        "four-small",
        "young-sparse-deletes",
        "delete-ratio",
        "old-delete",
        "equality-deletes-count-as-fragments",
        "dangling-deletes-never-trigger",
    ],
)
def test_a_partition_needs_work_exactly_when_a_threshold_is_met(counts, reasons):
    assert partition_reasons(partition("20240620", **counts), THRESHOLDS, NOW_MS) == reasons


@pytest.mark.parametrize(
    ("limits", "reasons"),
    [
        ({}, []),
        ({"max_equality_delete_files": 2}, ["2 equality-delete files (>= 2)"]),
        ({"max_equality_delete_records": 8}, ["8 equality-delete records (>= 8)"]),
        ({"max_equality_delete_files": 3, "max_equality_delete_records": 9}, []),
    ],
    ids=["unset-as-in-flink", "file-count", "record-count", "below-both"],
)
def test_flinks_equality_delete_thresholds_apply_only_when_set(limits, reasons):
    thresholds = HealthThresholds(min_small_files=12, max_delete_ratio=1.0, max_delete_age_minutes=600, **limits)
    health = partition(
        "20240620",
        data_files=1,
        equality_delete_files=2,
        data_records=100,
        delete_records=8,
        equality_delete_records=8,
        oldest_delete_ms=NOW_MS,
    )
    assert partition_reasons(health, thresholds, NOW_MS) == reasons


@pytest.mark.parametrize(
    ("content", "sequence", "oldest_data", "applies"),
    [
        ("equality", 5, 4, True),  # an older data file is live: it may delete rows of it
        ("equality", 5, 5, False),  # only data of its own sequence number or newer: a rewrite kept none older
        ("position", 5, 5, True),  # position deletes apply to their own sequence number too
        ("position", 5, 6, False),
        ("equality", 5, None, False),  # the partition has no live data file
    ],
)
def test_a_delete_file_dangles_once_no_live_data_file_is_older_than_it(content, sequence, oldest_data, applies):
    from types import SimpleNamespace

    from pyiceberg.manifest import DataFileContent

    from airflow_iceberg.health import _may_apply

    kind = DataFileContent.EQUALITY_DELETES if content == "equality" else DataFileContent.POSITION_DELETES
    assert _may_apply(SimpleNamespace(content=kind), sequence, oldest_data, set()) is applies


def test_a_deletion_vector_dangles_once_the_data_file_it_names_is_gone():
    from types import SimpleNamespace

    from pyiceberg.manifest import DataFileContent

    from airflow_iceberg.health import _may_apply

    vector = SimpleNamespace(content=DataFileContent.POSITION_DELETES, referenced_data_file="file:///d/a.parquet")
    assert _may_apply(vector, 5, 1, {"file:///d/a.parquet"})
    assert not _may_apply(vector, 5, 1, {"file:///d/b.parquet"})


def test_partitions_with_equality_deletes_have_every_data_file_rewritten_so_the_deletes_can_go():
    where = {"rewrite_data_files": None, "rewrite_position_delete_files": None}
    small_only = partition("20240620", data_files=4, small_files=4)
    equality = partition(
        "20240621",
        data_files=2,
        small_files=1,
        equality_delete_files=3,
        data_records=100,
        delete_records=3,
        equality_delete_records=3,
        oldest_delete_ms=NOW_MS,
    )
    assert make_plan(table_health(small_only), THRESHOLDS, where).options == {}
    plan = make_plan(table_health(small_only, equality), THRESHOLDS, where)
    assert plan.options == {"rewrite_data_files": {"rewrite-all": True}}
    assert plan.partitions["rewrite_data_files"] == ["dt=20240620", "dt=20240621"]


def test_with_no_partition_needing_work_the_plan_skips_and_says_why():
    plan = make_plan(
        table_health(partition("20240620", data_files=2, small_files=2)),
        THRESHOLDS,
        {"rewrite_data_files": None, "rewrite_position_delete_files": None},
    )
    assert (plan.decision, plan.predicates, plan.partitions) == ("skip", {}, {})
    assert plan.reason.startswith("no partition needs work: none has 4 small files (under 768 bytes)")
    assert plan.health["data_files"] == 2 and plan.health["unhealthy"] == []


def test_each_rewrite_is_narrowed_to_the_partitions_that_need_it_within_its_where():
    small = partition("20240621", data_files=6, small_files=6)
    deletes = partition(
        "20240622", data_files=1, position_delete_files=2, data_records=10, delete_records=5, oldest_delete_ms=NOW_MS
    )
    healthy = partition("20240620", data_files=1, small_files=1)
    where = {"rewrite_data_files": "dt >= '20240621'", "rewrite_position_delete_files": None}

    plan = make_plan(table_health(healthy, small, deletes), THRESHOLDS, where)

    assert plan.decision == "compact" and plan.reason == "2 of 3 partitions need work"
    assert plan.partitions == {
        "rewrite_data_files": ["dt=20240621", "dt=20240622"],
        "rewrite_position_delete_files": ["dt=20240622"],  # the only partition with position deletes
    }
    assert plan.predicates == {
        "rewrite_data_files": "(dt >= '20240621') AND ((`dt` = '20240621') OR (`dt` = '20240622'))",
        "rewrite_position_delete_files": "`dt` = '20240622'",
    }
    assert plan.score == 6 + 2


def test_partitions_outside_a_rewrites_where_are_left_to_it_and_may_skip_the_run():
    small = partition("20240601", data_files=6, small_files=6)
    outside = {"rewrite_data_files": lambda p: p.partition["dt"] >= "20240620"}
    plan = make_plan(table_health(small), THRESHOLDS, {"rewrite_data_files": "dt >= '20240620'"}, in_scope=outside)
    assert plan.decision == "skip"
    assert plan.reason == "the partitions that need work are outside every rewrite's where"


def test_force_runs_every_rewrite_with_its_where_unchanged_and_still_reports_health():
    where = {"rewrite_data_files": "dt >= '20240620'", "rewrite_position_delete_files": None}
    plan = make_plan(table_health(partition("20240620", data_files=1, small_files=1)), THRESHOLDS, where, force=True)
    assert (plan.decision, plan.predicates) == ("force", where)
    assert plan.health["partitions"] == 1


def test_an_empty_table_skips():
    plan = make_plan(table_health(), THRESHOLDS, {"rewrite_data_files": None})
    assert (plan.decision, plan.reason) == ("skip", "the table has no files")


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
    assert _conditions(spec, schema, (19894, "x")) == [
        "`payload`.`ts` >= TIMESTAMP '2024-06-20 00:00:00+00:00' "
        "AND `payload`.`ts` < TIMESTAMP '2024-06-21 00:00:00+00:00'"
    ]


def test_a_partition_whose_transform_cannot_be_inverted_widens_the_predicate_to_the_whole_table():
    narrow = partition("20240620")
    bucketed = PartitionHealth(spec_id=0, partition={"id_bucket": 3}, conditions=[])
    assert partition_predicate([narrow]) == "`dt` = '20240620'"
    assert partition_predicate([narrow, bucketed]) is None  # never fewer rows than the partitions hold


def test_health_read_from_a_real_tables_manifests(tmp_path):
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import DateType, LongType, NestedField

    catalog = SqlCatalog("lake", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("db")
    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "day", DateType()))
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="day"))
    table = catalog.create_table("db.t", schema=schema, partition_spec=spec)
    arrow = pa.schema([pa.field("id", pa.int64(), nullable=True), pa.field("day", pa.date32(), nullable=True)])
    for batch in range(3):  # three commits: three files in each of two day partitions
        ids = list(range(batch * 100, batch * 100 + 100))
        days = [date(2024, 6, 20) if i % 2 else date(2024, 6, 21) for i in ids]
        table.append(pa.table({"id": ids, "day": days}, schema=arrow))
    table = catalog.load_table("db.t")

    health = read_health(table, "lake.db.t", small_file_ratio=0.75, target=10 * 1024 * 1024)

    assert health.snapshot_id == table.current_snapshot().snapshot_id
    assert [p.label for p in health.partitions] == ["day=2024-06-20", "day=2024-06-21"]
    for day in health.partitions:
        assert (day.data_files, day.small_files, day.data_records, day.delete_files) == (3, 3, 150, 0)
        assert day.snapshots_since_rewrite == 3
    assert health.snapshots_since_rewrite == 3
    assert health.partitions[0].conditions == ["`day` = DATE '2024-06-20'"]
    large = read_health(table, "lake.db.t", small_file_ratio=0.75, target=1024)  # every file is over 768 bytes
    assert {p.small_files for p in large.partitions} == {0}


def test_more_partitions_than_a_predicate_names_one_by_one_take_the_rewrites_whole_where():
    """A backlog of many partitions never makes a predicate too long for a command line, or a record too long."""
    backlog = [partition(f"2024{i:04d}", data_files=6, small_files=6) for i in range(MAX_NARROWED_PARTITIONS + 1)]
    plan = make_plan(table_health(*backlog), THRESHOLDS, {"rewrite_data_files": "dt >= '2024'"})
    assert plan.decision == "compact"
    assert plan.predicates == {"rewrite_data_files": "dt >= '2024'"}
    labels = plan.partitions["rewrite_data_files"]
    assert len(labels) == MAX_NARROWED_PARTITIONS + 1 and labels[-1] == "... 1 more"
    few = make_plan(table_health(*backlog[:MAX_NARROWED_PARTITIONS]), THRESHOLDS, {"rewrite_data_files": None})
    assert few.predicates["rewrite_data_files"].count("`dt` = ") == MAX_NARROWED_PARTITIONS


# --- Screening from the snapshot summary: healthy tables told apart without reading manifests, never wrongly ---

SCREEN_THRESHOLDS = HealthThresholds(min_small_files=12, max_delete_age_minutes=60)


def snapshot_entry(sid: int, parent: int | None, added: int | None, total: int, deletes: int = 0) -> dict:
    summary = {"operation": "append", "total-data-files": str(total), "total-delete-files": str(deletes)}
    if added:
        summary["added-data-files"] = str(added)
    return {"snapshot-id": sid, "parent-snapshot-id": parent, "summary": summary}


def metadata_json(*snapshots: dict, current: int | None = None) -> dict:
    return {
        "current-snapshot-id": current if current is not None else snapshots[-1]["snapshot-id"],
        "snapshots": list(snapshots),
    }


def plan_of(decision: str) -> Plan:
    return Plan(decision, "why", {}, {}, {})


def test_facts_read_the_current_snapshots_totals_and_what_was_added_since_each_ancestor():
    facts = SnapshotFacts.from_metadata(
        metadata_json(snapshot_entry(1, None, 3, 3), snapshot_entry(2, 1, 2, 5), snapshot_entry(3, 2, 4, 9))
    )
    assert (facts.snapshot_id, facts.data_files, facts.delete_files) == (3, 9, 0)
    assert facts.added_since == {2: 4, 1: 6}


def test_a_snapshot_without_an_added_count_added_none_as_iceberg_writes_it():
    facts = SnapshotFacts.from_metadata(metadata_json(snapshot_entry(1, None, 3, 3), snapshot_entry(2, 1, None, 3)))
    assert facts.added_since == {1: 0}


@pytest.mark.parametrize("current", [-1, None])
def test_a_table_without_a_snapshot_is_healthy_without_any_read(current):
    facts = SnapshotFacts.from_metadata({"current-snapshot-id": current, "snapshots": []})
    assert screen(facts, None, SCREEN_THRESHOLDS) == (False, "no snapshot yet")


def test_fewer_data_files_than_a_partition_needs_is_healthy_for_sure():
    must_read, why = screen(SnapshotFacts(7, data_files=11, delete_files=0), None, SCREEN_THRESHOLDS)
    assert not must_read and "11 data files in all" in why


def test_enough_data_files_may_need_work_so_the_manifests_are_read():
    must_read, why = screen(SnapshotFacts(7, data_files=12, delete_files=0), None, SCREEN_THRESHOLDS)
    assert must_read and "up to 12 small files" in why


def test_any_delete_file_calls_for_a_read():
    assert screen(SnapshotFacts(7, data_files=1, delete_files=1), None, SCREEN_THRESHOLDS) == (True, "1 delete files")


def test_missing_totals_call_for_a_read():
    assert screen(SnapshotFacts(7), None, SCREEN_THRESHOLDS)[0]


def test_a_big_table_read_once_stays_healthy_while_few_files_are_added():
    last = ManifestRead(snapshot_id=5, max_small_files=3, oldest_delete_ms=None, plan=plan_of("skip"))
    facts = SnapshotFacts(9, data_files=5000, delete_files=0, added_since={8: 2, 5: 8})
    must_read, why = screen(facts, last, SCREEN_THRESHOLDS)
    assert not must_read and "at most 3 small in a partition at the last read, 8 data files added since" in why
    # One more file could make a partition of 3 + 9 = 12 small files.
    assert screen(SnapshotFacts(10, 5001, 0, {9: 1, 5: 9}), last, SCREEN_THRESHOLDS)[0]


def test_a_last_read_no_longer_in_the_history_gives_no_bound():
    last = ManifestRead(snapshot_id=4, max_small_files=0, oldest_delete_ms=None, plan=plan_of("skip"))
    assert screen(SnapshotFacts(9, 5000, 0, {8: 2, 5: 8}), last, SCREEN_THRESHOLDS)[0]


def test_a_delete_file_comes_of_age_with_time_alone():
    now = 1_800_000_000_000
    last = ManifestRead(snapshot_id=5, max_small_files=0, oldest_delete_ms=now - 59 * MINUTE_MS, plan=plan_of("skip"))
    assert not last.delete_age_due(SCREEN_THRESHOLDS, now)
    assert last.delete_age_due(SCREEN_THRESHOLDS, now + MINUTE_MS)
    already = ManifestRead(5, 0, now - 120 * MINUTE_MS, plan_of("compact"))
    assert not already.delete_age_due(SCREEN_THRESHOLDS, now)  # it needs work already: nothing new to read
