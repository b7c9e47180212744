"""``make bench-fleet``: what 1,000 healthy, watched tables cost a live Airflow, and what cron mode costs instead.

One machine, one bench, three live ``airflow standalone`` (PostgreSQL metadata, LocalExecutor, parallelism 16) on
the same DAG files and 1,000 real Iceberg tables in the JDBC catalog (one small file each: healthy):

1. **unscheduled**, for reference: a table list that schedules nothing (no health watch, no cron), so the DAGs
   have no asset, no watcher and no cron at all. CPU over a window.
2. **idle, then watching**: every table watched by the triggerer, polled every 60 s. First every DAG is paused
   (the same DAG files with every schedule off: Airflow registers no watcher of a paused DAG) for a window; then
   every DAG is unpaused through the REST API, as a user would, and DAG runs created and CPU are measured over the
   same window; the ratio watching / idle. Then a writer adds small files to 10 tables: each must get exactly one
   run, starting within two poll intervals of its last commit, which compacts it; no other run may follow in the
   next 5 minutes. Before the writer, the Iceberg tables page's list of the 1,000 tables is asked for ten times,
   as the page asks when it opens: its response time.
3. **cron**: 60 of the tables scheduled every minute (no watch), as before the health watch: runs finished a
   minute, and CPU per (skipped) run, against CPU per table check of the watch.

CPU is that of the whole process tree ``airflow standalone`` starts, exited task processes included
(``LiveAirflow.cpu_seconds``). Every figure is printed with what it is measured against.
"""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.surface.dag_factory import compaction_dag_id
from airflow_iceberg.table_list import load_table_list
from devkit.live_airflow import LiveAirflow
from devkit.tables import TableStats

ROOT = Path(__file__).resolve().parents[1]
CATALOG = "lake"
NAMESPACE = "fleet_bench"
META_DB = "airflow_iceberg_bench_fleet"
ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": pa.array(["a", "b", "c"])})
#: A table needs work from this many small files: the writer's tables get 1 + this many.
MIN_SMALL_FILES = 4
#: Airflow as the issue measured it: LocalExecutor, parallelism 16; a triggerer with room for every watcher.
SETTINGS = {"AIRFLOW__CORE__PARALLELISM": "16", "AIRFLOW__TRIGGERER__CAPACITY": "5000"}


def tables(count: int) -> list[TableName]:
    return [TableName(CATALOG, NAMESPACE, f"t{n:04d}") for n in range(count)]


def create_fleet(fleet: list[TableName]) -> None:
    """Each table anew, with one small data file: a healthy table."""
    catalog = IcebergHook(CATALOG).catalog
    catalog.create_namespace_if_not_exists(NAMESPACE)
    for identifier in catalog.list_tables(NAMESPACE):
        catalog.purge_table(identifier)

    def create(table: TableName) -> None:
        catalog.create_table(table.in_catalog, schema=ROWS.schema).append(ROWS)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(create, fleet))


def table_list(path: Path, fleet: list[TableName], mode: str, poll_interval: float, cron_tables: int) -> None:
    """The table list of one mode: ``unscheduled`` (nothing scheduled), ``watch`` (every table), ``cron`` (the first
    ``cron_tables`` every minute)."""
    demo = next(t for t in load_table_list(ROOT / "dags" / "iceberg_tables.yaml").tables if t.table.table == "events")
    defaults = {
        "spark": demo.spark.model_dump(mode="json", exclude_none=True),
        "idle_seconds": 2,
        "poke_interval": 1,
        "full_rewrite": {"schedule": None},
        "health": {"min_small_files": MIN_SMALL_FILES, "poll_interval": poll_interval, "watch": mode == "watch"},
    }
    entries: list[dict[str, Any]] = [{"table": str(t)} for t in fleet]
    if mode == "cron":
        for entry in entries[:cron_tables]:
            entry["schedule"] = "* * * * *"
    path.write_text(yaml.safe_dump({"defaults": defaults, "tables": entries}))


