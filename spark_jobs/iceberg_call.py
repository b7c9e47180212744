"""Validate table names and procedure options, and build Iceberg's Spark ``CALL`` statements safely.

Pure Python on purpose: the Spark job builds its ``CALL`` with it, and Airflow validates the same input with it
at DAG-parse time, before any gate is closed. Nothing here imports Airflow or PySpark.

Spark SQL cannot take the arguments of a ``CALL`` as bind parameters, so every piece is either checked against
a strict pattern (catalog, namespace, table), taken from a known list (procedure, option names), or passed as
an escaped string literal (option values, the ``where`` predicate).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The line prefix the Spark job prints its procedure result row behind, for the Airflow operator to find.
RESULT_MARKER = "AIRFLOW_ICEBERG_RESULT "
#: The line prefix the Spark job prints behind the reason it stopped: its run no longer holds the write gate.
LEASE_LOST_MARKER = "AIRFLOW_ICEBERG_LEASE_LOST "

#: The name of a job's secrets file: a JSON object, mode 0600, that the job reads and then deletes. It carries
#: secret Spark settings (a JDBC password, REST credentials, tokens and headers, S3 keys) under ``spark_conf``,
#: JVM system properties (AWS keys) under ``system_properties``, and the write gate's connection under ``gate``,
#: so none of them is ever on a command line, in a driver's spec, in rendered templates or in logs. In local and
#: client deploy modes the job gets the file's path; in cluster modes spark-submit ships it with ``--files``.
JOB_SECRETS_FILE = "airflow-iceberg-job-secrets.json"

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")

_BOOL = "boolean"
_POSITIVE_INT = "positive integer"
_NON_NEGATIVE_INT = "non-negative integer"
_RATIO = "number between 0 and 1"
_JOB_ORDERS = ("none", "bytes-asc", "bytes-desc", "files-asc", "files-desc")

# Options each procedure accepts, with the kind of value each takes (Iceberg 1.10 Spark procedures).
_COMMON_REWRITE_OPTIONS: dict[str, object] = {
    "max-concurrent-file-group-rewrites": _POSITIVE_INT,
    "partial-progress.enabled": _BOOL,
    "partial-progress.max-commits": _POSITIVE_INT,
    "rewrite-job-order": _JOB_ORDERS,
    "target-file-size-bytes": _POSITIVE_INT,
    "min-file-size-bytes": _NON_NEGATIVE_INT,
    "max-file-size-bytes": _POSITIVE_INT,
    "min-input-files": _POSITIVE_INT,
    "rewrite-all": _BOOL,
    "max-file-group-size-bytes": _POSITIVE_INT,
}
PROCEDURE_OPTIONS: dict[str, dict[str, object]] = {
    "rewrite_data_files": {
        **_COMMON_REWRITE_OPTIONS,
        "partial-progress.max-failed-commits": _NON_NEGATIVE_INT,
        "use-starting-sequence-number": _BOOL,
        "delete-file-threshold": _POSITIVE_INT,
        "delete-ratio-threshold": _RATIO,
        "remove-dangling-deletes": _BOOL,
        "output-spec-id": _NON_NEGATIVE_INT,
    },
    "rewrite_position_delete_files": dict(_COMMON_REWRITE_OPTIONS),
    "rewrite_manifests": {},
    "expire_snapshots": {},
    "remove_orphan_files": {},
}
#: Procedures that take a ``where`` predicate.
WHERE_PROCEDURES = frozenset({"rewrite_data_files", "rewrite_position_delete_files"})

_TIMESTAMP = "UTC timestamp 'YYYY-MM-DD HH:MM:SS[.ffffff]'"
_SORT_ORDER = "sort order such as 'id DESC NULLS LAST, ts' or 'zorder(a, b)'"
_TIMESTAMP_PATTERN = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d{1,6})?")
_SORT_TERM = r"[A-Za-z_][A-Za-z0-9_]*(\s+(ASC|DESC))?(\s+NULLS\s+(FIRST|LAST))?"
_SORT_ORDER_PATTERN = re.compile(
    rf"\s*(zorder\(\s*[A-Za-z_]\w*(\s*,\s*[A-Za-z_]\w*)*\s*\)|{_SORT_TERM}(\s*,\s*{_SORT_TERM})*)\s*",
    re.IGNORECASE,
)
#: Named arguments, besides table, options and where, that each procedure takes, with their kinds.
PROCEDURE_ARGUMENTS: dict[str, dict[str, object]] = {
    "rewrite_data_files": {"strategy": ("binpack", "sort"), "sort_order": _SORT_ORDER},
    "rewrite_position_delete_files": {},
    "rewrite_manifests": {"use_caching": _BOOL},
    "expire_snapshots": {"older_than": _TIMESTAMP, "retain_last": _POSITIVE_INT},
    "remove_orphan_files": {"older_than": _TIMESTAMP, "dry_run": _BOOL},
}


#: Characters of a bad value an error message quotes; a longer one is cut, with its length said.
SHOWN_CHARACTERS = 120


def shown(value: object, limit: int = SHOWN_CHARACTERS, quoted: bool = True) -> str:
    """``repr(value)`` (``str`` unless ``quoted``) for an error message, cut to about ``limit`` characters: a
    10,000-character table name must not make a 20,000-character error."""
    text = repr(value) if quoted else str(value)
    if len(text) <= limit:
        return text
    length = f"{len(value)} characters" if isinstance(value, str) else f"{len(text)} characters as written"
    return f"{text[:limit]}... ({length})"


class InvalidCallError(ValueError):
    """A table name, procedure or option that must not reach Spark; the message names the bad value."""


@dataclass(frozen=True)
class TableName:
    """A fully qualified Iceberg table name, ``catalog.namespace.table``, each part a plain identifier."""

    catalog: str
    namespace: str
    table: str

    @classmethod
    def parse(cls, text: object) -> TableName:
        """Parse ``catalog.namespace.table``; raise :class:`InvalidCallError` naming the value otherwise."""
        if not isinstance(text, str):
            raise InvalidCallError(f"table must be a string 'catalog.namespace.table', got {shown(text)}")
        parts = text.split(".")
        if len(parts) != 3 or not all(_IDENTIFIER.fullmatch(p) for p in parts):
            raise InvalidCallError(
                f"table {shown(text)} is not 'catalog.namespace.table' with each part made of letters, digits "
                "and underscores (not starting with a digit)"
            )
        return cls(*parts)

    @classmethod
    def of(cls, value: TableName | str) -> TableName:
        """``value`` itself if it is a TableName already, else :meth:`parse` of it."""
        return value if isinstance(value, TableName) else cls.parse(value)

    @property
    def in_catalog(self) -> str:
        """The name inside its catalog, ``namespace.table``, as Iceberg procedures and pyiceberg take it."""
        return f"{self.namespace}.{self.table}"

    def __str__(self) -> str:
        return f"{self.catalog}.{self.namespace}.{self.table}"


def sql_string_literal(value: str) -> str:
    """Quote ``value`` as a Spark SQL string literal, escaping backslashes and single quotes."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _format_option(procedure: str, name: str, value: object, kind: object) -> str:
    def bad(expected: str) -> InvalidCallError:
        article = "" if expected.startswith("one of") else "a "
        return InvalidCallError(f"{procedure} option {name!r} must be {article}{expected}, got {shown(value)}")

    if kind == _BOOL:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower()
        raise bad(_BOOL)
    if kind in (_POSITIVE_INT, _NON_NEGATIVE_INT):
        if isinstance(value, bool):
            raise bad(str(kind))
        try:
            number = int(value)  # type: ignore[call-overload]
        except (TypeError, ValueError):
            raise bad(str(kind)) from None
        if str(number) != str(value).strip() or number < (1 if kind == _POSITIVE_INT else 0):
            raise bad(str(kind))
        return str(number)
    if kind == _RATIO:
        try:
            ratio = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise bad(_RATIO) from None
        if isinstance(value, bool) or not 0.0 <= ratio <= 1.0:
            raise bad(_RATIO)
        return repr(ratio)
    if isinstance(kind, tuple):
        if value not in kind:
            raise bad("one of " + ", ".join(kind))
        return str(value)
    raise AssertionError(f"unknown option kind {kind!r}")


