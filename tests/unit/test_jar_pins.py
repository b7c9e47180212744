"""One pin per jar: requirements/pom.xml's coordinates are what the table list, flink/pom.xml and the docs say."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
POM = "{http://maven.apache.org/POM/4.0.0}"


def pom_properties(path: Path) -> dict[str, str]:
    properties = ET.parse(path).getroot().find(f"{POM}properties")
    return {child.tag.removeprefix(POM): (child.text or "").strip() for child in properties}


def spark_jar_coordinates() -> list[str]:
    """group:artifact:version of each jar requirements/pom.xml copies into build/jars, properties resolved."""
    path = ROOT / "requirements" / "pom.xml"
    properties = pom_properties(path)
    resolved = []
    for item in ET.parse(path).getroot().iter(f"{POM}artifactItem"):
        group, artifact, version = (item.find(POM + tag).text.strip() for tag in ("groupId", "artifactId", "version"))
        version = re.sub(r"\$\{([^}]+)\}", lambda m: properties[m.group(1)], version)
        resolved.append(f"{group}:{artifact}:{version}")
    return resolved


def shipped_table_list() -> dict:
    return yaml.safe_load((ROOT / "dags" / "iceberg_tables.yaml").read_text())


def test_the_pom_copies_iceberg_for_spark_3_5_and_the_catalogs_jdbc_driver():
    artifacts = [coordinate.rsplit(":", 1)[0] for coordinate in spark_jar_coordinates()]
    assert artifacts == ["org.apache.iceberg:iceberg-spark-runtime-3.5_2.12", "org.mariadb.jdbc:mariadb-java-client"]


def test_the_shipped_packages_are_the_pinned_coordinates():
    assert shipped_table_list()["x-spark-packages"]["packages"] == spark_jar_coordinates()


def test_the_shipped_jars_are_the_files_the_pom_copies_into_build_jars():
    expected = []
    for coordinate in spark_jar_coordinates():
        _, artifact, version = coordinate.split(":")
        expected.append(f"${{AIRFLOW_ICEBERG_JARS}}/{artifact}-{version}.jar")
    assert shipped_table_list()["x-spark-jars"]["jars"] == expected


def test_the_embedded_default_loads_iceberg_from_the_jars():
    assert shipped_table_list()["defaults"]["spark"]["jars"] == shipped_table_list()["x-spark-jars"]["jars"]


def test_flink_and_spark_use_one_jdbc_driver_version():
    spark = pom_properties(ROOT / "requirements" / "pom.xml")
    flink = pom_properties(ROOT / "flink" / "pom.xml")
    assert flink["mariadb.version"] == spark["mariadb.version"]


def test_the_docs_name_the_pinned_iceberg_runtime():
    pinned = pom_properties(ROOT / "requirements" / "pom.xml")["iceberg.version"]
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        named = set(re.findall(r"iceberg-spark-runtime-3\.5_2\.12[:-](\d+\.\d+\.\d+)", path.read_text()))
        assert named <= {pinned}, f"{path.name} names Iceberg {sorted(named)}, the pin is {pinned}"
