"""Run the reference writers (``devkit/writer_jobs``) in Spark from Python: the demo, tests and benchmark use them.

- :func:`write_small_files` runs ``small_files_writer.py`` once: a table full of small files.
- :class:`IngestJob` runs ``gated_ingest.py`` in the background: a live streaming writer that honours the gate
  (or, for a control experiment, ignores it).

Both reach Spark, the catalog and the gate through the same Airflow connections the DAGs use, and run with the
installed provider's core beside them, as one zip (``airflow_iceberg.core.bundle.core_zip``).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from airflow_iceberg.core.bundle import core_zip
from airflow_iceberg.core.job_secrets import write_job_secrets
from airflow_iceberg.core.writer import GATE_PASSWORD_ENV
from airflow_iceberg.hooks.catalogs import spark_settings_for_connection
from airflow_iceberg.hooks.spark_submit import IcebergSparkSubmitHook
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.table_list.schema import TableConfig

WRITER_JOBS_DIR = Path(__file__).resolve().parent / "writer_jobs"
#: Runs given SQL statements and prints a result line for each: the bare baseline of `make bench`, and a table
#: builder for tests.
BARE_CALLS_JOB = Path(__file__).resolve().with_name("bare_calls.py")
#: Names the connection the writers reach the gate through, when it is not the table's own (Airflow's): the test
#: suite sets it to a MySQL user with a writer's grants only.
WRITER_CONN_ENV = "AIRFLOW_ICEBERG_WRITER_CONN_ID"
#: The writers' spark-submit output is logged under airflow.task.hooks.<this>.
LOGGER_NAME = "devkit.writers"


def spark_job_hook(
    config: TableConfig,
    application_args: list[str],
    *,
    name: str,
    gated: bool = True,
    gate_conn_id: str | None = None,
    log_file: Path | None = None,
    on_line: Callable[[str], None] | None = None,
) -> IcebergSparkSubmitHook:
    """A hook that submits a writer job (or the provider's procedure job) on ``config.table``, ``--table`` first.

    With ``gated``, the writer gets the gate's database from ``gate_conn_id``, else the writers' connection
    (:data:`WRITER_CONN_ENV`), else ``config.write_gate_conn_id``, its password in the environment. With
    ``log_file``, spark-submit's output is also appended there, and ``on_line`` is called with each line of it.
    """
    table = config.table
    catalog = spark_settings_for_connection(table.catalog, config.catalog_conn_id)
    env = {}
    # The job reads and deletes it; its directory, empty then, stays behind in the temporary folder.
    args = ["--table", str(table), "--job-secrets", str(write_job_secrets(catalog.job_secrets))]
    if gated:
        conn_id = gate_conn_id or os.environ.get(WRITER_CONN_ENV) or config.write_gate_conn_id
        gate = WriteGateHook(conn_id).connection_settings()
        args += [
            "--gate-host",
            gate["host"],
            "--gate-port",
            str(gate["port"]),
            "--gate-user",
            gate["user"],
            "--gate-database",
            gate["database"],
        ]
        env[GATE_PASSWORD_ENV] = gate["password"]
    helpers = [core_zip(), WRITER_JOBS_DIR / "ingest_events.py"]
    sinks = [on_line] if on_line is not None else []
    if log_file is not None:
        sinks.append(_appender(log_file))

    def each_line(line: str) -> None:
        for sink in sinks:
            sink(line)

    return IcebergSparkSubmitHook(
        conn_id=config.spark_conn_id,
        conf={**catalog.conf, **config.spark.conf, "spark.sql.session.timeZone": "UTC"},
        jars=",".join(config.spark.jars) or None,
        packages=",".join(config.spark.packages) or None,
        py_files=",".join(str(path) for path in helpers),
        name=name,
        application_args=args + application_args,
        env_vars=env or None,
        on_line=each_line,
        # `make demo` and `make bench` quiet this namespace on the console ([logging] namespace_levels).
        logger_name=LOGGER_NAME,
    )


#: The rewrite the compaction DAG runs, as the ungated controls run it.
REWRITE_ALL = [{"procedure": "rewrite_data_files", "options": {"rewrite-all": "true"}}]


def ungated_rewrite(
    config: TableConfig, calls: list[dict[str, Any]] | None = None, name: str | None = None
) -> list[str] | None:
    """The procedure job's ``calls`` (by default :data:`REWRITE_ALL`) submitted with the gate not consulted, as the
    ungated controls run them: None if they committed, else what spark-submit printed."""
    from airflow.exceptions import AirflowException

    from airflow_iceberg.operators.procedure import RUN_PROCEDURE_JOB

    output: list[str] = []
    hook = spark_job_hook(
        config,
        ["--calls", json.dumps(calls or REWRITE_ALL)],
        name=name or f"ungated-rewrite-{config.table}",
        gated=False,
        on_line=output.append,
    )
    try:
        hook.submit(str(RUN_PROCEDURE_JOB))
    except AirflowException:
        return output
    return None


def _appender(path: Path) -> Callable[[str], None]:
    def append(line: str) -> None:
        with path.open("a") as log:
            log.write(line + "\n")

    return append


def write_small_files(config: TableConfig, *writer_args: str, log_file: Path | None = None) -> dict[str, Any]:
    """Run the gated small-files writer on ``config.table`` in Spark; return the summary it prints.

    ``writer_args`` are the writer's own options (``--commits``, ``--days``, ...). The writer checks the
    table's gate before every commit.
    """
    summary: dict[str, Any] = {}

    def keep_summary(line: str) -> None:  # the writer's last stdout line is its JSON summary
        if line.startswith('{"table"'):
            summary.update(json.loads(line))

    hook = spark_job_hook(
        config, list(writer_args), name=f"small-files-writer-{config.table}", log_file=log_file, on_line=keep_summary
    )
    hook.submit(str(WRITER_JOBS_DIR / "small_files_writer.py"))
    if not summary:
        raise RuntimeError(f"the small-files writer for {config.table} printed no summary")
    return summary


def run_statements(config: TableConfig, statements: list[str], *, log_file: Path | None = None) -> list[dict]:
    """Run Spark SQL ``statements`` in one Spark application on ``config``'s catalog, ungated, as a user would
    type them into ``spark-sql``; return each statement's first result row ({} for none)."""
    from airflow_iceberg.core.spark_job import parse_result_line

    rows: list[dict] = []

    def keep_row(line: str) -> None:
        row = parse_result_line(line)
        if row is not None:
            rows.append(row)

    args = [arg for statement in statements for arg in ("--statement", statement)]
    hook = spark_job_hook(
        config, args, name=f"statements-{config.table}", gated=False, log_file=log_file, on_line=keep_row
    )
    hook.submit(str(BARE_CALLS_JOB))
    if len(rows) != len(statements):
        raise RuntimeError(f"{len(statements)} statements on {config.table} printed {len(rows)} result lines")
    return rows


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class IngestJob:
    """The reference streaming writer, ``devkit/writer_jobs/gated_ingest.py``, running in the background.

    :param config: The table and how to reach Spark, the catalog and the gate.
    :param workdir: Holds the streaming checkpoint, the status file and the log; keep it to restart.
    :param gated: Whether the writer honours the gate; False only for the ungated control experiment.
    :param rows_per_second: Events per second from the deterministic source.
    :param keys: Distinct keys the events upsert and delete.
    :param trigger_seconds: The writer's commit interval.
    :param writer_id: Its id at the gate, kept across restarts.
    :param format_version: The table's Iceberg format, if the writer creates it: 3 for deletion vectors.
    """

    script = "gated_ingest.py"
    #: The gate connection of a job that needs more than a writer's grants; None: the writers' connection.
    gate_conn_id: str | None = None
    #: What the job's commits do, as it declares them at the gate: a MERGE of each micro-batch changes rows of
    #: existing files. None: it declares nothing, as a writer of the previous protocol.
    commit_kind: str | None = "row-level"

    def __init__(
        self,
        config: TableConfig,
        workdir: Path,
        *,
        gated: bool = True,
        rows_per_second: int = 40,
        keys: int = 300,
        trigger_seconds: float = 3.0,
        writer_id: str = "gated-ingest",
        format_version: int = 2,
        previous_protocol: bool = False,
    ) -> None:
        self.config = config
        self.format_version = format_version
        self.previous_protocol = previous_protocol
        self.workdir = workdir
        self.gated = gated
        self.rows_per_second = rows_per_second
        self.keys = keys
        self.trigger_seconds = trigger_seconds
        self.writer_id = writer_id
        self.status_file = workdir / "status.jsonl"
        self.stop_file = workdir / "stop"
        self._thread: threading.Thread | None = None
        self._hook: IcebergSparkSubmitHook | None = None
        self._error: BaseException | None = None
        self._processes: dict[int, tuple[psutil.Process, str]] = {}  # pid -> (process, its name)
        self.output: list[str] = []

    def job_args(self) -> list[str]:
        """The writer job's own options."""
        return [
            "--checkpoint",
            str(self.workdir / "checkpoint"),
            "--rows-per-second",
            str(self.rows_per_second),
            "--keys",
            str(self.keys),
            "--trigger-seconds",
            str(self.trigger_seconds),
            "--format-version",
            str(self.format_version),
            *(["--gate-protocol", "previous"] if self.previous_protocol else []),
        ]

    def start(self) -> IngestJob:
        """Start (or restart, from the checkpoint) the writer."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.stop_file.unlink(missing_ok=True)
        args = ["--status-file", str(self.status_file), "--stop-file", str(self.stop_file), *self.job_args()]
        if self.gated:
            args += ["--gate-writer-id", self.writer_id]
            args += ["--gate-commit-kind", self.commit_kind] if self.commit_kind else []
        hook = spark_job_hook(
            self.config,
            args,
            name=f"{self.writer_id}-{self.config.table}",
            gated=self.gated,
            gate_conn_id=self.gate_conn_id,
            log_file=self.workdir / "spark-submit.log",
            on_line=self.output.append,
        )
        self._hook = hook
        self._error = None

        def run() -> None:
            try:
                hook.submit(str(WRITER_JOBS_DIR / self.script))
            except BaseException as error:  # reported by stop() and batches()
                self._error = error

        self._thread = threading.Thread(target=run, name=self.writer_id, daemon=True)
        self._thread.start()
        return self

    def records(self) -> list[dict[str, Any]]:
        """Every status line written so far: one per committed batch, then the final summary."""
        if not self.status_file.exists():
            return []
        return [json.loads(line) for line in self.status_file.read_text().splitlines() if line.strip()]

    def batches(self) -> list[dict[str, Any]]:
        return [r for r in self.records() if not r.get("final")]

    def wait_for_batches(self, count: int, timeout: float = 180.0) -> list[dict[str, Any]]:
        """Wait until at least ``count`` batches have been committed in all; fail if the writer died."""
        deadline = time.monotonic() + timeout
        while len(batches := self.batches()) < count:
            if self._thread is not None and not self._thread.is_alive():
                raise RuntimeError(f"the ingest job ended early: {self._error}\n" + "\n".join(self.output[-30:]))
            if time.monotonic() > deadline:
                raise TimeoutError(f"{count} batches not committed within {timeout} s")
            time.sleep(0.2)
        self._note_processes()
        return batches

    def _note_processes(self) -> None:
        """Remember this job's processes: spark-submit's JVM, the Python driver and whatever they started.

        They are this process's descendants whose command line names this job's own status file.
        """
        for child in psutil.Process().children(recursive=True):
            try:
                if str(self.status_file) in " ".join(child.cmdline()):
                    for process in [child, *child.children(recursive=True)]:
                        self._processes.setdefault(process.pid, (process, process.name()))
            except psutil.NoSuchProcess:
                continue

    def processes_left(self, timeout: float = 60.0) -> list[str]:
        """This job's processes still running after up to ``timeout`` seconds of waiting for them to end."""
        deadline = time.monotonic() + timeout
        while True:
            left = [f"pid {process.pid}: {name}" for process, name in self._processes.values() if _running(process)]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.5)

    def stop(self, timeout: float = 120.0) -> dict[str, Any]:
        """Stop the writer between batches and return its final summary.

        The summary's ``exit_error`` is None when spark-submit exited cleanly, else what went wrong.
        """
        self._note_processes()
        self.stop_file.touch()
        assert self._thread is not None, "the ingest job was never started"
        self._thread.join(timeout)
        if self._thread.is_alive():
            assert self._hook is not None
            self._hook.on_kill()
            self._thread.join(30)
            raise TimeoutError(f"the ingest job did not stop within {timeout} s and was killed")
        finals = [r for r in self.records() if r.get("final")]
        if not finals:
            raise RuntimeError(f"the ingest job left no summary: {self._error}\n" + "\n".join(self.output[-30:]))
        return {**finals[-1], "exit_error": str(self._error) if self._error else None}

    def remove(self) -> None:
        """Delete the job's working directory (checkpoint, status, log)."""
        shutil.rmtree(self.workdir, ignore_errors=True)


