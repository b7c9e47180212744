"""A Spark standalone cluster on 127.0.0.1 (one master, one worker), from the project's Spark environment.

Used by the cluster test (``tests/integration/test_spark_cluster.py``) and ``make bench-cluster``: each daemon
runs in the foreground in a process group of its own, so that stopping it ends the worker's executors too.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from devkit.live_airflow import free_port, group_alive

#: The Airflow connection id the cluster's master is reached by, set in the environment while it runs.
CONN_ID = "spark_standalone"


@dataclass(frozen=True)
class StandaloneCluster:
    master_url: str
    ui_url: str
    #: The environment variable that holds the Airflow connection to the master.
    conn_env: tuple[str, str]

    def state(self) -> dict:
        """The master's own account of its workers and applications (its web UI's JSON)."""
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=5) as response:
            return json.load(response)


def _start(command: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


def _stop(process: subprocess.Popen) -> list[str]:
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


@contextmanager
def standalone_cluster(workdir: Path, *, cores: int = 2, memory: str = "2g") -> Iterator[StandaloneCluster]:
    """A master and one worker of ``cores`` and ``memory``, up once the master lists the worker as alive; the
    Airflow connection :data:`CONN_ID` points at the master while the block runs (``AIRFLOW_CONN_SPARK_STANDALONE``).

    Raises ``RuntimeError`` on leaving if any process of the cluster outlives its stop.
    """
    spark_class = shutil.which("spark-class")
    if not spark_class:
        raise RuntimeError("spark-class is not on PATH: run this through make (scripts/env.sh puts it there)")
    workdir.mkdir(parents=True, exist_ok=True)
    port, ui_port, worker_ui_port = free_port(), free_port(), free_port()
    conn = (
        f"AIRFLOW_CONN_{CONN_ID.upper()}",
        json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1", "port": port}),
    )
    cluster = StandaloneCluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}", conn)
    master_log, worker_log = workdir / "master.log", workdir / "worker.log"
    master = _start(
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
         "--webui-port", str(ui_port)],
        master_log,
    )  # fmt: skip
    worker = _start(
        [spark_class, "org.apache.spark.deploy.worker.Worker", cluster.master_url, "--host", "127.0.0.1",
         "--cores", str(cores), "--memory", memory, "--webui-port", str(worker_ui_port),
         "--work-dir", str(workdir / "work")],
        worker_log,
    )  # fmt: skip
    previous = os.environ.get(conn[0])
    try:
        deadline = time.monotonic() + 90
        while True:  # until the master answers and lists the worker as alive
            try:
                if any(w["state"] == "ALIVE" for w in cluster.state()["workers"]):
                    break
            except OSError:
                pass
            for process, log in ((master, master_log), (worker, worker_log)):
                if process.poll() is not None:
                    raise RuntimeError(f"{' '.join(process.args[1:2])} ended:\n{log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError("the standalone cluster did not come up within 90 s")
            time.sleep(0.5)
        os.environ[conn[0]] = conn[1]
        yield cluster
    finally:
        if previous is None:
            os.environ.pop(conn[0], None)
        else:
            os.environ[conn[0]] = previous
        left = _stop(worker) + _stop(master)
        if left:
            raise RuntimeError(f"processes of the standalone cluster are still running: {left}")
