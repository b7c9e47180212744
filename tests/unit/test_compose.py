"""docker-compose.yaml: the files it needs exist, its connections are the DAGs' connections, the services are there.

No Docker engine runs where the tests run, so the stack is not started here; `docker-compose config` (Debian's,
installed by setup) still validates the file against the Compose schema.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from airflow_iceberg.hooks.catalogs import spark_catalog_settings
from airflow_iceberg.table_list.loader import load_table_list

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())
SERVICES = COMPOSE["services"]
AIRFLOW_SERVICES = ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")


def test_the_services_the_dags_need_are_there_and_report_their_health():
    needed = {"postgres", "mysql", "spark-master", "spark-worker", "airflow-init", *AIRFLOW_SERVICES}
    assert needed <= set(SERVICES)
    assert "airflow-iceberg migrate" in " ".join(SERVICES["airflow-init"]["command"])  # the gate's schema step
    for name in needed - {"airflow-init"}:
        assert "healthcheck" in SERVICES[name], f"{name} has no health check"
    assert "warehouse:/warehouse" in SERVICES["spark-worker"]["volumes"]
    for name in AIRFLOW_SERVICES:
        assert "warehouse:/warehouse" in SERVICES[name]["volumes"]
        assert SERVICES[name]["depends_on"]["airflow-init"]["condition"] == "service_completed_successfully"


def test_every_file_the_stack_references_exists():
    for name, service in SERVICES.items():
        if "build" in service:
            context = ROOT / (service["build"] if isinstance(service["build"], str) else service["build"]["context"])
            assert (context / "Dockerfile").is_file(), name
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{name} mounts {source}, which does not exist"
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    stages = {line.split()[-1] for line in lines if line.startswith("FROM ") and " AS " in line}
    for line in lines:
        if line.startswith("COPY --from="):  # from an earlier build stage of the same Dockerfile
            stage = line.split()[1].removeprefix("--from=")
            assert stage in stages, f"the Dockerfile copies from stage {stage}, which it does not build"
        elif line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), f"the Dockerfile copies {source}, which does not exist"


def test_airflow_services_define_every_connection_the_dags_use_and_nothing_else_decides_them():
    tables = load_table_list(ROOT / "dags" / "iceberg_tables.yaml").tables  # the list the stack mounts
    assert tables, "the shipped table list has no valid table"
    for service in AIRFLOW_SERVICES:
        environment = SERVICES[service]["environment"]
        for table in tables:
            for conn_id, conn_type in (
                (table.spark_conn_id, "spark"),
                (table.catalog_conn_id, "iceberg"),
                (table.write_gate_conn_id, "iceberg_write_gate"),
            ):
                variable = f"AIRFLOW_CONN_{conn_id.upper()}"
                assert variable in environment, f"{service} does not set {variable}"
                assert json.loads(environment[variable])["conn_type"] == conn_type


def test_the_connections_point_at_the_stacks_own_services():
    environment = SERVICES["airflow-scheduler"]["environment"]
    spark = json.loads(environment["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert f"{spark['host']}:{spark['port']}" in SERVICES["spark-worker"]["command"]
    catalog = json.loads(environment["AIRFLOW_CONN_LAKE"])["extra"]
    settings = spark_catalog_settings("lake", catalog)  # the same connection also drives Spark
    assert settings.conf["spark.sql.catalog.lake.uri"] == "jdbc:mysql://mysql:3306/iceberg_catalog?permitMysqlScheme"
    gate = json.loads(environment["AIRFLOW_CONN_WRITE_GATE_DEFAULT"])
    init_sql = (ROOT / "docker" / "mysql-init.sql").read_text()
    for database in (gate["schema"], "iceberg_catalog"):
        assert re.search(rf"CREATE DATABASE IF NOT EXISTS {database};", init_sql), database
    assert environment["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://")


def compose_command() -> list[str]:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.fail("neither `docker compose` nor `docker-compose` is installed; `make setup` installs docker-compose")


def test_docker_compose_config_accepts_the_file():
    result = subprocess.run(
        [*compose_command(), "-f", str(ROOT / "docker-compose.yaml"), "config", "--quiet"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_the_image_runs_the_default_stacks_spark_and_jars():
    from scripts import stacks

    default = stacks.load().default
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f".venv/spark-{default}/bin" in dockerfile and f"build/stacks/{default}/jars" in dockerfile
    assert "/.venv/spark/" not in dockerfile


def test_airflow_services_run_the_fleet_setting():
    from airflow_iceberg.fleet.dag_bundle import FLEET_SETTINGS

    for name in AIRFLOW_SERVICES:
        environment = SERVICES[name]["environment"]
        assert {key: environment.get(key) for key in FLEET_SETTINGS} == FLEET_SETTINGS, name
