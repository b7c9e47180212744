"""Make the embedded default's database servers answer: MySQL and PostgreSQL, at the addresses scripts/env.sh sets.

MySQL (MariaDB) holds the write gate and the Iceberg JDBC catalog; PostgreSQL holds the metadata database of the
live Airflow that the tests and ``make bench`` start. scripts/setup.sh runs this with the Airflow environment's
Python.

- A server that answers on its configured address is used as it is and never touched: only the configured login
  is tried, and a refused login fails, naming the variables to set.
- When nothing answers on a loopback address, this machine's server is installed from Debian's packages if missing
  (``mariadb-server``, ``postgresql``; ``apt-get`` as root or through ``sudo``), started, and awaited. Then, on that
  server only, the configured login is made to work: the MySQL user may sign in over TCP with the configured
  password (Debian's MariaDB lets root in through its unix socket only), and PostgreSQL lets the configured user
  in over loopback (trusted without a password, as Debian's ``pg_hba.conf`` does not by default).
- When nothing answers on another host, it fails: the set-up starts servers on this machine only.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg2
import pymysql
from pymysql.converters import escape_string

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
#: How long a server just started may take to answer on a slow machine.
START_TIMEOUT_SECONDS = 120
#: Marks the lines this script adds to PostgreSQL's pg_hba.conf.
HBA_MARK = "# airflow-iceberg scripts/setup.sh: the embedded default's login over loopback"


class SetupError(RuntimeError):
    """A server cannot be used as configured; the message says what to do."""


def step(message: str) -> None:
    print(f"==> {message}", flush=True)


def as_root(*command: str, user: str | None = None, stdin: str | None = None) -> str:
    """Run ``command`` as root (or as ``user``), directly when this is root, else through sudo; its stdout.

    Its output goes through temporary files, not pipes: a server it starts keeps what it inherits, and a pipe
    held by a daemon would keep whoever reads the set-up's output waiting.
    """
    if os.geteuid() == 0:
        prefix = ["runuser", "-u", user, "--"] if user else []
    elif shutil.which("sudo"):
        prefix = ["sudo", "-n", *(["-u", user] if user else [])]
    else:
        raise SetupError(f"`{' '.join(command)}` needs root: run the set-up as root, or install sudo")
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        given = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
        code = subprocess.run([*prefix, *command], **given, stdout=out, stderr=err, text=True, cwd="/").returncode
        out.seek(0), err.seek(0)
        if code != 0:
            raise SetupError(f"`{' '.join(command)}` failed ({code}): {err.read().strip()}")
        return out.read()


def wait_until(ready: Callable[[], bool], timeout_error: Callable[[], SetupError]) -> None:
    """Ask ``ready`` every half second until it says yes; after START_TIMEOUT_SECONDS, raise ``timeout_error()``."""
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not ready():
        if time.monotonic() > deadline:
            raise timeout_error()
        time.sleep(0.5)


def answers(host: str, port: int) -> bool:
    """True if something accepts TCP connections at host:port."""
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


@dataclass(frozen=True)
class Server:
    """One database server of the embedded default, as the environment configures it; a subclass per kind."""

    name: str
    env: str  # the variables' prefix, e.g. AIRFLOW_ICEBERG_MYSQL
    package: str  # Debian's package of the server
    service: str  # its init script
    default_port: int
    default_user: str

    @property
    def host(self) -> str:
        return os.environ.get(f"{self.env}_HOST", "127.0.0.1")

    @property
    def port(self) -> int:
        return int(os.environ.get(f"{self.env}_PORT", self.default_port))

    @property
    def user(self) -> str:
        return os.environ.get(f"{self.env}_USER", self.default_user)

    @property
    def password(self) -> str:
        return os.environ.get(f"{self.env}_PASSWORD", "")

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def login_error(self) -> str | None:
        """Why the configured login fails, or None when it works."""
        raise NotImplementedError

    def grant_login(self) -> None:
        """Let the configured user in over loopback, on the server this script started."""
        raise NotImplementedError

    def refused(self, error: str, *, ours: bool) -> SetupError:
        whose = "the server the set-up started" if ours else "a server the set-up did not start (left untouched)"
        return SetupError(
            f"{self.name} at {self.address} refuses user {self.user!r}: {error}. This is {whose}. Point the set-up "
            f"at a login that works with {self.env}_HOST, _PORT, _USER and _PASSWORD."
        )

    def start_here(self) -> None:
        """Install this machine's server if missing, start it, and wait until it answers."""
        if subprocess.run(["dpkg", "-s", self.package], capture_output=True).returncode != 0:
            step(f"apt-get install {self.package} (nothing answers at {self.address})")
            as_root("apt-get", "update", "-qq")
            env = ["env", "DEBIAN_FRONTEND=noninteractive"]
            as_root(*env, "apt-get", "install", "-y", "-qq", self.package)
        if not answers(self.host, self.port):
            step(f"start {self.name} ({self.service}) at {self.address}")
            as_root("service", self.service, "start")
        wait_until(
            lambda: answers(self.host, self.port),
            lambda: SetupError(
                f"{self.name} was started from Debian's {self.package} but nothing answers at {self.address} "
                f"after {START_TIMEOUT_SECONDS} s: is it configured for another port?"
            ),
        )

    def ensure(self) -> None:
        if answers(self.host, self.port):
            error = self.login_error()
            if error:
                raise self.refused(error, ours=False)
            step(f"{self.name} answers at {self.address} (used as it is)")
            return
        if self.host not in LOOPBACK:
            raise SetupError(
                f"nothing answers at {self.address} ({self.env}_HOST, _PORT): start that server, or unset "
                f"{self.env}_HOST so that the set-up starts one on this machine"
            )
        self.start_here()
        if self.login_error():
            step(f"let user {self.user!r} sign in to {self.name} at {self.address}")
            self.grant_login()
        # A reloaded pg_hba.conf takes effect within moments: wait until the login works.
        wait_until(lambda: self.login_error() is None, lambda: self.refused(self.login_error(), ours=True))
        step(f"{self.name} answers at {self.address}")


