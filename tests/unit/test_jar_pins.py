"""One pin per version: the stacks' matrix (requirements/stacks.toml) is what the Maven builds, the shipped table
list and the docs use, and no build file pins a version of its own."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import yaml

from scripts import stacks

ROOT = Path(__file__).resolve().parents[2]
POM = "{http://maven.apache.org/POM/4.0.0}"
MATRIX = stacks.load()
DEFAULT = MATRIX[MATRIX.default]


def pom_properties(path: Path) -> dict[str, str]:
    properties = ET.parse(path).getroot().find(f"{POM}properties")
    return {child.tag.removeprefix(POM): (child.text or "").strip() for child in properties}


def shipped_table_list() -> dict:
    return yaml.safe_load((ROOT / "dags" / "iceberg_tables.yaml").read_text())


def test_the_shipped_packages_are_the_default_stacks():
    assert shipped_table_list()["x-spark-packages"]["packages"] == DEFAULT.spark_packages


def test_the_shipped_jars_are_the_files_set_up_copies_for_the_default_stack():
    expected = [f"${{AIRFLOW_ICEBERG_JARS}}/{name}" for name in DEFAULT.spark_jar_files]
    assert shipped_table_list()["x-spark-jars"]["jars"] == expected
    assert shipped_table_list()["defaults"]["spark"]["jars"] == expected  # the embedded default loads them


def test_the_maven_builds_take_every_stack_version_from_the_matrix_and_pin_none():
    spark_keys = set(DEFAULT.maven_spark_properties())
    flink_keys = set(DEFAULT.maven_flink_properties())
    assert not spark_keys & set(pom_properties(ROOT / "requirements" / "pom.xml"))
    assert not flink_keys & set(pom_properties(ROOT / "flink" / "pom.xml"))
    for path, keys in ((ROOT / "requirements" / "pom.xml", spark_keys), (ROOT / "flink" / "pom.xml", flink_keys)):
        used = set(re.findall(r"\$\{([a-z.]+)\}", path.read_text()))
        assert keys <= used, f"{path.name} does not use {sorted(keys - used)}"


def test_each_stacks_scala_is_its_pyspark_packages():
    for stack in MATRIX.stacks.values():  # the full PySpark ships Scala 2.12 jars up to 3.5, 2.13 from 4.0
        assert stack.scala == ("2.13" if stack.spark_line.startswith("4.") else "2.12"), stack.name


def test_the_docs_name_only_runtimes_of_the_matrix():
    spark = {(s.spark_line, s.scala, s.iceberg_spark) for s in MATRIX.stacks.values()}
    flink = {(s.flink_line, s.iceberg_flink) for s in MATRIX.stacks.values()}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        named = set(re.findall(r"iceberg-spark-runtime-(\d+\.\d+)_(\d+\.\d+)[:-](\d+\.\d+\.\d+)", text))
        assert named <= spark, f"{path.name} names {sorted(named - spark)}, which no stack has"
        named_flink = set(re.findall(r"iceberg-flink-runtime-(\d+\.\d+)[:-](\d+\.\d+\.\d+)", text))
        assert named_flink <= flink, f"{path.name} names {sorted(named_flink - flink)}, which no stack has"
