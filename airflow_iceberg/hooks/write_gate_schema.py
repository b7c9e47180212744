"""The write gate's schema: read from ``write_gate.sql`` beside this module, and migrated in an explicit step.

The SQL file is the one definition of the tables. :func:`migrate` applies it to a database: the statements
before the first version every time, then each version newer than the last one recorded, recording each.
Nothing here runs on its own: ``airflow-iceberg migrate`` (and so ``make setup``) calls it, never a hook
instance, a sensor poke or a DAG run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

from airflow_iceberg.core.gate_protocol import GATE_TABLE
from airflow_iceberg.exceptions import WriteGateSchemaError

SCHEMA_FILE = "write_gate.sql"
SCHEMA_TABLE = "iceberg_write_gate_schema"

_VERSION_HEADER = re.compile(r"--\s*version\s+(\d+):\s*(.+)")
_LOCK_SECONDS = 60


@dataclass(frozen=True)
class SchemaVersion:
    """One version of the schema: its number, what it adds, and its statements in order."""

    number: int
    summary: str
    statements: tuple[str, ...]


@dataclass(frozen=True)
class Schema:
    """The parsed SQL file: statements that run on every migration, then the versions in order."""

    always: tuple[str, ...]
    versions: tuple[SchemaVersion, ...]

    @property
    def latest(self) -> int:
        return self.versions[-1].number


def parse_schema(text: str) -> Schema:
    """Split the SQL file into its sections; raise ValueError naming the line that breaks the file's rules."""
    sections: list[tuple[int, str, list[str]]] = [(0, "always", [])]
    pending: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        header = _VERSION_HEADER.fullmatch(stripped)
        if header:
            if pending:
                raise ValueError(f"{SCHEMA_FILE} line {number}: a statement before it lacks its final ';'")
            version = int(header.group(1))
            if version != sections[-1][0] + 1:
                raise ValueError(f"{SCHEMA_FILE} line {number}: version {version} follows {sections[-1][0]}")
            sections.append((version, header.group(2).strip(), []))
        elif stripped and not stripped.startswith("--"):
            pending.append(line)
            if stripped.endswith(";"):
                sections[-1][2].append("\n".join(pending).strip().removesuffix(";"))
                pending = []
    if pending:
        raise ValueError(f"{SCHEMA_FILE}: the last statement lacks its final ';'")
    if len(sections) == 1 or any(not statements for _, _, statements in sections[1:]):
        raise ValueError(f"{SCHEMA_FILE}: needs at least one version, each with a statement")
    always = tuple(sections[0][2])
    return Schema(always, tuple(SchemaVersion(n, s, tuple(st)) for n, s, st in sections[1:]))


@cache
def gate_schema() -> Schema:
    """The schema this provider ships."""
    return parse_schema(files("airflow_iceberg.hooks").joinpath(SCHEMA_FILE).read_text())


def recorded_version(cursor: Any) -> int:
    """The schema version recorded in the cursor's database: 0 when it has none yet.

    Gate tables with no recorded version were made by hand, not by :func:`migrate`: refused, naming them, since
    nothing can tell which version they are.
    """
    cursor.execute(
        "SELECT LOWER(table_name) AS name FROM information_schema.tables"
        " WHERE table_schema = DATABASE() AND LOWER(table_name) IN (%s, %s)",
        (SCHEMA_TABLE, GATE_TABLE),
    )
    present = {row["name"] for row in cursor.fetchall()}
    if SCHEMA_TABLE in present:
        cursor.execute(f"SELECT MAX(version) AS version FROM {SCHEMA_TABLE}")
        version = cursor.fetchone()["version"]
        if version is not None:
            return int(version)
    if GATE_TABLE in present:
        raise WriteGateSchemaError(
            f"the database holds {GATE_TABLE} but no schema version in {SCHEMA_TABLE}: it was not made by "
            "`airflow-iceberg migrate`; drop its gate tables (no gate may be closed) and run the command again"
        )
    return 0


def migrate(connection: Any, schema: Schema | None = None) -> tuple[int, int]:
    """Bring the connection's database to the newest schema version; return the versions before and after.

    Safe to run any number of times and from several places at once: a named lock serialises migrations of
    the same database, and each version is recorded as soon as its statements have run.
    """
    schema = schema or gate_schema()
    lock = f"{SCHEMA_TABLE}.migrate"
    with connection.cursor() as cursor:
        cursor.execute("SELECT GET_LOCK(CONCAT(DATABASE(), '.', %s), %s) AS acquired", (lock, _LOCK_SECONDS))
        if cursor.fetchone()["acquired"] != 1:
            raise WriteGateSchemaError(f"another migration of this database held its lock for {_LOCK_SECONDS} s")
        try:
            for statement in schema.always:
                cursor.execute(statement)
            before = current = recorded_version(cursor)
            if current > schema.latest:
                raise WriteGateSchemaError(
                    f"the database is at schema version {current}, newer than this provider's {schema.latest}"
                )
            for version in schema.versions[current:]:
                for statement in version.statements:
                    cursor.execute(statement)
                cursor.execute(
                    f"INSERT INTO {SCHEMA_TABLE} (version, summary) VALUES (%s, %s)", (version.number, version.summary)
                )
                connection.commit()
                current = version.number
            connection.commit()
        finally:
            cursor.execute("SELECT RELEASE_LOCK(CONCAT(DATABASE(), '.', %s))", (lock,))
    return before, current
