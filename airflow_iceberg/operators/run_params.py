"""Manual runs with their own settings: the trigger form's Params, their checks, and the dry run's plan.

Both DAG kinds declare these Params, each with a JSON schema and a description, so the UI's trigger form shows
them. ``check_run_params`` (:class:`CheckRunParamsOperator`), the first task of each DAG, validates them with the
same checks that build the ``CALL`` and fails, naming the parameter, before the gate closes; on a dry run it
reports what would be rewritten (:func:`plan_rewrite`, from table metadata alone) and skips the rest of the run,
so the gate is never closed and nothing is committed. The rewrite tasks apply the same Params
(:func:`overrides_from_params`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jinja2
from airflow.providers.standard.operators.python import ShortCircuitOperator
from airflow.sdk import Param
from airflow.sdk.exceptions import AirflowFailException

from airflow_iceberg.spark_jobs.iceberg_call import (
    InvalidCallError,
    TableName,
    normalize_arguments,
    normalize_options,
)

# Param name -> the rewrite option it sets, in both rewrite procedures.
_OPTION_PARAMS = {
    "rewrite_all": "rewrite-all",
    "target_file_size_bytes": "target-file-size-bytes",
    "min_input_files": "min-input-files",
    "partial_progress": "partial-progress.enabled",
}
# Param name -> argument of rewrite_data_files.
_ARGUMENT_PARAMS = ("strategy", "sort_order")


#: The JSON Schema dialect the Params are written in. Airflow checks every Param's schema each time it resolves
#: one (per DAG when it is parsed, and again when it is serialized); against draft 7's single meta-schema that
#: check is about four times cheaper than against the newest dialect's vocabularies, which jsonschema assumes
#: when a schema does not say. At 1,000 tables it was half of the parse.
SCHEMA_DIALECT = {"$schema": "http://json-schema.org/draft-07/schema#"}


def run_params() -> dict[str, Param]:
    """The Params every table DAG declares. Unset (null) values leave the DAG's configured behaviour."""
    params = _run_params()
    for param in params.values():
        param.schema.update(SCHEMA_DIALECT)
    return params


def _run_params() -> dict[str, Param]:
    return {
        "where": Param(
            None,
            type=["null", "string"],
            description="Spark SQL predicate selecting the partitions to rewrite, e.g. dt >= '20261120'. "
            "Empty: the DAG's own predicate (recent partitions, or the logical date's partition).",
        ),
        "rewrite_all": Param(
            None, type=["null", "boolean"], description="Rewrite every file, not just small ones (rewrite-all)."
        ),
        "target_file_size_bytes": Param(
            None, type=["null", "integer"], minimum=1, description="Target size of the rewritten files, in bytes."
        ),
        "min_input_files": Param(
            None, type=["null", "integer"], minimum=1, description="Rewrite a file group only from this many files."
        ),
        "partial_progress": Param(
            None, type=["null", "boolean"], description="Commit file groups as they finish (partial-progress)."
        ),
        "strategy": Param(
            "binpack", type="string", enum=["binpack", "sort"], description="binpack, or sort by sort_order."
        ),
        "sort_order": Param(
            None,
            type=["null", "string"],
            description="With strategy sort: e.g. 'id DESC NULLS LAST, ts' or 'zorder(a, b)'. Empty: the "
            "table's own sort order.",
        ),
        "dry_run": Param(
            False,
            type="boolean",
            description="Only report what would be rewritten (files and bytes per partition); never close the gate.",
        ),
    }


@dataclass(frozen=True)
class RunOverrides:
    """What a run's Params change: options and arguments per procedure, the predicate, dry run or not."""

    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    arguments: dict[str, dict[str, Any]] = field(default_factory=dict)
    where: str | None = None
    dry_run: bool = False


