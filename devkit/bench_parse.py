"""``make bench-parse``: what parsing the DAG files costs with 1, 100, 1,000 and 5,000 tables in the table list.

Each size gets a DAG folder of its own, as ``airflow-iceberg dags`` makes it: the shipped DAG files, and the further
compaction DAG files that a list of more than ``tables_per_dag_file`` tables takes (5 files at 5,000 tables).

For each fleet size, a fresh Python process (so that nothing is imported yet) measures what Airflow does:

- *Airflow*: importing Airflow itself (``airflow.sdk`` and the DagBag), which the dag-processor and the task
  runner have done before they parse anything; not counted in the goals;
- *imports*: what the DAG files import beyond that (the provider, pydantic models, ...), once per process;
- each DAG file as the dag-processor parses it (a DagBag of that file), and the serialization of its DAGs that the
  dag-processor does next (shown apart: the goal is the parse);
- *store*: what the dag-processor's manager does with the serialized DAGs of each compaction DAG file, Airflow's
  own ``update_dag_parsing_results_in_db`` on a PostgreSQL metadata database of the bench's own, the second time
  (every parse after the first finds its DAGs unchanged); CPU seconds of the process, not of PostgreSQL. The
  transfer of the DAGs from the parsing process to the manager is not counted;
- *task start*: the parse a task's process does before it runs, with Airflow's parsing context naming its DAG.

Then, at 1,000 tables, what the same parse costs if each table had fewer DAGs or no cron schedules, or with each
cron decoded anew as Airflow's own timetable does: the DAG files are the same, and the bench builds only the
compaction DAGs, gives the tables no cron, or puts Airflow's decode back. These rows show where the seconds go;
they are not settings the product offers.

Goals (issue 9): all DAG files together parse 1,000 tables in under 10 s; a task's start-up parse takes under 1 s
with 1,000 tables; the imports of the DAG files take under 5 s. Issue 38: at 5,000 tables no DAG file comes near
Airflow's time-outs: its parse takes under a third of ``[core] dagbag_import_timeout`` (30 s), and its parse and
serialisation together under half of ``[dag_processor] dag_file_processor_timeout`` (50 s).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import closing
from pathlib import Path

import yaml

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.fleet.dag_files import dag_file_index, dag_file_name, dag_files_taken, write_dag_files
from airflow_iceberg.fleet.shards import dag_file_of
from airflow_iceberg.surface.dag_factory import compaction_dag_id, full_rewrite_dag_id
from airflow_iceberg.table_list.loader import read_table_list
from devkit.live_airflow import postgres, postgres_url

ROOT = Path(__file__).resolve().parents[1]
DAGS = ROOT / "dags"
FILES = ("iceberg_compaction.py", "iceberg_table_list_check.py")
SIZES = (1, 100, 1000, 5000)
#: Airflow's defaults: ``[core] dagbag_import_timeout`` and ``[dag_processor] dag_file_processor_timeout``.
IMPORT_TIMEOUT, PROCESSOR_TIMEOUT = 30.0, 50.0
GOALS = {
    "parse_1000": 10.0,
    "task_start_1000": 1.0,
    "imports": 5.0,
    "file_parse": IMPORT_TIMEOUT / 3,
    "file_parse_serialize": PROCESSOR_TIMEOUT / 2,
}
#: The what-if variants at 1,000 tables: (label, the one DAG per table kept (``_BUILDERS``' index: 0 the compaction
#: DAG, 1 the full rewrite's) or None for both, no cron schedules, crons decoded anew).
VARIANTS = (
    ("as shipped: 2 DAGs per table, each on a cron", None, False, False),
    ("as before the shared cron timetable: each decode of a cron anew", None, False, True),
    ("the compaction DAG alone: 1 DAG per table", 0, False, False),
    ("the full-rewrite DAG alone: 1 DAG per table, with its maintenance tasks", 1, False, False),
    ("no cron: compaction on the health watch alone, full rewrites manual", None, True, False),
    ("1 DAG per table, no cron", 0, True, False),
)
#: The bench's own metadata databases: one migrated template, and a copy of it for each measurement.
STORE_DB = "airflow_iceberg_bench_parse"

#: Runs in the fresh process; prints one JSON line of seconds.
_MEASURE = """
import json, os, sys, time
from pathlib import Path
t = time.perf_counter()
import airflow.sdk
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk.definitions._internal.dag_parsing_context import _airflow_parsing_context_manager
from airflow.serialization.serialized_objects import DagSerialization, LazyDeserializedDAG
airflow_s = time.perf_counter() - t
t = time.perf_counter()
import airflow_iceberg.surface.dag_factory, airflow_iceberg.table_list.schema  # what the DAG files import
imports_s = time.perf_counter() - t
if os.environ.get("BENCH_UNSHARED_CRON"):  # Airflow's own decode, anew at each call
    from airflow.timetables.trigger import CronTriggerTimetable
    from airflow_iceberg.timetables.cron import SharedCronTriggerTimetable
    SharedCronTriggerTimetable.deserialize = classmethod(CronTriggerTimetable.deserialize.__func__)
