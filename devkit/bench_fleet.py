"""``make bench-fleet``: what a fleet of healthy, watched tables costs a live Airflow, at Airflow's defaults and under
the fleet setting, for each fleet size asked (``--tables 100,1000``).

One machine, one bench; for each size, live ``airflow standalone`` (PostgreSQL metadata, LocalExecutor,
parallelism 16) on the same DAG files and that many real Iceberg tables in the JDBC catalog (one small file
each: healthy):

1. **at Airflow's defaults** (an unchanged table list parsed every 30 s) and then **under the fleet setting**
   (``FLEET_SETTINGS``: parsed once an hour, and at once when the table list changes or a DAG is paused or
   unpaused), each in an Airflow of its own:
   - **idle**: every DAG paused (Airflow registers no watcher of a paused DAG), CPU over a window;
   - **watching**: every DAG unpaused through the REST API, as a user turns a fleet on, every table checked by
     the triggerer (polled every 60 s); DAG runs created and CPU over the same window.
   Under the fleet setting no parse falls in a window: one parse is then started (by the DAG files' modification
   times, as the bundle starts one) and measured, and an hour's share of it is added to each window's cores (both
   parts are printed). Also printed: the sweep's time, the
   triggerer's memory, and the Iceberg tables page's list time;
2. **a writer**, under the fleet setting: small files into 10 tables; each must get exactly one run, starting
   within two poll intervals of its last commit, which compacts it; no other run may follow in the next 5 min;
3. with ``--settings`` naming it, **the fleet setting with Airflow's scheduler sleep** (1 s, not the fleet
   setting's 5 s), measured as the fleet setting is, Airflow alone included: what that line saves, and the
   writers' pause (the gate's time closed) beside it;
4. **cron**, once, for reference: 60 of the tables scheduled every minute (no watch), as before the health watch:
   runs finished a minute, and CPU per (skipped) run, against CPU per table check of the watch.

Each size also gets ``bench_parse``'s figures: one parse of the DAG files and the serialisation of their DAGs,
in a fresh process. CPU is that of the whole process tree ``airflow standalone`` starts, exited task processes
included (``LiveAirflow.cpu_seconds``). Every figure is printed with what it is measured against.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import yaml
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.fleet.dag_bundle import FLEET_PARSE_SECONDS, FLEET_SETTINGS
from airflow_iceberg.fleet.dag_files import write_dag_files
from airflow_iceberg.fleet.shards import dag_file_count
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.surface.dag_factory import compaction_dag_id
from airflow_iceberg.table_list.loader import TABLES_PER_DAG_FILE, load_table_list
from devkit import bench_parse
from devkit.bench_parse import FILES as DAG_FILES
from devkit.live_airflow import AIRFLOWS_OWN_IDLE_SLEEP, DAGS_FOLDER, LiveAirflow, running
from devkit.tables import TableStats

ROOT = Path(__file__).resolve().parents[1]
CATALOG = "lake"
NAMESPACE = "fleet_bench"
META_DB = "airflow_iceberg_bench_fleet"
ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": pa.array(["a", "b", "c"])})
#: A table needs work from this many small files: the writer's tables get 1 + this many.
MIN_SMALL_FILES = 4
#: How long the scheduler and its workers may take to leave after Airflow is stopped: with 10,000 DAGs on a
#: saturated machine its loop outlasts the 30 s a test allows.
STOP_GRACE_SECONDS = 180
#: Each live Airflow of this run whose processes outlived SIGTERM by STOP_GRACE_SECONDS (then killed): a finding
#: printed at the end, and the run fails, but the figures measured before it are still reported.
STOPS_MISSED: list[str] = []
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
    """The table list of one mode: ``watch`` (every table) or ``cron`` (the first ``cron_tables`` every minute)."""
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
    home: Path,
    fleet: list[TableName],
    mode: str,
    args: argparse.Namespace,
    paused: bool = False,
    settings: dict[str, str] | None = None,
) -> Iterator[LiveAirflow]:
    """A live Airflow on the table list of ``mode``, every DAG parsed; with ``paused``, every DAG starts paused;
    ``settings`` over the bench's own (:data:`SETTINGS`)."""
    home.mkdir(parents=True)
    path = home / "tables.yaml"
    table_list(path, fleet, mode, args.poll_interval, args.cron_tables)
    environment = {**SETTINGS, "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": str(paused), **(settings or {})}
    all_parsed = (
        f"{len(fleet)} tables' DAGs parsed",
        lambda airflow: airflow.query("SELECT count(*) FROM dag WHERE NOT is_stale")[0][0] >= 2 * len(fleet),
        1800,
    )
    began = time.monotonic()
    try:
        with running(
            home / "airflow",
            path,
            ready=all_parsed,
            stop_grace=STOP_GRACE_SECONDS,
            meta_db=META_DB,
            settings=environment,
        ) as airflow:
            print(f"  {mode}: airflow standalone up, {2 * len(fleet)} DAGs parsed in {time.monotonic() - began:.0f} s")
            yield airflow
    except AssertionError as error:  # stop killed what outlived it: the figures stand, and this is reported
        if "outlived it" not in str(error):
            raise
        STOPS_MISSED.append(f"{mode}: {error}")
        print(f"  {mode}: {error}; killed them")
    finally:
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


