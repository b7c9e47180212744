"""``make bench``, second part: what Airflow adds to the rewrites, against a bare ``spark-submit`` of the same CALLs.

Two identical copies of a table of small files and position deletes are written by the same writer with the
same arguments. On one, a live ``airflow standalone`` (PostgreSQL metadata, LocalExecutor, the repository's DAG
folder with a fleet of 200 other tables in its table list) runs the table's compaction DAG, triggered through
the REST API without a logical date, as a user would. Each task's process then starts, parses the DAG file and
submits its Spark job, as in production. On the second copy, one bare ``spark-submit`` runs the same two
``CALL`` statements in one Spark application, with the same Spark settings; on a third, two bare
``spark-submit`` run one ``CALL`` each, as the two tasks do, which leaves Airflow's own share.

Printed: the two rewrite tasks' own wall time (Airflow's start and end of each task, added), the same tasks'
span from the moment the first could start to the end of the second (scheduling included), the bare
submissions' wall times, and the ratios ``tasks / bare`` (goal for one bare submission of both CALLs: at most
1.1). Every copy must end with the same files and rows, so each did the same work.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

from airflow_iceberg.config import load_table_list
from airflow_iceberg.dag_factory import REWRITE_PROCEDURES, compaction_dag_id
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.spark_jobs.iceberg_call import TableName, build_call
from devkit.demo import DEMO_TABLE
from devkit.live_airflow import LiveAirflow, fleet
from devkit.tables import TableStats, drop_table
from devkit.writers import spark_job_hook, write_small_files

DAG_TABLE = TableName("lake", "bench", "tasks_dag")
BARE_TABLE = TableName("lake", "bench", "tasks_bare")
BARE_EACH_TABLE = TableName("lake", "bench", "tasks_bare_each")
COPIES = (DAG_TABLE, BARE_TABLE, BARE_EACH_TABLE)
#: The same writer run on both copies: 4 day partitions, 480 small data files and 16 position-delete files.
WRITER_ARGS = ("--days", "4", "--commits", "6", "--files-per-commit", "20", "--delete-commits", "4")
FLEET_SIZE = 200
META_DB = "airflow_iceberg_bench_scheduler"
GOAL = 1.1
BARE_JOB = Path(__file__).resolve().with_name("bare_calls.py")


def _seconds(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def _bench_settings() -> dict:
    """The shipped demo table's settings (rewrite options included), for the whole table, on demand only."""
    demo = next(t for t in load_table_list().tables if t.table == DEMO_TABLE)
    return {
        **demo.model_dump(mode="json", exclude={"table", "where", "schedule", "full_rewrite"}),
        "idle_seconds": 2,
        "poke_interval": 1,
        "full_rewrite": {"schedule": None},
    }


def run_dag(airflow: LiveAirflow, table: TableName) -> dict[str, float]:
    """Trigger the compaction DAG of ``table`` through the REST API with no logical date; its rewrite timings."""
    dag_id = compaction_dag_id(table)
    airflow.wait_for(f"{dag_id} to be parsed", lambda: airflow.dag_parsed(dag_id), 600)
    response = airflow.api("POST", f"dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": {}})
    if response.status_code != 200:
        raise RuntimeError(f"triggering {dag_id} failed: {response.status_code} {response.text}")
    run_id = response.json()["dag_run_id"]
    run = airflow.wait_for_run(dag_id, run_id, timeout=1800)
    listing = airflow.api("GET", f"dags/{dag_id}/dagRuns/{run_id}/taskInstances").json()["task_instances"]
    tasks = {ti["task_id"]: ti for ti in listing}
    if run["state"] != "success":
        raise RuntimeError(f"run {run_id} of {dag_id} ended {run['state']}: {tasks}")
    rewrites = [tasks[procedure] for procedure in REWRITE_PROCEDURES]
    return {
        "tasks_s": sum(_seconds(ti["start_date"], ti["end_date"]) for ti in rewrites),
        # From the end of the task before the rewrites to the end of the last: scheduling and queueing too.
        "span_s": _seconds(tasks["wait_until_snapshot_idle"]["end_date"], rewrites[-1]["end_date"]),
        "per_task_s": {ti["task_id"]: _seconds(ti["start_date"], ti["end_date"]) for ti in rewrites},
    }


