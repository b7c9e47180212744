"""What ``pip install airflow-iceberg`` gives: the provider, the Spark jobs it submits and its DAG files, nothing else.

The wheel is built from this repository with ``uv build`` as a release is (the sdist, then the wheel from it, so
nothing left in a build folder can slip in) and installed alone into a new virtual environment.
Run from a directory outside the repository, that environment lists the provider and runs a table's compaction
DAG, from a DAG folder that ``airflow-iceberg dags`` filled from the wheel and a table list of its own, with the
rewrite job the wheel installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from datetime import date, timedelta
from pathlib import Path

import pytest
import tomllib
import yaml
from packaging.requirements import Requirement

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.surface.dag_factory import compaction_dag_id
from devkit.tables import TableStats
from devkit.writers import write_small_files
from scripts import stacks

ROOT = Path(__file__).resolve().parents[2]
UV = ROOT / ".venv" / "tools" / "bin" / "uv"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: The workbench's folders, and its files by name (``spark_writers.py`` is the package's own, not ``writers.py``).
WORKBENCH_FOLDERS = ("devkit/", "tests/")
WORKBENCH = (
    "demo.py",
    "bench.py",
    "live_ingest.py",
    "writers.py",
    "gated_ingest.py",
    "small_files_writer.py",
    "ingest_events.py",
)


def workbench(names: list[str]) -> list[str]:
    """The names of workbench files among ``names``: below its folders, or named as one of its files."""
    return [n for n in names if any(f in n for f in WORKBENCH_FOLDERS) or n.rsplit("/", 1)[-1] in WORKBENCH]


def run(command: list[str | Path], **kwargs) -> str:
    done = subprocess.run([str(part) for part in command], capture_output=True, text=True, timeout=900, **kwargs)
    assert done.returncode == 0, f"{' '.join(map(str, command))} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    run([UV, "build", "--out-dir", out, ROOT])
    return out


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    [built] = dist.glob("airflow_iceberg-*.whl")
    return built


@pytest.fixture(scope="module", params=stacks.load().airflow, ids=lambda version: f"airflow-{version}")
def installed(request: pytest.FixtureRequest, wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment holding the wheel and its dependencies alone, with each Airflow the provider is
    tested on (the oldest minor it supports, and the newest); returns its ``bin`` folder.

    With the suite's own Airflow, dependencies are pinned to the versions ``make setup`` resolved, so uv takes them
    from its cache. With another, uv resolves them as a user's ``pip install`` with Airflow's constraints would:
    Airflow's own dependencies as served on its release day (the constraint files are not served here, and later
    releases of FastAPI, Cadwyn and Pydantic break an older Airflow), and the provider's own as new as served.
    """
    work = tmp_path_factory.mktemp("installed")
    run([UV, "venv", "-q", "-p", "python3.11", work / "venv"])
    python = work / "venv" / "bin" / "python"
    pins = run([UV, "pip", "freeze", "--python", sys.executable]).splitlines()
    if f"apache-airflow=={request.param}" in pins:
        constraints = work / "constraints.txt"
        constraints.write_text("\n".join(p for p in pins if "==" in p and not p.startswith("airflow-iceberg")))
        run([UV, "pip", "install", "-q", "--python", python, "-c", constraints, wheel])
    else:
        released = stacks.load().airflow_released[request.param] + timedelta(days=1)
        ours = [
            Requirement(d).name for d in PYPROJECT["project"]["dependencies"] if not d.startswith("apache-airflow>")
        ]
        exempt = [f"--exclude-newer-package={name}={date.today() + timedelta(days=1)}" for name in ours]
        run(
            [UV, "pip", "install", "-q", "--python", python, f"--exclude-newer={released}", *exempt]
            + [wheel, f"apache-airflow=={request.param}"]
        )
    version = run([python, "-c", "import airflow; print(airflow.__version__)"]).strip()
    assert version == request.param
    return python.parent


