"""The stacks' matrix as scripts/stacks.py reads it: what each stack derives, and what set-up asks of it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from scripts import stacks

SCRIPT = Path(stacks.__file__)


def run(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *arguments], capture_output=True, text=True, check=False)


def test_the_matrix_names_the_three_stacks_and_a_default_among_them():
    matrix = stacks.load()
    assert list(matrix.stacks) == ["original", "lts", "newest"]
    assert matrix.default in matrix.stacks


def test_the_original_stack_is_the_designs_flink_1_18_spark_3_4_and_iceberg_1_5():
    original = stacks.load()["original"]
    assert (original.flink_line, original.spark_line, original.iceberg_spark) == ("1.18", "3.4", "1.5.2")
    assert original.iceberg_spark_runtime == "org.apache.iceberg:iceberg-spark-runtime-3.4_2.12:1.5.2"
    assert original.iceberg_flink_runtime == "org.apache.iceberg:iceberg-flink-runtime-1.18:1.5.2"
    assert original.flink_artifact == "airflow-iceberg-flink-1.18"
    assert original.spark_jar_files == ["iceberg-spark-runtime-3.4_2.12-1.5.2.jar", "mariadb-java-client-3.5.7.jar"]


def test_set_up_gets_pyspark_and_each_maven_builds_properties_from_the_command_line():
    assert run("pyspark", "original").stdout.strip() == "pyspark==3.4.3"
    assert run("maven-spark", "original").stdout.split() == [
        "-Dspark.line=3.4",
        "-Dscala.binary=2.12",
        "-Diceberg.version=1.5.2",
        "-Dmariadb.version=3.5.7",
    ]
    assert run("maven-flink", "original").stdout.split() == ["-Pflink-1.18"]
    assert run("default").stdout.strip() == stacks.load().default


def test_an_unknown_stack_is_refused_naming_the_known_ones():
    result = run("pyspark", "ancient")
    assert result.returncode == 2
    assert "no stack 'ancient' in stacks.toml; known: original, lts, newest" in result.stderr


def test_a_stack_with_a_missing_or_unknown_key_is_refused_naming_it(tmp_path):
    text = stacks.MATRIX_FILE.read_text().replace("jdk = 17\n", 'jdk = 17\nspark = "3.4"\n', 1)
    (tmp_path / "stacks.toml").write_text(text)
    with pytest.raises(ValueError, match="stack 'original' has keys .*'spark'.*; a stack has exactly"):
        stacks.load(tmp_path / "stacks.toml")


def test_flink_cdcs_mysql_connector_and_its_driver_come_as_a_pair_and_reach_the_flink_build_only_when_named(
    tmp_path,
):
    matrix = stacks.load()
    profiles = stacks.flink_profiles_xml(matrix)
    lts = profiles[profiles.index("<id>flink-1.20</id>") : profiles.index("<id>flink-2.1</id>")]
    newest = profiles[profiles.index("<id>flink-2.1</id>") :]
    assert f"<flink.mysql.cdc.version>{matrix['lts'].flink_mysql_cdc}</flink.mysql.cdc.version>" in lts
    assert f"<mysql.jdbc.version>{matrix['lts'].mysql_jdbc}</mysql.jdbc.version>" in lts
    assert "<sql.jars.skip>false</sql.jars.skip>" in lts
    assert matrix["newest"].flink_mysql_cdc is None  # none served for Flink 2.1
    assert "mysql" not in newest
    assert "<sql.jars.skip>true</sql.jars.skip>" in newest
    text = stacks.MATRIX_FILE.read_text().replace('mysql-jdbc = "8.4.0"\n', "", 1)
    (tmp_path / "stacks.toml").write_text(text)
    with pytest.raises(ValueError, match=r"either all or none of \['flink-mysql-cdc', 'mysql-jdbc'\]"):
        stacks.load(tmp_path / "stacks.toml")


def test_the_flink_poms_profiles_are_the_matrixs_one_per_line_the_default_stacks_active_without_a_flag():
    matrix = stacks.load()
    assert stacks.sync_flink_pom(matrix), run("flink-profiles").stderr
    pom = stacks.POM_FLINK.read_text()
    ids = [line.strip() for line in pom.splitlines() if line.strip().startswith("<id>flink-") and "sources" not in line]
    assert ids == [f"<id>flink-{stack.flink_line}</id>" for stack in matrix.stacks.values()]
    default = f"<id>{stacks.flink_profile(matrix[matrix.default])}</id>"
    active = pom[pom.index(default) : pom.index("</profile>", pom.index(default))]
    assert pom.count("<activeByDefault>true</activeByDefault>") == 1 and "<activeByDefault>true" in active
    assert f"<flink.version>{matrix[matrix.default].flink}</flink.version>" in active
    assert "${" not in pom[pom.index("<properties>") : pom.index("</properties>")].replace(
        "${project.basedir}", ""
    )  # no version outside the profiles


def test_a_matrix_change_is_caught_in_the_pom_and_written_there_by_flink_profiles_write(tmp_path):
    pom = tmp_path / "pom.xml"
    pom.write_text(stacks.POM_FLINK.read_text())
    text = stacks.MATRIX_FILE.read_text().replace('flink = "1.20.3"', 'flink = "1.20.9"', 1)
    (tmp_path / "stacks.toml").write_text(text)
    changed = stacks.load(tmp_path / "stacks.toml")
    assert not stacks.sync_flink_pom(changed, pom)
    assert "1.20.9" not in pom.read_text()  # a check writes nothing
    assert not stacks.sync_flink_pom(changed, pom, write=True)
    assert "<flink.version>1.20.9</flink.version>" in pom.read_text() and stacks.sync_flink_pom(changed, pom)
    outside = stacks.POM_FLINK.read_text().split("<!-- BEGIN profiles")[0]
    assert pom.read_text().startswith(outside)  # only the generated block changed


def test_two_stacks_on_one_flink_line_are_refused_naming_both(tmp_path):
    text = stacks.MATRIX_FILE.read_text().replace('flink = "1.18.1"', 'flink = "1.20.1"', 1)
    (tmp_path / "stacks.toml").write_text(text)
    with pytest.raises(ValueError, match="stacks 'original' and 'lts' share Flink 1.20"):
        stacks.flink_profiles_xml(stacks.load(tmp_path / "stacks.toml"))


def test_the_environments_stack_is_the_default_unless_named(monkeypatch):
    monkeypatch.delenv(stacks.STACK_ENV, raising=False)
    assert stacks.current().name == stacks.load().default
    monkeypatch.setenv(stacks.STACK_ENV, "newest")
    assert stacks.current().spark_line == "4.1"


def test_the_oldest_airflow_tested_is_the_one_pyproject_allows_first():
    pyproject = tomllib.loads((Path(stacks.__file__).parents[1] / "pyproject.toml").read_text())
    [airflow] = [d for d in pyproject["project"]["dependencies"] if d.startswith("apache-airflow>")]
    oldest, newest = stacks.load().airflow[0], stacks.load().airflow[-1]
    assert airflow == f"apache-airflow>={'.'.join(oldest.split('.')[:2])}"  # and no cap below the next major
    assert (oldest.split(".")[0], newest.split(".")[:2]) == ("3", ["3", "3"])


def test_each_airflow_tested_names_its_release_day_as_a_date(tmp_path):
    matrix = stacks.load()
    days = list(matrix.airflow_released.values())
    assert (matrix.airflow, days) == (list(matrix.airflow_released), sorted(days))  # oldest first
    text = stacks.MATRIX_FILE.read_text().replace('"3.2.2" = 2026-05-29', '"3.2.2" = "2026-05-29"', 1)
    (tmp_path / "stacks.toml").write_text(text)
    with pytest.raises(ValueError, match=r"\[airflow\] tested '3.2.2' = '2026-05-29'; it is the release day"):
        stacks.load(tmp_path / "stacks.toml")