def _format_argument(procedure: str, name: str, value: object, kind: object) -> str:
    """An argument as Spark SQL: booleans and numbers bare, timestamps as TIMESTAMP literals, text quoted."""
    if kind == _TIMESTAMP:
        if not isinstance(value, str) or not _TIMESTAMP_PATTERN.fullmatch(value):
            raise InvalidCallError(f"{procedure} argument {name!r} must be a {_TIMESTAMP}, got {shown(value)}")
        return f"TIMESTAMP {sql_string_literal(value)}"
    if kind == _SORT_ORDER:
        if not isinstance(value, str) or not _SORT_ORDER_PATTERN.fullmatch(value):
            raise InvalidCallError(f"{procedure} argument {name!r} must be a {_SORT_ORDER}, got {shown(value)}")
        return sql_string_literal(value.strip())
    text = _format_option(procedure, name, value, kind).replace("option", "argument", 1)
    return sql_string_literal(text) if isinstance(kind, tuple) else text


def normalize_arguments(procedure: str, arguments: Mapping[str, object] | None) -> dict[str, str]:
    """Check ``arguments`` against what ``procedure`` takes; return them rendered as Spark SQL."""
    known = PROCEDURE_ARGUMENTS[_checked_procedure(procedure)]
    rendered = {}
    for name, value in (arguments or {}).items():
        if name not in known:
            raise InvalidCallError(
                f"{procedure} does not take argument {shown(name)}; known: {', '.join(sorted(known)) or 'none'}"
            )
        try:
            rendered[name] = _format_argument(procedure, name, value, known[name])
        except InvalidCallError as error:
            raise InvalidCallError(str(error).replace(" option ", " argument ")) from None
    if "sort_order" in rendered and (arguments or {}).get("strategy") != "sort":
        raise InvalidCallError(f"{procedure} argument 'sort_order' needs strategy 'sort', got {shown(arguments)}")
    return rendered