def overrides_from_params(params: Mapping[str, Any]) -> RunOverrides:
    """Validate a run's Params; raise ValueError naming the first bad parameter."""
    options: dict[str, dict[str, Any]] = defaultdict(dict)
    arguments: dict[str, dict[str, Any]] = defaultdict(dict)
    for param, option in _OPTION_PARAMS.items():
        value = params.get(param)
        if value is None:
            continue
        for procedure in ("rewrite_data_files", "rewrite_position_delete_files"):
            try:
                normalize_options(procedure, {option: value})
            except InvalidCallError as error:
                raise ValueError(f"param {param!r}: {error}") from None
            options[procedure][option] = value
    chosen = {name: params.get(name) for name in _ARGUMENT_PARAMS if params.get(name) is not None}
    if chosen.get("strategy") == "binpack":
        chosen.pop("strategy")  # binpack is Iceberg's default; say nothing
    try:
        normalize_arguments("rewrite_data_files", chosen)
    except InvalidCallError as error:
        bad = next((name for name in _ARGUMENT_PARAMS if repr(name) in str(error)), "strategy")
        raise ValueError(f"param {bad!r}: {error}") from None
    arguments["rewrite_data_files"].update(chosen)
    where = params.get("where")
    if where is not None and not isinstance(where, str):
        raise ValueError(f"param 'where' must be a Spark SQL predicate string, got {where!r}")
    dry_run = params.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise ValueError(f"param 'dry_run' must be true or false, got {dry_run!r}")
    return RunOverrides(options=dict(options), arguments=dict(arguments), where=where or None, dry_run=dry_run)


DEFAULT_TARGET_FILE_SIZE = 512 * 1024 * 1024  # Iceberg's write.target-file-size-bytes default
DEFAULT_MIN_INPUT_FILES = 5
MAX_FILE_GROUP_SIZE = 100 * 1024**3  # Iceberg's max-file-group-size-bytes default


def plan_rewrite(
    iceberg_conn_id: str,
    table: TableName,
    row_filter: str | None,
    options: dict[str, Any],
) -> dict[str, Any]:
    """Per partition: the data files, bytes and delete files a binpack ``rewrite_data_files`` would take.

    An estimate of Iceberg's selection: files under 75 % of the target size or carrying deletes are
    candidates, and a partition is rewritten when it has ``min-input-files`` of them (any number with
    ``rewrite-all``). ``row_filter`` is tried as a pyiceberg filter; if pyiceberg cannot read it, every
    partition is listed and ``row_filter_applied`` says so.
    """
    from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook  # pyiceberg: off the parse path

    iceberg_table = IcebergHook(iceberg_conn_id).load_table(table.in_catalog)
    target = int(options.get("target-file-size-bytes", DEFAULT_TARGET_FILE_SIZE))
    min_input_files = int(options.get("min-input-files", DEFAULT_MIN_INPUT_FILES))
    rewrite_all = str(options.get("rewrite-all", "false")).lower() == "true"
    applied = bool(row_filter)
    try:
        tasks = list(iceberg_table.scan(row_filter=row_filter).plan_files()) if row_filter else None
    except Exception:  # not a predicate pyiceberg can parse: list every partition instead
        tasks, applied = None, False
    if tasks is None:
        tasks = list(iceberg_table.scan().plan_files())
    partitions: dict[str, dict[str, Any]] = defaultdict(lambda: {"data_files": 0, "bytes": 0, "delete_files": set()})
    for task in tasks:
        has_deletes = bool(task.delete_files)
        if not (rewrite_all or has_deletes or task.file.file_size_in_bytes < 0.75 * target):
            continue
        entry = partitions[repr(task.file.partition)]
        entry["data_files"] += 1
        entry["bytes"] += task.file.file_size_in_bytes
        entry["delete_files"].update(d.file_path for d in task.delete_files)
    report = []
    for partition, entry in sorted(partitions.items()):
        if not rewrite_all and entry["data_files"] < min_input_files:
            continue
        report.append(
            {
                "partition": partition,
                "data_files": entry["data_files"],
                "bytes": entry["bytes"],
                "delete_files": len(entry["delete_files"]),
                "file_groups": math.ceil(entry["bytes"] / MAX_FILE_GROUP_SIZE) or 1,
            }
        )
    return {
        "table": str(table),
        "row_filter": row_filter,
        "row_filter_applied": applied,
        "partitions": report,
        "data_files": sum(p["data_files"] for p in report),
        "bytes": sum(p["bytes"] for p in report),
        "file_groups": sum(p["file_groups"] for p in report),
    }


