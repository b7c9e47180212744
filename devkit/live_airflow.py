"""A live Airflow for the tests that need the user's real path: scheduler, dag-processor, REST API and UI.

``airflow standalone`` (scheduler, dag-processor, triggerer, api-server; LocalExecutor) runs on a PostgreSQL
metadata database of its own, in its own process group, which :meth:`LiveAirflow.stop` ends. The test suite starts
one per session (the ``live_airflow`` fixture in ``tests/integration/conftest.py``) and every test that needs one
shares it: a start costs a minute or more on two cores. ``make bench`` starts one to time the rewrite tasks as a
scheduler runs them.

The suite's table list holds a fleet of 200 tables (:func:`fleet`) beside the ones tests add, and
``dagbag_import_timeout`` is left at Airflow's default, so every test that uses it also runs with the parse cost
of a fleet. The dag-processor parses the DAG files at Airflow's own interval (30 s), as in a deployment; a test
that adds tables asks it to parse the compaction DAG file at once (:meth:`LiveAirflow.add_tables`), through the
REST API as the UI's "Reparse" does. A 5 s interval kept the dag-processor at half a core all session long.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg2
import requests
import yaml
from sqlalchemy.engine import URL

from airflow_iceberg.core.tables import TableName

META_DB = "airflow_iceberg_test_scheduler"
DAGS_FOLDER = Path(__file__).resolve().parents[1] / "dags"
#: Airflow's own idle sleep of the scheduler, over the fleet setting's 5 s: for a live Airflow whose runs should not
#: wait for it (the test suite's), and for ``make bench-fleet`` to show what the fleet setting's 5 s save.
AIRFLOWS_OWN_IDLE_SLEEP = {"AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "1"}
#: A health sweep's line in the triggerer's log (``triggers/health_sweep.py``).
_SWEEP = re.compile(r"Health sweep of '[^']+': (\d+) tables in ([\d.]+) s: ([^\[]*)\[")
#: The DAG file that builds every table's DAGs, relative to the DAG folder.
COMPACTION_DAG_FILE = "iceberg_compaction.py"
AIRFLOW = str(Path(sys.executable).with_name("airflow"))
#: The simple auth manager's users: an admin, and a viewer who may read but not edit.
USERS = {"admin": ("admin", "admin-password"), "viewer": ("viewer", "viewer-password")}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _server_settings(server: str, port: int, user: str) -> dict[str, Any]:
    return {
        "host": os.environ.get(f"AIRFLOW_ICEBERG_{server}_HOST", "127.0.0.1"),
        "port": int(os.environ.get(f"AIRFLOW_ICEBERG_{server}_PORT", str(port))),
        "user": os.environ.get(f"AIRFLOW_ICEBERG_{server}_USER", user),
        "password": os.environ.get(f"AIRFLOW_ICEBERG_{server}_PASSWORD", ""),
    }


def postgres_settings() -> dict[str, Any]:
    """Where the PostgreSQL of the embedded default is (scripts/env.sh; scripts/setup.sh starts it)."""
    return _server_settings("POSTGRES", 5432, "postgres")


def mysql_settings() -> dict[str, Any]:
    """Where the MySQL (MariaDB) of the embedded default is, and its administrator (scripts/env.sh)."""
    return _server_settings("MYSQL", 3306, "root")


def postgres(database: str = "postgres"):
    connection = psycopg2.connect(**postgres_settings(), dbname=database)
    connection.autocommit = True
    return connection


def postgres_url(database: str) -> str:
    """The SQLAlchemy URL of ``database`` on that PostgreSQL, for Airflow's metadata."""
    settings = postgres_settings()
    url = URL.create(
        "postgresql+psycopg2",
        username=settings["user"],
        password=settings["password"] or None,
        host=settings["host"],
        port=settings["port"],
        database=database,
    )
    return url.render_as_string(hide_password=False)


def fleet(count: int) -> list[dict[str, Any]]:
    """``count`` manual-only tables that nothing runs: the parse load of a fleet."""
    recent = "ts >= '{{ macros.ds_add(ds, -2) }}'"
    manual_only = {"where": recent, "full_rewrite": {"schedule": None}}
    return [{"table": f"lake.fleet.t{n:04d}", **manual_only} for n in range(count)]