def normalize_options(procedure: str, options: Mapping[str, object] | None) -> dict[str, str]:
    """Check ``options`` against what ``procedure`` accepts and return them as the strings Spark takes."""
    known = _procedure_options(procedure)
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise InvalidCallError(f"{procedure} options must be a mapping of option name to value, got {shown(options)}")
    normalized = {}
    for name, value in options.items():
        if name not in known:
            raise InvalidCallError(
                f"{procedure} does not take option {shown(name)}; known options: {', '.join(sorted(known))}"
            )
        normalized[name] = _format_option(procedure, name, value, known[name])
    return normalized


def _checked_procedure(procedure: str) -> str:
    if procedure not in PROCEDURE_OPTIONS:
        raise InvalidCallError(
            f"procedure {shown(procedure)} is not supported; choose one of {', '.join(PROCEDURE_OPTIONS)}"
        )
    return procedure


def _procedure_options(procedure: str) -> dict[str, object]:
    return PROCEDURE_OPTIONS[_checked_procedure(procedure)]


def build_call(
    procedure: str,
    table: TableName,
    options: Mapping[str, object] | None = None,
    where: str | None = None,
    arguments: Mapping[str, object] | None = None,
) -> str:
    """Return the ``CALL <catalog>.system.<procedure>(...)`` statement for ``table``.

    The ``where`` predicate is Spark SQL that Iceberg parses itself; it is passed as one escaped string
    literal, so it can never end the literal and add SQL of its own. ``arguments`` are the procedure's other
    named arguments (``strategy``, ``older_than``, ``retain_last``, ...), each checked against its kind.
    """
    normalized = normalize_options(procedure, options)
    rendered = normalize_arguments(procedure, arguments)
    if where is not None and not isinstance(where, str):
        raise InvalidCallError(f"where must be a string predicate or None, got {shown(where)}")
    if where is not None and not where.strip():
        where = None  # a blank predicate is the whole table
    has_where = where is not None
    if has_where and procedure not in WHERE_PROCEDURES:
        raise InvalidCallError(f"{procedure} takes no where predicate, got {shown(where)}")
    args = [f"table => {sql_string_literal(table.in_catalog)}"]
    args += [f"{name} => {value}" for name, value in rendered.items()]
    if normalized:
        pairs = ", ".join(f"{sql_string_literal(k)}, {sql_string_literal(v)}" for k, v in normalized.items())
        args.append(f"options => map({pairs})")
    if where is not None:
        args.append(f"where => {sql_string_literal(where)}")
    return f"CALL `{table.catalog}`.system.{procedure}({', '.join(args)})"


