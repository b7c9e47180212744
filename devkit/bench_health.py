"""``make bench``, third part: what "compact only what needs it" costs and what a compaction buys, measured.

Planning from health puts a metadata read before every run and lets a run end without a gate or Spark, so:

1. The health check: ``read_health`` on a table of ``--files`` data files in ``--partitions`` identity
   partitions (written with pyiceberg alone, one file per partition per append), cold (first read in this
   process, pyiceberg's manifest cache cleared) and best of 3; and ``make_plan`` on what it read. Goal: the
   read under 2 s, so that checking a healthy table costs next to nothing.
2. A whole skipped run: the compaction DAG of a healthy table (two files, both large for a 4 KiB target) run
   through ``dag.test()``: it must end after ``plan_compaction`` with no gate closed and no Spark started.
3. The rewrite's throughput, in MB rewritten per second per core of the ``local[N]`` master, for the DAG's
   ``rewrite_data_files`` task and for a bare ``CALL`` of the same procedure, options and predicate on an
   identical copy (``--small-files`` small files in 4 day partitions, written by Spark): the bare ``CALL``
   both as a whole ``spark-submit`` (Spark's start-up included, as in the task's own seconds) and as the
   statement alone.
4. What the compaction buys readers: a full scan of the bare copy, best of 3 in one Spark application before
   the ``CALL`` and in another after it. Goal: at least 5 times faster after.

The tables live in namespace ``bench`` (``health_*``) and are dropped at the end. Figures are printed, never
asserted; the run fails only when a run or copy did not do what the measurement assumes.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_iceberg.core.procedures import REWRITE_PROCEDURES, build_call
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.planning.health import HealthThresholds, read_health
from airflow_iceberg.planning.plan import make_plan
from airflow_iceberg.surface.dag_factory import REWRITE_TASK_ID
from airflow_iceberg.table_list.loader import load_table_list
from airflow_iceberg.table_list.schema import TableConfig
from devkit.dag_runs import load_compaction_dag
from devkit.demo import DEMO_TABLE
from devkit.tables import TableStats, drop_table
from devkit.writers import WRITER_JOBS_DIR, run_statements, spark_job_hook

#: The Iceberg connection of catalog ``lake``, as the DAGs use it.
CATALOG_CONN = "lake"
MANY_FILES = TableName("lake", "bench", "health_files")
HEALTHY = TableName("lake", "bench", "health_skip")
# Names of one length, so that nothing in the two copies' files differs by the name.
REWRITE_DAG = TableName("lake", "bench", "health_rw_dag")
REWRITE_BARE = TableName("lake", "bench", "health_rw_cli")
ALL_TABLES = (MANY_FILES, HEALTHY, REWRITE_DAG, REWRITE_BARE)

READ_GOAL_S = 2.0
SCAN_GOAL = 5.0
REPEATS = 3
#: The small-file tables' day partitions, and the Spark tasks of one INSERT at most (each writes one file per day).
DAYS = 4
MAX_TASKS_PER_INSERT = 50
FIRST_DAY_EPOCH_S = 1_718_668_800  # 2024-06-18T00:00:00Z
SCAN_TIMER_JOB = WRITER_JOBS_DIR / "scan_timer.py"
#: How each of its timing lines starts (a Spark job, it cannot be imported here).
TIMING_PREFIX = '{"statement_seconds"'
SKIPPED_TASKS = ("close_gate", "wait_until_snapshot_idle", REWRITE_TASK_ID, "open_gate", "record_run")


def best_of(measure: Callable[[], float], repeats: int = REPEATS) -> float:
    """The least seconds of ``repeats`` calls of ``measure``, which returns the seconds it took."""
    return min(measure() for _ in range(repeats))


def local_cores(spark_conn_id: str) -> int | None:
    """The N of the Spark connection's ``local[N]`` master (``*`` is this machine's cores); None if not local."""
    from airflow.sdk import BaseHook

    master = BaseHook.get_connection(spark_conn_id).host or ""
    if master == "local":
        return 1
    match = re.fullmatch(r"local\[(\*|\d+)(?:,\s*\d+)?\]", master)
    if match is None:
        return None
    return os.cpu_count() if match.group(1) == "*" else int(match.group(1))


# --- 1. The health check on many files ------------------------------------------------------------------------


def write_many_files(table: TableName, files: int, partitions: int) -> float:
    """Create ``table`` partitioned by identity on an int column and append until it holds ``files`` files.

    Each append is one arrow table with a row in each of up to ``partitions`` partitions: pyiceberg writes one
    file per partition per append, and one manifest per append. Returns the seconds it took.
    """
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import IntegerType, LongType, NestedField, StringType

    started = time.monotonic()
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "part", IntegerType(), required=False),
        NestedField(3, "payload", StringType(), required=False),
    )
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="part"))
    iceberg_table = IcebergHook(CATALOG_CONN).catalog.create_table(table.in_catalog, schema=schema, partition_spec=spec)
    for append in range(math.ceil(files / partitions)):
        count = min(partitions, files - append * partitions)
        ids = range(append * partitions, append * partitions + count)
        iceberg_table.append(
            pa.table(
                {
                    "id": pa.array(ids, pa.int64()),
                    "part": pa.array(range(count), pa.int32()),
                    "payload": pa.array([f"row-{i}" for i in ids]),
                }
            )
        )
    return time.monotonic() - started


def measure_health_read(table: TableName, expected_files: int, expected_partitions: int) -> dict[str, Any]:
    """Cold and best-of-3 ``read_health`` on ``table``, each on a freshly loaded table; ``make_plan`` on it.

    Cold is the first read after clearing pyiceberg's manifest cache; the files themselves, just written, are in
    the operating system's page cache, as a busy catalog's recent manifests would be.
    """
    from pyiceberg.manifest import clear_manifest_cache

    hook = IcebergHook(CATALOG_CONN)

    def read() -> tuple[float, Any]:
        iceberg_table = hook.load_table(table.in_catalog)
        started = time.monotonic()
        health = read_health(iceberg_table, str(table), small_file_ratio=0.75)
        return time.monotonic() - started, health

    clear_manifest_cache()
    load_started = time.monotonic()
    iceberg_table = hook.load_table(table.in_catalog)
    load_s = time.monotonic() - load_started
    manifests = len(iceberg_table.current_snapshot().manifests(iceberg_table.io))
    cold_s, health = read()
    if (health.data_files, len(health.partitions)) != (expected_files, expected_partitions):
        raise RuntimeError(
            f"{table} holds {health.data_files} files in {len(health.partitions)} partitions, "
            f"not {expected_files} in {expected_partitions}"
        )
    best_s = best_of(lambda: read()[0])
    where = dict.fromkeys(REWRITE_PROCEDURES)

    def plan() -> float:
        started = time.monotonic()
        make_plan(health, HealthThresholds(), where)
        return time.monotonic() - started

    plan_best_s = best_of(plan)
    decision = make_plan(health, HealthThresholds(), where)
    return {
        "files": health.data_files,
        "partitions": len(health.partitions),
        "manifests": manifests,
        "load_table_s": load_s,
        "read_cold_s": cold_s,
        "read_best_s": best_s,
        "plan_best_s": plan_best_s,
        "plan_decision": f"{decision.decision}: {decision.reason}",
    }


# --- 2. A whole skipped run -----------------------------------------------------------------------------------


def write_healthy_table(table: TableName) -> None:
    """Two files of 5,000 longs each: both over 3 KiB, so both large for a 4 KiB target."""
    catalog = IcebergHook(CATALOG_CONN).catalog
    iceberg_table = catalog.create_table(table.in_catalog, schema=pa.schema([("id", pa.int64())]))
    for start in (0, 5000):
        iceberg_table.append(pa.table({"id": pa.array(range(start, start + 5000), pa.int64())}))
    sizes = iceberg_table.inspect.files().column("file_size_in_bytes").to_pylist()
    if min(sizes) <= 3072:
        raise RuntimeError(f"{table}'s files are not all over 3 KiB: {sizes}")


def measure_skipped_runs(config: TableConfig, runs: int) -> dict[str, Any]:
    """Parse the DAG folder once, then run the table's compaction DAG ``runs`` times; each must skip."""
    table = config.table
    gate = WriteGateHook(config.write_gate_conn_id)
    trail_before = len(gate.audit_trail(table))
    parse_started = time.monotonic()
    dag = load_compaction_dag(table)
    parse_s = time.monotonic() - parse_started
    walls, plan_task_s, tasks_s = [], [], []
    for _ in range(runs):
        started = time.monotonic()
        run = dag.test()
        walls.append(time.monotonic() - started)
        tis = {ti.task_id: ti for ti in run.get_task_instances()}
        plan = tis["plan_compaction"].xcom_pull(task_ids="plan_compaction", key="plan")
        if run.state != "success" or plan["decision"] != "skip" or {tis[t].state for t in SKIPPED_TASKS} != {"skipped"}:
            states = {task_id: ti.state for task_id, ti in tis.items()}
            raise RuntimeError(f"the run on the healthy {table} did not skip: {run.state}, {states}, {plan}")
        plan_task_s.append(tis["plan_compaction"].duration)
        tasks_s.append(sum(ti.duration or 0 for ti in tis.values()))
    if len(trail := gate.audit_trail(table)) != trail_before:
        raise RuntimeError(f"a skipped run on {table} touched its gate: {trail[trail_before:]}")
    return {
        "parse_s": parse_s,
        "first_s": walls[0],
        "best_s": min(walls),
        "plan_task_best_s": min(plan_task_s),
        "tasks_best_s": min(tasks_s),
    }


