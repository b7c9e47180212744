"""Integration set-up: these tests run against the machine's real MySQL, local Spark and real Iceberg tables.

Run them with ``make test``, which builds the environments and exports what ``scripts/env.sh`` sets. Nothing
here skips: a missing server or tool fails the run with a message that says what is missing. Every test under
this folder carries the ``integration`` marker.

The suite uses databases of its own (``airflow_iceberg_test_gate`` and ``airflow_iceberg_test_catalog``,
recreated per session, the gate's schema migrated as ``make setup`` does) and a warehouse under ``build/``, so
it never touches the demo's data. As in a deployment that follows the README's grants, the gate is reached
with least privilege: Airflow's connection (``write_gate_default``) through a MySQL user with data rights
only, the writers' (``write_gate_writer``) through a user that may read the gate and report about itself, and
only the explicit schema step (``write_gate_admin``) with DDL rights. Two checkouts can run their suites at once
on one machine when one of them sets ``AIRFLOW_ICEBERG_TEST_DB_SUFFIX``, which every database name of the suite
ends with; each worker of a parallel run adds its own name to it (``tests/conftest.py``).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pymysql
import pytest
import yaml

from devkit import EXTRA_JVM_OPTIONS_ENV
from devkit.live_airflow import mysql_settings
from devkit.stack_checks import SMOKE_ENV
from scripts import stacks
from tests.conftest import WORKER_SUFFIX

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
#: Ends every database name of the suite, so that two checkouts' suites can run at once on one machine.
DB_SUFFIX = os.environ.get("AIRFLOW_ICEBERG_TEST_DB_SUFFIX", "") + WORKER_SUFFIX
GATE_DB = f"airflow_iceberg_test_gate{DB_SUFFIX}"
CATALOG_DB = f"airflow_iceberg_test_catalog{DB_SUFFIX}"
#: The gate's MySQL users, with the grants the README gives them: (user, password, grants on the gate database).
GATE_USERS = {
    "airflow": (
        f"aic_airflow{DB_SUFFIX}",
        "Airflow-gate-pw-7",
        [f"GRANT SELECT, INSERT, UPDATE, DELETE ON `{GATE_DB}`.* TO {{user}}"],
    ),
    "writer": (
        f"aic_writer{DB_SUFFIX}",
        "Writer-gate-pw-3",
        [
            f"GRANT SELECT ON `{GATE_DB}`.`iceberg_write_gate` TO {{user}}",
            f"GRANT SELECT, INSERT, UPDATE ON `{GATE_DB}`.`iceberg_write_gate_writer` TO {{user}}",
        ],
    ),
}
#: The tests' JVMs live for seconds or minutes on tables of a few kilobytes: the JIT's first tier and the serial
#: collector take about 30 % less CPU for each Spark job (95.6 against 67.9 CPU s for a test of a write and a
#: rewrite). Given to the tests' Spark drivers and to the JVMs devkit starts (Flink jobs, the Kafka broker).
QUICK_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: The Spark settings every test's table has.
SPARK_CONF = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"}
#: The shipped table list, whose blocks ``x-spark-jars`` and ``x-spark-packages`` load Iceberg into Spark.
SHIPPED_TABLE_LIST = ROOT / "dags" / "iceberg_tables.yaml"


def shipped_spark_block(name: str) -> dict[str, list[str]]:
    """How the shipped table list loads Iceberg into Spark: its block ``x-spark-jars`` or ``x-spark-packages``."""
    return yaml.safe_load(SHIPPED_TABLE_LIST.read_text())[name]


def stack_jars() -> list[str]:
    """The jars of this run's stack (``$AIRFLOW_ICEBERG_STACK``) that set-up copied: on the default stack, the
    shipped table list's ``x-spark-jars`` (tests/unit/test_jar_pins.py keeps the two alike)."""
    return [str(Path(os.environ["AIRFLOW_ICEBERG_JARS"]) / name) for name in stacks.current().spark_jar_files]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)


