"""``make faults``: gated compactions under injected faults, against real MariaDB, local Spark and a gated writer.

Each scenario runs the table's real compaction DAG (``dag.test()`` in this process, ``airflow dags test`` in a
process of its own where the scenario kills or freezes it, or, for a pre-started rewrite (``prestart_spark``), whose
tasks must run at once, a live ``airflow standalone`` started for those scenarios) while a gated writer appends
numbered rows to the same table through pyiceberg every half second, and injects one fault. The gate lives in a
MariaDB server of the suite's own (:class:`~devkit.private_mariadb.PrivateMariaDB`), so MySQL can be stopped
without touching the machine's server, which holds the Iceberg catalog.

One row per scenario: the gate after it, the seconds the writer stayed paused, the writer's commits that failed
(pyiceberg's compare-and-swap refuses any commit that races another, so a rewrite committing while the writer
does shows here), rows lost (the rows the writer committed that the table lacks, plus any it holds twice), and
the run's state. ``tests/integration/test_faults.py`` runs the same scenarios and asserts each row, but the two
of pre-started work: ``tests/integration/test_prestarted_rewrite.py`` asserts the same faults on the suite's one
live Airflow.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

from airflow_iceberg.core.spark_job import JobArguments
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.core.writer import WriteGateClient
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.surface.dag_factory import REWRITE_TASK_ID, compaction_dag_id, full_rewrite_dag_id
from airflow_iceberg.table_list.loader import load_table_list
from airflow_iceberg.table_list.schema import TableConfig
from devkit.dag_runs import load_dag
from devkit.live_airflow import AIRFLOWS_OWN_IDLE_SLEEP, COMPACTION_DAG_FILE, LiveAirflow
from devkit.private_mariadb import PrivateMariaDB
from devkit.tables import data_file_paths

TABLE = TableName("lake", "faults", "events")
GATE_CONN_ID = "fault_gate"
GATE_DATABASE = "fault_gate"
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
ROOT = Path(__file__).resolve().parents[1]
#: A rewrite that takes long on a table of small files: one file group per file, rewritten one after another,
#: committed a few groups at a time (partial progress).
LONG_REWRITE = {
    "rewrite-all": True,
    "max-file-group-size-bytes": 1,
    "max-concurrent-file-group-rewrites": 1,
    "partial-progress.enabled": True,
    "partial-progress.max-commits": 100,
}
SEED_FILES = 160
#: The metadata database of the live Airflow that the scenarios of pre-started work start.
LIVE_META_DB = "airflow_iceberg_faults"

log = logging.getLogger(__name__)


class GatedAppender(threading.Thread):
    """A writer that appends ``rows`` numbered rows every ``interval`` seconds through pyiceberg.

    With a gate client it honours the gate before every commit (and acknowledges pauses); without one it is a
    writer that never reads the gate. A commit pyiceberg refuses is counted and its rows are tried again, so a
    failed commit loses nothing by itself; what the table lacks at the end was lost by someone else.
    """

    def __init__(
        self,
        table: TableName,
        iceberg_conn_id: str,
        gate: WriteGateClient | None,
        *,
        first_id: int = 0,
        interval: float = 0.5,
        rows: int = 5,
    ) -> None:
        super().__init__(name=f"appender-{gate.writer_id if gate else 'ungated'}", daemon=True)
        self.table = table
        self.iceberg_conn_id = iceberg_conn_id
        self.gate = gate
        self.interval = interval
        self.rows = rows
        self.first_id = self.next_id = first_id
        self.last_snapshot_id: int | None = None
        # (wall time it passed the gate, wall time its commit returned, snapshot id), oldest first
        self.commits: list[tuple[float, float, int]] = []
        self.pauses: list[tuple[float, float]] = []  # (start, end) of each wait at a closed gate, wall time
        self.failed_commits: list[str] = []
        self.errors: list[tuple[float, str]] = []  # (wall time, error) of anything else that failed an attempt
        self.stopped = threading.Event()

    def run(self) -> None:
        import pyarrow as pa
        from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

        catalog = IcebergHook(self.iceberg_conn_id).catalog
        while not self.stopped.is_set():
            try:
                cleared = time.time()  # before the gate is read: a commit cleared before any close it did not see
                if self.gate is not None and self.gate.wait_until_open(self.last_snapshot_id):
                    self.pauses.append((cleared, time.time()))
                    cleared = time.time()
                ids = list(range(self.next_id, self.next_id + self.rows))
                batch = pa.table({"id": pa.array(ids, pa.int64()), "payload": [f"row {i}" for i in ids]})
                iceberg_table = catalog.load_table(self.table.in_catalog)
                iceberg_table.append(batch)
                self.next_id += self.rows
                self.last_snapshot_id = iceberg_table.current_snapshot().snapshot_id
                self.commits.append((cleared, time.time(), self.last_snapshot_id))
            except Exception as error:  # counted, never fatal: the scenario decides what it means
                from pyiceberg.exceptions import CommitFailedException

                message = f"{type(error).__name__}: {error}"[:300]
                if isinstance(error, CommitFailedException):
                    self.failed_commits.append(message)
                else:
                    self.errors.append((time.time(), message))
            self.stopped.wait(self.interval)

    def committed_ids(self) -> range:
        return range(self.first_id, self.next_id)

    def paused_seconds(self, since: float) -> float:
        """Seconds this writer waited at a closed gate in pauses that ended after ``since``."""
        return round(sum(end - max(start, since) for start, end in self.pauses if end > since), 1)

    def commits_since(self, moment: float) -> int:
        return sum(1 for _, t, _ in self.commits if t > moment)

    def stop(self) -> None:
        self.stopped.set()
        if self.ident is not None:  # started
            self.join(60)


@dataclass
class Outcome:
    """One scenario's row, and what its own checks need."""

    scenario: str
    gate_after: str
    paused_seconds: float
    failed_commits: int
    rows_lost: int
    run_state: str
    checks: dict[str, Any] = field(default_factory=dict)

    COLUMNS = (
        ("scenario", 34),
        ("gate after", 22),
        ("writers paused s", 16),
        ("failed commits", 14),
        ("rows lost", 9),
        ("run state", 30),
    )

    def row(self) -> str:
        values = (
            self.scenario,
            self.gate_after,
            f"{self.paused_seconds:.1f}",
            str(self.failed_commits),
            str(self.rows_lost),
            self.run_state,
        )
        return "  ".join(value.ljust(width) for value, (_, width) in zip(values, self.COLUMNS, strict=True))

    @classmethod
    def header(cls) -> str:
        return "  ".join(name.ljust(width) for name, width in cls.COLUMNS)


