"""``make bench``, second part: what Airflow adds to the rewrites, against a bare ``spark-submit`` of the same CALLs.

For each size of table (``SIZES``), the same writer with the same arguments writes identical copies of a table
of small files and position deletes. On ``--repeats`` of them (5 by default), a live ``airflow standalone``
(PostgreSQL metadata, LocalExecutor, the repository's DAG folder with a fleet of 200 other tables in its table
list) runs the table's compaction DAG, triggered through the REST API without a logical date, as a user would:
each task's process starts, parses the DAG file and submits its Spark job, as in production. On as many other
copies, one bare ``spark-submit`` runs the same two ``CALL`` statements (with the predicates the DAG's plan
gave its rewrite) in one Spark application, with the same Spark settings, as the rewrite task does. The two
sides take turns, so that both meet the same machine: the live Airflow's dag-processor parses the table list
again every 30 s, on the same two cores. On one more copy, two bare ``spark-submit`` run one ``CALL`` each.

Printed: every run's wall times, and their medians: the rewrite task's own wall time (Airflow's start and end of
the task, which runs both CALLs in one Spark application), its span from the moment it could start (scheduling
included), the bare submissions' wall times, and the ratios of the medians ``task / bare`` (goal for one bare
submission of both CALLs: at most 1.1; two bare submissions, one per CALL, show what one task per procedure would
cost). Every copy must end with the same files and rows, so each did the same work.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import yaml

from airflow_iceberg.core.procedures import build_call
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.surface.dag_factory import PLAN_TASK_ID, REWRITE_PROCEDURES, REWRITE_TASK_ID, compaction_dag_id
from airflow_iceberg.table_list.loader import load_table_list
from airflow_iceberg.table_list.schema import TableConfig
from devkit.bench_health import bench_settings
from devkit.live_airflow import LiveAirflow, fleet, running
from devkit.tables import TableStats, drop_table
from devkit.writers import spark_job_hook, write_small_files

#: The same writer run on every copy of a size: 4 day partitions of 480 small data files and position deletes;
#: "small" files of 20 rows, where Spark's start-up dominates, and "larger" files of 20,000 rows.
SIZES = {
    "small": ("--days", "4", "--commits", "6", "--files-per-commit", "20", "--delete-commits", "4"),
    "larger": ("--days", "4", "--commits", "6", "--files-per-commit", "20", "--delete-commits", "4",
               "--rows-per-file", "20000"),
}  # fmt: skip
FLEET_SIZE = 200
META_DB = "airflow_iceberg_bench_scheduler"
GOAL = 1.1
BARE_JOB = Path(__file__).resolve().with_name("bare_calls.py")


@dataclass(frozen=True)
class Copies:
    """Identical tables of one size: ``repeats`` for the DAG, as many for one bare submission, one for one each."""

    size: str
    repeats: int

    def dag(self, run: int) -> TableName:
        return TableName("lake", "bench", f"tasks_{self.size}_dag_{run}")

    def bare(self, run: int) -> TableName:
        return TableName("lake", "bench", f"tasks_{self.size}_bare_{run}")

    @property
    def bare_each(self) -> TableName:
        return TableName("lake", "bench", f"tasks_{self.size}_bare_each")

    @property
    def all(self) -> list[TableName]:
        runs = range(self.repeats)
        return [*(self.dag(r) for r in runs), *(self.bare(r) for r in runs), self.bare_each]


def _seconds(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def run_dag(airflow: LiveAirflow, table: TableName) -> dict[str, float]:
    """Trigger the compaction DAG of ``table`` through the REST API with no logical date; its rewrite timings."""
    dag_id = compaction_dag_id(table)
    airflow.wait_for(f"{dag_id} to be parsed", lambda: airflow.dag_parsed(dag_id), 600)
    response = airflow.api("POST", f"dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": {}})
    if response.status_code != 200:
        raise RuntimeError(f"triggering {dag_id} failed: {response.status_code} {response.text}")
    run_id = response.json()["dag_run_id"]
    # Asked seldom: the timings come from the task's own start and end, and each question costs the api-server
    # CPU on the cores the run is using.
    run = airflow.wait_for_run(dag_id, run_id, timeout=1800, every=5)
    listing = airflow.api("GET", f"dags/{dag_id}/dagRuns/{run_id}/taskInstances").json()["task_instances"]
    tasks = {ti["task_id"]: ti for ti in listing}
    if run["state"] != "success":
        raise RuntimeError(f"run {run_id} of {dag_id} ended {run['state']}: {tasks}")
    rewrite = tasks[REWRITE_TASK_ID]
    plan = airflow.api("GET", f"dags/{dag_id}/dagRuns/{run_id}/taskInstances/{PLAN_TASK_ID}/xcomEntries/plan")
    if not plan.ok:
        raise RuntimeError(f"reading the plan of run {run_id} of {dag_id} failed: {plan.status_code} {plan.text}")
    value = plan.json()["value"]
    predicates = (json.loads(value) if isinstance(value, str) else value)["predicates"]
    if sorted(predicates) != sorted(REWRITE_PROCEDURES):
        raise RuntimeError(f"the plan of run {run_id} of {dag_id} did not give both rewrites: {predicates}")
    return {
        "tasks_s": _seconds(rewrite["start_date"], rewrite["end_date"]),
        # From the end of the task before the rewrite to its end: scheduling and queueing too.
        "span_s": _seconds(tasks["wait_until_snapshot_idle"]["end_date"], rewrite["end_date"]),
        "predicates": predicates,
    }


def run_bare(table: TableName, work: Path, predicates: dict[str, str | None], *, one_application: bool) -> float:
    """Wall seconds of bare spark-submits of the DAG's two CALLs on ``table``: one for both, or one each.

    ``predicates`` are the ones the DAG's plan gave its rewrite task (the copies are identical, so their
    partitions are the same): the bare CALLs are the task's, but for the table's name.
    """
    config = load_table_list(work / "iceberg_tables.yaml", select=lambda t: t == table).tables[0]
    statements = [build_call(p, table, getattr(config, p), predicates[p]) for p in REWRITE_PROCEDURES]
    submissions = [statements] if one_application else [[statement] for statement in statements]
    started = time.monotonic()
    for submission in submissions:
        args = [argument for statement in submission for argument in ("--statement", statement)]
        hook = spark_job_hook(config, args, name=f"bare-calls-{table}", gated=False, log_file=work / "bare.log")
        hook.submit(str(BARE_JOB))
    return time.monotonic() - started


def write_copies(config: TableConfig, copies: Copies, work: Path) -> tuple[TableStats, int]:
    """Write every copy anew with the same writer arguments; the stats and bytes they share."""
    gate = WriteGateHook(config.write_gate_conn_id)
    for table in copies.all:
        drop_table(config.catalog_conn_id, table)
        gate.force_open(table, "make bench recreates the table")
        log_file = work / f"writer-{copies.size}.log"
        write_small_files(config.model_copy(update={"table": table}), *SIZES[copies.size], log_file=log_file)
    before = {t: TableStats.read(config.catalog_conn_id, t) for t in copies.all}
    if len({(s.data_files, s.delete_files, s.rows) for s in before.values()}) != 1:
        raise RuntimeError(f"the copies differ before the rewrites: {before}")
    return before[copies.dag(0)], table_bytes(config, copies.dag(0))


def table_bytes(config: TableConfig, table: TableName) -> int:
    from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

    files = IcebergHook(config.catalog_conn_id).load_table(table.in_catalog).inspect.files()
    return sum(files.column("file_size_in_bytes").to_pylist())


@dataclass
class Timings:
    """One size's wall times: each DAG run's (``tasks_s``, ``span_s``) and each bare run's, in the order they ran."""

    dag: list[dict[str, float]]
    bare_s: list[float]
    bare_each_s: float

    def medians(self) -> dict[str, float]:
        return {
            "tasks_s": statistics.median(run["tasks_s"] for run in self.dag),
            "span_s": statistics.median(run["span_s"] for run in self.dag),
            "bare_s": statistics.median(self.bare_s),
            "bare_each_s": self.bare_each_s,
        }


