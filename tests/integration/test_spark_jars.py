"""Iceberg reaches the rewrite job both ways the shipped table list shows: Maven packages, or jars on disk.

Each test runs a table's compaction DAG with one of the list's blocks (``x-spark-packages``, ``x-spark-jars``) as
the table's whole ``spark`` setting, and gives spark-submit an Ivy home of its own that starts empty
(``spark.jars.ivy``): what Spark resolves from Maven Central lands there, and nothing else brings Iceberg in.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from devkit.tables import TableStats
from devkit.writers import write_small_files
from tests.integration.conftest import shipped_spark_block

WRITER_ARGS = ("--days", "1", "--commits", "3", "--files-per-commit", "4")


@pytest.fixture
def small_files_table(unique_name, table_config) -> str:
    table = f"lake.jars.{unique_name}"
    write_small_files(table_config(table), *WRITER_ARGS)
    return table


def resolved_jars(ivy: Path) -> list[str]:
    """The jars Spark resolved into the Ivy home ``ivy`` (it copies each to ``jars/`` as group_artifact-version)."""
    return sorted(jar.name for jar in (ivy / "jars").glob("*.jar"))


def run_with(compaction_dag, table: str, block: str, ivy: Path):
    """One compaction run of ``table`` whose Spark loads Iceberg only as ``block`` of the shipped list says."""
    spark = {"jars": [], "packages": [], **shipped_spark_block(block), "conf": {"spark.jars.ivy": str(ivy)}}
    return compaction_dag(table, spark=spark).test()


def test_a_rewrite_loads_iceberg_as_maven_packages_resolved_from_maven_central(
    small_files_table, compaction_dag, tmp_path
):
    before = TableStats.read("lake", small_files_table)
    packages = shipped_spark_block("x-spark-packages")["packages"]
    assert any(p.startswith("org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:") for p in packages)

    run = run_with(compaction_dag, small_files_table, "x-spark-packages", tmp_path / "ivy")

    assert run.state == "success"
    after = TableStats.read("lake", small_files_table)
    assert after.rows == before.rows
    assert after.data_files < before.data_files
    # Each package, as Spark's Ivy names the jar it downloaded: group_artifact-version.jar.
    expected = {"{}_{}-{}.jar".format(*coordinate.split(":")) for coordinate in packages}
    assert expected <= set(resolved_jars(tmp_path / "ivy"))


def test_a_rewrite_loads_iceberg_from_jars_on_disk_and_resolves_nothing(small_files_table, compaction_dag, tmp_path):
    before = TableStats.read("lake", small_files_table)

    run = run_with(compaction_dag, small_files_table, "x-spark-jars", tmp_path / "ivy")

    assert run.state == "success"
    after = TableStats.read("lake", small_files_table)
    assert after.rows == before.rows
    assert after.data_files < before.data_files
    assert resolved_jars(tmp_path / "ivy") == []