# --- 3 and 4. The rewrite and what it buys ---------------------------------------------------------------------


def small_file_statements(table: TableName, small_files: int, rows_per_file: int) -> list[str]:
    """A day-partitioned table of ``small_files`` small files (about; a multiple of the files per INSERT).

    Each INSERT spreads its rows over ``DAYS`` days in as many Spark tasks as give it up to ``small_files``
    files; without a distribution mode each task writes one file per day. Deterministic: two tables built from
    these statements in one Spark application hold the same rows in files of the same sizes.
    """
    tasks = max(1, min(MAX_TASKS_PER_INSERT, small_files // DAYS))
    inserts = max(1, round(small_files / (tasks * DAYS)))
    rows = tasks * DAYS * rows_per_file
    name = table.in_catalog
    statements = [
        f"CREATE TABLE lake.{name} (id BIGINT, ts TIMESTAMP, payload STRING) USING iceberg PARTITIONED BY (days(ts)) "
        "TBLPROPERTIES ('format-version'='2', 'write.distribution-mode'='none')"
    ]
    for batch in range(inserts):
        statements.append(
            f"INSERT INTO lake.{name} SELECT /*+ REPARTITION({tasks}) */ {batch * rows} + id AS id, "
            f"timestamp_seconds({FIRST_DAY_EPOCH_S} + id % {DAYS} * 86400 + id % 86400) AS ts, "
            "sha2(CAST(id AS STRING), 256) AS payload "
            f"FROM range({rows})"
        )
    return statements


def table_bytes(table: TableName) -> int:
    files = IcebergHook(CATALOG_CONN).load_table(table.in_catalog).inspect.files()
    return sum(files.column("file_size_in_bytes").to_pylist())


def time_statements(config: TableConfig, statements: list[str], log_file: Path) -> tuple[float, list[dict]]:
    """Run ``statements`` in one ``spark-submit`` of the scan timer on ``config.table``; its wall seconds and each
    statement's ``{"statement_seconds": ..., "row": ...}``."""
    timings: list[dict] = []

    def keep_timing(line: str) -> None:
        start = line.find(TIMING_PREFIX)
        if start >= 0:  # Spark's progress bar may share the line: read the JSON object only
            timings.append(json.JSONDecoder().raw_decode(line, start)[0])

    args = [argument for statement in statements for argument in ("--statement", statement)]
    hook = spark_job_hook(
        config, args, name=f"scan-timer-{config.table}", gated=False, log_file=log_file, on_line=keep_timing
    )
    started = time.monotonic()
    hook.submit(str(SCAN_TIMER_JOB))
    wall_s = time.monotonic() - started
    if len(timings) != len(statements):
        raise RuntimeError(f"{len(statements)} statements on {config.table} printed {len(timings)} timings")
    return wall_s, timings


#: What a full scan of a bench table reads: every row, and a checksum of its widest column.
PAYLOAD_SCAN = "count(*) AS row_count, sum(hash(payload)) AS checksum"
#: The figures :func:`against_bare_call` measures, as each bench reports them.
TIMINGS = ("task_s", "bare_wall_s", "bare_statement_s", "scan_before_s", "scan_after_s")


def full_scan(config: TableConfig, work: Path, columns: str = PAYLOAD_SCAN) -> tuple[float, dict]:
    """Best of 3 full scans (``SELECT <columns>``) of ``config.table`` in one Spark application, and what the scan
    returned."""
    statement = f"SELECT {columns} FROM {config.table}"
    _, timings = time_statements(config, [statement] * REPEATS, work / "scans.log")
    if len({json.dumps(t["row"], sort_keys=True) for t in timings}) != 1:
        raise RuntimeError(f"the scans of {config.table} disagree: {timings}")
    return min(t["statement_seconds"] for t in timings), timings[0]["row"]


def same_work(task_row: dict[str, Any], bare_row: dict[str, Any]) -> bool:
    """Whether a task's result row and a bare CALL's agree: every field of the CALL's row (the task's also counts
    the files it planned, with partial progress)."""
    return all(task_row.get(field) == value for field, value in bare_row.items())


def compact_through_dag(config: TableConfig, copy: TableName) -> tuple[float, dict[str, Any], str]:
    """Run ``config.table``'s compaction DAG (``dag.test()``), which must compact; its rewrite task's seconds and
    ``rewrite_data_files`` result row, and the ``CALL`` that does the same on ``copy``: the table's options with
    the plan's (``rewrite-all`` where it folds equality deletes), and the plan's narrowed predicate."""
    run = load_compaction_dag(config.table).test()
    plan = run.get_task_instance("plan_compaction").xcom_pull(task_ids="plan_compaction", key="plan")
    rewrite = run.get_task_instance(REWRITE_TASK_ID)
    task_s = rewrite.xcom_pull(task_ids=REWRITE_TASK_ID, key="seconds")
    task_row = (rewrite.xcom_pull(task_ids=REWRITE_TASK_ID) or {}).get("rewrite_data_files")
    if run.state != "success" or plan["decision"] != "compact" or task_row is None:
        raise RuntimeError(f"the run on {config.table} did not compact: {run.state}, {plan}, {task_row}")
    options = {**config.options_for("rewrite_data_files"), **plan.get("options", {}).get("rewrite_data_files", {})}
    return task_s, task_row, build_call("rewrite_data_files", copy, options, plan["predicates"]["rewrite_data_files"])


def against_bare_call(
    dag_config: TableConfig, bare_config: TableConfig, scan_columns: str, work: Path
) -> dict[str, Any]:
    """Scan the copy, compact the original through its DAG, the same CALL bare on the copy, scan the copy again.

    Returns the :data:`TIMINGS`, the task's result row (``task_row``) and what the scans read (``scanned``); raises
    if the scan read differently after, or the task and the CALL report different work.
    """
    scan_before_s, scanned = full_scan(bare_config, work, scan_columns)
    task_s, task_row, call = compact_through_dag(dag_config, bare_config.table)
    bare_wall_s, [bare] = time_statements(bare_config, [call], work / "bare-call.log")
    scan_after_s, scanned_after = full_scan(bare_config, work, scan_columns)
    if scanned_after != scanned:
        raise RuntimeError(f"the compaction changed what a scan reads: {scanned} -> {scanned_after}")
    if not same_work(task_row, bare["row"]):
        raise RuntimeError(f"the DAG and the bare CALL did different work: {task_row} vs {bare['row']}")
    return {
        "task_s": task_s,
        "bare_wall_s": bare_wall_s,
        "bare_statement_s": bare["statement_seconds"],
        "scan_before_s": scan_before_s,
        "scan_after_s": scan_after_s,
        "task_row": task_row,
        "scanned": scanned,
    }


def measure_rewrite(
    dag_config: TableConfig, bare_config: TableConfig, small_files: int, rows_per_file: int, work: Path
) -> dict[str, Any]:
    """Write both copies, scan the bare one, run the DAG on the other, the same CALL bare, scan again."""
    run_statements(
        dag_config,
        [
            "CREATE NAMESPACE IF NOT EXISTS lake.bench",
            *small_file_statements(dag_config.table, small_files, rows_per_file),
            *small_file_statements(bare_config.table, small_files, rows_per_file),
        ],
        log_file=work / "write.log",
    )
    stats = {t: TableStats.read(CATALOG_CONN, t) for t in (dag_config.table, bare_config.table)}
    sizes = {t: table_bytes(t) for t in stats}
    if len({(s.data_files, s.rows) for s in stats.values()}) != 1 or len(set(sizes.values())) != 1:
        raise RuntimeError(f"the two copies differ: {stats} {sizes}")
    before = stats[bare_config.table]
    measured = against_bare_call(dag_config, bare_config, PAYLOAD_SCAN, work)
    after = {t: TableStats.read(CATALOG_CONN, t) for t in stats}
    if len({(s.data_files, s.rows) for s in after.values()}) != 1:
        raise RuntimeError(f"the DAG and the bare CALL left different tables: {after}")
    return {
        "small_files": before.data_files,
        "bytes": sizes[bare_config.table],
        "files_after": after[bare_config.table].data_files,
        "rewritten_bytes": measured["task_row"]["rewritten_bytes_count"],
        **{figure: measured[figure] for figure in TIMINGS},
    }


# --- Report ---------------------------------------------------------------------------------------------------


def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def report(health: dict[str, Any], skipped: dict[str, Any], rewrite: dict[str, Any], cores: int | None) -> None:
    def per_core(seconds: float) -> str:
        rate = rewrite["rewritten_bytes"] / 1e6 / seconds
        return f"{rate / cores:.2f} MB/s/core" if cores else f"{rate:.2f} MB/s (cores unknown)"

    scan_ratio = rewrite["scan_before_s"] / rewrite["scan_after_s"]
    mb = rewrite["rewritten_bytes"] / 1e6
    cores_text = f"local[{cores}]" if cores else "not a local master"
    print()
    print(f"compact only what needs it: figures (Spark {cores_text}; os.cpu_count() = {os.cpu_count()})")
    print("| what | figure | goal |")
    print("|---|---:|---|")
    print(
        f"| read_health, {health['files']} files in {health['partitions']} partitions, {health['manifests']} "
        f"manifests: best of {REPEATS} | {health['read_best_s']:.3f} s | < {READ_GOAL_S:g} s: "
        f"{verdict(health['read_best_s'] < READ_GOAL_S)} |"
    )
    print(
        f"| read_health, first (cold) | {health['read_cold_s']:.3f} s | < {READ_GOAL_S:g} s: "
        f"{verdict(health['read_cold_s'] < READ_GOAL_S)} |"
    )
    print(f"| load_table before it (catalog row and metadata JSON) | {health['load_table_s']:.3f} s | |")
    print(f"| make_plan on that health, best of {REPEATS} | {health['plan_best_s']:.3f} s | |")
    print(
        f"| skipped run, dag.test() wall: first / best of {skipped['runs']} | {skipped['first_s']:.1f} / "
        f"{skipped['best_s']:.1f} s | |"
    )
    print(f"| its tasks' own durations, added (best run) | {skipped['tasks_best_s']:.2f} s | |")
    print(f"| its plan_compaction task, best | {skipped['plan_task_best_s']:.2f} s | |")
    print(f"| parsing the DAG folder for it (once, not in the runs) | {skipped['parse_s']:.1f} s | |")
    print(
        f"| {REWRITE_TASK_ID} task (rewrite_data_files; no deletes): {mb:.1f} MB in {rewrite['small_files']} "
        f"files -> {rewrite['files_after']}, "
        f"{rewrite['task_s']:.1f} s (Spark start-up included) | {per_core(rewrite['task_s'])} | |"
    )
    print(
        f"| bare CALL, whole spark-submit: {rewrite['bare_wall_s']:.1f} s (Spark start-up included) | "
        f"{per_core(rewrite['bare_wall_s'])} | |"
    )
    print(
        f"| bare CALL, statement alone: {rewrite['bare_statement_s']:.1f} s | "
        f"{per_core(rewrite['bare_statement_s'])} | |"
    )
    print(f"| rewrite task / bare spark-submit | {rewrite['task_s'] / rewrite['bare_wall_s']:.2f} | |")
    print(
        f"| full scan, best of {REPEATS}: {rewrite['scan_before_s']:.2f} s before, {rewrite['scan_after_s']:.2f} s "
        f"after | {scan_ratio:.1f}x faster | >= {SCAN_GOAL:g}x: {verdict(scan_ratio >= SCAN_GOAL)} |"
    )
    print(f"plan on the {health['files']}-file table: {health['plan_decision']}")
    figures = {
        **{f"health_{k}": v for k, v in health.items() if k != "plan_decision"},
        **{f"skipped_{k}": v for k, v in skipped.items()},
        **{f"rewrite_{k}": v for k, v in rewrite.items()},
        "cores": cores,
        "cpu_count": os.cpu_count(),
    }
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}))


