"""``make docs``: put the gate's schema, the writer's statements and the table list's settings into the docs from
their one source.

Blocks between ``<!-- generated: NAME -->`` and ``<!-- end: NAME -->`` are rewritten from the source NAME
stands for; everything else in the files is left as written. Each source says how it is shown: the SQL ones in a
``sql`` fence, the settings reference (rendered from the pydantic models of ``airflow_iceberg/table_list/schema.py``) as
markdown tables. ``tests/unit/test_docs.py`` fails while a block differs from its source.
"""

from __future__ import annotations

import json
import re
import sys
import types
from dataclasses import dataclass
from datetime import date
from importlib.resources import files
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, PlainSerializer
from pydantic.fields import FieldInfo

from airflow_iceberg.core import conflicts, gate_protocol, gate_store
from airflow_iceberg.fleet.dag_bundle import FLEET_SETTINGS
from airflow_iceberg.hooks.write_gate_schema import SCHEMA_FILE
from airflow_iceberg.table_list import schema
from scripts import stacks

DOCS = Path(__file__).resolve().parents[1] / "docs"
_BLOCK = re.compile(r"(<!-- generated: (\S+) -->\n)(.*?)(<!-- end: \2 -->)", re.DOTALL)

#: The name of the block that lists every setting of the table list.
SETTINGS_BLOCK = "table-list-settings"
#: The names of the blocks that show the stacks' matrix (requirements/stacks.toml): its versions, what to install.
STACKS_BLOCK = "stacks"
INSTALL_BLOCK = "stacks-install"
#: The Flink SQL scripts of the tests that the docs show, each in a block named after its file.
FLINK_SQL_SCRIPTS = DOCS.parent / "tests" / "integration" / "flink_sql"
#: The name of the block that shows the fleet setting (``FLEET_SETTINGS``) as ``airflow.cfg`` sections.
FLEET_SETTING_BLOCK = "fleet-setting"
#: The name of the block that shows the conflict rule (``core/conflicts.py``) as a table, cell by cell.
CONFLICTS_BLOCK = "conflict-table"
#: The table list's models, in the order the reference shows them, each with where it sits in an entry.
SETTINGS_MODELS: list[tuple[str, type[BaseModel]]] = [
    ("an entry of `tables` (and `defaults`)", schema.TableConfig),
    ("`health`", schema.HealthConfig),
    ("`full_rewrite`", schema.FullRewriteConfig),
    ("`full_rewrite.partition`", schema.PartitionOfDay),
    ("`maintenance`", schema.MaintenanceConfig),
    ("`spark`", schema.SparkSettings),
]


@dataclass(frozen=True)
class Source:
    """The text a generated block shows, and how: in a fence of ``fence``'s language, or as markdown (None)."""

    text: str
    fence: str | None = "sql"

    def block(self) -> str:
        if self.fence is None:
            return f"\n{self.text}\n"
        return f"```{self.fence}\n{self.text}```\n"


def sources() -> dict[str, Source]:
    """Each block name and what its block shows."""
    schema = files("airflow_iceberg.hooks").joinpath(SCHEMA_FILE).read_text()
    statements = {
        name: Source(value + "\n")
        for module in (gate_protocol, gate_store)
        for name, value in vars(module).items()
        if name.endswith("_SQL") and not name.startswith("_")
    }
    return {
        SCHEMA_FILE: Source(schema),
        **statements,
        SETTINGS_BLOCK: Source(settings_reference(), fence=None),
        STACKS_BLOCK: Source(stacks_table(), fence=None),
        INSTALL_BLOCK: Source(stacks_install(), fence=None),
        FLEET_SETTING_BLOCK: Source(fleet_setting(), fence="ini"),
        CONFLICTS_BLOCK: Source(conflict_table(), fence=None),
        **{script.name: Source(script.read_text()) for script in sorted(FLINK_SQL_SCRIPTS.glob("*.sql"))},
    }


def fleet_setting() -> str:
    """``FLEET_SETTINGS`` (Airflow's ``AIRFLOW__SECTION__KEY`` variables) as the ``airflow.cfg`` sections they set."""
    sections: dict[str, list[str]] = {}
    for variable, value in FLEET_SETTINGS.items():
        section, key = variable.removeprefix("AIRFLOW__").lower().split("__")
        sections.setdefault(section, []).append(f"{key} = {value}")
    return "\n".join(f"[{section}]\n" + "\n".join(lines) + "\n" for section, lines in sections.items())


# --- The conflict rule ------------------------------------------------------------------------------------------

