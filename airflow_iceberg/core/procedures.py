"""Validate procedure options and build Iceberg's Spark ``CALL`` statements safely.

Pure Python on purpose: the Spark job builds its ``CALL`` with it, and Airflow validates the same input with it
at DAG-parse time, before any gate is closed.

Spark SQL cannot take the arguments of a ``CALL`` as bind parameters, so every piece is either checked against
a strict pattern (catalog, namespace, table), taken from a known list (procedure, option names), or passed as
an escaped string literal (option values, the ``where`` predicate).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from airflow_iceberg.core.tables import InvalidCallError, TableName, shown

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


#: The rewrites of a gated run, in the order it takes them; they alone take a ``where`` predicate.
REWRITE_PROCEDURES = ("rewrite_data_files", "rewrite_position_delete_files")
WHERE_PROCEDURES = frozenset(REWRITE_PROCEDURES)


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
    known = PROCEDURE_ARGUMENTS[checked_procedure(procedure)]
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


def checked_procedure(procedure: str) -> str:
    """``procedure``, if Iceberg has it and this provider knows its options; else an error naming it."""
    if procedure not in PROCEDURE_OPTIONS:
        raise InvalidCallError(
            f"procedure {shown(procedure)} is not supported; choose one of {', '.join(PROCEDURE_OPTIONS)}"
        )
    return procedure


def _procedure_options(procedure: str) -> dict[str, object]:
    return PROCEDURE_OPTIONS[checked_procedure(procedure)]


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
