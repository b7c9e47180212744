"""Screening: what a snapshot's summary alone says, and when the manifests must be read."""

from __future__ import annotations

import pytest

from airflow_iceberg.planning.health import HealthThresholds
from airflow_iceberg.planning.plan import Plan
from airflow_iceberg.planning.screen import ManifestRead, SnapshotFacts, screen
from tests.unit.planning.partitions import MINUTE_MS

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