@contextmanager
def live_airflow(
    home: Path, fleet: list[TableName], mode: str, args: argparse.Namespace, paused: bool = False
) -> Iterator[LiveAirflow]:
    """A live Airflow on the table list of ``mode``, every DAG parsed; with ``paused``, every DAG starts paused."""
    home.mkdir(parents=True)
    path = home / "tables.yaml"
    table_list(path, fleet, mode, args.poll_interval, args.cron_tables)
    (home / "airflow").mkdir()
    settings = {**SETTINGS, "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": str(paused)}
    airflow = LiveAirflow(home / "airflow", path, meta_db=META_DB, reparse_seconds=None, settings=settings)
    try:
        began = time.monotonic()
        airflow.start()
        airflow.wait_for(
            f"{len(fleet)} tables' DAGs parsed",
            lambda: airflow.query("SELECT count(*) FROM dag WHERE NOT is_stale")[0][0] >= 2 * len(fleet),
            1800,
            every=5,
        )
        print(f"  {mode}: airflow standalone up, {2 * len(fleet)} DAGs parsed in {time.monotonic() - began:.0f} s")
        yield airflow
    finally:
        airflow.stop()
        shutil.rmtree(home, ignore_errors=True)


def window(airflow: LiveAirflow, seconds: float, mode: str) -> tuple[float, int, float]:
    """(CPU seconds of the tree, DAG runs created, wall seconds) over ``seconds`` from now; prints the CPU by
    component."""
    runs0, cpu0, began = _runs(airflow), airflow.cpu_by_component(), time.monotonic()
    time.sleep(seconds)  # the measured window itself
    cpu1, wall = airflow.cpu_by_component(), time.monotonic() - began
    used = {name: cpu1[name] - cpu0.get(name, 0.0) for name in cpu1}
    print(f"  {mode}: CPU s by component: " + ", ".join(f"{n} {v:.1f}" for n, v in sorted(used.items())))
    return sum(used.values()), _runs(airflow) - runs0, wall


def unpause_all(airflow: LiveAirflow) -> None:
    """Every DAG unpaused in one REST call, as a user turns a fleet on."""
    response = airflow.api(
        "PATCH", "dags", params={"dag_id_pattern": "%", "update_mask": "is_paused"}, json={"is_paused": False}
    )
    assert response.ok, f"unpausing every DAG failed: {response.status_code} {response.text}"
    left = airflow.query("SELECT count(*) FROM dag WHERE is_paused AND NOT is_stale")[0][0]
    assert left == 0, f"{left} DAGs still paused after unpausing every DAG"


def _runs(airflow: LiveAirflow) -> int:
    return airflow.query("SELECT count(*) FROM dag_run")[0][0]


_SWEEP = re.compile(r"Health sweep of '[^']+': (\d+) tables in ([\d.]+) s: ([^\[]*)\[")


def sweeps(airflow: LiveAirflow) -> list[tuple[int, float, int]]:
    """(tables, seconds, metadata files read) of each health sweep the triggerer logged so far."""
    found = []
    for match in _SWEEP.finditer((airflow.home / "standalone.log").read_text(errors="replace")):
        read = re.search(r"(\d+) read metadata", match.group(3))
        found.append((int(match.group(1)), float(match.group(2)), int(read.group(1)) if read else 0))
    return found


def all_checked_since(fleet: list[TableName], since: datetime) -> bool:
    checks = WriteGateHook().health_checks()
    return all(str(t) in checks and checks[str(t)]["checked_at"] > since for t in fleet)