class BatchInsertJob(IngestJob):
    """The reference batch writer, ``devkit/writer_jobs/batch_inserts.py``, running in the background: a second
    writer of a streaming writer's table, inserting new keys from ``first_key`` on, ``rows`` at a time.

    :param first_key: Its keys start here, apart from the streaming writer's.
    :param rows: Rows per batch.
    :param interval_seconds: Seconds between batches.
    """

    script = "batch_inserts.py"
    commit_kind = "appends"

    def __init__(
        self,
        config: TableConfig,
        workdir: Path,
        *,
        first_key: int,
        rows: int = 10,
        interval_seconds: float = 2.0,
        writer_id: str = "batch-inserts",
        commit_kind: str | None = "appends",
    ) -> None:
        super().__init__(config, workdir, writer_id=writer_id)
        self.commit_kind = commit_kind
        self.first_key = first_key
        self.rows = rows
        self.interval_seconds = interval_seconds

    def job_args(self) -> list[str]:
        return [
            "--first-key",
            str(self.first_key),
            "--rows",
            str(self.rows),
            "--interval-seconds",
            str(self.interval_seconds),
        ]


class BatchChangesJob(IngestJob):
    """The reference batch writer of a CDC table, ``devkit/writer_jobs/batch_changes.py``, in the background: a
    ``DELETE`` with a non-key condition and a ``MERGE`` in turns, on keys from ``first_key`` on, apart from the
    stream's; with ``gated``, it takes the gate as a writer does, and with ``exclusive`` as well it holds the gate for
    each statement (``GateHolder``), pausing the stream while the statement commits.

    :param keys: How many keys it owns.
    :param interval_seconds: Seconds between two statements.
    :param max_attempts: Tries of one statement before it counts as lost.
    :param layout: The table's columns: ``cdc`` (``devkit/cdc.py``'s) or ``events`` (:class:`IngestJob`'s).
    :param commit_kind: What it declares at the gate: its DELETEs and MERGEs change rows of existing files; a test
        of a writer that declares less than it does gives another.
    """

    script = "batch_changes.py"

    def __init__(
        self,
        config: TableConfig,
        workdir: Path,
        *,
        first_key: int,
        keys: int = 2000,
        interval_seconds: float = 30.0,
        max_attempts: int = 3,
        gated: bool = True,
        exclusive: bool = False,
        writer_id: str = "batch-changes",
        layout: str = "cdc",
        commit_kind: str | None = "row-level",
    ) -> None:
        super().__init__(config, workdir, gated=gated, writer_id=writer_id)
        self.commit_kind = commit_kind
        self.exclusive = exclusive
        if exclusive:  # it holds the gate: Airflow's grants, not a writer's
            self.gate_conn_id = config.write_gate_conn_id
        self.layout = layout
        self.first_key = first_key
        self.keys = keys
        self.interval_seconds = interval_seconds
        self.max_attempts = max_attempts

    def job_args(self) -> list[str]:
        return [
            "--first-key",
            str(self.first_key),
            "--keys",
            str(self.keys),
            "--interval-seconds",
            str(self.interval_seconds),
            "--max-attempts",
            str(self.max_attempts),
            "--layout",
            self.layout,
            *(["--exclusive"] if self.exclusive else []),
        ]
