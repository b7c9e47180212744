"""A Java server of a test's own, from jars set-up resolved: started in a process group of its own, ready once it
answers, stopped (SIGTERM, then SIGKILL) when done, and killed when the interpreter exits while it still runs.

The catalog servers (:mod:`devkit.rest_catalog`, :mod:`devkit.hive_metastore`) and the Hadoop mini-cluster
(:mod:`devkit.mini_hadoop`) run on it; each says how it starts and when it answers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from devkit import extra_jvm_options
from devkit.live_airflow import free_port


class JvmServiceError(RuntimeError):
    """The server could not be started, or did not answer; the message holds its log's tail."""


def _kill_at_exit(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def classpath_of(build_dir: Path, what: str) -> str:
    """The class path set-up wrote for ``what`` into ``build_dir/classpath``; a clear error if it has not."""
    path = Path(build_dir) / "classpath"
    if not path.is_file():
        raise JvmServiceError(f"the jars of {what} are not resolved ({path} is missing): run `make setup`")
    return path.read_text().strip()


class JvmService:
    """``java -cp classpath main args`` under ``base_dir`` (created), its output in ``base_dir/<name>.log``."""

    def __init__(
        self,
        name: str,
        base_dir: Path,
        classpath: str,
        main: str,
        args: Sequence[str] = (),
        *,
        heap: str = "256m",
        jvm_options: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.base_dir = Path(base_dir)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.log_file = self.base_dir / f"{name}.log"
        self._command = ["java", f"-Xmx{heap}", *extra_jvm_options(), *jvm_options, "-cp", classpath, main, *args]
        self._env = {**os.environ, **(env or {})}
        self._cwd = cwd
        self.process: subprocess.Popen | None = None

    def start(self, answers: Callable[[], bool], timeout: float = 120) -> None:
        """Run the server until ``answers()`` says it serves; :class:`JvmServiceError` if it exits or stays silent."""
        with self.log_file.open("a") as out:
            # stdin stays open until it stops: a server may take its end for the sign to stop (MiniHadoop does)
            self.process = subprocess.Popen(
                self._command,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self._env,
                cwd=self._cwd,
                start_new_session=True,
            )
        weakref.finalize(self, _kill_at_exit, self.process)
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise JvmServiceError(f"{self.name} exited ({self.process.returncode}):\n{self.log_tail()}")
            try:
                if answers():
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise JvmServiceError(f"{self.name} did not answer within {timeout} s:\n{self.log_tail()}")
            time.sleep(0.2)

    def log_tail(self, chars: int = 5000) -> str:
        return self.log_file.read_text(errors="replace")[-chars:] if self.log_file.exists() else ""

    def stop(self) -> None:
        """SIGTERM to the server's process group; SIGKILL if it has not ended within 30 s."""
        stop_group(self.process)


def stop_group(process: subprocess.Popen | None, grace: float = 30) -> None:
    """SIGTERM to ``process``'s group (it leads one of its own); SIGKILL if it has not ended within ``grace`` s."""
    if process is not None and process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def add_opens(*packages: str) -> list[str]:
    """The JVM options that open these packages of ``java.base`` to the class path's code (Java 17 closes them)."""
    return [f"--add-opens=java.base/{package}=ALL-UNNAMED" for package in packages]


class OnJvm:
    """Something a :class:`JvmService` serves: started when its ``with`` block begins, stopped when it ends."""

    server: JvmService

    def __enter__(self) -> OnJvm:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.server.stop()

    def start(self) -> None:
        raise NotImplementedError


class CatalogServer(OnJvm):
    """A catalog's server on a free loopback port, its state in MySQL database ``database`` (created by
    :meth:`start`), its tables' data under ``base_dir/warehouse``; ``mysql`` holds pymysql's host, port, user and
    password. A subclass sets :attr:`server` and :attr:`uri`, and starts it in :meth:`start`."""

    uri: str

    def __init__(self, base_dir: Path, mysql: dict[str, Any], database: str) -> None:
        if not database.replace("_", "").isalnum():
            raise ValueError(f"database {database!r}: letters, digits and _ only")
        self.base_dir, self.mysql, self.database = Path(base_dir), mysql, database
        self.warehouse = self.base_dir / "warehouse"
        self.port = free_port()
