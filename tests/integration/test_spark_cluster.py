"""The same compaction DAG on a real Spark standalone cluster, chosen by the Spark connection alone."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from devkit.tables import TableStats
from devkit.writers import write_small_files
from tests.integration.conftest import CATALOG_USER_PASSWORD, GATE_USERS

WRITER_ARGS = ("--days", "2", "--commits", "3", "--files-per-commit", "6", "--delete-commits", "2")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass(frozen=True)
class StandaloneCluster:
    master_url: str
    ui_url: str

    def state(self) -> dict:
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=5) as response:
            return json.load(response)


def start(command: list[str], log: Path) -> subprocess.Popen:
    """A Spark daemon in the foreground, in its own process group so the whole group can be ended."""
    return subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def stop(process: subprocess.Popen) -> list[str]:
    """End the daemon's process group (a worker's executors with it); name the group if any of it outlives that."""
    group = process.pid
    if process.poll() is None:
        os.killpg(group, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(group, signal.SIGKILL)
            process.wait(10)
    deadline = time.monotonic() + 30
    while group_alive(group) and time.monotonic() < deadline:
        time.sleep(0.5)
    return [f"process group {group} ({' '.join(process.args[1:2])})"] if group_alive(group) else []


@pytest.fixture
def standalone_cluster(tmp_path: Path, monkeypatch) -> Iterator[StandaloneCluster]:
    """A Spark master and one worker on 127.0.0.1, started from the project's Spark environment, and stopped."""
    spark_class = shutil.which("spark-class")
    assert spark_class, "spark-class is not on PATH: run the suite with `make test`"
    port, ui_port, worker_ui_port = free_port(), free_port(), free_port()
    cluster = StandaloneCluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}")
    master = start(
        [
            spark_class,
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(ui_port),
        ],
        tmp_path / "master.log",
    )
    worker = start(
        [
            spark_class,
            "org.apache.spark.deploy.worker.Worker",
            cluster.master_url,
            "--host",
            "127.0.0.1",
            "--cores",
            "2",
            "--memory",
            "2g",
            "--webui-port",
            str(worker_ui_port),
            "--work-dir",
            str(tmp_path / "work"),
        ],
        tmp_path / "worker.log",
    )
    try:
        deadline = time.monotonic() + 90
        while True:  # until the master answers and lists the worker as alive
            try:
                if any(w["state"] == "ALIVE" for w in cluster.state()["workers"]):
                    break
            except OSError:
                pass
            assert master.poll() is None, (tmp_path / "master.log").read_text()[-3000:]
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the standalone cluster did not come up within 90 s"
            time.sleep(0.5)
        # Only the connection changes: the DAG's Spark connection points at the cluster's master.
        monkeypatch.setenv(
            "AIRFLOW_CONN_SPARK_STANDALONE",
            json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1", "port": port}),
        )
        yield cluster
    finally:
        left = stop(worker) + stop(master)
    assert not left, f"processes of the cluster this test started are still running: {left}"


def test_compaction_runs_on_the_standalone_cluster_with_the_local_result(
    standalone_cluster, password_protected_catalog, unique_name, table_config, compaction_dag, argv_sampler
):
    table = f"lake.cluster.{unique_name}"
    write_small_files(table_config(table), *WRITER_ARGS)
    before = TableStats.read("lake", table)

    # No secret on any command line: the driver's, the worker's, its executors'.
    with argv_sampler(CATALOG_USER_PASSWORD, GATE_USERS["airflow"][1]) as sampler:
        run = compaction_dag(table, spark_conn_id="spark_standalone", spark={"executor_memory": "1g"}).test()

    assert run.state == "success"
    assert sampler.spark_samples > 0 and sampler.leaks == [], sampler.leaks
    applications = {app["name"]: app for app in standalone_cluster.state()["completedapps"]}
    # Both rewrites ran in one application on the cluster, which gave it executors on the worker.
    application = applications[f"iceberg-rewrite_data_files,rewrite_position_delete_files-{table}"]
    assert application["state"] == "FINISHED"
    assert application["cores"] > 0
    after = TableStats.read("lake", table)
    assert after.rows == before.rows
    assert after.data_files <= 2  # one file per day partition: the 128 MiB target holds each day whole
    assert after.data_files < before.data_files
