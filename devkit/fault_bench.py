"""The fault bench's harness (``make faults``, ``tests/integration/test_faults.py``): the table, the gate's own
MariaDB, a gated writer appending numbered rows, the runs (here, in a process of their own, or on a live Airflow)
and the row each scenario's outcome makes. The scenarios are in :mod:`devkit.faults`.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

from airflow_iceberg.core.spark_job import JobArguments
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.core.writer import WriteGateClient
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.surface.dag_factory import REWRITE_TASK_ID, compaction_dag_id
from airflow_iceberg.table_list.loader import load_table_list
from airflow_iceberg.table_list.schema import TableConfig
from devkit.dag_runs import load_dag
from devkit.live_airflow import AIRFLOWS_OWN_IDLE_SLEEP, COMPACTION_DAG_FILE, LiveAirflow, running
from devkit.private_mariadb import PrivateMariaDB

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
        self._live_running = ExitStack()  # the live Airflow's, once started

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
            self._live_running.close()
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
            self._live = self._live_running.enter_context(
                running(
                    self.workdir / "live-airflow",
                    self.table_list,
                    keep_logs=True,
                    meta_db=LIVE_META_DB,
                    settings=AIRFLOWS_OWN_IDLE_SLEEP,
                )
            )
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

    def run_here_beside(self, fault: Callable[[], None]) -> tuple[Any, int]:
        """The table's compaction DAG run here (:meth:`run_here`) while ``fault`` runs in a thread beside it: the
        run, and how many tries its rewrite took."""
        injector = threading.Thread(target=fault, daemon=True)
        injector.start()
        run = self.run_here()
        injector.join(60)
        return run, run.get_task_instance(REWRITE_TASK_ID).try_number

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


def table_location() -> Path:
    """Where the table's files are, on the local disk."""
    from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

    location = IcebergHook(TABLE.catalog).load_table(TABLE.in_catalog).location()
    return Path(location.removeprefix("file://"))
