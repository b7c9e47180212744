"""Maintenance operators: safety floors checked when the DAG is parsed."""

from __future__ import annotations

import pytest

from airflow_iceberg.core.maintenance import FLINK_CHECKPOINT_MARKER
from airflow_iceberg.operators.maintenance import ExpireSnapshotsOperator, RemoveOrphanFilesOperator


def test_orphan_removal_refuses_an_older_than_inside_the_longest_pause_plus_margin():
    table = "lake.demo.events"
    with pytest.raises(ValueError, match=r"older_than_hours=25 is too short: .* pause \(90000 s\) plus a margin"):
        RemoveOrphanFilesOperator(task_id="r", table=table, older_than_hours=25, max_pause_seconds=90000)
    with pytest.raises(ValueError, match=r"older_than_hours=2 is too short: .* Iceberg's own 24 hours"):
        RemoveOrphanFilesOperator(task_id="r", table=table, older_than_hours=2, max_pause_seconds=600)
    ok = RemoveOrphanFilesOperator(task_id="r", table=table, older_than_hours=26, max_pause_seconds=90000)
    assert ok.procedures == ["remove_orphan_files"]


def test_expire_snapshots_takes_its_settings_explicitly():
    with pytest.raises(TypeError, match="retain_last"):
        ExpireSnapshotsOperator(task_id="e", table="lake.demo.events", older_than_hours=24)
    op = ExpireSnapshotsOperator(
        task_id="e",
        table="lake.demo.events",
        older_than_hours=12,
        retain_last=7,
        checkpoint_marker=FLINK_CHECKPOINT_MARKER,
    )
    assert (op.procedures, op.older_than_hours, op.retain_last) == (["expire_snapshots"], 12, 7)
    assert op.arguments == {"expire_snapshots": {"retain_last": 7}}
    with pytest.raises(ValueError, match="older_than_hours must not be negative, got -1"):
        ExpireSnapshotsOperator(
            task_id="e",
            table="lake.demo.events",
            older_than_hours=-1,
            retain_last=1,
            checkpoint_marker=FLINK_CHECKPOINT_MARKER,
        )