def _require_environment() -> None:
    problems = []
    if "AIRFLOW_ICEBERG_JARS" not in os.environ:
        problems.append("AIRFLOW_ICEBERG_JARS is not set: run the suite with `make test`")
    else:
        for jar in stack_jars():
            if not Path(jar).is_file():
                problems.append(f"{jar} is missing: run `make setup`")
    if shutil.which("spark-submit") is None:
        problems.append("spark-submit is not on PATH: run the suite with `make test`")
    if problems:
        pytest.exit("the test environment is incomplete:\n  " + "\n  ".join(problems), returncode=2)


def _mysql() -> pymysql.connections.Connection:
    settings = mysql_settings()
    try:
        return pymysql.connect(**settings, autocommit=True)
    except pymysql.err.OperationalError as error:
        where = f"{settings['host']}:{settings['port']}"
        pytest.exit(f"MySQL at {where} is not reachable ({error}); the suite needs it", returncode=2)


@pytest.fixture(scope="session", autouse=True)
def integration_stack() -> None:
    """Fresh gate and catalog databases and warehouse for the session, and connections pointing at them."""
    _require_environment()
    with _mysql() as db, db.cursor() as cursor:
        for name in (GATE_DB, CATALOG_DB):
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
            cursor.execute(f"CREATE DATABASE `{name}`")
    warehouse = ROOT / "build" / f"test-warehouse{WORKER_SUFFIX}"
    shutil.rmtree(warehouse, ignore_errors=True)
    warehouse.mkdir(parents=True)
    user, password, host, port = (mysql_settings()[key] for key in ("user", "password", "host", "port"))
    auth = f"{user}:{password}" if password else user
    # Connections for the suite: the same names the DAGs use, pointing at the suite's own databases.
    os.environ["AIRFLOW_CONN_LAKE"] = json.dumps(
        {
            "conn_type": "iceberg",
            "extra": {
                "type": "sql",
                "uri": f"mysql+pymysql://{auth}@{host}:{port}/{CATALOG_DB}",
                "warehouse": f"file://{warehouse}",
            },
        }
    )

    # The catalog's own tables, created now through pyiceberg. Iceberg's Java JDBC catalog looks for them with
    # DatabaseMetaData.getTables on no particular database: on a server where another database already holds an
    # Iceberg catalog (the embedded default's, after `make demo`), it finds those, creates none here, and every
    # Spark job that comes first then fails with "Table '<db>.iceberg_tables' doesn't exist".
    from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

    IcebergHook("lake").get_conn()

    def gate_connection(login: str, secret: str) -> str:
        return json.dumps(
            {
                "conn_type": "iceberg_write_gate",
                "host": host,
                "port": port,
                "login": login,
                "password": secret,
                "schema": GATE_DB,
            }
        )

    os.environ[EXTRA_JVM_OPTIONS_ENV] = QUICK_JVM_OPTIONS
    os.environ["AIRFLOW_CONN_WRITE_GATE_ADMIN"] = gate_connection(user, password)
    os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({"conn_type": "spark", "host": "local[2]"})
    from airflow_iceberg.hooks.write_gate import WriteGateHook

    WriteGateHook("write_gate_admin").migrate()  # the explicit schema step, as `make setup` takes it
    with _mysql() as db, db.cursor() as cursor:
        for login, secret, grants in GATE_USERS.values():
            cursor.execute(f"DROP USER IF EXISTS '{login}'@'%'")
            cursor.execute(f"CREATE USER '{login}'@'%%' IDENTIFIED BY %s", (secret,))  # %% is a literal %
            for grant in grants:
                cursor.execute(grant.format(user=f"'{login}'@'%'"))
    os.environ["AIRFLOW_CONN_WRITE_GATE_DEFAULT"] = gate_connection(*GATE_USERS["airflow"][:2])
    os.environ["AIRFLOW_CONN_WRITE_GATE_WRITER"] = gate_connection(*GATE_USERS["writer"][:2])
    # The reference writers (devkit/writers.py) reach the gate as the writer user.
    os.environ["AIRFLOW_ICEBERG_WRITER_CONN_ID"] = "write_gate_writer"


@functools.cache
def spark_driver_options() -> str:
    """The quick JVM options and the archive of Spark's classes (devkit/spark_cds.py), made at the first call."""
    from airflow_iceberg.table_list.schema import TableConfig
    from devkit.spark_cds import archive_options

    warm_up = TableConfig.model_validate(
        {"table": "lake.cds.warm_up", "spark": {"jars": stack_jars(), "conf": SPARK_CONF}}
    )
    return archive_options(warm_up, QUICK_JVM_OPTIONS)


