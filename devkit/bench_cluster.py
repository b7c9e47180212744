"""``make bench-cluster``: ``make bench``'s gated compactions with the rewrite on a Spark standalone cluster, its
application started before the gate closes (``prestart_spark``), on a live Airflow.

Starts a Spark standalone cluster (one master, one worker of 2 cores) and ``airflow standalone`` (PostgreSQL,
LocalExecutor, the repository's DAG folder), runs the reference gated ingest job (a ``MERGE`` every 3 s, in local
Spark beside them) on ``lake.bench.cluster_events``, and triggers the table's compaction DAG through the REST API
three times, without a logical date. The table runs with ``prestart_spark``: ``rewrite_files`` submits its
application to the cluster beside ``close_gate``, which closes the gate once the application is up and ready (its
session, its executors on the worker, the catalog), and the job begins its ``CALL`` statements at the idle wait's go.

Printed per run, as ``make bench`` prints them: the pause, the ``CALL``s' own time as the Spark job measured it, the
writer's acknowledgement and ``physical_ratio``, ``pause / (calls + ack + 2 s)`` (the bar: at most 1.2); and, to
show where the application's start-up went, ``startup_s`` (the rewrite task's start to its job's "ready") and
``ready_before_close_s`` (the job's "ready" to the gate's close: positive when the start-up was over before any
writer paused). Then the writer's failed commits and whether the table holds exactly the rows it wrote.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from pathlib import Path

import yaml

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.surface.dag_factory import REWRITE_TASK_ID, compaction_dag_id
from airflow_iceberg.table_list.loader import load_table_list
from airflow_iceberg.table_list.schema import TableConfig
from devkit.bench import COLUMNS, PHYSICAL_TARGET, RUNS, report_writer
from devkit.bench import _row as bench_row
from devkit.demo import DEMO_TABLE
from devkit.live_airflow import AIRFLOWS_OWN_IDLE_SLEEP, dags_parsed, logged_at, running
from devkit.live_ingest import CompactionFigures, RunTimes, closed_spell, measure
from devkit.spark_standalone import CONN_ID, standalone_cluster
from devkit.tables import drop_table
from devkit.writers import IngestJob

BENCH_TABLE = TableName("lake", "bench", "cluster_events")
META_DB = "airflow_iceberg_bench_cluster"
#: What the job prints once its session, its executors and the catalog are up (spark_jobs/run_procedure.py).
READY_LINE = "Ready: waiting for the go"


def table_settings(demo: TableConfig) -> dict:
    """``make bench``'s table settings (the demo table's), but the rewrite on the cluster, pre-started, and runs
    only when triggered."""
    settings = demo.model_dump(mode="json", exclude={"table", "where", "schedule"})
    return {
        **settings,
        "table": str(BENCH_TABLE),
        "spark_conn_id": CONN_ID,
        "prestart_spark": True,
        # The worker's 2 cores and 2 GiB hold one executor of 1 GiB beside nothing else.
        "spark": {**settings["spark"], "executor_memory": "1g"},
        "idle_seconds": 1800,
        "max_pause_seconds": 4000,
        "poke_interval": 1,
        "health": {"min_small_files": 1, "max_delete_age_minutes": 0, "watch": False},
        "full_rewrite": {"schedule": None},
    }


def main() -> int:
    logging.getLogger("pyiceberg.catalog.sql").setLevel(logging.ERROR)
    demo = next(t for t in load_table_list().tables if t.table == DEMO_TABLE)
    work = Path(tempfile.mkdtemp(prefix="airflow-iceberg-bench-cluster-"))
    table_list = work / "iceberg_tables.yaml"
    table_list.write_text(yaml.safe_dump({"tables": [table_settings(demo)]}))
    os.environ["AIRFLOW_ICEBERG_CONFIG"] = str(table_list)
    config = load_table_list(table_list).tables[0]
    # The writer runs in local Spark, as make bench's does; only the rewrite goes to the cluster.
    writer_config = config.model_copy(update={"spark_conn_id": demo.spark_conn_id})
    dag_id = compaction_dag_id(BENCH_TABLE)

    drop_table(config.catalog_conn_id, BENCH_TABLE)
    WriteGateHook(config.write_gate_conn_id).force_open(BENCH_TABLE, "make bench-cluster recreates the table")
    figures: list[CompactionFigures] = []
    startups: list[tuple[float, float]] = []
    with standalone_cluster(work / "spark-cluster") as cluster:
        print(f"==> Spark standalone cluster at {cluster.master_url} (one worker, 2 cores, 2 GiB)")
        print("==> airflow standalone (PostgreSQL, LocalExecutor)")
        airflow_running = running(
            work / "airflow-home",
            table_list,
            ready=(f"{dag_id} to be parsed", dags_parsed(dag_id), 600),
            keep_logs=True,
            meta_db=META_DB,
            settings=AIRFLOWS_OWN_IDLE_SLEEP,
        )
        with airflow_running as airflow:
            job = IngestJob(writer_config, work / "ingest", trigger_seconds=3.0).start()
            print(f"==> {BENCH_TABLE}: live gated ingest (a MERGE every 3 s), {RUNS} gated compactions on the cluster")
            try:
                job.wait_for_batches(3)
                for _ in range(RUNS):
                    job.wait_for_batches(len(job.batches()) + 3)
                    run = airflow.wait_for_run(dag_id, airflow.trigger(dag_id, {}), timeout=1800)
                    job.wait_for_batches(len(job.batches()) + 2)  # the records the gate held back get committed
                    times = RunTimes.of_live_run(airflow, dag_id, run)
                    figures.append(measure(times, BENCH_TABLE, job))
                    ready = logged_at(airflow.task_log(dag_id, times.run_id, REWRITE_TASK_ID), READY_LINE)
                    closed, _ = closed_spell(WriteGateHook(config.write_gate_conn_id), BENCH_TABLE, times.run_id)
                    startups.append(((ready - times.rewrite_start).total_seconds(), (closed - ready).total_seconds()))
            finally:
                final = job.stop()
        applications = cluster.state()["completedapps"]

    columns = (*COLUMNS, ("startup_s", 10), ("ready_before_close_s", 21))
    print("  ".join(name.rjust(width) for name, width in columns))
    for number, (run_figures, (startup, lead)) in enumerate(zip(figures, startups, strict=True), start=1):
        print(f"{bench_row(number, run_figures)}  {startup:>10.1f}  {lead:>21.1f}")
    on_cluster = [app for app in applications if str(BENCH_TABLE) in app["name"] and app["state"] == "FINISHED"]
    print(f"the cluster's master lists {len(on_cluster)} finished rewrite applications of {BENCH_TABLE}")
    correct = report_writer(config.catalog_conn_id, BENCH_TABLE, job, final)
    met = sum(f.physical_ratio <= PHYSICAL_TARGET for f in figures)
    print(
        f"physical_ratio = gate_closed / (calls + ack + 2 s) <= {PHYSICAL_TARGET} met in {met} of {len(figures)} runs"
        f"; the application's start-up was over before the gate closed in "
        f"{sum(lead > 0 for _, lead in startups)} of {len(startups)} runs"
    )
    print(
        json.dumps(
            {
                "runs": [
                    {**f.as_dict(), "startup_s": round(s, 3), "ready_before_close_s": round(lead, 3)}
                    for f, (s, lead) in zip(figures, startups, strict=True)
                ],
                "writer_failed_commits": final["failed_commits"],
            }
        )
    )
    print(f"(work files and the live Airflow's logs: {work})")
    job.remove()
    ok = all(f.state == "success" for f in figures) and correct and final["failed_commits"] == 0
    return 0 if ok and len(on_cluster) == RUNS else 1


if __name__ == "__main__":
    sys.exit(main())
