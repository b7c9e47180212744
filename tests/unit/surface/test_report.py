"""The report's pure parts: the chart points a run history gives, and the lines it prints."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_iceberg.surface.report import Health, TableSummary, health_line, history, render_text, size

T0 = datetime(2026, 11, 25, 3, 0, tzinfo=timezone.utc)


def record(minute: int, decision: str, outcome: str, before=(None, None, None), after=(None, None, None), **more):
    return {
        "started_at": T0 + timedelta(minutes=minute),
        "finished_at": T0 + timedelta(minutes=minute + 1),
        "decision": decision,
        "outcome": outcome,
        "data_files_before": before[0],
        "delete_files_before": before[1],
        "bytes_before": before[2],
        "data_files_after": after[0],
        "delete_files_after": after[1],
        "bytes_after": after[2],
        "gate_closed_seconds": more.get("paused"),
    }


RUNS = [
    record(0, "compact", "success", (40, 8, 4_000_000), (4, 0, 3_600_000), paused=31.25),
    record(30, "skip", "skipped", (6, 0, 3_700_000)),
    record(60, "none", "failed"),  # failed before it planned: no figures
]


def test_a_compaction_gives_a_point_before_and_after_a_skip_only_before_and_a_failed_plan_none():
    points = history(RUNS)

    assert points["at"] == [T0, T0 + timedelta(minutes=1), T0 + timedelta(minutes=30)]
    assert points["data_files"] == [40, 4, 6]
    assert points["delete_files"] == [8, 0, 0]
    assert points["average_mb"] == [0.1, 0.9, 3_700_000 / 6 / 1e6]


def test_the_text_names_the_last_compaction_not_the_last_run():
    summary = TableSummary("lake.db.t", None, Health(6, 5, 0, 3_700_000), RUNS)

    text = render_text([summary])

    assert text.splitlines() == [
        "lake.db.t",
        "  gate             -",
        "  health           6 data files (5 small), 0 delete files, average 617 KB",
        "  last check       never (health watch off, or no sweep yet)",
        "  last compaction  2026-11-25 03:00:00 UTC  compact  success  data files 40 -> 4  delete files 8 -> 0  "
        "paused 31.2 s",
        "  runs             3: 1 success, 1 skipped, 1 failed, 0 dry_run",
    ]


def test_the_text_says_when_the_watch_last_checked_and_what_it_decided():
    check = {
        "checked_at": T0,
        "decision": "waiting",
        "reason": "1 of 1 partitions need work; waits: a run is queued",
        "reading": "listing",
        "started_at": T0 - timedelta(minutes=2),
    }
    text = render_text([TableSummary("lake.db.t", None, None, [], (), check)])
    assert (
        "  last check       2026-11-25 03:00:00 UTC  waiting: 1 of 1 partitions need work; waits: a run is queued "
        "(read listing); last started a run 2026-11-25 02:58:00 UTC"
    ) in text.splitlines()


@pytest.mark.parametrize(
    ("count", "shown"),
    [(None, "-"), (0, "0 B"), (812, "812 B"), (1000, "1 KB"), (616_666, "617 KB"), (999_600, "1 MB"),
     (3_410_000, "3.41 MB"), (1.2e9, "1.2 GB")],
)  # fmt: skip
def test_sizes_read_in_the_unit_that_suits_them(count, shown):
    assert size(count) == shown


def test_one_file_is_one_file():
    assert health_line(Health(1, 1, 1, 20_000)) == "1 data file (1 small), 1 delete file, average 20 KB"