def suite_defaults() -> dict[str, Any]:
    """The ``defaults`` block of the suite's table list: small waits, local Spark with the shipped list's jars."""
    jars = stack_jars()
    return {
        "idle_seconds": 2,
        "poke_interval": 1,
        "lease_seconds": 600,
        # Tests' tables are small: a partition needs work from two small files or any delete file. The planning
        # tests set their own thresholds. Runs start when a test starts them: the health-watch tests turn it on.
        "health": {"min_small_files": 2, "max_delete_age_minutes": 0, "watch": False},
        "spark": {
            "jars": jars,
            "conf": {**SPARK_CONF, "spark.driver.extraJavaOptions": spark_driver_options()},
        },
    }


@pytest.fixture(scope="session")
def table_list_file(tmp_path_factory: pytest.TempPathFactory, integration_stack: None) -> Iterator[Path]:
    """The suite's own table list, in use by the real ``dags/`` folder for the whole session."""
    path = tmp_path_factory.mktemp("config") / "iceberg_tables.yaml"
    path.write_text(yaml.safe_dump({"defaults": suite_defaults(), "tables": []}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIRFLOW_ICEBERG_CONFIG", str(path))
        yield path


@pytest.fixture
def compaction_dag(table_list_file: Path):
    """Put a table in the suite's table list (replacing its entry) and return its DAG as ``dags/`` builds it.

    ``dag.test()`` re-parses the DAG folder, so the DAG it runs is the one ``dags/iceberg_compaction.py``
    builds from the table list, exactly as in a deployment.
    """
    from airflow_iceberg.core.tables import TableName
    from devkit.dag_runs import load_compaction_dag

    def add(table: TableName | str, **settings: Any):
        name = TableName.of(table)
        document = yaml.safe_load(table_list_file.read_text())
        document["tables"] = [t for t in document["tables"] if t["table"] != str(name)]
        document["tables"].append({"table": str(name), **settings})
        table_list_file.write_text(yaml.safe_dump(document))
        return load_compaction_dag(name)

    return add


@pytest.fixture(scope="session")
def table_config():
    """A validated :class:`TableConfig` for a test table, with the suite's defaults."""
    from airflow_iceberg.table_list.schema import TableConfig

    def build(table: Any, **settings: Any) -> TableConfig:
        return TableConfig.model_validate({**suite_defaults(), "table": table, **settings})

    return build


@pytest.fixture
def gate_hook():
    """The gate hook on the suite's gate database (connection ``write_gate_default``)."""
    from airflow_iceberg.hooks.write_gate import WriteGateHook

    return WriteGateHook()


@pytest.fixture
def gate_writer():
    """A writer's gate client for a table, connected as the writer user (``write_gate_writer``)."""
    from airflow_iceberg.core.writer import WriteGateClient
    from airflow_iceberg.hooks.write_gate import WriteGateHook

    clients = []

    def connect(table: str, **kwargs: Any) -> WriteGateClient:
        settings = WriteGateHook("write_gate_writer").connection_settings()
        clients.append(WriteGateClient.connect(table, **settings, **kwargs))
        return clients[-1]

    yield connect
    for client in clients:
        client.close()


@pytest.fixture
def gate_table(unique_name: str) -> str:
    """A table name of this test's own, so its gate starts open and its audit trail empty."""
    return f"lake.gate.{unique_name}"


@pytest.fixture(scope="session")
def rest_catalog(integration_stack: None) -> Iterator[Any]:
    """Iceberg's REST catalog server for the session (``devkit/rest_catalog.py``), over a JdbcCatalog in a database
    of the suite's own, as the Iceberg connection ``rest``: tables ``rest.<namespace>.<table>``."""
    from devkit.rest_catalog import RestCatalog

    with _catalog_server(RestCatalog, "rest") as server:
        yield server


@pytest.fixture(scope="session")
def hive_metastore(integration_stack: None) -> Iterator[Any]:
    """A standalone Hive Metastore for the session (``devkit/hive_metastore.py``), its schema in a database of the
    suite's own, as the Iceberg connection ``hive``: tables ``hive.<namespace>.<table>``."""
    from devkit.hive_metastore import HiveMetastore

    with _catalog_server(HiveMetastore, "hive") as server:
        yield server


@contextmanager
def _catalog_server(server_class: Any, name: str) -> Iterator[Any]:
    """``server_class`` started on a fresh database and directory of the suite's, as the Iceberg connection ``name``."""
    database = f"airflow_iceberg_test_{name}{DB_SUFFIX}"
    with _mysql() as db, db.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS `{database}`")
    base = ROOT / "build" / f"test-{name}-catalog{WORKER_SUFFIX}"
    shutil.rmtree(base, ignore_errors=True)
    with server_class(base, mysql_settings(), database) as server, pytest.MonkeyPatch.context() as patch:
        patch.setenv(f"AIRFLOW_CONN_{name.upper()}", json.dumps(server.iceberg_connection()))
        yield server


@pytest.fixture
def mysql_server() -> pymysql.connections.Connection:
    """An autocommit connection to the MySQL server with no database selected."""
    with _mysql() as connection:
        yield connection


#: Tables in the live Airflow's table list besides the ones tests add: the parse load of a fleet.
FLEET_SIZE = 200


class StatsdListener(threading.Thread):
    """A StatsD server for the suite: every line the live Airflow sends it, in the order it came."""

    def __init__(self) -> None:
        super().__init__(name="statsd-listener", daemon=True)
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        self.lines: list[str] = []

    def run(self) -> None:
        while True:
            try:
                packet = self.socket.recv(65535)
            except OSError:  # closed: the session is over
                return
            self.lines.extend(packet.decode(errors="replace").splitlines())

    def sent(self, name: str, kind: str, **tags: str) -> list[tuple[dict[str, str], float]]:
        """(tags, value) of each ``name`` metric of ``kind`` (``c``, ``g``, ``ms``) with ``tags`` among its own,
        in the order sent; ``name`` without Airflow's prefix."""
        found = []
        for line in list(self.lines):  # airflow.name,tag=value,...:value|kind
            head, _, rest = line.partition(":")
            metric, *pairs = head.split(",")
            value, _, line_kind = rest.partition("|")
            its_tags = dict(pair.split("=", 1) for pair in pairs if "=" in pair)
            if metric == f"airflow.{name}" and line_kind.split("|")[0] == kind and tags.items() <= its_tags.items():
                found.append((its_tags, float(value)))
        return found

    def settings(self) -> dict[str, str]:
        """Airflow's ``[metrics]`` settings that send here, with tags in the InfluxDB style (``name,tag=value``)."""
        return {
            "AIRFLOW__METRICS__STATSD_ON": "True",
            "AIRFLOW__METRICS__STATSD_HOST": "127.0.0.1",
            "AIRFLOW__METRICS__STATSD_PORT": str(self.port),
            "AIRFLOW__METRICS__STATSD_PREFIX": "airflow",
            "AIRFLOW__METRICS__STATSD_INFLUXDB_ENABLED": "True",
        }


@pytest.fixture(scope="session")
def statsd() -> Iterator[StatsdListener]:
    """The StatsD server the live Airflow sends its metrics to."""
    listener = StatsdListener()
    listener.start()
    yield listener
    listener.socket.close()


_LIVE_AIRFLOW = pytest.StashKey[Any]()


@pytest.fixture(scope="session")
def live_airflow(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    integration_stack: None,
    statsd: StatsdListener,
):
    """One ``airflow standalone`` for the whole session, shared by every test that needs a live Airflow.

    It runs the fleet setting (``FLEET_SETTINGS``). Its table list has the suite's defaults and a fleet of 200
    manual-only tables; tests add their own tables with :meth:`LiveAirflow.add_tables`, which waits until the
    dag-processor has parsed them. Its tests run one after the other (tests/conftest.py), and it stops when the
    last of them is done: idle, it would still take CPU from every test after them.
    """
    from airflow_iceberg.fleet.dag_bundle import FLEET_SETTINGS
    from devkit.live_airflow import AIRFLOWS_OWN_IDLE_SLEEP, META_DB, fleet, running

    root = tmp_path_factory.mktemp("live-airflow")
    table_list = root / "scheduler_tables.yaml"
    table_list.write_text(yaml.safe_dump({"defaults": suite_defaults(), "tables": fleet(FLEET_SIZE)}))
    # The fleet setting docs/fleets.md advises: test_table_list_changes holds it to its promise. All but its idle
    # scheduler sleep: the suite's runs would each wait up to 5 s more for every next task, and the sleep is no
    # part of how a table-list change reaches Airflow (make bench-fleet measures the setting whole).
    settings = {**statsd.settings(), **FLEET_SETTINGS, **AIRFLOWS_OWN_IDLE_SLEEP}
    with running(root / "airflow-home", table_list, meta_db=META_DB + DB_SUFFIX, settings=settings) as airflow:
        request.config.stash[_LIVE_AIRFLOW] = airflow
        yield airflow


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    yield
    airflow = item.config.stash.get(_LIVE_AIRFLOW, None)
    if airflow is None or "live_airflow" not in getattr(item, "fixturenames", ()):
        return
    later = item.session.items[item.session.items.index(item) + 1 :]
    if not any("live_airflow" in getattr(other, "fixturenames", ()) for other in later):
        airflow.stop()  # the last test that needed it is done; stop() is idempotent, the fixture's end calls it too


#: Where the tests that open a browser save their screenshots.
BUILD = ROOT / "build"


@pytest.fixture
def browser():
    """Debian's Chromium, headless, driven through Debian's chromedriver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1400,1000",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    yield driver
    driver.quit()


def login(browser: Any, live_airflow: Any, user: str) -> None:
    """Sign ``browser`` in to the live Airflow as ``user`` through Airflow's own login form, as a person does."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    from devkit.live_airflow import USERS

    browser.get(f"{live_airflow.url}/api/v2/monitor/health")  # on the api-server's origin, to drop its cookies
    browser.delete_all_cookies()
    browser.get(f"{live_airflow.url}/auth/login")
    wait = WebDriverWait(browser, 120)
    wait.until(expected_conditions.element_to_be_clickable((By.NAME, "username"))).send_keys(user)
    browser.find_element(By.NAME, "password").send_keys(USERS[user][1])
    browser.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
    wait.until(lambda b: b.get_cookie("_token"), message=f"no session cookie after {user} signed in")


CATALOG_USER = f"aic_catalog{DB_SUFFIX}"
CATALOG_USER_PASSWORD = "Kq7-catalog-secret-91x"


@pytest.fixture
def password_protected_catalog(mysql_server, monkeypatch):
    """The suite's catalog reached through a MySQL user that needs a password, as in production."""
    catalog = json.loads(os.environ["AIRFLOW_CONN_LAKE"])
    database = catalog["extra"]["uri"].rsplit("/", 1)[1]
    host = os.environ.get("AIRFLOW_ICEBERG_MYSQL_HOST", "127.0.0.1")
    with mysql_server.cursor() as cursor:
        cursor.execute(f"DROP USER IF EXISTS '{CATALOG_USER}'@'%'")
        cursor.execute(f"CREATE USER '{CATALOG_USER}'@'%%' IDENTIFIED BY %s", (CATALOG_USER_PASSWORD,))  # %%: a %
        cursor.execute(f"GRANT ALL ON `{database}`.* TO '{CATALOG_USER}'@'%'")
    port = os.environ.get("AIRFLOW_ICEBERG_MYSQL_PORT", "3306")
    catalog["extra"]["uri"] = f"mysql+pymysql://{CATALOG_USER}:{CATALOG_USER_PASSWORD}@{host}:{port}/{database}"
    monkeypatch.setenv("AIRFLOW_CONN_LAKE", json.dumps(catalog))
    yield
    with mysql_server.cursor() as cursor:
        cursor.execute(f"DROP USER IF EXISTS '{CATALOG_USER}'@'%'")


class ArgvSampler(threading.Thread):
    """Reads every process's command line, as ``ps`` shows it to anyone on the machine, every 50 ms.

    ``leaks`` holds each command line that contained a secret; ``spark_samples`` counts the samples that saw a
    rewrite's Spark job running, so a test knows the sampling overlapped the work.
    """

    def __init__(self, secrets: tuple[str, ...]) -> None:
        super().__init__(name="argv-sampler", daemon=True)
        self.secrets = secrets
        self.leaks: list[str] = []
        self.spark_samples = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        me = psutil.Process()
        while not self.stopped.wait(0.05):
            spark = False
            # A rewrite counts when this test started it: another worker's (pytest -n) may run at the same time.
            mine = {child.pid for child in me.children(recursive=True)}
            for process in psutil.process_iter(["cmdline"]):
                command = " ".join(process.info["cmdline"] or [])
                spark = spark or ("run_procedure.py" in command and process.pid in mine)
                if any(secret in command for secret in self.secrets):
                    self.leaks.append(command[:500])
            self.spark_samples += spark


@pytest.fixture
def argv_sampler():
    """``with argv_sampler(secret, ...) as sampler:`` samples command lines for the block's duration."""

    @contextmanager
    def sample(*secrets: str) -> Iterator[ArgvSampler]:
        sampler = ArgvSampler(secrets)
        sampler.start()
        try:
            yield sampler
        finally:
            sampler.stopped.set()
            sampler.join(10)

    return sample


# --- The stacks' checks: what `make test-stacks` (devkit/stack_checks.py) puts in its matrix -------------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = yield
    if report.when == "call" or report.failed:  # a failure in set-up counts too
        item.stash[_OUTCOME] = "pass" if report.passed else "fail"
    return report


_OUTCOME = pytest.StashKey[str]()


class StackCheck:
    """What a check of the stacks' matrix (a test marked ``stack_check``) measured, written when it ends to
    ``build/stacks/<stack>/checks/<test>.json`` with its outcome, whatever the outcome."""

    def __init__(self, name: str, smoke: bool) -> None:
        self.name = name
        self.smoke = smoke
        self.figures: dict[str, Any] = {}

    def record(self, **figures: Any) -> None:
        self.figures.update(figures)

    def compactions(self, full: int) -> int:
        """How many compactions the check runs: ``full``, or one in a smoke run of another stack (``make test``)."""
        return 1 if os.environ.get(SMOKE_ENV) else full

    def record_pauses(self, run: Any, gate_closed_seconds: float, label: Callable[[str], str]) -> dict[str, bool]:
        """What one compaction (``run``) decided for each writer, from its close task's XCom: whether it paused,
        by writer; and, by ``label(writer id)`` (one label for a Flink job's subtasks, say), each writer's pause
        in this compaction, appended to ``writer_pause_seconds``: the gate's closed time if it paused, else 0."""
        closing = run.get_task_instance("close_gate").xcom_pull(task_ids="close_gate") or {}
        decided = {w["writer"]: bool(w["pause"]) for w in closing.get("writers", [])}
        pauses: dict[str, float] = {}
        for writer, paused in decided.items():
            pauses[label(writer)] = max(pauses.get(label(writer), 0.0), gate_closed_seconds if paused else 0.0)
        recorded = self.figures.setdefault("writer_pause_seconds", {})
        for name, seconds in pauses.items():
            recorded.setdefault(name, []).append(round(seconds, 1))
        return decided


@pytest.fixture
def stack_check(request: pytest.FixtureRequest) -> Iterator[StackCheck]:
    marker = request.node.get_closest_marker("stack_check")
    assert marker is not None, "a test that records a stack check is marked stack_check('<its name>')"
    check = StackCheck(marker.args[0], smoke=request.node.get_closest_marker("stack_smoke") is not None)
    started = time.monotonic()
    yield check
    folder = Path(os.environ["AIRFLOW_ICEBERG_STACK_BUILD"]) / "checks"
    folder.mkdir(parents=True, exist_ok=True)
    record = {
        "stack": stacks.current().name,
        "check": check.name,
        "smoke": check.smoke,
        "test": request.node.nodeid,
        "seconds": round(time.monotonic() - started, 1),
        "figures": check.figures,
        "outcome": request.node.stash.get(_OUTCOME, "fail"),  # the test's call has been reported by now
    }
    safe = "".join(c if c.isalnum() else "_" for c in request.node.nodeid.split("::", 1)[1])
    (folder / f"{safe}.json").write_text(json.dumps(record, indent=1, default=str))