def bench_settings() -> dict[str, Any]:
    """The shipped demo table's settings (Spark and rewrite options included), on demand only, short waits."""
    demo = next(t for t in load_table_list().tables if t.table == DEMO_TABLE)
    settings = demo.model_dump(mode="json", exclude={"table", "where", "schedule", "full_rewrite"})
    return {
        **settings,
        "idle_seconds": 2,
        "poke_interval": 1,
        "full_rewrite": {"schedule": None},
        "health": {**settings["health"], "watch": False},  # runs on demand only: the bench starts each
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000, help="data files of the health-check table")
    parser.add_argument("--partitions", type=int, default=500, help="its partitions")
    parser.add_argument("--small-files", type=int, default=2_000, help="small files of each rewrite copy")
    parser.add_argument("--rows-per-file", type=int, default=400, help="rows in each of those small files")
    parser.add_argument("--skipped-runs", type=int, default=REPEATS, help="skipped runs to time")
    args = parser.parse_args(argv)
    if args.files < args.partitions:
        parser.error("--files must be at least --partitions: every partition holds a file")
    logging.getLogger("pyiceberg.catalog.sql").setLevel(logging.ERROR)

    settings = bench_settings()
    work = Path(tempfile.mkdtemp(prefix="airflow-iceberg-bench-health-"))
    table_list = work / "iceberg_tables.yaml"
    entries = [
        {**settings, "table": str(HEALTHY), "rewrite_data_files": {"target-file-size-bytes": 4096}},
        {**settings, "table": str(REWRITE_DAG)},
        {**settings, "table": str(REWRITE_BARE)},  # not run: listed to be read with the same settings
    ]
    table_list.write_text(yaml.safe_dump({"tables": entries}))
    os.environ["AIRFLOW_ICEBERG_CONFIG"] = str(table_list)
    configs = {c.table: c for c in load_table_list(table_list).tables}
    cores = local_cores(configs[REWRITE_DAG].spark_conn_id)

    IcebergHook(CATALOG_CONN).catalog.create_namespace_if_not_exists(MANY_FILES.namespace)
    for table in ALL_TABLES:
        drop_table(CATALOG_CONN, table)
    # The only table whose gate closes: open, whatever an interrupted earlier run left.
    WriteGateHook(configs[REWRITE_DAG].write_gate_conn_id).force_open(REWRITE_DAG, "make bench recreates the table")
    try:
        print(f"==> {MANY_FILES}: {args.files} files in {args.partitions} partitions, written with pyiceberg")
        written_s = write_many_files(MANY_FILES, args.files, args.partitions)
        print(f"    written in {written_s:.1f} s; reading its health")
        health = measure_health_read(MANY_FILES, args.files, args.partitions)
        drop_table(CATALOG_CONN, MANY_FILES)

        print(f"==> {HEALTHY}: two large files; its compaction DAG {args.skipped_runs} times through dag.test()")
        write_healthy_table(HEALTHY)
        skipped = {"runs": args.skipped_runs, **measure_skipped_runs(configs[HEALTHY], args.skipped_runs)}

        print(
            f"==> {REWRITE_DAG} and {REWRITE_BARE}: about {args.small_files} small files each, written by Spark; "
            "scans, the DAG's rewrite, the bare CALL, scans"
        )
        rewrite = measure_rewrite(
            configs[REWRITE_DAG], configs[REWRITE_BARE], args.small_files, args.rows_per_file, work
        )
    finally:
        for table in ALL_TABLES:
            drop_table(CATALOG_CONN, table)
    report(health, skipped, rewrite, cores)
    print(f"(work files and Spark logs: {work})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