#: The writers the table shows, one per row: what each declares, and the Iceberg it commits with.
CONFLICT_WRITERS: list[tuple[str, conflicts.WriterCommits]] = [
    ("declares nothing (a writer of the previous protocol)", conflicts.WriterCommits("w", None)),
    ("appends", conflicts.WriterCommits("w", conflicts.CommitKind.APPENDS, None, "spark.app.id=a")),
    (
        "upserts, Flink's sink on Iceberg 1.5",
        conflicts.WriterCommits("w", conflicts.CommitKind.UPSERTS, "1.5.2", "f=1"),
    ),
    ("upserts, Iceberg 1.6 to 1.10", conflicts.WriterCommits("w", conflicts.CommitKind.UPSERTS, "1.10.1", "f=1")),
    ("upserts, Iceberg 1.11 and later", conflicts.WriterCommits("w", conflicts.CommitKind.UPSERTS, "1.11.0", "f=1")),
    ("row-level (declared, or seen)", conflicts.WriterCommits("w", conflicts.CommitKind.ROW_LEVEL, None, "f=1")),
]
_REWRITES = (conflicts.REWRITE_DATA_FILES, conflicts.REWRITE_POSITION_DELETE_FILES)
_SNAPSHOT, _MOR = conflicts.Isolation.SNAPSHOT, conflicts.WriteMode.MERGE_ON_READ
#: The work a gate guards, one per column.
CONFLICT_WORKS: list[tuple[str, conflicts.GuardedWork]] = [
    ("a compaction, format v2", conflicts.GuardedWork(_REWRITES, format_version=2)),
    ("a compaction, format v3", conflicts.GuardedWork(_REWRITES, format_version=3)),
    (
        "`rewrite_data_files` with `use-starting-sequence-number` false",
        conflicts.GuardedWork(_REWRITES[:1], format_version=2, use_starting_sequence_number=False),
    ),
    (
        "merge-on-read `DELETE`, snapshot isolation",
        conflicts.GuardedWork(statement=conflicts.BatchStatement(conflicts.Command.DELETE, _SNAPSHOT, _MOR)),
    ),
    (
        "merge-on-read `UPDATE` or `MERGE`, snapshot isolation",
        conflicts.GuardedWork(statement=conflicts.BatchStatement(conflicts.Command.MERGE, _SNAPSHOT, _MOR)),
    ),
    (
        "copy-on-write statement, snapshot isolation",
        conflicts.GuardedWork(statement=conflicts.BatchStatement(conflicts.Command.DELETE, _SNAPSHOT)),
    ),
    (
        "any statement, serializable isolation (the default)",
        conflicts.GuardedWork(statement=conflicts.BatchStatement(conflicts.Command.MERGE)),
    ),
]


def conflict_table() -> str:
    """:func:`conflicts.must_pause` for each writer by each work, as a markdown table: each cell says whether the
    writer pauses and points to the reason about the work, listed once below it."""
    reasons: list[str] = []

    def cell(work: conflicts.GuardedWork, writer: conflicts.WriterCommits) -> str:
        decision = conflicts.must_pause(work, writer)
        if decision.because not in reasons:
            reasons.append(decision.because)
        said = "**pauses**" if decision.pause else "keeps committing"
        return f"{said} ({reasons.index(decision.because) + 1})"

    lines = [
        "| the writer | " + " | ".join(title for title, _ in CONFLICT_WORKS) + " |",
        "|---|" + "---|" * len(CONFLICT_WORKS),
    ]
    lines += [
        f"| {title} | " + " | ".join(cell(work, writer) for _, work in CONFLICT_WORKS) + " |"
        for title, writer in CONFLICT_WRITERS
    ]
    listed = "\n".join(f"{number}. {_cell(reason)}" for number, reason in enumerate(reasons, start=1))
    return "\n".join(lines) + f"\n\n{listed}\n"


# --- The stacks' matrix ----------------------------------------------------------------------------------------


def stacks_table() -> str:
    """The matrix as a markdown table: one column per stack, one row per component."""
    matrix = stacks.load()
    columns = list(matrix.stacks.values())
    rows = [
        ("Flink", lambda s: s.flink),
        ("Flink's Kafka connector", lambda s: s.flink_kafka),
        ("Iceberg in Flink", lambda s: f"{s.iceberg_flink} (`iceberg-flink-runtime-{s.flink_line}`)"),
        ("Spark (PySpark)", lambda s: s.pyspark),
        ("Iceberg in Spark", lambda s: f"{s.iceberg_spark} (`iceberg-spark-runtime-{s.spark_line}_{s.scala}`)"),
        ("MariaDB JDBC driver", lambda s: s.mariadb_jdbc),
        (
            "Flink CDC's MySQL connector (+ MySQL's driver)",
            lambda s: f"{s.flink_mysql_cdc} ({s.mysql_jdbc})" if s.flink_mysql_cdc else "none served",
        ),
        ("JDK", lambda s: str(s.jdk)),
        ("gated Flink source", lambda s: f"`{s.flink_artifact}`"),
    ]
    header = "| | " + " | ".join(f"`{s.name}`" + (" (default)" if s.name == matrix.default else "") for s in columns)
    lines = [header + " |", "|---|" + "---|" * len(columns)]
    lines += [f"| {label} | " + " | ".join(cell(s) for s in columns) + " |" for label, cell in rows]
    airflow = ", ".join(matrix.airflow)
    return "\n".join(lines) + f"\n\nAirflow, one for every stack: tested on {airflow}.\n"