def writer_phase(airflow: LiveAirflow, fleet: list[TableName], args: argparse.Namespace) -> list[str]:
    """Small files into 10 tables; each must get one run, soon, that compacts it, and nothing else may run."""
    chosen = fleet[:: max(1, len(fleet) // args.needing)][: args.needing]
    runs_before = _runs(airflow)
    committed: dict[TableName, datetime] = {}
    for table in chosen:
        iceberg_table = IcebergHook(CATALOG).load_table(table.in_catalog)
        for _ in range(MIN_SMALL_FILES):
            iceberg_table.append(ROWS)
        committed[table] = datetime.now(timezone.utc)

    def started() -> dict[TableName, tuple[str, datetime]] | None:
        found = {}
        for table in chosen:
            rows = airflow.query(
                "SELECT run_id, start_date FROM dag_run WHERE dag_id = %s AND start_date IS NOT NULL",
                compaction_dag_id(table),
            )
            if not rows:
                return None
            found[table] = rows[0]
        return found

    first = airflow.wait_for("a run of each table that needs work", started, 3 * args.poll_interval + 300)
    delays = {t: (start - committed[t]).total_seconds() for t, (_, start) in first.items()}
    for table, (run_id, _) in first.items():
        airflow.wait_for_run(compaction_dag_id(table), run_id, timeout=1800, every=5)
    files = {t: TableStats.read(CATALOG, t).data_files for t in chosen}
    states = [
        airflow.api("GET", f"dags/{compaction_dag_id(t)}/dagRuns/{r}").json()["state"] for t, (r, _) in first.items()
    ]
    runs_after_compaction = _runs(airflow)
    time.sleep(args.after)  # the quiet period that must see no other run
    extra = _runs(airflow) - runs_after_compaction
    results = [
        f"  tables given small files: {len(chosen)}; runs: {runs_after_compaction - runs_before} "
        f"(states: {', '.join(sorted(set(states)))})",
        f"  seconds from last commit to run start: max {max(delays.values()):.0f}, "
        f"median {sorted(delays.values())[len(delays) // 2]:.0f}",
        f"  data files after their run: {sorted(set(files.values()))}",
        f"  runs in the {args.after:.0f} s after: {extra}",
        verdict(
            "each table that needs work gets exactly one run, which compacts it",
            runs_after_compaction - runs_before == len(chosen)
            and set(states) == {"success"}
            and set(files.values()) == {1},
        ),
        verdict(
            f"each run starts within two poll intervals ({2 * args.poll_interval:.0f} s) of its commit",
            max(delays.values()) <= 2 * args.poll_interval,
        ),
        verdict(f"no other run in the {args.after:.0f} s after", extra == 0),
    ]
    return results


def list_page_seconds(airflow: LiveAirflow, requests_: int = 10) -> list[float]:
    """Seconds each of ``requests_`` asks of the Iceberg tables page's list took (the summary and the first page
    by need, as the page asks when it opens), slowest last."""
    import requests

    from airflow_iceberg.plugins.fleet import URL_PREFIX

    headers = {"Authorization": f"Bearer {airflow.token('admin')}"}
    taken = []
    for _ in range(requests_):
        began = time.perf_counter()
        response = requests.get(
            f"{airflow.url}{URL_PREFIX}/api/tables", params={"page_size": 50}, headers=headers, timeout=120
        )
        taken.append(time.perf_counter() - began)
        assert response.ok, f"the list answered {response.status_code}: {response.text[:500]}"
        listed = response.json()["summary"]["tables"]
        assert listed == len(load_table_list(airflow.table_list).tables), f"the list has {listed} tables"
    return sorted(taken)


def verdict(goal: str, met: bool) -> str:
    return f"{'met' if met else 'MISSED'}: {goal}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=1000)
    parser.add_argument("--window", type=float, default=600, help="seconds each mode is measured")
    parser.add_argument("--poll-interval", type=float, default=60)
    parser.add_argument("--needing", type=int, default=10, help="tables the writer gives small files")
    parser.add_argument("--after", type=float, default=300, help="seconds watched for no other run")
    parser.add_argument("--cron-tables", type=int, default=60)
    parser.add_argument("--cron-window", type=float, default=300)
    parser.add_argument("--warm-up", type=float, default=120, help="seconds after start-up before a window")
    args = parser.parse_args(argv)
    fleet = tables(args.tables)
    began = time.monotonic()
    create_fleet(fleet)
    print(f"{len(fleet)} Iceberg tables created in {CATALOG}.{NAMESPACE} ({time.monotonic() - began:.0f} s)")
    work = Path(tempfile.mkdtemp(prefix="bench-fleet-"))

    with live_airflow(work / "unscheduled", fleet, "unscheduled", args) as airflow:
        time.sleep(args.warm_up)
        bare_cpu, _, bare_wall = window(airflow, args.window, "unscheduled")

    with live_airflow(work / "watch", fleet, "watch", args, paused=True) as airflow:
        time.sleep(args.warm_up)
        idle_cpu, idle_runs, idle_wall = window(airflow, args.window, "idle")
        print(f"  idle: {idle_cpu:.1f} CPU s in {idle_wall:.0f} s ({idle_cpu / idle_wall:.3f} cores), {idle_runs} runs")
        since = datetime.now(timezone.utc)
        unpause_all(airflow)
        airflow.wait_for("every table checked", lambda: all_checked_since(fleet, since), 1800, every=5)
        time.sleep(args.warm_up)
        watch_cpu, watch_runs, watch_wall = window(airflow, args.window, "watching")
        print(
            f"  watching: {watch_cpu:.1f} CPU s in {watch_wall:.0f} s ({watch_cpu / watch_wall:.3f} cores), "
            f"{watch_runs} runs"
        )
        whole = [s for s in sweeps(airflow) if s[0] == len(fleet)]
        steady = sorted(seconds for _, seconds, read in whole if read == 0)
        reading = max(whole, key=lambda s: s[2], default=(0, 0.0, 0))
        listing = list_page_seconds(airflow)
        writer = writer_phase(airflow, fleet, args)

    with live_airflow(work / "cron", fleet, "cron", args) as airflow:
        time.sleep(args.warm_up)
        began_at = datetime.now(timezone.utc)
        cron_cpu, _, cron_wall = window(airflow, args.cron_window, "cron")
        finished = airflow.query(
            "SELECT count(*) FROM dag_run WHERE end_date >= %s AND state IN ('success', 'failed')", began_at
        )[0][0]
    shutil.rmtree(work, ignore_errors=True)

    checks = len(fleet) * watch_wall / args.poll_interval
    watch_per_check = watch_cpu / checks
    cron_per_run = cron_cpu / finished if finished else None
    idle_rate = idle_cpu / idle_wall
    ratio = (watch_cpu / watch_wall) / idle_rate
    print()
    print(
        f"Fleet of {len(fleet)} healthy tables, health polled every {args.poll_interval:.0f} s, windows of "
        f"{args.window:.0f} s (2-core machine; CPU of the whole tree airflow standalone starts)"
    )
    print(f"  DAG runs created while every table is healthy: {watch_runs}")
    print(
        f"  CPU, watching: {watch_cpu:.1f} s; idle (the same DAG files, every DAG paused): {idle_cpu:.1f} s; "
        f"watching / idle: {ratio:.2f}"
    )
    print(
        f"  for reference, DAG files that schedule nothing (no asset, no watcher, no cron): {bare_cpu:.1f} s; "
        f"watching / that: {(watch_cpu / watch_wall) / (bare_cpu / bare_wall):.2f}"
    )
    print(
        f"  CPU per table check, watching: {watch_per_check * 1000:.2f} ms (all of Airflow's CPU / checks); "
        f"over idle: {max(0.0, watch_cpu - idle_rate * watch_wall) / checks * 1000:.2f} ms"
    )
    print(
        f"  cron mode, {args.cron_tables} tables every minute: {finished / (cron_wall / 60):.1f} runs finished a "
        f"minute in the window (asked: {args.cron_tables}); {cron_per_run or float('nan'):.2f} CPU s per run (all of "
        "Airflow's CPU / runs), "
        f"{max(0.0, cron_cpu - idle_rate * cron_wall) / max(finished, 1):.2f} over idle"
    )
    if steady:
        print(
            f"  a sweep of all {len(fleet)} tables (one listing query, nothing changed): median "
            f"{steady[len(steady) // 2]:.2f} s, slowest {steady[-1]:.2f} s, of {len(steady)}"
        )
    print(f"  the sweep that read the most metadata files: {reading[2]} files, {reading[1]:.2f} s")
    print(
        f"  the Iceberg tables page's list of {len(fleet)} tables (summary, first 50 by need): median "
        f"{listing[len(listing) // 2]:.3f} s, slowest {listing[-1]:.3f} s, of {len(listing)} requests"
    )
    print(verdict("no DAG run while every table is healthy", watch_runs == 0))
    print(verdict(f"watching / idle at most 1.25: {ratio:.2f}", ratio <= 1.25))
    print(verdict(f"the page's list answers in under 1 s: slowest {listing[-1]:.3f} s", listing[-1] < 1))
    if cron_per_run is not None:
        times = cron_per_run / watch_per_check
        print(verdict(f"at least 100x less CPU per table check than per cron run: {times:.0f}x", times >= 100))
    else:  # no per-run figure to hold the watch against: say so, never "met"
        print(
            f"NOT MEASURED: CPU per cron run, since no cron run finished in the {cron_wall:.0f} s window "
            "(give it a longer --cron-window)"
        )
    print("A writer adds small files to some tables, on the watching Airflow:")
    for line in writer:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