class MySQLServer(Server):
    def login_error(self) -> str | None:
        try:
            pymysql.connect(
                host=self.host, port=self.port, user=self.user, password=self.password, connect_timeout=5
            ).close()
        except pymysql.err.Error as error:
            return str(error).strip()
        return None

    def grant_login(self) -> None:
        user, password = escape_string(self.user), escape_string(self.password)
        if self.user == "root":  # keep root's unix-socket login, add the configured password for TCP
            sql = (
                f"ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket "
                f"OR mysql_native_password USING PASSWORD('{password}');"
            )
        else:
            sql = "".join(
                f"CREATE USER IF NOT EXISTS '{user}'@'{host}' IDENTIFIED BY '{password}'; "
                f"GRANT ALL PRIVILEGES ON *.* TO '{user}'@'{host}' WITH GRANT OPTION; "
                for host in ("localhost", "127.0.0.1")
            )
        as_root("mariadb", "--protocol=socket", "--batch", stdin=sql)


class PostgresServer(Server):
    def login_error(self) -> str | None:
        try:
            psycopg2.connect(
                host=self.host,
                port=self.port,
                user=self.user,
                password=self.password,
                dbname="postgres",
                connect_timeout=5,
            ).close()
        except psycopg2.Error as error:
            return str(error).strip()
        return None

    def grant_login(self) -> None:
        """The role, with its password if one is configured, and loopback lines at the top of pg_hba.conf."""
        psql = ("psql", "-X", "-q", "-tA", "-v", "ON_ERROR_STOP=1", "-v", f"u={self.user}", "-v", f"p={self.password}")
        as_root(
            *psql,
            user="postgres",
            stdin=(
                "SELECT format('CREATE ROLE %I LOGIN SUPERUSER', :'u') WHERE NOT EXISTS "
                "(SELECT FROM pg_roles WHERE rolname = :'u') \\gexec\n"
                + ("ALTER ROLE :\"u\" PASSWORD :'p';\n" if self.password else "")
            ),
        )
        hba = as_root(*psql, "-c", "SHOW hba_file", user="postgres").strip()
        current = as_root("cat", hba)
        if HBA_MARK not in current:
            method = "scram-sha-256" if self.password else "trust"
            lines = [HBA_MARK] + [f"host all all {net} {method}" for net in ("127.0.0.1/32", "::1/128")]
            as_root("tee", hba, stdin="\n".join(lines) + "\n" + current)
            as_root(*psql, "-c", "SELECT pg_reload_conf()", user="postgres")


MYSQL = MySQLServer("MySQL", "AIRFLOW_ICEBERG_MYSQL", "mariadb-server", "mariadb", 3306, "root")
POSTGRES = PostgresServer("PostgreSQL", "AIRFLOW_ICEBERG_POSTGRES", "postgresql", "postgresql", 5432, "postgres")


def main() -> int:
    try:
        for server in (MYSQL, POSTGRES):
            server.ensure()
    except SetupError as error:
        print(f"setup: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