def test_the_wheel_holds_the_provider_and_its_spark_jobs_and_no_workbench(wheel: Path):
    names = zipfile.ZipFile(wheel).namelist()
    for path in (
        "airflow_iceberg/get_provider_info.py",
        "airflow_iceberg/hooks/write_gate.py",
        "airflow_iceberg/hooks/write_gate.sql",
        "airflow_iceberg/plugins/static/iceberg-tables.js",  # the UI page's front end, built by npm at set-up
        "airflow_iceberg/spark_jobs/run_procedure.py",
        "airflow_iceberg/core/procedures.py",  # the core the job imports, shipped to Spark as a zip of these
        "airflow_iceberg/core/writer.py",
        "airflow_iceberg/core/spark_writers.py",  # the Spark writers' helpers
        "airflow_iceberg/core/gate_holder.py",
        "airflow_iceberg/example_dags/iceberg_compaction.py",  # the DAG files, from dags/
        "airflow_iceberg/example_dags/iceberg_table_list_check.py",
        "airflow_iceberg/example_dags/iceberg_tables.yaml",
    ):
        assert path in names, f"{path} is not in the wheel"
    carried = workbench(names)
    assert carried == [], f"the wheel carries workbench files: {carried}"
    assert all(name.startswith(("airflow_iceberg/", "airflow_iceberg-")) for name in names), names
    [entry_points] = [name for name in names if name.endswith(".dist-info/entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "airflow-iceberg = airflow_iceberg.surface.cli:main" in text
    assert "provider_info = airflow_iceberg.get_provider_info:get_provider_info" in text


def test_the_source_distribution_carries_no_workbench_either(dist: Path):
    [sdist] = dist.glob("airflow_iceberg-*.tar.gz")
    names = [name.split("/", 1)[1] for name in tarfile.open(sdist).getnames() if "/" in name]
    assert "spark_jobs/run_procedure.py" in names and "airflow_iceberg/hooks/write_gate.sql" in names
    assert workbench(names) == []


def test_installed_alone_it_lists_the_provider_and_runs_a_compaction_from_its_own_package(
    installed: Path, tmp_path: Path, unique_name: str, table_config, table_list_file: Path
):
    table = TableName("lake", "packaged", unique_name)
    write_small_files(table_config(str(table)), "--days", "1", "--commits", "2", "--files-per-commit", "4")
    before = TableStats.read("lake", table)

    # A deployment of its own: DAG folder, table list and Airflow home, all outside the repository.
    dags = tmp_path / "dags"
    dags.mkdir()
    table_list = tmp_path / "tables.yaml"
    defaults = yaml.safe_load(table_list_file.read_text())["defaults"]  # the suite's: local Spark, built jars
    # A second table asks for the health watch: Airflow 3.3's triggerer shares a sweep among watchers, and older
    # ones refuse the setting, naming the version and what to do.
    watched = {"table": f"lake.packaged.{unique_name}_watched", "health": {"watch": True}, "schedule": "@daily"}
    table_list.write_text(yaml.safe_dump({"defaults": defaults, "tables": [{"table": str(table)}, watched]}))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "PYTHONPATH", "VIRTUAL_ENV"))},
        "AIRFLOW_HOME": str(tmp_path / "airflow-home"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_ICEBERG_CONFIG": str(table_list),
    }
    outside = {"env": env, "cwd": tmp_path}
    run([installed / "airflow-iceberg", "dags", dags], **outside)  # the wheel's DAG files
    assert sorted(path.name for path in dags.iterdir()) == sorted(
        ["iceberg_compaction.py", "iceberg_table_list_check.py", "iceberg_tables.yaml"]
    )
    site = run([installed / "python", "-c", "import airflow_iceberg, sys; print(airflow_iceberg.__file__)"], **outside)
    assert site.strip().startswith(str(installed.parent)), site
    for workbench in ("devkit", "spark_jobs"):
        probe = subprocess.run([installed / "python", "-c", f"import {workbench}"], capture_output=True, **outside)
        assert probe.returncode != 0, f"{workbench} is importable from the installed environment"

    assert "airflow-iceberg" in run([installed / "airflow", "providers", "list"], **outside)
    airflow = run([installed / "python", "-c", "import airflow; print(airflow.__version__)"], **outside).strip()
    listed = "from airflow_iceberg.table_list.loader import load_table_list; print(load_table_list().errors)"
    errors = run([installed / "python", "-c", listed], **outside).strip()
    if airflow.startswith("3.2."):
        assert "health.watch needs Airflow 3.3 or newer" in errors and f"this Airflow is {airflow}" in errors
        assert "Set health.watch: false (or leave it out) and give the table a schedule" in errors
    else:
        assert errors == "[]"

    run([installed / "airflow", "db", "migrate"], **outside)
    log = run([installed / "airflow", "dags", "test", compaction_dag_id(table)], **outside)

    job = installed.parent / "lib" / "python3.11" / "site-packages" / "airflow_iceberg" / "spark_jobs"
    assert f"{job / 'run_procedure.py'} --table {table} --calls" in log
    for source in ("spark_jobs", "airflow_iceberg", "devkit"):  # nothing ran from the repository's sources
        assert f"{ROOT / source}/" not in log
    after = TableStats.read("lake", table)
    assert after.rows == before.rows and after.data_files < before.data_files
