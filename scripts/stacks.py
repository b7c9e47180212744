"""The stacks airflow-iceberg is tested on, read from their one declaration, ``requirements/stacks.toml``.

Standard library only: ``scripts/setup.sh`` runs it with the machine's Python before any environment exists, and
the tests, ``make test-stacks`` and ``make docs`` import it. Everything a stack's set-up needs is derived here from
the versions the file gives: Maven coordinates, the properties each Maven build takes, PySpark's requirement.

    python3 scripts/stacks.py default            # the default stack's name
    python3 scripts/stacks.py names              # every stack's name, in the file's order
    python3 scripts/stacks.py pyspark NAME       # PySpark's requirement, for pip
    python3 scripts/stacks.py flink-line NAME    # the stack's Flink line, e.g. 1.20
    python3 scripts/stacks.py maven-spark NAME   # -D properties of requirements/pom.xml (the Spark jobs' jars)
    python3 scripts/stacks.py maven-flink NAME   # the Maven profile of flink/pom.xml for the stack's Flink line
    python3 scripts/stacks.py flink-profiles [--write]
                                                 # check (or rewrite) flink/pom.xml's profiles against the matrix

flink/pom.xml carries one profile per Flink line, generated from this matrix (``flink-profiles --write``), so that
``mvn -f flink/pom.xml verify`` builds the default stack's line with no flag and ``-Pflink-<line>`` any other; a
unit test and set-up refuse a pom whose profiles differ from what the matrix gives.
"""

from __future__ import annotations

import os
import sys
from dataclasses import MISSING, dataclass, fields
from datetime import date
from pathlib import Path

import tomllib

MATRIX_FILE = Path(__file__).resolve().parents[1] / "requirements" / "stacks.toml"
#: Names the stack of the environment: scripts/env.sh sets it (the matrix's default unless given).
STACK_ENV = "AIRFLOW_ICEBERG_STACK"


def _line(version: str) -> str:
    """``1.20`` of ``1.20.3``: the line a release belongs to."""
    return ".".join(version.split(".")[:2])


@dataclass(frozen=True)
class Stack:
    """One named stack: the versions of Flink, Spark and Iceberg a user runs together, and what they bring."""

    name: str
    summary: str
    flink: str
    flink_kafka: str
    iceberg_flink: str
    pyspark: str
    scala: str
    iceberg_spark: str
    mariadb_jdbc: str
    jdk: int
    #: Flink CDC's MySQL connector for the Flink line (``flink-sql-connector-mysql-cdc``) and MySQL's JDBC driver
    #: it reads through; None where no release for the line is served.
    flink_mysql_cdc: str | None = None
    mysql_jdbc: str | None = None

    @property
    def flink_line(self) -> str:
        return _line(self.flink)

    @property
    def spark_line(self) -> str:
        return _line(self.pyspark)

    @property
    def flink_artifact(self) -> str:
        """This project's gated Flink source for the stack's Flink line, as Iceberg names its runtimes."""
        return f"airflow-iceberg-flink-{self.flink_line}"

    @property
    def iceberg_spark_runtime(self) -> str:
        return f"org.apache.iceberg:iceberg-spark-runtime-{self.spark_line}_{self.scala}:{self.iceberg_spark}"

    @property
    def iceberg_flink_runtime(self) -> str:
        return f"org.apache.iceberg:iceberg-flink-runtime-{self.flink_line}:{self.iceberg_flink}"

    @property
    def jdbc_driver(self) -> str:
        return f"org.mariadb.jdbc:mariadb-java-client:{self.mariadb_jdbc}"

    @property
    def spark_packages(self) -> list[str]:
        """What a table list's ``spark.packages`` gives the rewrite jobs on this stack."""
        return [self.iceberg_spark_runtime, self.jdbc_driver]

    @property
    def spark_jar_files(self) -> list[str]:
        """The file names Maven copies those packages to (``artifact-version.jar``)."""
        return [f"{coordinate.split(':')[1]}-{coordinate.split(':')[2]}.jar" for coordinate in self.spark_packages]

    def maven_spark_properties(self) -> dict[str, str]:
        return {
            "spark.line": self.spark_line,
            "scala.binary": self.scala,
            "iceberg.version": self.iceberg_spark,
            "mariadb.version": self.mariadb_jdbc,
        }

    def maven_flink_properties(self) -> dict[str, str]:
        properties = {
            "flink.version": self.flink,
            "flink.line": self.flink_line,
            "flink.kafka.version": self.flink_kafka,
            "iceberg.version": self.iceberg_flink,
            "mariadb.version": self.mariadb_jdbc,
        }
        if self.flink_mysql_cdc:  # the SQL jars a CDC job adds: build/stacks/<stack>/flink/sql-jars
            properties |= {"flink.mysql.cdc.version": self.flink_mysql_cdc, "mysql.jdbc.version": str(self.mysql_jdbc)}
        return properties


