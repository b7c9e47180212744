"""The plan a table's health gives: the thresholds, the skip, each rewrite narrowed to the partitions needing it."""

from __future__ import annotations

import pytest

from airflow_iceberg.planning.health import HealthThresholds
from airflow_iceberg.planning.plan import MAX_NARROWED_PARTITIONS, make_plan, partition_reasons
from tests.unit.planning.partitions import MINUTE_MS, NOW_MS, partition, table_health

THRESHOLDS = HealthThresholds(small_file_ratio=0.75, min_small_files=4, max_delete_ratio=0.1, max_delete_age_minutes=60)


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
        (
            {"data_files": 4, "small_files": 3, "dangling_delete_files": 9, "dangling_position_delete_files": 1},
            ["1 position-delete files that apply to nothing"],
        ),
    ],
    ids=[
        "three-small",
        "four-small",
        "young-sparse-deletes",
        "delete-ratio",
        "old-delete",
        "equality-deletes-count-as-fragments",
        "dangling-equality-deletes-and-dvs-never-trigger",
        "a-dangling-position-delete-file-triggers",
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


def test_a_partition_whose_only_fault_is_dangling_position_deletes_gets_only_the_cheap_delete_rewrite():
    where = {"rewrite_data_files": None, "rewrite_position_delete_files": None}
    dangling = partition(
        "20240620", data_files=3, small_files=1, dangling_delete_files=1, dangling_position_delete_files=1
    )
    plan = make_plan(table_health(dangling), THRESHOLDS, where)
    assert plan.decision == "compact"
    assert plan.partitions == {"rewrite_position_delete_files": ["dt=20240620"]}  # no data file rewritten for it
    assert plan.predicates == {"rewrite_position_delete_files": "`dt` = '20240620'"}
    assert plan.health["unhealthy"][0]["reasons"] == ["1 position-delete files that apply to nothing"]
    # With other faults too, the data rewrite takes the partition as well.
    both = partition("20240620", data_files=4, small_files=4, dangling_delete_files=1, dangling_position_delete_files=1)
    assert set(make_plan(table_health(both), THRESHOLDS, where).partitions) == set(where)


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