class RunParamsError(AirflowFailException):
    """A run's Params or the table's predicate cannot be used for this run; retrying would not change that."""


def render_predicate(operator: Any, template: str | None, context: Any, what: str) -> str | None:
    """``template`` rendered for this run, or :class:`RunParamsError` with a sentence that says why not.

    A predicate that uses the run's logical date (``ds``, ``logical_date``, ``macros.ds_add(ds, -2)``, ...) cannot
    be rendered for a run without one (triggered with ``logical_date: null``); the error says so and how to
    run anyway.
    """
    if not template:
        return None
    # Strict whatever the DAG says: an undefined name must fail here, not become '' inside a predicate.
    strict = operator.get_template_env().overlay(undefined=jinja2.StrictUndefined)
    try:
        return operator.render_template(template, context, jinja_env=strict)
    except jinja2.UndefinedError as error:
        if context.get("logical_date") is None:
            raise RunParamsError(
                f"{what} {template!r} uses the run's logical date ({error}), but this run has none: it was "
                "triggered without a logical date. Give the run its own 'where' in its conf, or trigger it with "
                "a logical date."
            ) from None
        raise RunParamsError(f"{what} {template!r} cannot be rendered for this run: {error}") from None
    except jinja2.TemplateError as error:
        raise RunParamsError(f"{what} {template!r} is not a valid template: {error}") from None


class CheckRunParamsOperator(ShortCircuitOperator):
    """Validate the run's Params and the table's predicate; on a dry run, report the plan and skip the rest.

    Invalid values fail this task, naming the parameter, so the gate is never closed; they are not retried.
    When the run gives no ``where`` of its own, the table's predicate is rendered here, so that a predicate
    the run cannot render (one that uses the logical date, in a run without one) fails here, before the gate
    closes, and not in a rewrite. When the run gives its own ``where``, the table's predicate is not rendered.

    A dry run pushes the plan (files, bytes and file groups per partition, from table metadata) to XCom under
    ``plan`` and skips every downstream task, teardown included: no gate is closed and nothing is committed.

    :param table: The table: a :class:`TableName`, or its text ``catalog.namespace.table``.
    :param iceberg_conn_id: Iceberg connection of the table's catalog.
    :param options: The DAG's own ``rewrite_data_files`` options, which the Params override.
    :param where: The rewrites' own Spark SQL predicate, a template (rendered here only if the run uses it).
    :param dry_run_filter: pyiceberg row filter for the DAG's own partitions, a template, used by a dry run that
        gives no ``where``.
    """

    def __init__(
        self,
        *,
        table: TableName | str,
        iceberg_conn_id: str,
        options: Mapping[str, Any] | None = None,
        where: str | None = None,
        dry_run_filter: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(python_callable=self._check, ignore_downstream_trigger_rules=True, **kwargs)
        self.table = TableName.of(table)
        self.iceberg_conn_id = iceberg_conn_id
        self.options = dict(options or {})
        self.where = where
        self.dry_run_filter = dry_run_filter

    def _check(self, **context: Any) -> bool:
        try:
            overrides = overrides_from_params(context["params"])
        except ValueError as error:
            raise RunParamsError(str(error)) from None
        if overrides.where is None:
            where = render_predicate(self, self.where, context, "the table's where")
            if where:
                self.log.info("The rewrites will use the table's where: %s", where)
        else:
            self.log.info("The rewrites will use this run's where: %s", overrides.where)
        if not overrides.dry_run:
            return True
        row_filter = overrides.where or render_predicate(self, self.dry_run_filter, context, "the dry run's filter")
        options = {**self.options, **overrides.options.get("rewrite_data_files", {})}
        plan = plan_rewrite(self.iceberg_conn_id, self.table, row_filter, options)
        self.log.info(
            "Dry run: %d data files, %d bytes in %d file groups would be rewritten: %s",
            plan["data_files"], plan["bytes"], plan["file_groups"], plan["partitions"],
        )  # fmt: skip
        context["ti"].xcom_push(key="plan", value=plan)
        return False