@dataclass(frozen=True)
class Matrix:
    default: str
    stacks: dict[str, Stack]
    #: The Airflow releases the provider is installed into and tested on, oldest first, each with the day it was
    #: released: an Airflow is installed with the libraries served on that day.
    airflow_released: dict[str, date]

    @property
    def airflow(self) -> list[str]:
        """The Airflow releases tested, oldest first."""
        return list(self.airflow_released)

    def __getitem__(self, name: str) -> Stack:
        try:
            return self.stacks[name]
        except KeyError:
            raise KeyError(f"no stack {name!r} in {MATRIX_FILE.name}; known: {', '.join(self.stacks)}") from None


def load(path: Path = MATRIX_FILE) -> Matrix:
    """The matrix, each stack checked for the keys a stack has: every required one, and optional ones in pairs."""
    document = tomllib.loads(path.read_text())
    keys = {field.name.replace("_", "-") for field in fields(Stack) if field.default is MISSING} - {"name"}
    optional = {field.name.replace("_", "-") for field in fields(Stack) if field.default is not MISSING}
    stacks = {}
    for name, entry in document["stacks"].items():
        if set(entry) - optional != keys or set(entry) & optional not in (set(), optional):
            raise ValueError(
                f"{path.name}: stack {name!r} has keys {sorted(entry)}; a stack has exactly {sorted(keys)}, and "
                f"either all or none of {sorted(optional)}"
            )
        stacks[name] = Stack(name=name, **{key.replace("-", "_"): value for key, value in entry.items()})
    tested = dict(document["airflow"]["tested"])
    for version, day in tested.items():
        if type(day) is not date:  # a TOML date, not a string or a date-time
            raise ValueError(f"{path.name}: [airflow] tested {version!r} = {day!r}; it is the release day, a TOML date")
    matrix = Matrix(default=document["default"], stacks=stacks, airflow_released=tested)
    matrix[matrix.default]  # the default names a stack
    return matrix


def current() -> Stack:
    """The stack of this environment: ``$AIRFLOW_ICEBERG_STACK``, else the matrix's default."""
    matrix = load()
    return matrix[os.environ.get(STACK_ENV) or matrix.default]


POM_FLINK = MATRIX_FILE.parents[1] / "flink" / "pom.xml"
_PROFILES_BEGIN = "<!-- BEGIN profiles of the Flink lines, written by scripts/stacks.py flink-profiles -->"
_PROFILES_END = "<!-- END profiles of the Flink lines -->"


def flink_profile(stack: Stack) -> str:
    """The Maven profile of flink/pom.xml that builds ``stack``'s Flink line: ``flink-1.20``."""
    return f"flink-{stack.flink_line}"


def _flink_seams(line: str) -> dict[str, str]:
    """Which of flink/src's two seams a Flink line compiles: src/main/flink-1 or flink-2 (Flink 2's Source declares
    watermarks), src/test/flink-1.18 (Iceberg 1.5's Flink sink, FlinkSink only) or flink-1.20-2.x."""
    return {
        "flink.main.seam": f"flink-{line.split('.')[0]}",
        "flink.test.seam": "flink-1.18" if line == "1.18" else "flink-1.20-2.x",
    }


