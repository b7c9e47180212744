"""The daily full rewrite, backfilled by a live Airflow scheduler over three days of a five-day table.

In Airflow 3 ``airflow backfill create`` only creates the runs; a running scheduler executes them. This test
starts ``airflow standalone`` (scheduler, dag-processor, triggerer, api-server; LocalExecutor) on a PostgreSQL
metadata database of its own, in its own process group, and ends that group afterwards.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from contextlib import closing
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import psycopg2
import pytest
import yaml
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_iceberg.dag_factory import full_rewrite_dag_id
from airflow_iceberg.spark_jobs.iceberg_call import TableName
from devkit.writers import write_small_files

META_DB = "airflow_iceberg_test_scheduler"
DAGS_FOLDER = Path(__file__).resolve().parents[2] / "dags"
AIRFLOW = str(Path(sys.executable).with_name("airflow"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def postgres(database: str = "postgres"):
    connection = psycopg2.connect(host="127.0.0.1", port=5432, user="postgres", dbname=database)
    connection.autocommit = True
    return connection


class LiveAirflow:
    """``airflow standalone`` on a fresh PostgreSQL metadata database, with the suite's DAG folder."""

    def __init__(self, home: Path, table_list: Path) -> None:
        self.home = home
        api_port = free_port()
        self.env = {
            **os.environ,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"postgresql+psycopg2://postgres@127.0.0.1:5432/{META_DB}",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__API__PORT": str(api_port),
            # Task runners report to the api-server's Execution API: it must be the port chosen above.
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
            "AIRFLOW__SCHEDULER__MIN_FILE_PROCESS_INTERVAL": "5",
            "AIRFLOW_ICEBERG_CONFIG": str(table_list),
            # standalone starts its scheduler, dag-processor, triggerer and api-server as `airflow` from PATH.
            "PATH": f"{Path(AIRFLOW).parent}{os.pathsep}{os.environ['PATH']}",
        }
        self.process: subprocess.Popen | None = None

    def cli(self, *args: str) -> str:
        result = subprocess.run([AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, f"airflow {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
        return result.stdout

    def start(self) -> None:
        # closing(), not `with connection`: psycopg2 wraps even an autocommit connection's block in a transaction.
        with closing(postgres()) as db, db.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {META_DB} WITH (FORCE)")
            cursor.execute(f"CREATE DATABASE {META_DB}")
        self.cli("db", "migrate")
        self.process = subprocess.Popen(
            [AIRFLOW, "standalone"],
            env=self.env,
            stdout=(self.home / "standalone.log").open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def query(self, sql: str, *params: object) -> list[tuple]:
        with closing(postgres(META_DB)) as db, db.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()

    def wait_for(self, what: str, condition, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.process is not None and self.process.poll() is None, (
                f"airflow standalone exited while waiting for {what}:\n"
                + (self.home / "standalone.log").read_text()[-4000:]
            )
            assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
            time.sleep(1)

    def stop(self) -> None:
        if self.process is None:
            return
        group = self.process.pid
        os.killpg(group, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                os.killpg(group, 0)
            except ProcessLookupError:
                break
            time.sleep(0.5)
        else:
            os.killpg(group, signal.SIGKILL)
        self.process.wait(30)
        # Nothing of the group may outlive the test (the scheduler's LocalExecutor workers included).
        time.sleep(1)
        with pytest.raises(ProcessLookupError):
            os.killpg(group, 0)


@pytest.fixture
def scheduler_table_list(tmp_path: Path, table_list_file: Path) -> Path:
    """A table list for the live scheduler alone: the suite's defaults, and only the tables a test adds."""
    path = tmp_path / "scheduler_tables.yaml"
    defaults = yaml.safe_load(table_list_file.read_text())["defaults"]
    path.write_text(yaml.safe_dump({"defaults": defaults, "tables": []}))
    return path


@pytest.fixture
def live_airflow(tmp_path: Path, scheduler_table_list: Path):
    airflow = LiveAirflow(tmp_path / "airflow-home", scheduler_table_list)
    airflow.home.mkdir()
    yield airflow
    airflow.stop()


def files_by_day(table: str) -> dict[date, dict[int, set[str]]]:
    """day partition -> content (0 data, 1 position deletes) -> file paths, as the table's metadata says."""
    layout: dict[date, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    for entry in IcebergHook("lake").load_table(table.split(".", 1)[1]).inspect.files().to_pylist():
        layout[entry["partition"]["ts_day"]][entry["content"]].add(entry["file_path"])
    return layout


def test_backfilling_three_days_rewrites_exactly_those_partitions(
    unique_name, table_config, scheduler_table_list, live_airflow
):
    table = f"lake.backfill.{unique_name}"
    today = datetime.now(timezone.utc).date()
    last_day = today - timedelta(days=6)
    days = [last_day - timedelta(days=n) for n in range(4, -1, -1)]  # five consecutive past days
    write_small_files(
        table_config(table),
        *("--days", "5", "--end-day", last_day.isoformat(), "--commits", "3", "--files-per-commit", "4"),
        *("--delete-commits", "5", "--deletes-per-commit", "3"),
    )
    before = files_by_day(table)
    assert sorted(before) == days and all(len(before[d][0]) == 12 for d in days)
    assert any(before[d][1] for d in days[1:4]), "no position deletes in the days to backfill"

    settings = {
        "table": table,
        "idle_seconds": 2,
        "poke_interval": 1,
        "full_rewrite": {"start_date": days[0].isoformat(), "partition": {"column": "ts", "transform": "day"}},
    }
    document = yaml.safe_load(scheduler_table_list.read_text())
    document["tables"].append(settings)
    scheduler_table_list.write_text(yaml.safe_dump(document))
    dag_id = full_rewrite_dag_id(TableName.parse(table))

    live_airflow.start()
    live_airflow.wait_for(
        f"{dag_id} to be parsed", lambda: live_airflow.query("SELECT 1 FROM dag WHERE dag_id = %s", dag_id), 180
    )
    backfilled = days[1:4]
    live_airflow.cli(
        "backfill", "create", "--dag-id", dag_id,
        "--from-date", backfilled[0].isoformat(), "--to-date", backfilled[-1].isoformat(),
        "--max-active-runs", "1",
    )  # fmt: skip

    def backfill_runs():
        return live_airflow.query(
            "SELECT logical_date, state FROM dag_run WHERE dag_id = %s AND run_type = 'backfill' ORDER BY 1", dag_id
        )

    def backfill_finished() -> bool:
        runs = backfill_runs()
        return len(runs) == 3 and all(state in ("success", "failed") for _, state in runs)

    live_airflow.wait_for("three backfill runs to finish", backfill_finished, 600)
    runs = [(logical.astimezone(timezone.utc).date(), state) for logical, state in backfill_runs()]
    assert runs == [(day, "success") for day in backfilled]

    after = files_by_day(table)
    for day in backfilled:
        assert len(after[day][0]) == 1, f"{day}: {len(after[day][0])} data files"
        assert not after[day][1], f"{day} kept position-delete files"
    for day in (days[0], days[4]):  # untouched: the very same files as before
        assert after[day][0] == before[day][0] and after[day][1] == before[day][1]
    shutil.rmtree(live_airflow.home / "logs", ignore_errors=True)