@contextlib.contextmanager
def running(
    home: Path,
    table_list: Path,
    *,
    ready: tuple[str, Callable[[LiveAirflow], Any], float] | None = None,
    stop_grace: float = 30,
    keep_logs: bool = False,
    **options: Any,
) -> Iterator[LiveAirflow]:
    """A :class:`LiveAirflow` for the ``with`` block, the one way the benches and the tests start one: ``home`` made,
    Airflow started and, with ``ready`` (what, its condition, a time-out), waited for until it holds; stopped at the
    block's end (``stop_grace``), its task logs removed unless ``keep_logs``. ``options`` are :class:`LiveAirflow`'s."""
    home.mkdir(parents=True, exist_ok=True)
    airflow = LiveAirflow(home, table_list, **options)
    try:
        airflow.start()
        if ready is not None:
            what, condition, timeout = ready
            airflow.wait_for(what, lambda: condition(airflow), timeout, every=min(5.0, timeout / 100))
        yield airflow
    finally:
        try:
            airflow.stop(grace=stop_grace)
        finally:
            if not keep_logs:
                shutil.rmtree(home / "logs", ignore_errors=True)


def dags_parsed(*dag_ids: str) -> Callable[[LiveAirflow], bool]:
    """A :func:`running` ``ready`` condition: each of ``dag_ids`` parsed and active."""
    return lambda airflow: all(airflow.dag_parsed(dag_id) for dag_id in dag_ids)