if os.environ.get("BENCH_ONE_DAG_PER_TABLE"):
    kept = int(os.environ["BENCH_ONE_DAG_PER_TABLE"])
    airflow_iceberg.surface.dag_factory._BUILDERS = airflow_iceberg.surface.dag_factory._BUILDERS[kept : kept + 1]
folder = Path(sys.argv[1])
out = {"airflow": airflow_s, "imports": imports_s, "files": {}}
serialized = {}
for name in sys.argv[2:]:
    bag = DagBag(dag_folder=folder / name, bundle_path=folder, bundle_name="dags-folder", collect_dags=False)
    t = time.perf_counter()
    bag.process_file(str(folder / name))
    parse_s = time.perf_counter() - t
    assert not bag.import_errors, bag.import_errors
    t = time.perf_counter()
    serialized[name] = [
        LazyDeserializedDAG(data=DagSerialization.to_dict(dag), last_loaded=dag.last_loaded)
        for dag in bag.dags.values()
    ]
    out["files"][name] = {"parse": parse_s, "serialize": time.perf_counter() - t, "dags": len(bag.dags)}
if not os.environ.get("BENCH_NO_STORE"):
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.collection import update_dag_parsing_results_in_db
    from airflow.utils.session import create_session
    DagBundlesManager().sync_bundles_to_db()
    for name in sys.argv[2:]:
        if not name.startswith("iceberg_compaction"):
            continue
        for _ in range(2):  # the first stores new DAGs; the second finds them unchanged, as every later parse does
            t = time.process_time()
            with create_session() as session:
                update_dag_parsing_results_in_db(
                    bundle_name="dags-folder", bundle_version=None, dags=serialized[name], import_errors={},
                    parse_duration=None, warnings=set(), session=session, files_parsed={("dags-folder", name)},
                )
            out["files"][name]["store"] = time.process_time() - t
with _airflow_parsing_context_manager(dag_id=os.environ["BENCH_TASK_DAG_ID"], task_id="open_gate"):
    path = str(folder / os.environ["BENCH_TASK_DAG_FILE"])
    bag = DagBag(dag_folder=path, collect_dags=False)
    t = time.perf_counter()
    bag.process_file(path)
    out["task_start"] = time.perf_counter() - t
    assert bag.dag_ids == [os.environ["BENCH_TASK_DAG_ID"]], bag.dag_ids
print("BENCH " + json.dumps(out))
"""


def table_list(count: int, no_cron: bool = False) -> dict:
    """The shipped demo entry, ``count`` times under distinct names, with the shipped defaults.

    ``no_cron``: without the compaction DAG's safety-net cron, and with the full rewrite run by hand only.
    """
    shipped = yaml.safe_load((DAGS / "iceberg_tables.yaml").read_text())
    demo = shipped["tables"][0]
    if no_cron:
        demo = {**demo, "schedule": None, "full_rewrite": {**demo["full_rewrite"], "schedule": None}}
    return {
        "defaults": shipped["defaults"],
        "tables": [{**demo, "table": f"lake.fleet.t{n:04d}"} for n in range(count)],
    }


def prepare_store(workdir: Path) -> dict[str, str]:
    """A migrated template metadata database on the embedded PostgreSQL, and the environment to migrate it."""
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(workdir / "airflow"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    _recreate(f"{STORE_DB}_template")
    airflow = str(Path(sys.executable).with_name("airflow"))
    migrate_env = {**env, "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres_url(f"{STORE_DB}_template")}
    subprocess.run([airflow, "db", "migrate"], env=migrate_env, check=True, capture_output=True)
    return env


def _recreate(database: str, template: str | None = None) -> None:
    with closing(postgres()) as connection, connection.cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        cursor.execute(f'CREATE DATABASE "{database}"' + (f' TEMPLATE "{template}"' if template else ""))


def dag_folder(count: int, workdir: Path, no_cron: bool = False) -> tuple[Path, list[str]]:
    """A DAG folder for ``count`` tables as ``airflow-iceberg dags`` makes it, and its DAG files' names: the
    compaction DAG files first, the check file last."""
    folder = workdir / f"dags_{count}{'_no_cron' if no_cron else ''}"
    folder.mkdir()
    for name in FILES:
        shutil.copyfile(DAGS / name, folder / name)
    (folder / "iceberg_tables.yaml").write_text(yaml.safe_dump(table_list(count, no_cron)))
    write_dag_files(folder, dag_files_taken(read_table_list(folder / "iceberg_tables.yaml")))
    compaction = sorted((p.name for p in folder.glob("iceberg_compaction*.py")), key=dag_file_index)
    return folder, [*compaction, FILES[1]]


def measure(
    count: int,
    workdir: Path,
    store_env: dict[str, str] | None = None,
    one_dag_per_table: int | None = None,
    no_cron: bool = False,
    unshared_cron: bool = False,
) -> dict:
    """One fresh process's figures for ``count`` tables; with ``store_env`` (:func:`prepare_store`), the store too;
    with ``one_dag_per_table``, only that DAG of each table (0: the compaction DAG, 1: the full rewrite's)."""
    folder, files = dag_folder(count, Path(tempfile.mkdtemp(dir=workdir)), no_cron)
    last = f"lake.fleet.t{count - 1:04d}"
    env = {
        **(store_env or os.environ),
        "AIRFLOW_ICEBERG_CONFIG": str(folder / "iceberg_tables.yaml"),
        "BENCH_TASK_DAG_ID": (full_rewrite_dag_id if one_dag_per_table == 1 else compaction_dag_id)(
            TableName.parse(last)
        ),
        "BENCH_TASK_DAG_FILE": dag_file_name(dag_file_of(last, len(files) - 1)),
    }
    if store_env is not None:
        _recreate(STORE_DB, template=f"{STORE_DB}_template")
        env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = postgres_url(STORE_DB)
    else:
        env["BENCH_NO_STORE"] = "1"
    if one_dag_per_table is not None:
        env["BENCH_ONE_DAG_PER_TABLE"] = str(one_dag_per_table)
    if unshared_cron:
        env["BENCH_UNSHARED_CRON"] = "1"
    result = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(folder), *files], env=env, capture_output=True, text=True, check=False
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("BENCH ")]
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"measuring {count} tables failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return json.loads(lines[-1].removeprefix("BENCH "))