def stacks_install() -> str:
    """What a user of each stack puts where: the Spark packages of the table list, the Flink artifact."""
    parts = []
    for stack in stacks.load().stacks.values():
        packages = "\n".join(f"      - {coordinate}" for coordinate in stack.spark_packages)
        parts.append(
            f"**`{stack.name}`** ({stack.summary}): PySpark {stack.pyspark} (or Spark {stack.spark_line} on the "
            f"cluster), and in the table list\n\n```yaml\ndefaults:\n  spark:\n    packages:\n{packages}\n```\n\n"
            f"Flink {stack.flink_line} jobs put `{stack.flink_artifact}.jar` (`make setup-stacks` builds it into "
            f"`build/stacks/{stack.name}/flink/`) and `{stack.iceberg_flink_runtime}` beside their Kafka connector "
            f"`org.apache.flink:flink-connector-kafka:{stack.flink_kafka}`.\n"
            + (
                f"A Flink SQL job that reads a MySQL binlog adds `org.apache.flink:flink-sql-connector-mysql-cdc:"
                f"{stack.flink_mysql_cdc}` and `com.mysql:mysql-connector-j:{stack.mysql_jdbc}`.\n"
                if stack.flink_mysql_cdc
                else "No Flink CDC MySQL connector for this Flink line is served.\n"
            )
        )
    return "\n".join(parts)


# --- The table list's settings ---------------------------------------------------------------------------------


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _anchor(model: type[BaseModel]) -> str:
    return model.__name__.lower()


def type_name(annotation: Any) -> str:
    """``annotation`` as a reader writes it: ``int | None``, ``dict[str, str]``, ``'day' | None``."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return type_name(args[0])
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(arg) for arg in args)
    if origin is Literal:
        return " | ".join(repr(arg) for arg in args)
    if origin is not None:
        return f"{origin.__name__}[{', '.join(type_name(arg) for arg in args)}]"
    if annotation is type(None):
        return "None"
    if annotation is Any:
        return "Any"
    return getattr(annotation, "__name__", str(annotation))


_BOUNDS = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}


def _field_type(field: FieldInfo) -> str:
    annotation = field.annotation
    if any(isinstance(item, PlainSerializer) and item.return_type is str for item in field.metadata):
        annotation = str  # parsed from a string, written back as one (the table's name)
    members = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
    if any(_is_model(member) for member in members):  # a nested model links to its own table
        shown = " or ".join(
            f"[`{member.__name__}`](#{_anchor(member)})" if _is_model(member) else f"`{type_name(member)}`"
            for member in members
        )
    else:
        shown = f"`{type_name(annotation)}`"
    bounds = []
    for item in field.metadata:
        for attribute, sign in _BOUNDS.items():
            if isinstance(item, annotated_types.BaseMetadata) and getattr(item, attribute, None) is not None:
                bounds.append(f"{sign} {getattr(item, attribute)}")
    return shown + (f", {', '.join(bounds)}" if bounds else "")


def _value(value: Any) -> str:
    if isinstance(value, BaseModel):
        return f"its own defaults, [below](#{_anchor(type(value))})"
    if value is None:
        return "`null`"
    if isinstance(value, date):
        return f"`{value.isoformat()}`"
    return f"`{json.dumps(value)}`"


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        return _value(field.default_factory())  # type: ignore[call-arg]
    return _value(field.default)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _description(field: FieldInfo) -> str:
    if field.description:
        return _cell(field.description)
    if _is_model(field.annotation):
        return _cell((field.annotation.__doc__ or "").strip().split("\n\n")[0])
    return ""


def settings_table(model: type[BaseModel]) -> str:
    """One markdown table of ``model``'s fields: setting, type, default, description."""
    rows = ["| setting | type | default | description |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        rows.append(f"| `{name}` | {_field_type(field)} | {_default(field)} | {_description(field)} |")
    return "\n".join(rows) + "\n"


def settings_reference() -> str:
    """Every setting of the table list, one section and table per model."""
    sections = []
    for where, model in SETTINGS_MODELS:
        summary = _cell((model.__doc__ or "").strip().split("\n\n")[0])
        sections.append(
            f"### {where}: `{model.__name__}` {{#{_anchor(model)}}}\n\n{summary}\n\n{settings_table(model)}"
        )
    return "\n".join(sections)


# --- Rendering -------------------------------------------------------------------------------------------------


def render(text: str) -> str:
    """``text`` with every generated block rewritten; an unknown block name is an error naming it."""
    known = sources()

    def block(match: re.Match[str]) -> str:
        name = match.group(2)
        if name not in known:
            raise KeyError(f"generated block {name!r} has no source; known: {', '.join(known)}")
        return f"{match.group(1)}{known[name].block()}{match.group(4)}"

    return _BLOCK.sub(block, text)


def stale() -> list[Path]:
    """The doc files whose generated blocks differ from their sources."""
    return [path for path in sorted(DOCS.glob("*.md")) if render(path.read_text()) != path.read_text()]


def main() -> int:
    for path in stale():
        path.write_text(render(path.read_text()))
        print(f"updated {path.relative_to(DOCS.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
