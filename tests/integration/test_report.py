"""``airflow-iceberg report``, the console script, after real runs: its figures are the run records' and the
table's health, and ``--html`` writes a page with PNG charts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_iceberg.core.gate_state import GateOwner
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.planning.health import read_health
from airflow_iceberg.surface.report import chart_names, size

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def table(unique_name: str) -> str:
    """A real table of six small data files, written by six commits."""
    catalog = IcebergHook("lake").catalog
    catalog.create_namespace_if_not_exists("report")
    iceberg_table = catalog.create_table(f"report.{unique_name}", schema=pa.schema([("id", pa.int64())]))
    for start in range(0, 60, 10):
        iceberg_table.append(pa.table({"id": pa.array(range(start, start + 10), pa.int64())}))
    return f"lake.report.{unique_name}"


def report(*args: str) -> subprocess.CompletedProcess:
    # The console script of the environment that runs the tests, which need not be on PATH.
    command = [str(Path(sys.executable).with_name("airflow-iceberg")), "report", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def test_the_report_says_what_the_run_records_and_the_table_say(table, compaction_dag, tmp_path):
    dag = compaction_dag(table)
    compacted = dag.test()
    skipped = dag.test()  # one file left: healthy
    assert (compacted.state, skipped.state) == ("success", "success")
    hook = WriteGateHook()
    first, second = hook.records.run_records(table)
    assert (first["outcome"], second["outcome"]) == ("success", "skipped")
    owner = GateOwner("someone_elses_dag", "manual__now")
    hook.close_gate(table, owner, lease_seconds=300)
    health = read_health(IcebergHook("lake").load_table(table.split(".", 1)[1]), table, small_file_ratio=0.75)

    result = report("--table", table, "--html", str(tmp_path / "report"))

    assert result.returncode == 0, result.stderr
    lines = {line[:19].strip(): line[19:] for line in result.stdout.splitlines() if line.startswith("  ")}
    assert result.stdout.splitlines()[0] == table
    assert lines["gate"].startswith("closed by dag someone_elses_dag run manual__now, lease ")
    assert lines["gate"].endswith("writers acknowledged 0 of 0")
    assert 0 < int(lines["gate"].split("lease ")[1].split(" s left")[0]) <= 300
    small = sum(p.small_files for p in health.partitions)
    assert (health.data_files, health.delete_files) == (1, 0)  # compacted into one file
    assert lines["health"] == f"1 data file ({small} small), 0 delete files, average {size(health.data_bytes)}"
    assert lines["last compaction"].startswith(first["started_at"].strftime("%Y-%m-%d %H:%M:%S UTC"))
    assert (
        f"compact  success  data files {first['data_files_before']} -> {first['data_files_after']}"
        in (lines["last compaction"])
    )
    assert (first["data_files_before"], first["data_files_after"]) == (6, health.data_files)
    assert lines["last compaction"].endswith(f"paused {first['gate_closed_seconds']:.1f} s")
    assert lines["runs"] == "2: 1 success, 1 skipped, 0 failed, 0 dry_run"

    page = (tmp_path / "report" / "index.html").read_text()
    assert table in page and "closed by dag someone_elses_dag" in page
    for name in chart_names(table).values():
        png = (tmp_path / "report" / name).read_bytes()
        assert png.startswith(PNG_MAGIC) and len(png) > 5_000, name
        assert f'src="{name}"' in page
    assert result.stdout.splitlines()[-1] == f"wrote {tmp_path / 'report' / 'index.html'}"
    hook.force_open(table, "test done")


def test_a_table_not_in_the_list_is_named_and_nothing_is_written(table_list_file, tmp_path):
    result = report("--table", "lake.nowhere.none", "--html", str(tmp_path / "report"))

    assert result.returncode == 2
    assert "not in the table list: lake.nowhere.none" in result.stderr
    assert not (tmp_path / "report").exists()
