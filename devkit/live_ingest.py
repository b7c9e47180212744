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
IDLE_TASK_ID = "wait_until_snapshot_idle"


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


@dataclass(frozen=True)
class RunTimes:
    """What :func:`measure` needs of a finished compaction run, wherever it ran: ``dag.test()`` here
    (:meth:`of_dag_run`) or a live Airflow's scheduler (:meth:`of_live_run`)."""

    run_id: str
    state: str
    rewrite_start: datetime
    rewrite_end: datetime
    #: When the idle wait (``wait_until_snapshot_idle``) ended.
    wait_end: datetime
    #: The rewrite task's result rows, by procedure (its XCom).
    results: dict[str, Any]

    @classmethod
    def of_dag_run(cls, run: Any) -> RunTimes:
        rewrite = run.get_task_instance(REWRITE_TASK_ID)
        return cls(
            run_id=run.run_id,
            state=str(run.state),
            rewrite_start=rewrite.start_date,
            rewrite_end=rewrite.end_date,
            wait_end=run.get_task_instance(IDLE_TASK_ID).end_date,
            results=rewrite.xcom_pull(task_ids=REWRITE_TASK_ID) or {},
        )

    @classmethod
    def of_live_run(cls, airflow: Any, dag_id: str, run: dict[str, Any]) -> RunTimes:
        """``run`` as :meth:`devkit.live_airflow.LiveAirflow.wait_for_run` gave it."""
        tasks = airflow.task_instances(dag_id, run["dag_run_id"])
        return cls(
            run_id=run["dag_run_id"],
            state=str(run["state"]),
            rewrite_start=datetime.fromisoformat(tasks[REWRITE_TASK_ID]["start_date"]),
            rewrite_end=datetime.fromisoformat(tasks[REWRITE_TASK_ID]["end_date"]),
            wait_end=datetime.fromisoformat(tasks[IDLE_TASK_ID]["end_date"]),
            results=airflow.xcom(dag_id, run["dag_run_id"], REWRITE_TASK_ID) or {},
        )


def closed_spell(gate: WriteGateHook, table: TableName, run_id: str) -> tuple[datetime, datetime]:
    """When run ``run_id`` closed ``table``'s gate and when it opened it again, from the gate's audit trail."""
    trail = [r for r in gate.audit_trail(table) if r["owner_run_id"] == run_id]
    return (
        next(r["at"] for r in trail if r["action"] == "close"),
        next(r["at"] for r in trail if r["action"] == "open"),
    )


def measure(run: Any, table: TableName, job: IngestJob, gate: WriteGateHook | None = None) -> CompactionFigures:
    """Figures of the finished DAG run ``run`` (a :class:`RunTimes`, or a ``dag.test()`` run) on ``table`` while
    ``job`` was writing to it.

    Call it once the writer has committed again after the run, so the records the gate held back are counted.
    """
    times = run if isinstance(run, RunTimes) else RunTimes.of_dag_run(run)
    gate = gate or WriteGateHook()
    closed_at, opened_at = closed_spell(gate, table, times.run_id)
    data_result = times.results.get("rewrite_data_files") or {}
    batches = job.batches()
    interval = commit_interval(batches)
    # Records held back by the gate are committed by the first batch after it opens.
    held = [b for b in batches if b["committed"] >= _epoch(closed_at)][:1] + [
        b for b in batches if b["committed"] >= _epoch(opened_at)
    ][:1]
    return CompactionFigures(
        run_id=times.run_id,
        state=times.state,
        gate_closed_seconds=round((opened_at - closed_at).total_seconds(), 3),
        rewrite_seconds=round((times.rewrite_end - times.rewrite_start).total_seconds(), 3),
        commit_interval_seconds=round(interval, 3),
        wait_for_writer_seconds=round((times.wait_end - closed_at).total_seconds(), 3),
        max_record_wait_seconds=max((b["max_record_wait_seconds"] for b in held), default=0.0),
        rewritten_data_files=int(data_result.get("rewritten_data_files_count", 0)),
        added_data_files=int(data_result.get("added_data_files_count", 0)),
        calls_seconds=round(calls_seconds(times.results), 3),
    )


def _epoch(moment: datetime) -> float:
    return moment.timestamp()