def compaction_files(result: dict) -> list[dict]:
    """The figures of each compaction DAG file of one measurement."""
    return [figures for name, figures in result["files"].items() if name.startswith("iceberg_compaction")]


def summed(result: dict) -> dict:
    """The compaction DAG files' figures added up, and the largest file's parse and parse with serialisation."""
    files = compaction_files(result)
    total = {key: sum(f.get(key, 0.0) for f in files) for key in ("parse", "serialize", "store", "dags")}
    total["files"] = len(files)
    total["largest_parse"] = max(f["parse"] for f in files)
    total["largest_both"] = max(f["parse"] + f["serialize"] for f in files)
    return total


def _told(compaction: dict) -> float:
    return compaction["parse"] + compaction["serialize"] + compaction["store"]


def main() -> int:
    print(f"Parse cost of the DAG files (dags/), {os.cpu_count()} cores; seconds, each size in a fresh process")
    header = (
        "| tables | compaction DAG files | Airflow itself | imports | their parse | serialize | store | all told "
        "| largest file: parse, with serialize | iceberg_table_list_check.py | task start |"
    )
    print(header)
    print("|---:" * (header.count("|") - 1) + "|")
    results = {}
    with tempfile.TemporaryDirectory() as workdir:
        store_env = prepare_store(Path(workdir))
        for count in SIZES:
            r = results[count] = measure(count, Path(workdir), store_env)
            c, check = summed(r), r["files"][FILES[1]]
            print(
                f"| {count:,} | {c['files']} | {r['airflow']:.2f} | {r['imports']:.2f} "
                f"| {c['parse']:.2f} for {c['dags']:,} DAGs | {c['serialize']:.2f} | {c['store']:.2f} "
                f"| {_told(c):.2f} | {c['largest_parse']:.2f}, {c['largest_both']:.2f} | {check['parse']:.2f} "
                f"| {r['task_start']:.3f} |"
            )
        count = 1000
        print()
        print(f"What one parse of iceberg_compaction.py would cost at {count:,} tables otherwise")
        print("| tables' DAGs | DAGs | parse | serialize | store | all told | against as shipped |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        shipped = None
        for label, one_dag, no_cron, unshared in VARIANTS:
            if one_dag is None and not (no_cron or unshared):
                r = results[count]
            else:
                r = measure(count, Path(workdir), store_env, one_dag, no_cron, unshared)
            c = summed(r)
            shipped = shipped or _told(c)
            print(
                f"| {label} | {c['dags']:,} | {c['parse']:.2f} | {c['serialize']:.2f} "
                f"| {c['store']:.2f} | {_told(c):.2f} | {_told(c) / shipped:.2f} |"
            )
    thousand, largest = results[1000], summed(results[SIZES[-1]])
    checks = [
        ("all DAG files parse 1,000 tables", sum(f["parse"] for f in thousand["files"].values()), GOALS["parse_1000"]),
        ("a task's start-up parse, 1,000 tables", thousand["task_start"], GOALS["task_start_1000"]),
        ("the imports of the DAG files", max(r["imports"] for r in results.values()), GOALS["imports"]),
        (
            f"the largest DAG file's parse at {SIZES[-1]:,} tables (import time-out {IMPORT_TIMEOUT:g} s)",
            largest["largest_parse"],
            GOALS["file_parse"],
        ),
        (
            f"the largest DAG file's parse and serialisation at {SIZES[-1]:,} tables "
            f"(file processor time-out {PROCESSOR_TIMEOUT:g} s)",
            largest["largest_both"],
            GOALS["file_parse_serialize"],
        ),
    ]
    print()
    for what, seconds, goal in checks:
        print(f"{'met' if seconds < goal else 'MISSED':>6}: {what}: {seconds:.2f} s (goal: under {goal:g} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