def runs(values: Iterable[float]) -> str:
    return ", ".join(f"{value:.1f}" for value in values)


def report(
    copies: Copies, before: TableStats, size_bytes: int, timings: Timings, after: dict[TableName, TableStats]
) -> bool:
    """Print one size's figures; whether every copy did the same work."""
    same_work = len({(s.data_files, s.delete_files, s.rows) for s in after.values()}) == 1
    median = timings.medians()
    ratio, ratio_each = median["tasks_s"] / median["bare_s"], median["tasks_s"] / median["bare_each_s"]
    print()
    print(
        f"{copies.size}: {before.data_files} data files and {before.delete_files} delete files, "
        f"{size_bytes / 1e6:.1f} MB, {before.rows} rows; {copies.repeats} runs of each, taking turns"
    )
    print(f"| what | seconds, each run | median | task {REWRITE_TASK_ID} / this |")
    print("|---|---|---:|---:|")
    print(
        f"| task {REWRITE_TASK_ID}: both CALLs in one Spark application | {runs(r['tasks_s'] for r in timings.dag)} "
        f"| {median['tasks_s']:.1f} | |"
    )
    print(
        f"| the same, from its scheduling to its end | {runs(r['span_s'] for r in timings.dag)} "
        f"| {median['span_s']:.1f} | |"
    )
    print(f"| bare spark-submit of the two CALLs | {runs(timings.bare_s)} | {median['bare_s']:.1f} | {ratio:.2f} |")
    print(
        f"| bare spark-submit of each CALL, one after the other | {timings.bare_each_s:.1f} "
        f"| {timings.bare_each_s:.1f} | {ratio_each:.2f} |"
    )
    dag_after = after[copies.dag(0)]
    print(
        f"each copy after: {dag_after.data_files} data files, {dag_after.delete_files} delete files, "
        f"{dag_after.rows} rows: " + ("the same on every copy" if same_work else f"NOT the same on every copy: {after}")
    )
    verdict = "met" if ratio <= GOAL else "MISSED"
    print(
        f"{verdict} ({copies.size}): {REWRITE_TASK_ID} / bare spark-submit of both CALLs = {ratio:.3f}, medians "
        f"of {copies.repeats} runs each (goal <= {GOAL})"
    )
    print(
        json.dumps(
            {
                "size": copies.size,
                **{name: round(value, 2) for name, value in median.items()},
                "runs": {
                    "tasks_s": [round(r["tasks_s"], 2) for r in timings.dag],
                    "bare_s": [round(b, 2) for b in timings.bare_s],
                },
            }
        )
    )
    return same_work


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", metavar="SIZE", help=f"any of {', '.join(SIZES)} (default: all)")
    parser.add_argument("--repeats", type=int, default=5, help="runs of the DAG and of the bare submission (5)")
    args = parser.parse_args(argv)
    names = args.sizes or list(SIZES)
    if unknown := sorted(set(names) - set(SIZES)):
        parser.error(f"unknown size {', '.join(unknown)}: choose from {', '.join(SIZES)}")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    sizes = [Copies(size, args.repeats) for size in names]
    logging.getLogger("pyiceberg.catalog.sql").setLevel(logging.ERROR)
    settings = bench_settings()
    work = Path(tempfile.mkdtemp(prefix="airflow-iceberg-bench-tasks-"))
    table_list = work / "iceberg_tables.yaml"
    # Only the DAG copies' DAGs run; the bare copies are listed to be read with the same settings.
    entries = [{**settings, "table": str(table)} for copies in sizes for table in copies.all]
    table_list.write_text(yaml.safe_dump({"tables": entries + fleet(FLEET_SIZE)}))
    os.environ["AIRFLOW_ICEBERG_CONFIG"] = str(table_list)
    config = load_table_list(table_list, select=lambda t: t == sizes[0].dag(0)).tables[0]

    written = {}
    for copies in sizes:
        print(f"==> {copies.size}: {len(copies.all)} identical copies of a table ({' '.join(SIZES[copies.size])})")
        written[copies.size] = write_copies(config, copies, work)

    print(f"==> airflow standalone (PostgreSQL, LocalExecutor), {len(entries) + FLEET_SIZE} tables in its list")
    timings = {}
    with running(work / "airflow-home", table_list, keep_logs=True, meta_db=META_DB) as airflow:
        for copies in sizes:
            dag_runs, bare_runs = [], []
            for run in range(copies.repeats):  # taking turns, so both sides meet the same machine
                print(f"==> {compaction_dag_id(copies.dag(run))}: triggered through the REST API, no logical date")
                dag_runs.append(run_dag(airflow, copies.dag(run)))
                predicates = dag_runs[-1]["predicates"]
                print(f"==> bare spark-submit of the same two CALLs on {copies.bare(run)}")
                bare_runs.append(run_bare(copies.bare(run), work, predicates, one_application=True))
            print(f"==> bare spark-submit of each CALL, one after the other, on {copies.bare_each}")
            bare_each_s = run_bare(copies.bare_each, work, predicates, one_application=False)
            timings[copies.size] = Timings(dag_runs, bare_runs, bare_each_s)

    same_work = True
    for copies in sizes:
        after = {t: TableStats.read(config.catalog_conn_id, t) for t in copies.all}
        same_work &= report(copies, *written[copies.size], timings[copies.size], after)
    print(f"\n(work files and the live Airflow's logs: {work})")
    return 0 if same_work else 1


if __name__ == "__main__":
    sys.exit(main())