def killed_parses(airflow: LiveAirflow) -> int:
    """How many parses the dag-processor killed at ``[dag_processor] dag_file_processor_timeout`` so far."""
    return (airflow.home / "standalone.log").read_text(errors="replace").count("exceeding the timeout")


def all_checked_since(fleet: list[TableName], since: datetime) -> bool:
    checks = WriteGateHook().records.health_checks()
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
    records = WriteGateHook().records
    paused = [  # (the gate closed, the rewrite) of each run, in seconds, from its run record
        (row["gate_closed_seconds"], row["rewrite_seconds"])
        for table, (run_id, _) in first.items()
        for row in records.run_records(table)
        if row["run_id"] == run_id and row["gate_closed_seconds"] is not None
    ]
    time.sleep(args.after)  # the quiet period that must see no other run
    extra = _runs(airflow) - runs_after_compaction
    results = [
        f"  tables given small files: {len(chosen)}; runs: {runs_after_compaction - runs_before} "
        f"(states: {', '.join(sorted(set(states)))})",
        f"  seconds from last commit to run start: max {max(delays.values()):.0f}, "
        f"median {sorted(delays.values())[len(delays) // 2]:.0f}",
        f"  data files after their run: {sorted(set(files.values()))}",
        f"  the writers paused (gate closed), s: {_median_max([closed for closed, _ in paused])}; of it the "
        f"rewrite: {_median_max([rewrite or 0.0 for _, rewrite in paused])}; of {len(paused)} run records",
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


def _median_max(values: list[float]) -> str:
    ordered = sorted(values)
    return f"median {ordered[len(ordered) // 2]:.1f}, max {ordered[-1]:.1f}" if ordered else "none recorded"


def list_page_seconds(airflow: LiveAirflow, requests_: int = 10) -> list[float]:
    """Seconds each of ``requests_`` asks of the Iceberg tables page's list took (the summary and the first page
    by need, as the page asks when it opens), slowest last."""
    import requests

    from airflow_iceberg.plugins.tables_page import URL_PREFIX

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


#: The fleet setting but for its scheduler line: Airflow's scheduler sleeping 1 s, its default, not 5 s, after a loop
#: that found nothing to do. What that line saves, against how much longer a compaction holds its writers paused
#: (a running DAG's next task waits for the scheduler's next loop). Measured only when ``--settings`` names it.
BUSY_SCHEDULER = "fleet setting with Airflow's scheduler sleep"
#: The settings a size can run under: Airflow's defaults, the fleet setting docs/fleets.md advises, and that with
#: Airflow's own idle sleep of the scheduler (only when asked).
SETTINGS_UNDER_TEST = {
    "defaults": {},
    "fleet setting": FLEET_SETTINGS,
    BUSY_SCHEDULER: {**FLEET_SETTINGS, **AIRFLOWS_OWN_IDLE_SLEEP},
}
#: Run unless ``--settings`` says otherwise.
DEFAULT_SETTINGS = ("defaults", "fleet setting")
#: Goals (issue 38), in cores of a 2-core machine: a healthy fleet of 1,000 tables, idle or watching.
GOALS = {"defaults": 0.30, "fleet setting": 0.05}
GOAL_TABLES = 1000


@dataclass
class Watch:
    """What one live Airflow, under one setting, measured for one fleet size."""

    idle_cpu: float
    idle_wall: float
    idle_runs: int
    watch_cpu: float
    watch_wall: float
    watch_runs: int
    sweeps: list[tuple[int, float, int]]
    triggerer_mib: float
    longest_parse: float  # seconds: the longest parse stored once the fleet was turned on, as Airflow timed it
    killed_parses: int  # parses the dag-processor killed at dag_file_processor_timeout, from start to the end
    parse_cpu: float | None = None  # one parse, measured where no parse falls in a window (the fleet setting)
    listing: list[float] = field(default_factory=list)
    writer: list[str] = field(default_factory=list)

    def cores(self, cpu: float, wall: float) -> float:
        """Cores over a window, plus an hour's share of the parse no window saw."""
        return cpu / wall + (self.parse_cpu or 0.0) / FLEET_PARSE_SECONDS

    @property
    def idle_cores(self) -> float:
        return self.cores(self.idle_cpu, self.idle_wall)

    @property
    def watch_cores(self) -> float:
        return self.cores(self.watch_cpu, self.watch_wall)

    @property
    def steady_sweep(self) -> float | None:
        steady = sorted(seconds for _, seconds, read in self.sweeps if read == 0)
        return steady[len(steady) // 2] if steady else None


def one_parse(airflow: LiveAirflow) -> float:
    """The dag-processor's CPU seconds for one parse of both DAG files, less what it takes idle over the same time.

    The parse is started as the fleet setting's bundle starts one: the DAG files' modification times set to now.
    """
    dag_processor = "dag-processor"
    idle_began, idle0 = time.monotonic(), airflow.cpu_by_component().get(dag_processor, 0.0)
    time.sleep(30)  # the dag-processor's own rate with nothing to parse: the baseline subtracted below
    idle_rate = (airflow.cpu_by_component().get(dag_processor, 0.0) - idle0) / (time.monotonic() - idle_began)
    compaction = [path.name for path in DAGS_FOLDER.glob("iceberg_compaction*.py")]  # with a long list, several
    before = {name: _last_parsed(airflow, name) for name in compaction}
    processes = len(airflow.components()[dag_processor])  # with no parse under way
    began, cpu0 = time.monotonic(), airflow.cpu_by_component().get(dag_processor, 0.0)
    for name in {*DAG_FILES, *compaction}:
        os.utime(DAGS_FOLDER / name)
    airflow.wait_for("the parse", lambda: all(_last_parsed(airflow, name) != before[name] for name in compaction), 600)
    # Each file's parse is a process of the dag-processor's, reaped once its DAGs are stored: its CPU counts then.
    airflow.wait_for("the parses' processes to end", lambda: len(airflow.components()[dag_processor]) <= processes, 120)
    spent = airflow.cpu_by_component().get(dag_processor, 0.0) - cpu0
    return spent - idle_rate * (time.monotonic() - began)


def _last_parsed(airflow: LiveAirflow, dag_file: str) -> Any:
    return airflow.query("SELECT max(last_parsed_time) FROM dag WHERE relative_fileloc = %s", dag_file)[0][0]


def _folder(setting: str) -> str:
    """A folder name for the live Airflow of ``setting``."""
    return re.sub(r"\W+", "-", setting)


def watch(work: Path, fleet: list[TableName], args: argparse.Namespace, setting: str) -> Watch:
    """Idle, then watching, on one live Airflow under ``setting``; under the fleet setting also one parse, the
    page's list and the writer."""
    fleet_setting = setting != "defaults"
    settings = SETTINGS_UNDER_TEST[setting]
    with live_airflow(work / _folder(setting), fleet, "watch", args, paused=True, settings=settings) as air:
        time.sleep(args.warm_up)  # the start-up's work done: its first parse, the scheduler's first loops
        idle_cpu, idle_runs, idle_wall = window(air, args.window, f"{setting}, idle")
        since = datetime.now(timezone.utc)
        unpause_all(air)
        air.wait_for("every table checked", lambda: all_checked_since(fleet, since), 1800, every=5)
        time.sleep(args.warm_up)  # the unpause's work done, the watch running: then the window
        watch_cpu, watch_runs, watch_wall = window(air, args.window, f"{setting}, watching")
        result = Watch(
            idle_cpu=idle_cpu,
            idle_wall=idle_wall,
            idle_runs=idle_runs,
            watch_cpu=watch_cpu,
            watch_wall=watch_wall,
            watch_runs=watch_runs,
            sweeps=[s for s in air.sweeps() if s[0] == len(fleet)],
            triggerer_mib=air.memory_by_component().get("triggerer", 0.0),
            longest_parse=air.query("SELECT max(last_parse_duration) FROM dag WHERE NOT is_stale")[0][0] or 0.0,
            killed_parses=0,
        )
        if fleet_setting:
            result.parse_cpu = one_parse(air)
            print(f"  {setting}: one parse of the DAG files took the dag-processor {result.parse_cpu:.1f} CPU s")
            result.listing = list_page_seconds(air)
            result.writer = writer_phase(air, fleet, args)
        result.killed_parses = killed_parses(air)
    for what, cores in (("idle", result.idle_cores), ("watching", result.watch_cores)):
        print(f"  {setting}, {what}: {cores:.3f} cores")
    return result


def airflow_alone(work: Path, args: argparse.Namespace, setting: str = "fleet setting") -> float:
    """Cores of the same live Airflow with an empty table list, under ``setting``, in one window: what Airflow
    itself costs on this machine, the floor under any fleet."""
    settings = SETTINGS_UNDER_TEST[setting]
    with live_airflow(work / f"airflow-alone-{_folder(setting)}", [], "no tables", args, settings=settings) as air:
        time.sleep(args.warm_up)
        cpu, _, wall = window(air, args.window, f"Airflow alone, no tables, {setting}")
    print(f"  Airflow alone, no tables, {setting}: {cpu / wall:.3f} cores")
    return cpu / wall


def cron(work: Path, fleet: list[TableName], args: argparse.Namespace) -> tuple[float, float, int]:
    """(CPU s, wall s, runs finished) with ``--cron-tables`` tables on a one-minute cron, at Airflow's defaults."""
    with live_airflow(work / "cron", fleet, "cron", args) as airflow:
        time.sleep(args.warm_up)
        began_at = datetime.now(timezone.utc)
        cpu, _, wall = window(airflow, args.cron_window, "cron")
        finished = airflow.query(
            "SELECT count(*) FROM dag_run WHERE end_date >= %s AND state IN ('success', 'failed')", began_at
        )[0][0]
    return cpu, wall, finished


def report(
    count: int, parse: dict[str, Any], results: dict[str, Watch], args: argparse.Namespace, alone: dict[str, float]
) -> None:
    """The figures of one fleet size; ``alone``: the cores of Airflow with no tables under each setting but the
    defaults (:func:`airflow_alone`); the defaults are held against the fleet setting's."""
    fleet_setting = results["fleet setting"]
    compaction, check = bench_parse.summed(parse), parse["files"][DAG_FILES[1]]
    print()
    print(
        f"Fleet of {count:,} healthy tables, health polled every {args.poll_interval:.0f} s, windows of "
        f"{args.window:.0f} s ({os.cpu_count()}-core machine; CPU of the whole tree airflow standalone starts)"
    )
    print(
        f"  one parse of the DAG files: {compaction['parse'] + check['parse']:.2f} s, and "
        f"{compaction['serialize']:.2f} s serialising its {compaction['dags']:,} DAGs, in {compaction['files']} "
        f"compaction DAG file(s), the largest {compaction['largest_both']:.2f} s (bench_parse, a fresh "
        "process); under the fleet setting, measured in the dag-processor: "
        f"{fleet_setting.parse_cpu:.1f} CPU s, once an hour"
    )
    for setting, result in results.items():
        hourly = (
            f" (windows {result.idle_cpu / result.idle_wall:.3f} and {result.watch_cpu / result.watch_wall:.3f}, "
            f"+ {result.parse_cpu / FLEET_PARSE_SECONDS:.3f} for the hourly parse)"
            if result.parse_cpu is not None
            else ""
        )
        print(
            f"  {setting}: idle {result.idle_cores:.3f} cores, watching {result.watch_cores:.3f} cores{hourly}; "
            f"DAG runs while every table is healthy: {result.idle_runs} idle, {result.watch_runs} watching"
        )
        floor = alone.get(setting, alone["fleet setting"])
        print(
            f"    above Airflow alone ({floor:.3f} cores with no tables): idle {result.idle_cores - floor:+.3f}, "
            f"watching {result.watch_cores - floor:+.3f}"
        )
    for setting, result in results.items():
        sweep = result.steady_sweep
        said = f"median {sweep:.2f} s of {len(result.sweeps)}" if sweep is not None else "none logged"
        print(
            f"  {setting}: a sweep of all {count:,} tables, nothing changed: {said}; "
            f"triggerer memory {result.triggerer_mib:.0f} MiB (PSS)"
        )
        print(
            f"  {setting}: the longest parse once every DAG was unpaused, as Airflow timed it (with its wait for "
            f"other files' DAGs to be stored): {result.longest_parse:.1f} s; parses killed at the time-out: "
            f"{result.killed_parses}"
        )
    print(verdict("no parse killed at the time-out", all(r.killed_parses == 0 for r in results.values())))
    listing = fleet_setting.listing
    print(
        f"  the Iceberg tables page's list of {count:,} tables (summary, first 50 by need): median "
        f"{listing[len(listing) // 2]:.3f} s, slowest {listing[-1]:.3f} s, of {len(listing)} requests"
    )
    print(verdict("no DAG run while every table is healthy", all(r.watch_runs == 0 for r in results.values())))
    print(verdict(f"the page's list answers in under 1 s: slowest {listing[-1]:.3f} s", listing[-1] < 1))
    if count == GOAL_TABLES:
        for setting, goal in GOALS.items():
            if setting not in results:
                print(f"NOT MEASURED: {setting} (--settings left it out)")
                continue
            result = results[setting]
            worst = max(result.idle_cores, result.watch_cores)
            print(verdict(f"{setting}: idle and watching at most {goal:.2f} cores: {worst:.3f}", worst <= goal))
    for setting, result in results.items():
        if result.writer:
            print(f"A writer adds small files to some of the {count:,} tables, {setting}:")
            for line in result.writer:
                print(line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", default="1000", help="fleet sizes, comma-separated: 100,1000,5000")
    parser.add_argument("--window", type=float, default=300, help="seconds each idle or watching window lasts")
    parser.add_argument("--poll-interval", type=float, default=60)
    parser.add_argument("--needing", type=int, default=10, help="tables the writer gives small files")
    parser.add_argument("--after", type=float, default=300, help="seconds watched for no other run")
    parser.add_argument("--cron-tables", type=int, default=60)
    parser.add_argument("--cron-window", type=float, default=300)
    parser.add_argument("--warm-up", type=float, default=120, help="seconds after start-up before a window")
    parser.add_argument(
        "--settings",
        default=",".join(DEFAULT_SETTINGS),
        help=f"settings to run each size under, comma-separated, of: {', '.join(SETTINGS_UNDER_TEST)} (the fleet "
        "setting always; cron mode needs defaults)",
    )
    args = parser.parse_args(argv)
    chosen = [setting.strip() for setting in args.settings.split(",")]
    if unknown := [setting for setting in chosen if setting not in SETTINGS_UNDER_TEST]:
        parser.error(f"--settings: unknown {', '.join(map(repr, unknown))}; known: {', '.join(SETTINGS_UNDER_TEST)}")
    if "fleet setting" not in chosen:
        parser.error(f"--settings {args.settings!r}: the fleet setting is always run (its page list and writer)")
    sizes = [int(size) for size in args.tables.split(",")]
    work = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    watches: dict[int, tuple[dict[str, Any], dict[str, Watch]]] = {}
    cron_figures = None
    alone = {setting: airflow_alone(work, args, setting) for setting in chosen if setting != "defaults"}
    for count in sizes:
        fleet = tables(count)
        began = time.monotonic()
        create_fleet(fleet)
        print(f"{len(fleet):,} Iceberg tables created in {CATALOG}.{NAMESPACE} ({time.monotonic() - began:.0f} s)")
        parse = bench_parse.measure(count, work)
        # The further compaction DAG files a list of this size takes, as `airflow-iceberg dags` writes them: at
        # Airflow's defaults nothing else would (under the fleet setting, the bundle would).
        write_dag_files(DAGS_FOLDER, dag_file_count(count, TABLES_PER_DAG_FILE), remove_surplus=True)
        results = {setting: watch(work, fleet, args, setting) for setting in SETTINGS_UNDER_TEST if setting in chosen}
        watches[count] = parse, results
        if cron_figures is None and count >= args.cron_tables and "defaults" in results:
            cron_figures = count, *cron(work, fleet, args)
        report(count, parse, results, args, alone)
    write_dag_files(DAGS_FOLDER, 1, remove_surplus=True)  # the checkout's DAG folder as it was
    shutil.rmtree(work, ignore_errors=True)

    print()
    print(
        f"By fleet size ({os.cpu_count()} cores; cores of the whole tree, idle / watching; Airflow alone, no "
        f"tables: {', '.join(f'{cores:.3f} {setting}' for setting, cores in alone.items())}):"
    )
    print(
        "| tables | parse + serialise, s | defaults: idle / watching | fleet setting: idle / watching "
        "| hourly parse, CPU s | sweep, s | triggerer, MiB | page list, s |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for count, (parse, results) in watches.items():
        compaction, check = bench_parse.summed(parse), parse["files"][DAG_FILES[1]]
        defaults, fleet_setting = results.get("defaults"), results["fleet setting"]
        sweep = fleet_setting.steady_sweep
        at_defaults = f"{defaults.idle_cores:.3f} / {defaults.watch_cores:.3f}" if defaults else "not run"
        print(
            f"| {count:,} | {compaction['parse'] + check['parse']:.2f} + {compaction['serialize']:.2f} "
            f"| {at_defaults} "
            f"| {fleet_setting.idle_cores:.3f} / {fleet_setting.watch_cores:.3f} "
            f"| {fleet_setting.parse_cpu:.1f} | {sweep if sweep is not None else float('nan'):.2f} "
            f"| {fleet_setting.triggerer_mib:.0f} | {max(fleet_setting.listing):.3f} |"
        )
    for count, (_, results) in watches.items():
        if busy := results.get(BUSY_SCHEDULER):
            print(f"  {count:,} tables, {BUSY_SCHEDULER}: {busy.idle_cores:.3f} / {busy.watch_cores:.3f}")
    if cron_figures is not None:
        count, cron_cpu, cron_wall, finished = cron_figures
        _, results = watches[count]
        defaults = results["defaults"]
        checks = count * defaults.watch_wall / args.poll_interval
        watch_per_check = defaults.watch_cpu / checks
        print(
            f"cron mode, {args.cron_tables} of {count:,} tables every minute, at Airflow's defaults: "
            f"{finished / (cron_wall / 60):.1f} runs finished a minute (asked: {args.cron_tables})"
        )
        if finished:
            times = (cron_cpu / finished) / watch_per_check
            print(
                f"  {cron_cpu / finished:.2f} CPU s per run against {watch_per_check * 1000:.2f} ms per table check "
                f"watching (all of Airflow's CPU / checks, at Airflow's defaults)"
            )
            print(verdict(f"at least 100x less CPU per table check than per cron run: {times:.0f}x", times >= 100))
        else:  # no per-run figure to hold the watch against: say so, never "met"
            print(
                f"NOT MEASURED: CPU per cron run, since no cron run finished in the {cron_wall:.0f} s window "
                "(give it a longer --cron-window)"
            )
    print(verdict(f"every live Airflow stops within {STOP_GRACE_SECONDS} s of SIGTERM", not STOPS_MISSED))
    for missed in STOPS_MISSED:
        print(f"  {missed}")
    return 1 if STOPS_MISSED else 0


if __name__ == "__main__":
    raise SystemExit(main())
