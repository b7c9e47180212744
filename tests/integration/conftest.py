"""Integration set-up: these tests run against the machine's real MySQL, local Spark and real Iceberg tables.

Run them with ``make test``, which builds the environments and exports what ``scripts/env.sh`` sets. Nothing
here skips: a missing server or tool fails the run with a message that says what is missing. Every test under
this folder carries the ``integration`` marker.

The suite uses databases of its own (``airflow_iceberg_test_gate`` and ``airflow_iceberg_test_catalog``,
recreated per session, the gate's schema migrated as ``make setup`` does) and a warehouse under ``build/``, so
it never touches the demo's data.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GATE_DB = "airflow_iceberg_test_gate"
CATALOG_DB = "airflow_iceberg_test_catalog"
JARS = (
    "iceberg-spark-runtime-3.5_2.12-1.10.2.jar",
    "iceberg-shaded-jackson.jar",
    "mariadb-java-client.jar",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)


def _require_environment() -> None:
    problems = []
    if "AIRFLOW_ICEBERG_JARS" not in os.environ:
        problems.append("AIRFLOW_ICEBERG_JARS is not set: run the suite with `make test`")
    else:
        for jar in JARS:
            if not (Path(os.environ["AIRFLOW_ICEBERG_JARS"]) / jar).is_file():
                problems.append(f"{jar} missing from {os.environ['AIRFLOW_ICEBERG_JARS']}: run `make setup`")
    if shutil.which("spark-submit") is None:
        problems.append("spark-submit is not on PATH: run the suite with `make test`")
    if problems:
        pytest.exit("the test environment is incomplete:\n  " + "\n  ".join(problems), returncode=2)


def _mysql() -> pymysql.connections.Connection:
    host = os.environ.get("AIRFLOW_ICEBERG_MYSQL_HOST", "127.0.0.1")
    port = int(os.environ.get("AIRFLOW_ICEBERG_MYSQL_PORT", "3306"))
    try:
        return pymysql.connect(
            host=host,
            port=port,
            user=os.environ.get("AIRFLOW_ICEBERG_MYSQL_USER", "root"),
            password=os.environ.get("AIRFLOW_ICEBERG_MYSQL_PASSWORD", ""),
            autocommit=True,
        )
    except pymysql.err.OperationalError as error:
        pytest.exit(f"MySQL at {host}:{port} is not reachable ({error}); the suite needs it", returncode=2)


@pytest.fixture(scope="session", autouse=True)
def integration_stack() -> None:
    """Fresh gate and catalog databases and warehouse for the session, and connections pointing at them."""
    _require_environment()
    with _mysql() as db, db.cursor() as cursor:
        for name in (GATE_DB, CATALOG_DB):
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
            cursor.execute(f"CREATE DATABASE `{name}`")
    warehouse = ROOT / "build" / "test-warehouse"
    shutil.rmtree(warehouse, ignore_errors=True)
    warehouse.mkdir(parents=True)
    user = os.environ.get("AIRFLOW_ICEBERG_MYSQL_USER", "root")
    password = os.environ.get("AIRFLOW_ICEBERG_MYSQL_PASSWORD", "")
    host = os.environ.get("AIRFLOW_ICEBERG_MYSQL_HOST", "127.0.0.1")
    port = int(os.environ.get("AIRFLOW_ICEBERG_MYSQL_PORT", "3306"))
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
    os.environ["AIRFLOW_CONN_WRITE_GATE_DEFAULT"] = json.dumps(
        {"conn_type": "iceberg_write_gate", "host": host, "port": port, "login": user, "password": password,
         "schema": GATE_DB}
    )  # fmt: skip
    os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({"conn_type": "spark", "host": "local[2]"})
    from airflow_iceberg.hooks.write_gate import WriteGateHook

    WriteGateHook().migrate()  # the explicit schema step, as `make setup` takes it for the demo's database


def suite_defaults() -> dict[str, Any]:
    """The ``defaults`` block of the suite's table list: small waits, local Spark with the built jars."""
    jars = [str(Path(os.environ["AIRFLOW_ICEBERG_JARS"]) / jar) for jar in JARS]
    return {
        "idle_seconds": 2,
        "poke_interval": 1,
        "lease_seconds": 600,
        "spark": {"jars": jars, "conf": {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"}},
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
    from airflow_iceberg.spark_jobs.iceberg_call import TableName
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
    from airflow_iceberg.config import TableConfig

    def build(table: Any, **settings: Any) -> TableConfig:
        return TableConfig.model_validate({**suite_defaults(), "table": table, **settings})

    return build


@pytest.fixture
def gate_hook():
    """The gate hook on the suite's gate database (connection ``write_gate_default``)."""
    from airflow_iceberg.hooks.write_gate import WriteGateHook

    return WriteGateHook()


@pytest.fixture
def gate_table(unique_name: str) -> str:
    """A table name of this test's own, so its gate starts open and its audit trail empty."""
    return f"lake.gate.{unique_name}"


@pytest.fixture
def mysql_server() -> pymysql.connections.Connection:
    """An autocommit connection to the MySQL server with no database selected."""
    with _mysql() as connection:
        yield connection


#: Tables in the live Airflow's table list besides the ones tests add: the parse load of a fleet.
FLEET_SIZE = 200


@pytest.fixture(scope="session")
def live_airflow(tmp_path_factory: pytest.TempPathFactory, integration_stack: None):
    """One ``airflow standalone`` for the whole session, shared by every test that needs a live Airflow.

    Its table list has the suite's defaults and a fleet of 200 manual-only tables; tests add their own tables with
    :meth:`LiveAirflow.add_tables`, which waits until the dag-processor has parsed them.
    """
    from devkit.live_airflow import LiveAirflow, fleet

    root = tmp_path_factory.mktemp("live-airflow")
    table_list = root / "scheduler_tables.yaml"
    table_list.write_text(yaml.safe_dump({"defaults": suite_defaults(), "tables": fleet(FLEET_SIZE)}))
    home = root / "airflow-home"
    home.mkdir()
    airflow = LiveAirflow(home, table_list)
    try:
        airflow.start()
        yield airflow
    finally:
        airflow.stop()
        shutil.rmtree(home / "logs", ignore_errors=True)
