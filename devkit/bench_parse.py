"""``make bench-parse``: what parsing the DAG files costs with 1, 100 and 1,000 tables in the table list.

For each fleet size, a fresh Python process (so that nothing is imported yet) measures what Airflow does:

- *Airflow*: importing Airflow itself (``airflow.sdk`` and the DagBag), which the dag-processor and the task
  runner have done before they parse anything; not counted in the goals;
- *imports*: what the DAG files import beyond that (the provider, pydantic models, ...), once per process;
- each DAG file as the dag-processor parses it (a DagBag of that file), and the serialization of its DAGs that the
  dag-processor does next (shown apart: the goal is the parse);
- *task start*: the parse a task's process does before it runs, with Airflow's parsing context naming its DAG.

Goals (issue 9): all DAG files together parse 1,000 tables in under 10 s; a task's start-up parse takes under 1 s
with 1,000 tables; the imports of the DAG files take under 5 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DAGS = ROOT / "dags"
FILES = ("iceberg_compaction.py", "iceberg_table_list_check.py")
SIZES = (1, 100, 1000)
GOALS = {"parse_1000": 10.0, "task_start_1000": 1.0, "imports": 5.0}

#: Runs in the fresh process; prints one JSON line of seconds.
_MEASURE = """
import json, os, sys, time
t = time.perf_counter()
import airflow.sdk
from airflow.dag_processing.dagbag import DagBag
from airflow.sdk.definitions._internal.dag_parsing_context import _airflow_parsing_context_manager
from airflow.serialization.serialized_objects import DagSerialization
airflow_s = time.perf_counter() - t
t = time.perf_counter()
import airflow_iceberg.surface.dag_factory, airflow_iceberg.config  # what the DAG files import
imports_s = time.perf_counter() - t
out = {"airflow": airflow_s, "imports": imports_s, "files": {}}
for name in sys.argv[2:]:
    path = os.path.join(sys.argv[1], name)
    bag = DagBag(dag_folder=path, collect_dags=False)
    t = time.perf_counter()
    bag.process_file(path)
    parse_s = time.perf_counter() - t
    assert not bag.import_errors, bag.import_errors
    t = time.perf_counter()
    for dag in bag.dags.values():
        DagSerialization.to_dict(dag)
    out["files"][name] = {"parse": parse_s, "serialize": time.perf_counter() - t, "dags": len(bag.dags)}
path = os.path.join(sys.argv[1], sys.argv[2])
with _airflow_parsing_context_manager(dag_id=os.environ["BENCH_TASK_DAG_ID"], task_id="open_gate"):
    bag = DagBag(dag_folder=path, collect_dags=False)
    t = time.perf_counter()
    bag.process_file(path)
    out["task_start"] = time.perf_counter() - t
    assert bag.dag_ids == [os.environ["BENCH_TASK_DAG_ID"]], bag.dag_ids
print("BENCH " + json.dumps(out))
"""


def table_list(count: int) -> dict:
    """The shipped demo entry, ``count`` times under distinct names, with the shipped defaults."""
    shipped = yaml.safe_load((DAGS / "iceberg_tables.yaml").read_text())
    demo = shipped["tables"][0]
    return {
        "defaults": shipped["defaults"],
        "tables": [{**demo, "table": f"lake.fleet.t{n:04d}"} for n in range(count)],
    }


def measure(count: int, workdir: Path) -> dict:
    path = workdir / f"tables_{count}.yaml"
    path.write_text(yaml.safe_dump(table_list(count)))
    env = {
        **os.environ,
        "AIRFLOW_ICEBERG_CONFIG": str(path),
        "BENCH_TASK_DAG_ID": f"iceberg_compact__lake__fleet__t{count - 1:04d}",
    }
    result = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(DAGS), *FILES], env=env, capture_output=True, text=True, check=False
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("BENCH ")]
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"measuring {count} tables failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return json.loads(lines[-1].removeprefix("BENCH "))


def main() -> int:
    print(f"Parse cost of the DAG files (dags/), {os.cpu_count()} cores; seconds, each size in a fresh process")
    header = (
        "| tables | Airflow itself | imports | iceberg_compaction.py (+ serialize) | iceberg_table_list_check.py "
        "| all files | task start |"
    )
    print(header)
    print("|---:" * (header.count("|") - 1) + "|")
    results = {}
    with tempfile.TemporaryDirectory() as workdir:
        for count in SIZES:
            r = results[count] = measure(count, Path(workdir))
            compaction, check = (r["files"][name] for name in FILES)
            total = compaction["parse"] + check["parse"]
            print(
                f"| {count:,} | {r['airflow']:.2f} | {r['imports']:.2f} "
                f"| {compaction['parse']:.2f} (+ {compaction['serialize']:.2f}) for {compaction['dags']:,} DAGs "
                f"| {check['parse']:.2f} | {total:.2f} | {r['task_start']:.3f} |"
            )
    largest = results[SIZES[-1]]
    checks = [
        ("all DAG files parse 1,000 tables", sum(f["parse"] for f in largest["files"].values()), GOALS["parse_1000"]),
        ("a task's start-up parse, 1,000 tables", largest["task_start"], GOALS["task_start_1000"]),
        ("the imports of the DAG files", max(r["imports"] for r in results.values()), GOALS["imports"]),
    ]
    print()
    for what, seconds, goal in checks:
        print(f"{'met' if seconds < goal else 'MISSED':>6}: {what}: {seconds:.2f} s (goal: under {goal:g} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
