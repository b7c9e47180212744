"""``make bench``: how long gated compactions pause a live streaming writer, measured.

Runs the reference gated ingest job (a MERGE every 3 s) on ``lake.bench.live_events`` in the embedded
default stack, runs the table's compaction DAG three times through ``dag.test()`` with ``idle_seconds`` at
1800 (so only the writer's acknowledgement ends the wait in time), and prints per run: the seconds the gate
was closed, the rewrite tasks' own seconds (Spark start-up included), the writer's commit interval, the ratio
``gate_closed / (rewrite + commit_interval + 10 s)`` (target: at most 1.0), how long the sensor waited for
the writer, the longest time a record waited to be committed around the compaction, the rewrites' own seconds
as the Spark job timed them (``calls_s``), and ``physical_ratio``, ``gate_closed / (calls + ack + 2 s)`` (the
bar: at most 1.2), the acknowledgement being ``wait_for_writer_s`` (see ``CompactionFigures.physical_ratio``).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from pathlib import Path

import yaml
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.table_list.loader import load_table_list
from devkit.dag_runs import load_compaction_dag
from devkit.demo import DEMO_TABLE
from devkit.live_ingest import CompactionFigures, measure
from devkit.tables import TableStats, drop_table
from devkit.writer_jobs.ingest_events import expected_rows
from devkit.writers import IngestJob

BENCH_TABLE = TableName("lake", "bench", "live_events")
RUNS = 3
COLUMNS = (
    ("run", 4),
    ("gate_closed_s", 14),
    ("rewrite_s", 10),
    ("commit_interval_s", 18),
    ("ratio", 7),
    ("wait_for_writer_s", 18),
    ("max_record_wait_s", 18),
    ("calls_s", 8),
    ("physical_ratio", 15),
)
#: The issue's bar for the pause against the work it guards: pause / (calls + ack + 2 s).
PHYSICAL_TARGET = 1.2


def _row(number: int, figures: CompactionFigures) -> str:
    values = (
        str(number),
        f"{figures.gate_closed_seconds:.1f}",
        f"{figures.rewrite_seconds:.1f}",
        f"{figures.commit_interval_seconds:.1f}",
        f"{figures.ratio:.2f}",
        f"{figures.wait_for_writer_seconds:.1f}",
        f"{figures.max_record_wait_seconds:.1f}",
        f"{figures.calls_seconds:.1f}",
        f"{figures.physical_ratio:.2f}",
    )
    return "  ".join(value.rjust(width) for value, (_, width) in zip(values, COLUMNS, strict=True))


def report_writer(catalog_conn_id: str, table: TableName, job: IngestJob, final: dict) -> bool:
    """Print what the writer committed and whether ``table`` holds exactly the rows it wrote; whether it does."""
    stats = TableStats.read(catalog_conn_id, table)
    arrow = IcebergHook(catalog_conn_id).load_table(table.in_catalog).scan().to_arrow()
    actual = dict(
        zip(
            arrow["key"].to_pylist(),
            zip(arrow["value"].to_pylist(), arrow["payload"].to_pylist(), strict=False),
            strict=False,
        )
    )
    correct = len(actual) == arrow.num_rows and actual == expected_rows(final["max_value"], job.keys)
    print(
        f"writer: {final['batches']} commits, {final['failed_commits']} failed; table holds {stats.rows} rows, "
        f"{'exactly' if correct else 'NOT'} the expected state; {stats.data_files} data files now"
    )
    return correct


def main() -> int:
    logging.getLogger("pyiceberg.catalog.sql").setLevel(logging.ERROR)
    demo = next(t for t in load_table_list().tables if t.table == DEMO_TABLE)
    settings = {
        **demo.model_dump(exclude={"table", "where", "schedule"}),
        "table": str(BENCH_TABLE),
        "idle_seconds": 1800,
        "max_pause_seconds": 4000,
        "poke_interval": 1,
        # Every run compacts: this measures the pause, not the plan (the writer's MERGEs leave deletes anyway).
        "health": {"min_small_files": 1, "max_delete_age_minutes": 0},
    }
    work = Path(tempfile.mkdtemp(prefix="airflow-iceberg-bench-"))
    table_list = work / "iceberg_tables.yaml"
    table_list.write_text(yaml.safe_dump({"tables": [settings]}))
    os.environ["AIRFLOW_ICEBERG_CONFIG"] = str(table_list)
    config = load_table_list(table_list).tables[0]

    drop_table(config.catalog_conn_id, BENCH_TABLE)
    WriteGateHook(config.write_gate_conn_id).force_open(BENCH_TABLE, "make bench recreates the table")
    dag = load_compaction_dag(BENCH_TABLE)
    job = IngestJob(config, work / "ingest", trigger_seconds=3.0).start()
    print(f"==> {BENCH_TABLE}: live gated ingest (a MERGE every 3 s), {RUNS} gated compactions, idle_seconds=1800")
    figures: list[CompactionFigures] = []
    try:
        job.wait_for_batches(3)
        for _ in range(RUNS):
            job.wait_for_batches(len(job.batches()) + 3)
            run = dag.test()
            job.wait_for_batches(len(job.batches()) + 2)  # the records the gate held back get committed
            figures.append(measure(run, BENCH_TABLE, job))
    finally:
        final = job.stop()

    print("  ".join(name.rjust(width) for name, width in COLUMNS))
    for number, run_figures in enumerate(figures, start=1):
        print(_row(number, run_figures))
    correct = report_writer(config.catalog_conn_id, BENCH_TABLE, job, final)
    print(f"target ratio <= 1.0 met in {sum(f.ratio <= 1.0 for f in figures)} of {len(figures)} runs")
    met = sum(f.physical_ratio <= PHYSICAL_TARGET for f in figures)
    print(
        f"physical_ratio = gate_closed / (calls + ack + 2 s) <= {PHYSICAL_TARGET} met in {met} of {len(figures)} runs"
        " (calls: the CALLs and the dangling removal, as the Spark job timed them; ack: wait_for_writer_s, the close"
        " to the sensor seeing the writer's acknowledgement)"
    )
    print(json.dumps({"runs": [f.as_dict() for f in figures], "writer_failed_commits": final["failed_commits"]}))
    job.remove()
    return 0 if all(f.state == "success" for f in figures) and correct else 1


if __name__ == "__main__":
    sys.exit(main())
