"""A MariaDB server of a test's own, for tests that take MySQL away: stop it, start it again, throw it away.

The machine's MariaDB serves every other test and must stay up; a test that injects a MySQL fault runs its own
server instead. :class:`PrivateMariaDB` creates a data directory with ``mariadb-install-db`` (root with an empty
password, like the machine's), and runs ``mariadbd`` from the same installation on a port and socket of its own,
listening on 127.0.0.1 only. :meth:`~PrivateMariaDB.stop` shuts it down cleanly and :meth:`~PrivateMariaDB.kill`
crashes it; :meth:`~PrivateMariaDB.start` brings it back on the same data directory and port, so what was
committed is still there. :meth:`~PrivateMariaDB.gate_connection` makes a database with the write gate's schema
migrated and an ``iceberg_write_gate`` Airflow connection to it, for ``WriteGateHook(conn_id)``.

Clean-up: :meth:`~PrivateMariaDB.close` (or leaving the ``with`` block, also on an error) ends the server, removes
its data directory and any connection it defined. A server still running when the interpreter exits is killed
then. Only a test process that is itself killed with SIGKILL leaves one behind: its command line names its data
directory.

Typical use, e.g. in a fixture::

    with PrivateMariaDB(tmp_path / "mariadb") as server:
        conn_id = server.gate_connection("airflow_iceberg")
        hook = WriteGateHook(conn_id)
        hook.close_gate(table, owner, lease_seconds=30)
        server.stop()      # MySQL is down: connections are refused
        ...
        server.start()     # back, with the same data, on the same port
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import weakref
from pathlib import Path
from typing import Any

import pymysql

from devkit.live_airflow import free_port


class PrivateMariaDBError(RuntimeError):
    """The private server could not be set up, started or stopped; the message holds its error log's tail."""


def _kill_at_exit(process: subprocess.Popen) -> None:
    """Kill ``process`` if it still runs (at interpreter exit, for a server nobody stopped)."""
    if process.poll() is None:
        process.kill()
        process.wait(timeout=30)