def flink_profiles_xml(matrix: Matrix) -> str:
    """flink/pom.xml's profiles, one per Flink line of the matrix, the default stack's active by default."""
    lines: dict[str, Stack] = {}
    for stack in matrix.stacks.values():
        if stack.flink_line in lines:
            raise ValueError(
                f"stacks {lines[stack.flink_line].name!r} and {stack.name!r} share Flink {stack.flink_line}: "
                "flink/pom.xml has one profile per Flink line"
            )
        lines[stack.flink_line] = stack
    out = [f"        {_PROFILES_BEGIN}"]
    for stack in lines.values():
        properties = {
            **stack.maven_flink_properties(),
            **_flink_seams(stack.flink_line),
            "sql.jars.skip": "false" if stack.flink_mysql_cdc else "true",
        }
        out += ["        <profile>", f"            <id>{flink_profile(stack)}</id>"]
        summary = stack.summary.replace("--", "-")  # an XML comment holds no --
        out.append(f"            <!-- stack {stack.name}: {summary} -->")
        if stack.name == matrix.default:
            out.append("            <activation><activeByDefault>true</activeByDefault></activation>")
        out.append("            <properties>")
        out += [f"                <{key}>{value}</{key}>" for key, value in properties.items()]
        out += ["            </properties>", "        </profile>"]
    out.append(f"        {_PROFILES_END}")
    return "\n".join(out)


def sync_flink_pom(matrix: Matrix, path: Path = POM_FLINK, *, write: bool = False) -> bool:
    """Whether ``path``'s generated profiles are the matrix's; with ``write``, make them so."""
    text = path.read_text()
    begin = text.index(f"        {_PROFILES_BEGIN}")
    end = text.index(_PROFILES_END, begin) + len(_PROFILES_END)
    wanted = flink_profiles_xml(matrix)
    if text[begin:end] == wanted:
        return True
    if write:
        path.write_text(text[:begin] + wanted + text[end:])
    return False


def _flink_profiles(*flags: str) -> str:
    matrix = load()
    if flags not in ((), ("--write",)):
        raise TypeError(f"flink-profiles takes --write or nothing, not {' '.join(flags)!r}")
    if sync_flink_pom(matrix, write=bool(flags)):
        lines = ", ".join(stack.flink_line for stack in matrix.stacks.values())
        return f"{POM_FLINK.name}: the profiles of Flink {lines} are the matrix's"
    if flags:
        return f"{POM_FLINK.name}: profiles rewritten from {MATRIX_FILE.name}"
    raise ValueError(
        f"flink/pom.xml's profiles differ from {MATRIX_FILE.name}: "
        "run `python3 scripts/stacks.py flink-profiles --write`"
    )


def _maven_arguments(properties: dict[str, str]) -> str:
    return " ".join(f"-D{key}={value}" for key, value in properties.items())


def main(argv: list[str]) -> int:
    matrix = load()
    commands = {
        "default": lambda: matrix.default,
        "names": lambda: " ".join(matrix.stacks),
        "pyspark": lambda name: f"pyspark=={matrix[name].pyspark}",
        "flink-line": lambda name: matrix[name].flink_line,
        "maven-spark": lambda name: _maven_arguments(matrix[name].maven_spark_properties()),
        "maven-flink": lambda name: f"-P{flink_profile(matrix[name])}",
        "flink-profiles": _flink_profiles,
    }
    if not argv or argv[0] not in commands:
        print(f"usage: stacks.py {{{'|'.join(commands)}}} [NAME]", file=sys.stderr)
        return 2
    try:
        print(commands[argv[0]](*argv[1:]))
    except (KeyError, TypeError, ValueError) as error:
        print(f"stacks.py: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
