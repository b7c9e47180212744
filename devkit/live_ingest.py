"""Gated compactions under a live streaming writer, and what each one cost the writer.

Shared by the live-ingest integration test, which asserts on the figures, and ``make bench``, which prints
them. The target: the gate is closed for no longer than the rewrite itself plus one writer commit interval
plus 10 s, i.e. ``gate_closed / (rewrite + commit_interval + 10 s) <= 1``.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.surface.dag_factory import REWRITE_TASK_ID
from devkit.writers import IngestJob

TARGET_SLACK_SECONDS = 10.0
#: What the physical bar allows beyond the work and one acknowledgement: closing and opening, the job's go.
PHYSICAL_SLACK_SECONDS = 2.0


def calls_seconds(results: dict[str, Any]) -> float:
    """The rewrites' own seconds in the job's result rows (by procedure): each CALL and its dangling removal."""
    return sum(
        float(row.get("call_seconds") or 0.0) + float(row.get("removal_seconds") or 0.0)
        for row in results.values()
        if isinstance(row, dict)
    )


@dataclass(frozen=True)
class CompactionFigures:
    """One gated compaction run, measured."""

    run_id: str
    state: str
    gate_closed_seconds: float
    rewrite_seconds: float
    commit_interval_seconds: float
    wait_for_writer_seconds: float
    max_record_wait_seconds: float
    rewritten_data_files: int
    added_data_files: int
    #: The rewrites' own work as the Spark job timed it: each ``CALL`` and its removal of dangling deletes.
    calls_seconds: float = 0.0

    @property
    def ratio(self) -> float:
        """gate_closed / (rewrite + commit_interval + 10 s): at most 1 meets the target."""
        return self.gate_closed_seconds / (self.rewrite_seconds + self.commit_interval_seconds + TARGET_SLACK_SECONDS)

    @property
    def physical_ratio(self) -> float:
        """gate_closed / (the CALLs' own time + the writers' acknowledgement + 2 s): how close the pause is to the
        work it guards, Spark's start-up and Airflow's scheduling counted against it.

        The acknowledgement is ``wait_for_writer_seconds``, the close to the moment the sensor saw every paused
        writer's acknowledgement (it looks every ``poke_interval``, 1 s in the bench). The gate row keeps each
        writer's latest acknowledgement, not its first of a closing (a ``MERGE`` writer acknowledges after the
        write under way and again before its next batch), so that is the nearest the DAG can tell."""
        return self.gate_closed_seconds / (self.calls_seconds + self.wait_for_writer_seconds + PHYSICAL_SLACK_SECONDS)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": round(self.ratio, 3), "physical_ratio": round(self.physical_ratio, 3)}


def commit_interval(batches: list[dict[str, Any]]) -> float:
    """The writer's typical time between commits: the median gap between commits that no pause held up."""
    gaps = [
        later["committed"] - earlier["committed"]
        for earlier, later in zip(batches, batches[1:], strict=False)
        if later["paused_seconds"] == 0
    ]
    if not gaps:
        raise ValueError("need at least two unpaused commits to measure the commit interval")
    return statistics.median(gaps)


def measure(run: Any, table: TableName, job: IngestJob, gate: WriteGateHook | None = None) -> CompactionFigures:
    """Figures of the finished DAG run ``run`` on ``table`` while ``job`` was writing to it.

    Call it once the writer has committed again after the run, so the records the gate held back are counted.
    """
    gate = gate or WriteGateHook()
    trail = [r for r in gate.audit_trail(table) if r["owner_run_id"] == run.run_id]
    closed_at = next(r["at"] for r in trail if r["action"] == "close")
    opened_at = next(r["at"] for r in trail if r["action"] == "open")
    rewrite = run.get_task_instance(REWRITE_TASK_ID)
    rewrite_seconds = (rewrite.end_date - rewrite.start_date).total_seconds()
    wait = run.get_task_instance("wait_until_snapshot_idle")
    results = rewrite.xcom_pull(task_ids=REWRITE_TASK_ID) or {}
    data_result = results.get("rewrite_data_files") or {}
    batches = job.batches()
    interval = commit_interval(batches)
    # Records held back by the gate are committed by the first batch after it opens.
    held = [b for b in batches if b["committed"] >= _epoch(closed_at)][:1] + [
        b for b in batches if b["committed"] >= _epoch(opened_at)
    ][:1]
    return CompactionFigures(
        run_id=run.run_id,
        state=str(run.state),
        gate_closed_seconds=round((opened_at - closed_at).total_seconds(), 3),
        rewrite_seconds=round(rewrite_seconds, 3),
        commit_interval_seconds=round(interval, 3),
        wait_for_writer_seconds=round((wait.end_date - closed_at).total_seconds(), 3),
        max_record_wait_seconds=max((b["max_record_wait_seconds"] for b in held), default=0.0),
        rewritten_data_files=int(data_result.get("rewritten_data_files_count", 0)),
        added_data_files=int(data_result.get("added_data_files_count", 0)),
        calls_seconds=round(calls_seconds(results), 3),
    )


def _epoch(moment: datetime) -> float:
    return moment.timestamp()