def run_bare(table: TableName, work: Path, *, one_application: bool) -> float:
    """Wall seconds of bare spark-submits of the DAG's two CALLs on ``table``: one for both, or one each."""
    config = load_table_list(work / "iceberg_tables.yaml", select=lambda t: t == table).tables[0]
    statements = [build_call(p, table, getattr(config, p), config.where) for p in REWRITE_PROCEDURES]
    submissions = [statements] if one_application else [[statement] for statement in statements]
    started = time.monotonic()
    for submission in submissions:
        args = [argument for statement in submission for argument in ("--statement", statement)]
        hook = spark_job_hook(config, args, name=f"bare-calls-{table}", gated=False, log_file=work / "bare.log")
        hook.submit(str(BARE_JOB))
    return time.monotonic() - started


def main() -> int:
    logging.getLogger("pyiceberg.catalog.sql").setLevel(logging.ERROR)
    settings = _bench_settings()
    work = Path(tempfile.mkdtemp(prefix="airflow-iceberg-bench-tasks-"))
    table_list = work / "iceberg_tables.yaml"
    entries = [{**settings, "table": str(t)} for t in COPIES]
    # The bare copies are in the list only to be read with the same settings; only the DAG copy's DAG runs.
    table_list.write_text(yaml.safe_dump({"tables": entries + fleet(FLEET_SIZE)}))
    os.environ["AIRFLOW_ICEBERG_CONFIG"] = str(table_list)
    config = load_table_list(table_list, select=lambda t: t == DAG_TABLE).tables[0]

    print(f"==> Three identical copies of a table of small files and position deletes ({' '.join(WRITER_ARGS)})")
    gate = WriteGateHook(config.write_gate_conn_id)
    for table in COPIES:
        drop_table(config.catalog_conn_id, table)
        gate.force_open(table, "make bench recreates the table")
        write_small_files(config.model_copy(update={"table": table}), *WRITER_ARGS, log_file=work / "writer.log")
    before = {t: TableStats.read(config.catalog_conn_id, t) for t in COPIES}
    if len({(s.data_files, s.delete_files, s.rows) for s in before.values()}) != 1:
        raise RuntimeError(f"the copies differ before the rewrites: {before}")

    home = work / "airflow-home"
    home.mkdir()
    airflow = LiveAirflow(home, table_list, meta_db=META_DB)
    print(f"==> airflow standalone (PostgreSQL, LocalExecutor), {len(COPIES) + FLEET_SIZE} tables in its list")
    airflow.start()
    try:
        print(f"==> {compaction_dag_id(DAG_TABLE)}: triggered through the REST API, no logical date")
        dag = run_dag(airflow, DAG_TABLE)
        print(f"==> bare spark-submit of the same two CALLs on {BARE_TABLE}; one per CALL on {BARE_EACH_TABLE}")
        bare_s = run_bare(BARE_TABLE, work, one_application=True)
        bare_each_s = run_bare(BARE_EACH_TABLE, work, one_application=False)
    finally:
        airflow.stop()

    after = {t: TableStats.read(config.catalog_conn_id, t) for t in COPIES}
    same_work = len({(s.data_files, s.delete_files, s.rows) for s in after.values()}) == 1
    ratio, ratio_each = dag["tasks_s"] / bare_s, dag["tasks_s"] / bare_each_s
    print()
    print("| what | seconds | rewrite tasks / this |")
    print("|---|---:|---:|")
    for task_id, seconds in dag["per_task_s"].items():
        print(f"| task {task_id} | {seconds:.1f} | |")
    print(f"| the two rewrite tasks | {dag['tasks_s']:.1f} | |")
    print(f"| the same, from the first's scheduling to the last's end | {dag['span_s']:.1f} | |")
    print(f"| bare spark-submit of the two CALLs | {bare_s:.1f} | {ratio:.2f} |")
    print(f"| bare spark-submit of each CALL, one after the other | {bare_each_s:.1f} | {ratio_each:.2f} |")
    print()
    dag_before, dag_after = before[DAG_TABLE], after[DAG_TABLE]
    print(
        f"each copy: data files {dag_before.data_files} -> {dag_after.data_files}, delete files "
        f"{dag_before.delete_files} -> {dag_after.delete_files}, rows {dag_before.rows} -> {dag_after.rows}: "
        + ("the same on every copy" if same_work else f"NOT the same on every copy: {after}")
    )
    verdict = "met" if ratio <= GOAL else "MISSED"
    print(f"{verdict}: rewrite tasks / bare spark-submit of both CALLs = {ratio:.2f} (goal: at most {GOAL})")
    figures = {"tasks_s": dag["tasks_s"], "span_s": dag["span_s"], "bare_s": bare_s, "bare_each_s": bare_each_s}
    print(json.dumps({name: round(value, 2) for name, value in figures.items()}))
    return 0 if same_work else 1


if __name__ == "__main__":
    sys.exit(main())