def wait_for(what: str, condition: Callable[[], Any], timeout: float, every: float = 0.2) -> Any:
    """Poll ``condition`` until it returns something true, and return that; TimeoutError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout} s")
        time.sleep(every)
    return value


def spark_jobs(root: psutil.Process, procedure: str) -> list[psutil.Process]:
    """The processes under ``root`` that run the rewrite job for ``procedure``: spark-submit's JVM, its driver."""
    found = []
    for process in root.children(recursive=True):
        try:
            cmdline = process.cmdline()
        except psutil.Error:
            continue
        if any("run_procedure.py" in part for part in cmdline) and procedure in _procedures_of(cmdline):
            found.append(process)
    return found


def _procedures_of(cmdline: list[str]) -> list[str]:
    """The procedures a job's command line calls (its ``--calls``, which travel as base64)."""
    if "--calls" not in cmdline[:-1]:
        return []
    try:
        calls = JobArguments.calls_json(cmdline[cmdline.index("--calls") + 1])
    except ValueError:
        return []
    return [call.get("procedure") for call in calls if isinstance(call, dict)]


def driver_started(root: psutil.Process, procedure: str) -> bool:
    """Whether the Python driver of ``procedure``'s job runs (its JVM started it): the rewrite is under way."""
    return any(p.name().startswith("python") for p in spark_jobs(root, procedure))


def rewrite_submit(table: TableName) -> psutil.Process | None:
    """The spark-submit of ``table``'s rewrite job, anywhere on the machine, if one runs (its arguments name the
    table): a live Airflow's task runs it, not a process of ours."""
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "org.apache.spark.deploy.SparkSubmit" in cmdline and str(table) in cmdline:
            return process
    return None


def alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class FaultBench:
    """The table, the gate's own MariaDB, the gated writer and the runs, shared by every scenario.

    :param workdir: Holds the gate's MariaDB, the table list, a second Airflow home for runs in their own process,
        and their logs.
    :param defaults: The table list's ``defaults`` (Spark jars and settings, short waits).
    """

    def __init__(self, workdir: Path, defaults: dict[str, Any]) -> None:
        self.workdir = workdir
        self.defaults = defaults
        self.table_list = workdir / "iceberg_tables.yaml"
        self.gate_db = PrivateMariaDB(workdir / "gate-mariadb")
        self.gate = WriteGateHook(GATE_CONN_ID)
        self.writer: GatedAppender | None = None
        self.other_home = workdir / "airflow-home"
        self._environment: dict[str, str | None] = {}
        self._seeded = 0  # seed files so far; their ids count down from -1
        self._live: LiveAirflow | None = None

    # --- set-up ------------------------------------------------------------------------------------------------

    def __enter__(self) -> FaultBench:
        self.gate_db.start()
        self.gate_db.gate_connection(GATE_DATABASE, GATE_CONN_ID)
        self._setenv("AIRFLOW_ICEBERG_CONFIG", str(self.table_list))
        self.configure()
        self._create_table()
        self._prepare_other_home()
        gate = WriteGateClient.connect(
            str(TABLE),
            **self.gate.connection_settings(),
            writer_id="fault-writer",
            poke_interval=0.2,
            log=lambda message: None,
        )
        self.writer = GatedAppender(TABLE, TABLE.catalog, gate)
        self.writer.start()
        wait_for("the writer's first commits", lambda: len(self.writer.commits) >= 3, 120)
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            if self._live is not None:
                self._live.stop()
            if self.writer is not None:
                self.writer.stop()
        finally:
            self.gate_db.close()
            for name, value in self._environment.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def _setenv(self, name: str, value: str) -> None:
        self._environment.setdefault(name, os.environ.get(name))
        os.environ[name] = value

    def configure(self, **settings: Any) -> TableConfig:
        """Write the table's entry, with these settings over the bench's own; its validated config."""
        entry = {
            "table": str(TABLE),
            "write_gate_conn_id": GATE_CONN_ID,
            "full_rewrite": {"schedule": None},
            "maintenance": {"rewrite_manifests": False, "expire_snapshots": False, "remove_orphan_files": False},
            **settings,
        }
        self.table_list.write_text(yaml.safe_dump({"defaults": self.defaults, "tables": [entry]}))
        [config] = load_table_list(self.table_list).tables
        return config

    def _create_table(self) -> None:
        import pyarrow as pa
        from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

        catalog = IcebergHook(TABLE.catalog).catalog
        catalog.create_namespace_if_not_exists(TABLE.namespace)
        if catalog.table_exists(TABLE.in_catalog):
            catalog.purge_table(TABLE.in_catalog)
        schema = pa.schema([("id", pa.int64()), ("payload", pa.string())])
        catalog.create_table(TABLE.in_catalog, schema=schema, properties={"format-version": "2"})
        # Many small files, for the scenarios whose rewrite must take long: one file group per file.
        self.add_seed_files(SEED_FILES)

    def add_seed_files(self, count: int) -> None:
        """Add ``count`` small Parquet files of 5 rows each, numbered below every row so far, in one commit.

        ``add_files`` commits them as one snapshot: 160 appends in one pyiceberg transaction took 24 s, and more
        on a table with the writer's history, since each append copies every manifest before it.
        """
        import pyarrow as pa
        import pyarrow.parquet as pq
        from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook
        from pyarrow import fs
        from pyiceberg.exceptions import CommitFailedException

        table = IcebergHook(TABLE.catalog).load_table(TABLE.in_catalog)
        filesystem, root = fs.FileSystem.from_uri(table.location())
        filesystem.create_dir(f"{root}/data", recursive=True)
        first = -(self._seeded + count) * 5
        paths = []
        for start in range(first, first + count * 5, 5):
            ids = list(range(start, start + 5))
            name = f"data/seed-{-start:08d}-{uuid.uuid4().hex}.parquet"
            rows = pa.table({"id": pa.array(ids, pa.int64()), "payload": [f"seed {i}" for i in ids]})
            pq.write_table(rows, f"{root}/{name}", filesystem=filesystem)
            paths.append(f"{table.location()}/{name}")
        for attempt in range(5):  # the writer may commit in between: try again on the new metadata
            try:
                table.add_files(paths)
                break
            except CommitFailedException:
                if attempt == 4:
                    raise
                table = IcebergHook(TABLE.catalog).load_table(TABLE.in_catalog)
        self._seeded += count

    def _prepare_other_home(self) -> None:
        """An Airflow home of its own for runs in their own process: one frozen mid-run holds no lock here."""
        self.other_home.mkdir(parents=True, exist_ok=True)
        result = subprocess.run(
            [AIRFLOW, "db", "migrate"], env=self._other_env(), capture_output=True, text=True, timeout=600
        )
        if result.returncode != 0:
            raise RuntimeError(f"airflow db migrate failed for {self.other_home}:\n{result.stdout}\n{result.stderr}")

    def _other_env(self) -> dict[str, str]:
        return {
            **os.environ,
            "AIRFLOW_HOME": str(self.other_home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.other_home / 'airflow.db'}",
        }

    def live(self) -> LiveAirflow:
        """A live ``airflow standalone`` (LocalExecutor, PostgreSQL) on the bench's table list, its gate and catalog
        connections from this process's environment; started at its first use, stopped with the bench."""
        if self._live is None:
            home = self.workdir / "live-airflow"
            home.mkdir(parents=True, exist_ok=True)
            live = LiveAirflow(home, self.table_list, meta_db=LIVE_META_DB, settings=AIRFLOWS_OWN_IDLE_SLEEP)
            live.start()
            self._live = live
        return self._live

    def configure_live(self, **settings: Any) -> TableConfig:
        """:meth:`configure`, then wait until the live Airflow has parsed the table's DAGs with these settings."""
        live = self.live()
        dag_id = compaction_dag_id(TABLE)
        asked = live.query("SELECT NOW()")[0][0]
        config = self.configure(**settings)
        live.request_parse(COMPACTION_DAG_FILE)

        def parsed_since() -> bool:
            rows = live.query("SELECT last_parsed_time FROM dag WHERE dag_id = %s AND NOT is_stale", dag_id)
            return bool(rows and rows[0][0] and rows[0][0] > asked)

        live.wait_for(f"{dag_id} to be parsed with its new settings", parsed_since, 300)
        return config

    # --- runs --------------------------------------------------------------------------------------------------

    def run_here(self, dag_id: str | None = None, prepare: Callable[[Any], None] | None = None) -> Any:
        """The DAG (the table's compaction DAG by default) run with ``dag.test()`` in this process; its run."""
        dag = load_dag(dag_id or compaction_dag_id(TABLE))
        if prepare is not None:
            prepare(dag)
        return dag.test()

    @contextmanager
    def run_elsewhere(self, dag_id: str | None = None) -> Iterator[subprocess.Popen]:
        """``airflow dags test`` of the DAG in a process (and process group) of its own; ended when the block ends."""
        name = dag_id or compaction_dag_id(TABLE)
        output = (self.workdir / f"{name}-{time.time():.0f}.log").open("w")
        process = subprocess.Popen(
            [AIRFLOW, "dags", "test", name],
            env=self._other_env(),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield process
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(60)
            output.close()

    def run_state(self, run: Any) -> str:
        return str(getattr(run.state, "value", run.state))

    def task_states(self, run: Any) -> dict[str, str]:
        return {ti.task_id: str(getattr(ti.state, "value", ti.state)) for ti in run.get_task_instances()}

    # --- what a scenario leaves ---------------------------------------------------------------------------------

    def outcome(self, scenario: str, started: float, run_state: str, **checks: Any) -> Outcome:
        """The row of a scenario that began at ``started``: waits until the gate no longer pauses writers and the
        writer has committed again, then counts."""
        state = wait_for("the gate to stop pausing writers", self._released, 600)
        writer = self.writer
        assert writer is not None
        failed_before = checks.pop("failed_before")
        resumed_from = time.time()
        wait_for("the writer to commit again", lambda: writer.commits_since(resumed_from) >= 2, 300)
        missing, doubled = self.lost_ids()
        if missing or doubled:  # what a reader of a failed row needs first
            checks["missing_ids"], checks["doubled_ids"] = missing[:20], doubled[:20]
        if errors := [e for t, e in writer.errors if t >= started]:
            checks["writer_errors"] = errors[:5]
        return Outcome(
            scenario=scenario,
            gate_after=state,
            paused_seconds=writer.paused_seconds(started),
            failed_commits=len(writer.failed_commits) - failed_before,
            rows_lost=len(missing) + len(doubled),
            run_state=run_state,
            checks=checks,
        )

    def _released(self) -> str | None:
        try:
            state = self.gate.get_state(TABLE)
        except Exception:  # MySQL may still be coming back
            return None
        if state.pauses_writers:
            return None
        return "open" if state.state == "open" else "released at lease end"

    def rows_lost(self) -> int:
        """Rows the writer committed or the bench seeded that the table lacks, plus rows it holds more than once."""
        missing, doubled = self.lost_ids()
        return len(missing) + len(doubled)

    def lost_ids(self) -> tuple[list[int], list[int]]:
        """The ids the writer committed or the bench seeded that the table lacks, and the ids it holds twice."""
        from collections import Counter

        from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

        assert self.writer is not None
        # What was committed before the table is read; the writer goes on committing while it is read, and those
        # later rows may or may not be in the snapshot read.
        expected = set(self.writer.committed_ids()) | set(range(-self._seeded * 5, 0))  # seed rows are negative
        ids = IcebergHook(TABLE.catalog).load_table(TABLE.in_catalog).scan(selected_fields=("id",)).to_arrow()
        counts = Counter(ids["id"].to_pylist())
        missing = sorted(expected - counts.keys())
        doubled = sorted(i for i, n in counts.items() if n > 1 and i in expected)
        return missing, doubled

    def begin(self) -> tuple[float, int]:
        assert self.writer is not None
        return time.time(), len(self.writer.failed_commits)


# --- the scenarios -----------------------------------------------------------------------------------------------


def task_killed_mid_rewrite(bench: FaultBench) -> Outcome:
    """SIGKILL of the Airflow task's process while its rewrite runs: Spark must go with it, writers resume at the
    lease's end (nobody is left to open the gate), and the table keeps every row."""
    config = bench.configure(lease_seconds=20, rewrite_data_files=LONG_REWRITE)
    started, failed = bench.begin()
    with bench.run_elsewhere() as process:
        task = psutil.Process(process.pid)
        wait_for("the rewrite's driver", lambda: driver_started(task, "rewrite_data_files"), 300)
        spark = spark_jobs(task, "rewrite_data_files")
        process.send_signal(signal.SIGKILL)  # the process that runs the task, and only it
        killed = time.monotonic()
        wait_for("spark-submit and its driver to die", lambda: not any(alive(p) for p in spark), 120)
        spark_gone = time.monotonic() - killed
    return bench.outcome(
        "task killed mid-rewrite",
        started,
        "killed",
        failed_before=failed,
        spark_gone_seconds=spark_gone,
        lease_seconds=config.lease_seconds,
    )


def spark_submit_killed(bench: FaultBench) -> Outcome:
    """SIGKILL of spark-submit while the rewrite runs: the task fails, retries once, and the run still succeeds."""
    bench.configure(rewrite_data_files=LONG_REWRITE)
    started, failed = bench.begin()
    killed: list[int] = []

    def kill_once() -> None:
        me = psutil.Process()
        wait_for("the rewrite's driver", lambda: driver_started(me, "rewrite_data_files"), 600)
        jvm = next(p for p in spark_jobs(me, "rewrite_data_files") if p.name() == "java")
        jvm.send_signal(signal.SIGKILL)
        killed.append(jvm.pid)

    killer = threading.Thread(target=kill_once, daemon=True)
    killer.start()
    run = bench.run_here()
    killer.join(5)
    tries = run.get_task_instance(REWRITE_TASK_ID).try_number
    return bench.outcome(
        "spark-submit killed",
        started,
        bench.run_state(run),
        failed_before=failed,
        killed=killed,
        rewrite_tries=tries,
    )


def rewrite_five_times_the_lease(bench: FaultBench) -> Outcome:
    """A rewrite that lasts five leases and more: the work renews the lease, the writer stays paused throughout."""
    config = bench.configure(lease_seconds=6, rewrite_data_files=LONG_REWRITE)
    # 160 one-file groups took 27-39 s on 2 cores, 410 took 37-47 s: five 6 s leases need a margin.
    bench.add_seed_files(340)
    started, failed = bench.begin()
    run = bench.run_here()
    trail = [r for r in bench.gate.audit_trail(TABLE) if r["owner_run_id"] == run.run_id]
    closed = next(r["at"] for r in trail if r["action"] == "close").timestamp()
    opened = next(r["at"] for r in trail if r["action"] == "open").timestamp()
    rewrite = run.get_task_instance(REWRITE_TASK_ID)
    writer = bench.writer
    assert writer is not None
    return bench.outcome(
        "rewrite of 5x the lease",
        started,
        bench.run_state(run),
        failed_before=failed,
        rewrite_seconds=(rewrite.end_date - rewrite.start_date).total_seconds(),
        lease_seconds=config.lease_seconds,
        # A commit that passed the gate just before it closed may land just after: the idle wait covers those.
        # None may pass the gate while it is closed, and none may land while the rewrite runs.
        writer_commits_while_closed=sum(1 for cleared, _, _ in writer.commits if closed < cleared < opened),
        writer_commits_during_rewrite=sum(
            1 for _, landed, _ in writer.commits if rewrite.start_date.timestamp() < landed < opened
        ),
    )


def rewrite_past_max_pause(bench: FaultBench) -> Outcome:
    """A rewrite longer than ``max_pause_seconds``: stopped before the ceiling, gate reopened, rows intact."""
    config = bench.configure(lease_seconds=10, max_pause_seconds=30, rewrite_data_files=LONG_REWRITE)
    # 160 one-file groups were rewritten in under 30 s on a fast machine, and the run succeeded: with 800 the
    # rewrite alone takes minutes, so the ceiling, not the machine's speed, is what ends it.
    bench.add_seed_files(640)
    started, failed = bench.begin()
    run = bench.run_here()
    trail = [r for r in bench.gate.audit_trail(TABLE) if r["owner_run_id"] == run.run_id]
    closed = next(r["at"] for r in trail if r["action"] == "close")
    last = trail[-1]
    return bench.outcome(
        "rewrite past max_pause_seconds",
        started,
        bench.run_state(run),
        failed_before=failed,
        task_states=bench.task_states(run),
        max_pause_seconds=config.max_pause_seconds,
        gate_closed_seconds=(last["at"] - closed).total_seconds() if last["action"] == "open" else None,
    )


def mysql_down(moment: str) -> Callable[[FaultBench], Outcome]:
    """MySQL (the gate's) down at ``moment``: 'close', 'rewrite' or 'open'; back after a while."""

    def scenario(bench: FaultBench) -> Outcome:
        # While rewriting, the job renews every quarter of the lease and gives up a quarter (at most 15 s) before
        # its end: with 40 s, a renewal due just before the outage came too late after it, in some phases. With
        # 80 s a renewal falls after MySQL is back (15 s, and its start-up) and well before the lease's margin.
        lease = 80 if moment == "rewrite" else 40
        bench.configure(lease_seconds=lease, rewrite_data_files=LONG_REWRITE if moment == "rewrite" else {})
        started, failed = bench.begin()
        downtime: list[float] = []

        def go_down(back_after: float) -> None:
            """Stop MySQL now; start it again ``back_after`` seconds later, from another thread."""
            bench.gate_db.stop()
            down = time.monotonic()

            def come_back() -> None:
                time.sleep(back_after)
                bench.gate_db.start()
                downtime.append(time.monotonic() - down)

            threading.Thread(target=come_back, daemon=True).start()

        fired: list[bool] = []

        def down_once(context: Any) -> None:
            if not fired:
                fired.append(True)
                go_down(15.0)

        def prepare(dag: Any) -> None:
            task = {"close": "close_gate", "open": "open_gate"}.get(moment)
            if task is not None:  # down as that task first starts, back 15 s later: its retries must carry it
                dag.get_task(task).on_execute_callback = [down_once]

        if moment == "rewrite":  # down while the CALL runs, for less than the lease's margin
            me = psutil.Process()

            def when_rewriting() -> None:
                wait_for("the rewrite's driver", lambda: driver_started(me, "rewrite_data_files"), 600)
                time.sleep(10)  # the driver has renewed and started its CALL (a long one)
                go_down(15.0)

            threading.Thread(target=when_rewriting, daemon=True).start()
        run = bench.run_here(prepare=prepare)
        wait_for("MySQL to be back", lambda: bench.gate_db.running and downtime, 120)
        tries = {ti.task_id: ti.try_number for ti in run.get_task_instances()}
        return bench.outcome(
            f"MySQL down at {moment}",
            started,
            bench.run_state(run),
            failed_before=failed,
            tries=tries,
            downtime_seconds=downtime[0],
        )

    scenario.__name__ = f"mysql_down_at_{moment}"
    return scenario


def two_runs_at_once(bench: FaultBench) -> Outcome:
    """The compaction and the full rewrite of one table started together: one waits for the other's gate."""
    bench.configure()
    started, failed = bench.begin()
    with bench.run_elsewhere(full_rewrite_dag_id(TABLE)) as other:
        run = bench.run_here()
        other_status = other.wait(900)
    trail = [r for r in bench.gate.audit_trail(TABLE) if r["at"].timestamp() >= started]
    owners = [r["owner_dag_id"] for r in trail if r["action"] == "close"]
    return bench.outcome(
        "two runs at once",
        started,
        f"{bench.run_state(run)} + {'success' if other_status == 0 else 'failed'}",
        failed_before=failed,
        closes=owners,
    )


def stale_opener_after_takeover(bench: FaultBench) -> Outcome:
    """Run A is frozen with the gate closed until its lease ends; run B takes the gate over; A wakes up. A's
    work stops, A's open_gate leaves B's gate closed, and B compacts."""
    bench.configure(lease_seconds=10)
    started, failed = bench.begin()
    with bench.run_elsewhere(full_rewrite_dag_id(TABLE)) as frozen:
        a_dag = full_rewrite_dag_id(TABLE)
        wait_for("run A to close the gate", lambda: _holder(bench) == a_dag, 300, every=0.05)
        os.killpg(frozen.pid, signal.SIGSTOP)
        try:
            wait_for("run A's lease to end", lambda: not bench.gate.get_state(TABLE).pauses_writers, 120)
            b_states: dict[str, str] = {}

            def wake_a_once_b_holds(dag: Any) -> None:
                def wake(context: Any) -> None:
                    os.killpg(frozen.pid, signal.SIGCONT)  # A wakes while B holds the gate

                dag.get_task("wait_until_snapshot_idle").on_execute_callback = [wake]

            run_b = bench.run_here(prepare=wake_a_once_b_holds)
            b_states = bench.task_states(run_b)
        finally:
            os.killpg(frozen.pid, signal.SIGCONT)
        a_status = frozen.wait(900)
    trail = [r for r in bench.gate.audit_trail(TABLE) if r["at"].timestamp() >= started]
    a_opens = [r for r in trail if r["owner_dag_id"] == a_dag and r["action"].startswith("open")]
    return bench.outcome(
        "stale opener after takeover",
        started,
        f"A {'failed' if a_status else 'success'}, B {bench.run_state(run_b)}",
        failed_before=failed,
        a_open_actions=[r["action"] for r in a_opens],
        b_states=b_states,
    )


def _holder(bench: FaultBench) -> str | None:
    state = bench.gate.get_state(TABLE)
    return state.owner.dag_id if state.pauses_writers and state.owner else None


def sensor_times_out_with_a_busy_writer(bench: FaultBench) -> Outcome:
    """A second writer that never reads the gate keeps committing while it is closed: the idle wait times out,
    nothing is rewritten, and the gate opens. It writes only while the gate is closed, so the gated writer never
    races it (two pyiceberg writers committing at once would fail each other's commits, gate or no gate)."""
    bench.configure(idle_seconds=10, max_pause_seconds=30, lease_seconds=10)
    started, failed = bench.begin()
    busy = GatedAppender(TABLE, TABLE.catalog, None, first_id=10**9, interval=0.5)

    def start_busy(context: Any) -> None:  # before the wait's first look, with the gate closed
        busy.start()
        wait_for("the busy writer to commit", lambda: len(busy.commits) >= 2, 120)

    def stop_busy(context: Any) -> None:  # before the gate opens
        busy.stop()

    def prepare(dag: Any) -> None:
        dag.get_task("wait_until_snapshot_idle").on_execute_callback = [start_busy]
        dag.get_task("open_gate").on_execute_callback = [stop_busy]

    try:
        run = bench.run_here(prepare=prepare)
    finally:
        busy.stop()
    records = [r for r in bench.gate.records.run_records(str(TABLE)) if r["run_id"] == run.run_id]
    outcome = bench.outcome(
        "sensor time-out, busy writer",
        started,
        bench.run_state(run),
        failed_before=failed,
        task_states=bench.task_states(run),
        busy_commits=len(busy.commits),
        record_detail=records[0]["detail"] if records else None,
    )
    outcome.failed_commits += len(busy.failed_commits)
    return outcome


def warehouse_unwritable(bench: FaultBench) -> Outcome:
    """The table's data directory turns unwritable while the rewrite runs: it fails, commits nothing, and its
    retry (the directory writable again) compacts. (With partial progress, Iceberg reports the failed file groups
    instead of failing; the rewrite task then fails on them.)"""
    bench.configure()
    data = _table_location() / "data"
    started, failed = bench.begin()
    me = psutil.Process()
    frozen: list[float] = []

    def freeze_while_rewriting() -> None:
        wait_for("the rewrite's driver", lambda: driver_started(me, "rewrite_data_files"), 600)
        subprocess.run(["chattr", "+i", str(data)], check=True)  # even root cannot add files now
        frozen.append(time.monotonic())
        try:
            wait_for("the rewrite to fail", lambda: not spark_jobs(me, "rewrite_data_files"), 600)
        finally:
            subprocess.run(["chattr", "-i", str(data)], check=True)

    freezer = threading.Thread(target=freeze_while_rewriting, daemon=True)
    freezer.start()
    run = bench.run_here()
    freezer.join(60)
    tries = run.get_task_instance(REWRITE_TASK_ID).try_number
    return bench.outcome(
        "warehouse unwritable",
        started,
        bench.run_state(run),
        failed_before=failed,
        rewrite_tries=tries,
        froze=bool(frozen),
    )


# --- a pre-started rewrite (prestart_spark), on the live Airflow ------------------------------------------------


@dataclass
class HeldRun:
    """A pre-started run of the table's compaction DAG on the live Airflow, and what its row needs."""

    bench: FaultBench
    config: TableConfig
    dag_id: str
    before: set[str]  # the table's data files before the run
    started: float
    failed: int
    run_id: str = ""

    def outcome(self, scenario: str, run: dict[str, Any], **checks: Any) -> Outcome:
        return self.bench.outcome(
            scenario,
            self.started,
            str(run["state"]),
            failed_before=self.failed,
            lease_seconds=self.config.lease_seconds,
            task_states=self.bench.live().task_states(self.dag_id, self.run_id),
            files_replaced=len(self.before - data_file_paths(TABLE)),  # a CALL replaces; the writer only adds
            **checks,
        )


@contextmanager
def _held_prestarted_run(bench: FaultBench, **settings: Any) -> Iterator[HeldRun]:
    """Trigger a pre-started run (``prestart_spark`` with ``settings``) while a second writer is mid-write (a batch
    DELETE, say) for as long as the block lasts: the idle wait cannot give the go meanwhile."""
    config = bench.configure_live(prestart_spark=True, **settings)
    held = HeldRun(bench, config, compaction_dag_id(TABLE), data_file_paths(TABLE), *bench.begin())
    holder = WriteGateClient.connect(
        str(TABLE), **bench.gate.connection_settings(), writer_id="mid-write", poke_interval=0.2, log=lambda m: None
    )
    try:
        with holder.writing(lambda: None):
            held.run_id = bench.live().trigger(held.dag_id, {})
            yield held
    finally:
        holder.close()


def prestarted_rewrite_killed_before_the_go(bench: FaultBench) -> Outcome:
    """SIGKILL of the pre-started rewrite task's process while its application waits for the go, the gate closed:
    its application ends with it, no CALL runs, and the idle wait, seeing the work fall silent, ends the run, so
    that writers resume within one lease."""
    settings = {"lease_seconds": 30, "max_pause_seconds": 300, "deferrable": True, "poke_interval": 1}
    with _held_prestarted_run(bench, **settings) as held:
        wait_for("the gate to close", lambda: bench.gate.get_state(TABLE).state == "closed", 600)
        spark_submit = wait_for("the rewrite's spark-submit", lambda: rewrite_submit(TABLE), 60)
        application = [spark_submit, *spark_submit.children(recursive=True)]
        spark_submit.parent().kill()  # the task's process, and only it: it tells nobody anything
        killed = time.monotonic()
        wait_for("its Spark application to end", lambda: not any(map(alive, application)), 120)
        spark_gone = time.monotonic() - killed
        wait_for("the writers to be let go", bench._released, held.config.lease_seconds + 60)
        let_go = time.monotonic() - killed
        run = bench.live().wait_for_run(held.dag_id, held.run_id, timeout=600)
    return held.outcome(
        "pre-started rewrite killed before go",
        run,
        spark_gone_seconds=round(spark_gone, 1),
        let_go_seconds=round(let_go, 1),
        wait_log=bench.live().task_log(held.dag_id, held.run_id, "wait_until_snapshot_idle")[-2000:],
    )


def prestarted_wait_fails_before_the_go(bench: FaultBench) -> Outcome:
    """The idle wait of a pre-started rewrite times out (a writer stays mid-write): it tells the waiting application
    to stop, which ends without a CALL, and the gate opens."""
    with _held_prestarted_run(bench, lease_seconds=10, max_pause_seconds=20) as held:
        run = bench.live().wait_for_run(held.dag_id, held.run_id, timeout=900)
    return held.outcome(
        "pre-started, idle wait fails",
        run,
        rewrite_log=bench.live().task_log(held.dag_id, held.run_id, REWRITE_TASK_ID)[-2000:],
    )


def _table_location() -> Path:
    from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

    location = IcebergHook(TABLE.catalog).load_table(TABLE.in_catalog).location()
    return Path(location.removeprefix("file://"))


SCENARIOS: list[Callable[[FaultBench], Outcome]] = [
    task_killed_mid_rewrite,
    spark_submit_killed,
    rewrite_five_times_the_lease,
    rewrite_past_max_pause,
    mysql_down("close"),
    mysql_down("rewrite"),
    mysql_down("open"),
    two_runs_at_once,
    stale_opener_after_takeover,
    sensor_times_out_with_a_busy_writer,
    warehouse_unwritable,
    # Last: they start a live Airflow, which then stays up until the bench ends.
    prestarted_rewrite_killed_before_the_go,
    prestarted_wait_fails_before_the_go,
]


_CONSOLE: list[int] = []


@contextmanager
def _output_to(path: Path) -> Iterator[None]:
    """Send this process's stdout and stderr (Airflow's and Spark's logs) to ``path``; :func:`_console` still prints."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    _CONSOLE.append(saved[0])
    with path.open("a") as log_file:
        os.dup2(log_file.fileno(), 1)
        os.dup2(log_file.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            _CONSOLE.pop()
            os.close(saved[0])
            os.close(saved[1])


def _console(line: str) -> None:
    os.write(_CONSOLE[-1] if _CONSOLE else 1, (line + "\n").encode())


def bench_defaults() -> dict[str, Any]:
    """The table list's defaults: the shipped demo table's Spark settings, and short waits."""
    demo = next(t for t in load_table_list(ROOT / "dags" / "iceberg_tables.yaml").tables if t.table.table == "events")
    return {
        "spark": demo.spark.model_dump(mode="json", exclude_none=True),
        "idle_seconds": 2,
        "poke_interval": 1,
        # Every run under a writer compacts; runs start on demand only (no health watch).
        "health": {"min_small_files": 2, "max_delete_age_minutes": 0, "watch": False},
    }


def main(argv: list[str] | None = None) -> int:
    import argparse

    names = [scenario.__name__ for scenario in SCENARIOS]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help=f"any of: {', '.join(names)} (default: all)")
    chosen = parser.parse_args(argv).scenarios or names
    if unknown := sorted(set(chosen) - set(names)):
        parser.error(f"unknown scenario {', '.join(unknown)}")
    logging.getLogger("pyiceberg.catalog.sql").setLevel(logging.ERROR)
    workdir = Path(tempfile.mkdtemp(prefix="airflow-iceberg-faults-"))
    print(f"==> fault injection on {TABLE}: the gate in a MariaDB of its own, a gated writer every 0.5 s")
    outcomes = []
    log_file = workdir / "faults.log"
    print(f"==> the runs' own output goes to {log_file}", flush=True)
    with _output_to(log_file), FaultBench(workdir, bench_defaults()) as bench:
        for scenario in (s for s in SCENARIOS if s.__name__ in chosen):
            started = time.monotonic()
            outcomes.append(scenario(bench))
            _console(f"==> {scenario.__name__}: {time.monotonic() - started:.0f} s")
    print()
    print(Outcome.header())
    for outcome in outcomes:
        print(outcome.row())
    print(json.dumps([{**o.__dict__, "checks": {k: str(v) for k, v in o.checks.items()}} for o in outcomes]))
    clean = all(o.rows_lost == 0 and o.failed_commits == 0 for o in outcomes)
    print("every scenario: 0 rows lost, 0 failed commits" if clean else "NOT every scenario kept every row")
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