class PrivateMariaDB:
    """A MariaDB server of the caller's own, under ``base_dir``, that can be stopped and started again.

    :param base_dir: Where its data directory and error log go; created if missing. It should be new: a data
        directory already there is used as it is (that is how :meth:`start` restarts a server).
    :param port: Its TCP port on 127.0.0.1; default: a free one, kept across restarts.
    :param start_timeout: Seconds :meth:`start` and :meth:`stop` wait for the server before they fail.
    :param binlog: Write a row-based binary log with full row images, as a source of change data capture
        (Flink CDC's MySQL connector) needs; without it, none.
    """

    user = "root"
    password = ""
    host = "127.0.0.1"

    def __init__(
        self, base_dir: Path, *, port: int | None = None, start_timeout: float = 60.0, binlog: bool = False
    ) -> None:
        self.base_dir = Path(base_dir)
        self.binlog = binlog
        self.datadir = self.base_dir / "data"
        self.error_log = self.base_dir / "mariadbd.err"
        self.port = port or free_port()
        self.start_timeout = start_timeout
        # Unix socket paths are limited to 107 bytes; pytest's temporary directories can be longer.
        self._socket_dir = Path(tempfile.mkdtemp(prefix="mariadb-"))
        self.socket = self._socket_dir / "mysqld.sock"
        self._process: subprocess.Popen | None = None
        self._finalizer: weakref.finalize | None = None
        self._connection_vars: list[str] = []

    # --- lifecycle ----------------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the server (creating its data directory the first time); return once it accepts connections."""
        if self.running:
            return
        self.base_dir.mkdir(parents=True, exist_ok=True)
        if not (self.datadir / "mysql").is_dir():
            self._install()
        command = [
            shutil.which("mariadbd") or "/usr/sbin/mariadbd",
            "--no-defaults",  # none of the machine's server's settings: its port, socket, datadir
            "--user=root",
            f"--datadir={self.datadir}",
            f"--port={self.port}",
            f"--bind-address={self.host}",
            f"--socket={self.socket}",
            f"--pid-file={self.base_dir / 'mariadbd.pid'}",
            f"--log-error={self.error_log}",
            *(
                ["--log-bin=mariadb-bin", "--binlog-format=ROW", "--binlog-row-image=FULL", "--server-id=1"]
                if self.binlog
                else ["--skip-log-bin"]
            ),
            "--innodb-buffer-pool-size=32M",
        ]
        # Its own session, so that signals meant for the test runner's process group do not reach it.
        self._process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        self._finalizer = weakref.finalize(self, _kill_at_exit, self._process)
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self._process.poll() is not None:
                raise PrivateMariaDBError(f"mariadbd on port {self.port} exited at start:\n{self._log_tail()}")
            try:
                self.connect().close()
                return
            except pymysql.err.OperationalError:
                if time.monotonic() > deadline:
                    self.kill()
                    raise PrivateMariaDBError(
                        f"mariadbd on port {self.port} accepted no connection within {self.start_timeout} s:\n"
                        f"{self._log_tail()}"
                    ) from None
                time.sleep(0.1)

    def stop(self) -> None:
        """Shut the server down cleanly (SIGTERM) and wait until it has exited; clients then get refused."""
        self._end(signal.SIGTERM)

    def kill(self) -> None:
        """Crash the server (SIGKILL), as a lost machine would; :meth:`start` recovers it like a crashed server."""
        self._end(signal.SIGKILL)

    def close(self) -> None:
        """End the server if it runs, remove its data directory, and drop the connections it defined."""
        try:
            if self.running:
                self.kill()
        finally:
            for name in self._connection_vars:
                os.environ.pop(name, None)
            self._connection_vars.clear()
            shutil.rmtree(self.datadir, ignore_errors=True)
            shutil.rmtree(self._socket_dir, ignore_errors=True)

    def __enter__(self) -> PrivateMariaDB:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- using it -----------------------------------------------------------------------------------------------

    def connect(self, database: str | None = None, **kwargs: Any) -> pymysql.connections.Connection:
        """A new autocommit pymysql connection over TCP, to ``database`` or none."""
        return pymysql.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            database=database,
            autocommit=True,
            connect_timeout=5,
            **kwargs,
        )

    def create_database(self, name: str) -> None:
        """Create database ``name`` (letters, digits and underscores) unless it exists."""
        if not name.replace("_", "").isalnum():
            raise ValueError(f"bad database name {name!r}")
        with self.connect() as db, db.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE IF NOT EXISTS `{name}`")

    def jdbc_url(self, database: str) -> str:
        """The JDBC URL of ``database`` here, for a JVM writer (MariaDB's driver)."""
        return f"jdbc:mariadb://{self.host}:{self.port}/{database}"

    def airflow_connection(self, database: str) -> dict[str, Any]:
        """An ``iceberg_write_gate`` connection to ``database`` here, as Airflow's JSON connection form."""
        return {
            "conn_type": "iceberg_write_gate",
            "host": self.host,
            "port": self.port,
            "login": self.user,
            "password": self.password,
            "schema": database,
        }

    def gate_connection(self, database: str, conn_id: str | None = None) -> str:
        """Create ``database`` with the write gate's schema migrated, defined as an Airflow connection; its id.

        The connection lives in this process's environment (``AIRFLOW_CONN_<ID>``) until :meth:`close`.
        """
        from airflow_iceberg.hooks.write_gate import WriteGateHook

        conn_id = conn_id or f"private_mariadb_{self.port}_{database}"
        self.create_database(database)
        variable = f"AIRFLOW_CONN_{conn_id.upper()}"
        os.environ[variable] = json.dumps(self.airflow_connection(database))
        self._connection_vars.append(variable)
        WriteGateHook(conn_id).migrate()
        return conn_id

    # --- internals ----------------------------------------------------------------------------------------------

    def _install(self) -> None:
        result = subprocess.run(
            [
                shutil.which("mariadb-install-db") or "/usr/bin/mariadb-install-db",
                "--no-defaults",
                "--user=root",
                f"--datadir={self.datadir}",
                "--auth-root-authentication-method=normal",  # root with an empty password over TCP
                "--skip-test-db",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode != 0:
            raise PrivateMariaDBError(f"mariadb-install-db failed:\n{result.stdout}\n{result.stderr}")

    def _end(self, sig: signal.Signals) -> None:
        if not self.running:
            return
        assert self._process is not None
        self._process.send_signal(sig)
        try:
            self._process.wait(timeout=self.start_timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=30)
            raise PrivateMariaDBError(
                f"mariadbd on port {self.port} ignored {sig.name} for {self.start_timeout} s and was killed:\n"
                f"{self._log_tail()}"
            ) from None
        finally:
            if self._finalizer is not None:
                self._finalizer.detach()

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.error_log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return f"(no error log at {self.error_log})"