#: Table properties of a table written the way a streaming writer writes: format v2, merge-on-read upserts and
#: deletes (so position-delete files appear), and one file per task per partition with no shuffle.
STREAMING_TABLE_PROPERTIES = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
    "write.distribution-mode": "none",
    "write.spark.fanout.enabled": "true",
}


def create_streaming_table_statements(
    table: TableName, columns: str, partitioned_by: str, format_version: int = 2
) -> list[str]:
    """``CREATE NAMESPACE`` and ``CREATE TABLE ... IF NOT EXISTS`` for a streaming-written table.

    ``columns`` and ``partitioned_by`` are fixed Spark SQL written by the calling job, never user input. Format 3
    makes Spark's merge-on-read writes deletion vectors instead of position-delete files.
    """
    if format_version not in (2, 3):
        raise InvalidCallError(f"format_version must be 2 or 3, got {shown(format_version)}")
    settings = {**STREAMING_TABLE_PROPERTIES, "format-version": str(format_version)}
    properties = ", ".join(f"'{k}' = '{v}'" for k, v in settings.items())
    return [
        f"CREATE NAMESPACE IF NOT EXISTS `{table.catalog}`.`{table.namespace}`",
        f"CREATE TABLE IF NOT EXISTS `{table.catalog}`.`{table.namespace}`.`{table.table}` ({columns}) "
        f"USING iceberg PARTITIONED BY ({partitioned_by}) TBLPROPERTIES ({properties})",
    ]


def read_job_secrets(location: str | None) -> dict[str, Any]:
    """The job's secrets, from ``location``, and the file deleted once read; ``{}`` without a location.

    ``location`` is a local path (local and client deploy modes), or the name of a file spark-submit shipped
    with ``--files`` (cluster modes), found in the working directory or through ``SparkFiles`` (so call this
    once the Spark session exists).
    """
    if not location:
        return {}
    path = Path(location)
    if not path.is_file():
        from pyspark import SparkFiles

        path = Path(SparkFiles.get(path.name))
    secrets = json.loads(path.read_text())
    try:
        path.unlink()
    except OSError:  # a read-only copy (a cluster's staging area): the cluster removes it with the application
        pass
    return secrets


def apply_job_secrets(spark: Any, secrets: Mapping[str, Any]) -> None:
    """Set the secret Spark settings on ``spark``'s session and the system properties in its driver's JVM.

    Catalogs are created when first used, so a catalog's secret settings take effect if set before that.
    """
    for key, value in secrets.get("spark_conf", {}).items():
        spark.conf.set(key, value)
    system = spark.sparkContext._jvm.java.lang.System
    for key, value in secrets.get("system_properties", {}).items():
        system.setProperty(key, value)


def format_result_line(result: Mapping[str, object]) -> str:
    """The line the Spark job prints for its result row."""
    return RESULT_MARKER + json.dumps(dict(result), sort_keys=True, default=str)


def parse_result_line(line: str) -> dict[str, object] | None:
    """The result row from a line printed by :func:`format_result_line`, or None for any other line.

    Text after the JSON object is ignored: spark-submit's stderr (Spark's console progress bar, which ends
    its updates with a carriage return, not a newline) can land on the same line of the merged output.
    """
    start = line.find(RESULT_MARKER)
    if start < 0:
        return None
    try:
        result, _ = json.JSONDecoder().raw_decode(line, start + len(RESULT_MARKER))
    except ValueError:
        return None
    return result if isinstance(result, dict) else None


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(signal_number: int | None = None) -> None:
    """Have Linux send this process ``signal_number`` (SIGKILL) when its parent process dies; elsewhere, nothing.

    A Spark job started by spark-submit in local or client deploy mode is a child of spark-submit's JVM, which
    is a child of the Airflow task: with this in both, killing the task ends the Spark work within moments. If
    the parent is already gone, the process exits at once.
    """
    import ctypes
    import os
    import signal
    import sys

    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal_number or signal.SIGKILL, 0, 0, 0) != 0:
        return  # not allowed here (a restricted sandbox): the lease still bounds the work
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)