class LiveAirflow:
    """``airflow standalone`` on a fresh PostgreSQL metadata database, with the repository's DAG folder.

    :param home: Its ``AIRFLOW_HOME``.
    :param table_list: The table list its DAG files read (``AIRFLOW_ICEBERG_CONFIG``).
    :param meta_db: The PostgreSQL database it creates anew for its metadata.
    :param reparse_seconds: How often the dag-processor parses a DAG file again; None keeps Airflow's default
        (30 s), as a deployment would. Tables a test adds need no short interval: :meth:`add_tables` asks for a
        parse.
    :param settings: More environment for it (``AIRFLOW__SECTION__KEY`` settings), over the ones above.
    """

    def __init__(
        self,
        home: Path,
        table_list: Path,
        meta_db: str = META_DB,
        reparse_seconds: int | None = None,
        settings: dict[str, str] | None = None,
    ) -> None:
        self.home = home
        self.meta_db = meta_db
        self.table_list = table_list
        self.api_port = free_port()
        self.url = f"http://127.0.0.1:{self.api_port}"
        passwords = home / "passwords.json"
        passwords.write_text(json.dumps({user: password for user, (_, password) in USERS.items()}))
        self.env = {
            **os.environ,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres_url(meta_db),
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS_FOLDER),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{role}" for u, (role, _) in USERS.items()),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            "AIRFLOW__API__PORT": str(self.api_port),
            # Task runners report to the api-server's Execution API: it must be the port chosen above.
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW_ICEBERG_CONFIG": str(table_list),
            # standalone starts its scheduler, dag-processor, triggerer and api-server as `airflow` from PATH.
            "PATH": f"{Path(AIRFLOW).parent}{os.pathsep}{os.environ['PATH']}",
        }
        if reparse_seconds is not None:
            self.env["AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL"] = str(reparse_seconds)
        self.env.update(settings or {})
        for name in list(self.env):  # [core] dagbag_import_timeout stays at Airflow's default
            if name.endswith("DAGBAG_IMPORT_TIMEOUT"):
                del self.env[name]
        self.process: subprocess.Popen | None = None
        self._restarted: dict[str, subprocess.Popen] = {}  # the components restart() started
        self._orphans: list[Any] = []  # processes of a component restart() killed, left without it
        self._tokens: dict[str, str] = {}

    # --- lifecycle ----------------------------------------------------------------------------------------------

    def cli(self, *args: str) -> str:
        result = subprocess.run([AIRFLOW, *args], env=self.env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, f"airflow {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
        return result.stdout

    def start(self) -> None:
        # closing(), not `with connection`: psycopg2 wraps even an autocommit connection's block in a transaction.
        with closing(postgres()) as db, db.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {self.meta_db} WITH (FORCE)")
            cursor.execute(f"CREATE DATABASE {self.meta_db}")
        self.cli("db", "migrate")
        self.process = subprocess.Popen(
            [AIRFLOW, "standalone"],
            env=self.env,
            stdout=(self.home / "standalone.log").open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.wait_for("the api-server to answer", self._api_up, 300)

    def cpu_seconds(self) -> float:
        """CPU seconds used so far by every process ``airflow standalone`` started, exited ones included.

        Each live process of the tree counts its own time and its reaped children's (``cutime``/``cstime``): a
        process that exited is in its parent's, and so on up to a live ancestor.
        """
        return sum(self.cpu_by_component().values())

    def cpu_by_component(self) -> dict[str, float]:
        """:meth:`cpu_seconds` by component: ``standalone`` itself, then each process it started (``scheduler``,
        ``dag-processor``, ``triggerer``, ``api-server``) with all of that one's descendants."""
        return {name: sum(process_cpu(p) for p in processes) for name, processes in self.components().items()}

    def memory_by_component(self) -> dict[str, float]:
        """Each component's memory now, in MiB: the proportional set size (PSS) of its live processes, so that pages
        they share are counted once across them."""
        return {name: sum(process_pss(p) for p in processes) / 2**20 for name, processes in self.components().items()}

    def components(self) -> dict[str, list[Any]]:
        """The live processes of each component (see :meth:`cpu_by_component`), ``standalone`` alone first."""
        import psutil

        assert self.process is not None
        root = psutil.Process(self.process.pid)
        by_component: dict[str, list[Any]] = {"standalone": [root]}
        for child in root.children():
            try:
                # A process that set its title has it all in cmdline()[0], the rest empty: split on spaces.
                words = " ".join(child.cmdline()).split()[1:]
                name = next((w for w in words if not w.startswith("-") and "/" not in w), "other")
                processes = [child, *child.children(recursive=True)]
            except psutil.NoSuchProcess:
                continue
            by_component.setdefault(name, []).extend(processes)
        return by_component

    def restart(self, component: str) -> int:
        """SIGKILL the running ``component`` (``triggerer`` or ``scheduler``), as a crash would, and start another.

        The triggerer goes with its trigger runner. The scheduler goes alone: the task processes its executor
        started go on, as they do when a scheduler process dies, and report to the api-server as before.
        ``airflow standalone`` does not restart a component that died, so the new one runs beside it, with the same
        environment and logging to ``<component>.log``, until :meth:`stop`. Returns the pid that was killed.
        """
        import psutil

        assert self.process is not None and component in ("triggerer", "scheduler"), component
        tree = psutil.Process(self.process.pid).children(recursive=True)
        if component in self._restarted:
            tree.extend(psutil.Process(self._restarted[component].pid).children(recursive=True))
            tree.append(psutil.Process(self._restarted[component].pid))
        # The topmost process that names the component (a process that set its title has it in cmdline()[0]).
        ours = [p for p in tree if component in " ".join(_cmdline(p)[:3])]
        main = next(p for p in ours if p.parent() is None or p.parent().pid not in {o.pid for o in ours})
        killed = [main, *main.children(recursive=True)] if component == "triggerer" else [main]
        # What the killed scheduler started goes on without it (its executor's workers wait on a queue whose
        # other end is gone, under the scheduler's own SIGTERM handler): :meth:`stop` ends them with SIGKILL.
        self._orphans.extend(set(main.children(recursive=True)) - set(killed))
        for process in killed:
            process.kill()
        psutil.wait_procs([main], timeout=30)
        self._restarted[component] = subprocess.Popen(
            [AIRFLOW, component],
            env=self.env,
            stdout=(self.home / f"{component}.log").open("a"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return main.pid

    def _api_up(self) -> bool:
        try:
            return requests.get(f"{self.url}/api/v2/monitor/health", timeout=5).ok
        except requests.ConnectionError:
            return False

    def stop(self, grace: float = 30) -> None:
        """Stop ``airflow standalone``; fail if any process of its group outlives it by ``grace`` s (a scheduler
        whose loop holds thousands of DAGs on a saturated machine takes longer than a test's)."""
        for restarted in self._restarted.values():
            os.killpg(restarted.pid, signal.SIGTERM)
            try:
                restarted.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(restarted.pid, signal.SIGKILL)
                restarted.wait(30)
        self._restarted.clear()
        if self.process is None:
            return
        group = self.process.pid
        os.killpg(group, signal.SIGTERM)
        for orphan in self._orphans:
            with contextlib.suppress(Exception):
                orphan.kill()
        self._orphans.clear()
        # Reap standalone itself first: until it is waited for, it stays in its group as a zombie, and the group
        # would look alive for as long as any deadline allows.
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(group, signal.SIGKILL)
            self.process.wait(30)
        self.process = None
        # Nothing of the group may outlive it (the scheduler's LocalExecutor workers included).
        deadline = time.monotonic() + grace
        while group_alive(group):
            if time.monotonic() > deadline:
                left = [" ".join(_cmdline(p))[:80] for p in _group_members(group)]
                os.killpg(group, signal.SIGKILL)
                raise AssertionError(
                    f"processes of airflow standalone's group {group} outlived it by {grace:.0f} s: {left}"
                )
            time.sleep(0.2)

    def wait_for(self, what: str, condition: Callable[[], Any], timeout: float, every: float = 1) -> Any:
        """Poll ``condition`` every ``every`` s until it returns something true, and return that; fail after
        ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while not (value := condition()):
            assert self.process is not None and self.process.poll() is None, (
                f"airflow standalone exited while waiting for {what}:\n"
                + (self.home / "standalone.log").read_text()[-4000:]
            )
            assert time.monotonic() < deadline, f"{what} did not happen within {timeout} s"
            time.sleep(every)
        return value

    # --- the table list -----------------------------------------------------------------------------------------

    def add_tables(self, *entries: dict[str, Any], timeout: float = 300) -> None:
        """Add (or replace) table-list entries, ask the dag-processor to parse the compaction DAG file now, and
        wait until it has parsed their DAGs."""
        from airflow_iceberg.core.tables import TableName
        from airflow_iceberg.surface.dag_factory import compaction_dag_id, full_rewrite_dag_id

        document = yaml.safe_load(self.table_list.read_text())
        names = {entry["table"] for entry in entries}
        document["tables"] = [t for t in document["tables"] if t["table"] not in names] + list(entries)
        self.table_list.write_text(yaml.safe_dump(document))
        self.request_parse(COMPACTION_DAG_FILE)
        for name in names:
            table = TableName.parse(name)
            for dag_id in (compaction_dag_id(table), full_rewrite_dag_id(table)):
                self.wait_for(f"{dag_id} to be parsed", lambda d=dag_id: self.dag_parsed(d), timeout)

    def request_parse(self, dag_file: str) -> bool:
        """Ask the dag-processor to parse ``dag_file`` (relative to the DAG folder) ahead of its interval, through
        the REST API as the UI's "Reparse" does. False if no DAG of that file is known yet: nothing to name it by
        (its first parse comes at the interval)."""
        known = self.query("SELECT dag_id FROM dag WHERE relative_fileloc = %s AND NOT is_stale LIMIT 1", dag_file)
        if not known:
            return False
        details = self.api("GET", f"dags/{known[0][0]}")
        assert details.status_code == 200, f"GET dags/{known[0][0]}: {details.status_code} {details.text}"
        response = self.api("PUT", f"parseDagFile/{details.json()['file_token']}")
        # 409: a parse of the file is already asked for and not yet taken up, which is as good.
        assert response.status_code in (201, 409), f"parseDagFile {dag_file}: {response.status_code} {response.text}"
        return True

    def dag_parsed(self, dag_id: str) -> bool:
        return bool(self.query("SELECT 1 FROM dag WHERE dag_id = %s AND NOT is_stale", dag_id))

    # --- the metadata database and the REST API -------------------------------------------------------------

    def query(self, sql: str, *params: object) -> list[tuple]:
        with closing(postgres(self.meta_db)) as db, db.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()

    def token(self, user: str = "admin") -> str:
        if user not in self._tokens:
            response = requests.post(
                f"{self.url}/auth/token", json={"username": user, "password": USERS[user][1]}, timeout=60
            )
            assert response.status_code == 201, f"login of {user} failed: {response.status_code} {response.text}"
            self._tokens[user] = response.json()["access_token"]
        return self._tokens[user]

    def api(self, method: str, path: str, user: str = "admin", **kwargs: Any) -> requests.Response:
        """A call to the REST API (``/api/v2/...``) as ``user``."""
        headers = {"Authorization": f"Bearer {self.token(user)}", **kwargs.pop("headers", {})}
        return requests.request(method, f"{self.url}/api/v2/{path}", headers=headers, timeout=60, **kwargs)

    def wait_for_run(self, dag_id: str, run_id: str, timeout: float, every: float = 1) -> dict[str, Any]:
        """The DAG run once it has finished (success or failed), as the REST API shows it; asked every ``every`` s."""

        def finished() -> dict[str, Any] | None:
            response = self.api("GET", f"dags/{dag_id}/dagRuns/{run_id}")
            assert response.ok, response.text
            run = response.json()
            return run if run["state"] in ("success", "failed") else None

        return self.wait_for(f"run {run_id} of {dag_id} to finish", finished, timeout, every)

    def trigger(self, dag_id: str, conf: dict[str, Any]) -> str:
        """Trigger a run of ``dag_id`` through the REST API, without a logical date; its run id."""
        response = self.api("POST", f"dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf})
        assert response.status_code == 200, response.text
        run = response.json()
        assert run["logical_date"] is None
        return run["dag_run_id"]

    def compacted(self, table: TableName, entry: dict[str, Any], conf: dict[str, Any], timeout: float = 900) -> str:
        """Add ``table`` with ``entry``, trigger its compaction DAG with ``conf`` (:meth:`trigger`), and assert that
        the run and each of its tasks succeeded and that it replaced every data file; the run id."""
        from airflow_iceberg.surface.dag_factory import compaction_dag_id
        from devkit.tables import data_file_paths

        before = data_file_paths(table)
        self.add_tables({"table": str(table), **entry})
        dag_id = compaction_dag_id(table)
        run_id = self.trigger(dag_id, conf)
        run = self.wait_for_run(dag_id, run_id, timeout=timeout)
        states = self.task_states(dag_id, run_id)
        assert run["state"] == "success", states
        assert set(states.values()) == {"success"}, states
        after = data_file_paths(table)
        assert len(after) < len(before) and not after & before, "the rewrite did not replace the small files"
        return run_id

    def task_instances(self, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
        """The run's task instances as the REST API shows them, by task id."""
        response = self.api("GET", f"dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        assert response.ok, response.text
        return {ti["task_id"]: ti for ti in response.json()["task_instances"]}

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        return {task_id: ti["state"] for task_id, ti in self.task_instances(dag_id, run_id).items()}

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        """The XCom value a task pushed (its return value by default), decoded; None if it pushed none."""
        response = self.api("GET", f"dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}")
        if response.status_code == 404:
            return None
        assert response.ok, f"XCom {key} of {task_id}: {response.status_code} {response.text}"
        value = response.json()["value"]
        return json.loads(value) if isinstance(value, str) else value

    def log_text(self) -> str:
        """What its components logged: ``standalone``'s output, then that of the components :meth:`restart`
        started."""
        logs = [self.home / name for name in ("standalone.log", "triggerer.log", "scheduler.log")]
        return "".join(log.read_text(errors="replace") for log in logs if log.exists())

    def sweeps(self) -> list[tuple[int, float, int]]:
        """(tables, seconds, metadata files read) of each health sweep its triggerers logged so far, in order."""
        found = []
        for match in _SWEEP.finditer(self.log_text()):
            read = re.search(r"(\d+) read metadata", match.group(3))
            found.append((int(match.group(1)), float(match.group(2)), int(read.group(1)) if read else 0))
        return found

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
        """The task's log as the UI shows it: one line per structured log event (JSON), errors included."""
        response = self.api("GET", f"dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}")
        assert response.ok, response.text
        return "\n".join(
            json.dumps(item) if isinstance(item, dict) else str(item) for item in response.json()["content"]
        )


def logged_at(log: str, text: str) -> datetime:
    """When the first event holding ``text`` was logged, in a task log as :meth:`LiveAirflow.task_log` gives it."""
    for line in log.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict) and text in str(event.get("event", "")):
            return datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00"))
    raise AssertionError(f"no event with {text!r} in the log:\n{log[-3000:]}")


def _cmdline(process: Any) -> list[str]:
    """The process's command line; empty for one that exited, or a zombie not yet reaped."""
    import psutil

    try:
        return process.cmdline()
    except psutil.Error:
        return []


def _group_members(group: int) -> list[Any]:
    """The live processes of a process group."""
    import psutil

    members = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if os.getpgid(process.pid) == group and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process)
    return members


def group_alive(group: int) -> bool:
    """Whether any process of the process group ``group`` is left."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def process_pss(process: Any) -> float:
    """A live process's proportional set size in bytes; 0 if it exited meanwhile."""
    import psutil

    try:
        return float(process.memory_full_info().pss)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0.0


def process_cpu(process: Any) -> float:
    """A process's CPU seconds and its reaped children's; 0 if it exited meanwhile (its parent counts it now)."""
    import psutil

    try:
        times = process.cpu_times()
    except psutil.NoSuchProcess:
        return 0.0
    return times.user + times.system + times.children_user + times.children_system
