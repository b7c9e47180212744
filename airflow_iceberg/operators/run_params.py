"""Manual runs with their own settings: the trigger form's Params and their checks.

Both DAG kinds declare these Params, each with a JSON schema and a description, so the UI's trigger form shows
them. ``plan_compaction``, the first task of each DAG (``operators/plan.py``), validates them first
(:class:`RunParamsCheck`) with the same checks that build the ``CALL`` and fails, naming the parameter, before the
gate closes; then it ends dry runs and runs with nothing to do. The rewrite tasks apply the same Params
(:func:`overrides_from_params`).
"""

from __future__ import annotations

import difflib
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from airflow.sdk import Param

from airflow_iceberg.core.iceberg_runtime import IcebergRuntime, check_options
from airflow_iceberg.core.procedures import REWRITE_PROCEDURES, normalize_arguments, normalize_options
from airflow_iceberg.core.tables import InvalidCallError, TableName
from airflow_iceberg.exceptions import RunParamsError
from airflow_iceberg.hooks.catalogs import load_iceberg_table
from airflow_iceberg.planning.templates import render_predicate

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
        "rewrite_data_files_where": Param(
            None,
            type=["null", "string"],
            description="Predicate for rewrite_data_files only; overrides 'where' for it.",
        ),
        "rewrite_position_delete_files_where": Param(
            None,
            type=["null", "string"],
            description="Predicate for rewrite_position_delete_files only; overrides 'where' for it.",
        ),
        "force": Param(
            False,
            type="boolean",
            description="Rewrite even if table health says nothing needs it (each rewrite takes its whole where).",
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
            description="Only report the plan (table health, and the partitions each rewrite would take); never "
            "close the gate.",
        ),
    }


@dataclass(frozen=True)
class RunOverrides:
    """What a run's Params change: options and arguments per procedure, the predicate, dry run or not."""

    options: dict[str, dict[str, Any]] = field(default_factory=dict)
    arguments: dict[str, dict[str, Any]] = field(default_factory=dict)
    where: str | None = None
    dry_run: bool = False
    force: bool = False
    where_by_procedure: dict[str, str] = field(default_factory=dict)

    def where_for(self, procedure: str) -> str | None:
        """The run's own predicate for ``procedure`` (its ``<procedure>_where``, else ``where``), or None."""
        return self.where_by_procedure.get(procedure, self.where)


def overrides_from_params(
    params: Mapping[str, Any], iceberg: IcebergRuntime | None = None, *, parse_where: bool = True
) -> RunOverrides:
    """Validate a run's Params, for the table's Iceberg if known; raise ValueError naming the first bad parameter.

    ``parse_where=False`` takes the run's predicates as they are: for the tasks after the check
    (:meth:`RunParamsCheck.check_run_params`), which parsed each of them once."""
    options: dict[str, dict[str, Any]] = defaultdict(dict)
    arguments: dict[str, dict[str, Any]] = defaultdict(dict)
    for param, option in _OPTION_PARAMS.items():
        value = params.get(param)
        if value is None:
            continue
        for procedure in ("rewrite_data_files", "rewrite_position_delete_files"):
            try:
                check_options(procedure, normalize_options(procedure, {option: value}), iceberg)
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
    if where is not None and parse_where:
        from airflow_iceberg.planning.predicates import parse_predicate  # sqlglot: off the parse path

        parse_predicate(where, what="param 'where'")  # one filter, not empty: checked before anything else
    where_by_procedure = {}
    for procedure in REWRITE_PROCEDURES:
        own = params.get(f"{procedure}_where")
        if own is not None:
            if parse_where:
                from airflow_iceberg.planning.predicates import parse_predicate

                parse_predicate(own, what=f"param '{procedure}_where'")
            where_by_procedure[procedure] = own
    flags = {}
    for name in ("dry_run", "force"):
        flags[name] = params.get(name, False)
        if not isinstance(flags[name], bool):
            raise ValueError(f"param {name!r} must be true or false, got {flags[name]!r}")
    return RunOverrides(
        options=dict(options), arguments=dict(arguments), where=where, where_by_procedure=where_by_procedure, **flags
    )


def check_known_params(params: Mapping[str, Any], declared: Collection[str]) -> None:
    """Refuse a key of the run's conf that is no Param of the DAG, naming it and the nearest Param.

    Airflow merges a run's conf into its Params without a word about keys the DAG does not declare, so a typo
    (``wher`` for ``where``) would otherwise be ignored and the run would go on with the DAG's own settings.
    """
    unknown = sorted(set(params) - set(declared))
    if not unknown:
        return
    key = unknown[0]
    nearest = difflib.get_close_matches(key, sorted(declared), n=1, cutoff=0.5)
    hint = f"; did you mean {nearest[0]!r}?" if nearest else "."
    more = f" (and {', '.join(map(repr, unknown[1:]))})" if unknown[1:] else ""
    raise RunParamsError(
        f"the run's conf has {key!r}{more}, which is no Param of this DAG{hint} "
        f"Its Params: {', '.join(sorted(declared))}."
    )


class RunParamsCheck:
    """The check of a run's Params and of the predicate each rewrite will use, which ``plan_compaction``
    (:class:`~airflow_iceberg.operators.plan.PlanCompactionOperator`) runs first, on the table it then plans from:
    one task, one read of the table, before the gate closes.

    Invalid values fail the task, naming the parameter, so the gate is never closed; they are not retried.
    Each rewrite's predicate (the run's own ``<procedure>_where`` or ``where``, or else the table's, rendered
    here) is parsed as one Spark SQL filter and its columns are checked against the table's schema, so a
    predicate Spark would refuse fails here, before the gate closes, and not in a rewrite while writers wait. A
    predicate the run cannot render (one that uses the logical date, in a run without one) fails here too. When
    the run gives its own predicate, the table's is not rendered. On a dry run, a predicate pyiceberg cannot
    apply to the metadata fails here too, naming it.

    A key of the run's conf that is no Param of the DAG (a typo such as ``wher``) fails here, naming it and the
    nearest Param.

    Gives ``{procedure: predicate or None}``, which the plan narrows to the partitions that need work.

    Set by the operator: ``table`` (:class:`TableName`), ``iceberg_conn_id``, ``where`` (per procedure, its Spark
    SQL predicate, a template rendered only if the run uses it) and ``iceberg_runtime`` (the Iceberg of the
    table's Spark jobs, if known: an option the run asks for that it lacks fails, naming the version).
    """

    table: TableName
    iceberg_conn_id: str
    where: dict[str, str | None]
    iceberg_runtime: IcebergRuntime | None

    def _declared_params(self) -> set[str]:
        """The Params the DAG and this task declare (a run's conf is merged into ``params`` beside them)."""
        operator: Any = self
        declared = set(run_params()) | set(operator.params or {})
        if operator.has_dag():
            declared |= set(operator.dag.params or {})
        return declared

    def _load_table(self) -> Any:
        """The table, as pyiceberg reads it through the Iceberg connection."""
        return load_iceberg_table(self.iceberg_conn_id, self.table)

    def check_run_params(self, context: Mapping[str, Any], schema_of: Callable[[], Any]) -> dict[str, str | None]:
        """The run's predicates, each checked against the table's schema, from ``schema_of``; :class:`RunParamsError`
        names what is wrong. The Params and the rendering are checked first: a typo or a predicate the run cannot
        render fails even with the catalog down, and ``schema_of`` is called only when a predicate needs it."""
        from airflow_iceberg.exceptions import PredicateError, PredicateTypeError
        from airflow_iceberg.planning.predicates import check_columns, parse_predicate, to_pyiceberg

        log = cast(Any, self).log
        check_known_params(context["params"], self._declared_params())
        try:  # its predicates are parsed below, each once
            overrides = overrides_from_params(context["params"], self.iceberg_runtime, parse_where=False)
        except ValueError as error:
            raise RunParamsError(str(error)) from None
        # By procedure: what names the predicate, the predicate, and whether it was rendered from the table's
        # template (a run's own is taken as written).
        chosen: dict[str, tuple[str, str | None, bool]] = {}
        for procedure in REWRITE_PROCEDURES:
            own = overrides.where_for(procedure)
            if own is not None:
                name = f"{procedure}_where" if procedure in overrides.where_by_procedure else "where"
                chosen[procedure] = (f"param {name!r}", own, False)
            else:
                what = f"the table's where for {procedure}"
                chosen[procedure] = (what, render_predicate(self, self.where.get(procedure), context, what), True)
        checked: set[tuple[str, str, bool]] = set()  # one predicate for both procedures is checked once
        schema = None
        for procedure, (what, where, rendered) in chosen.items():
            if where is None:
                log.info("%s will rewrite the whole table", procedure)
                continue
            if (what, where, rendered) in checked:
                log.info("%s will use %s: %s", procedure, what, where)
                continue
            checked.add((what, where, rendered))
            try:
                predicate = parse_predicate(where, what=what, rendered=rendered)
                if schema is None:
                    schema = schema_of()
                check_columns(predicate, schema, self.table, what=what)
                try:
                    to_pyiceberg(predicate, schema, what=what)
                except PredicateTypeError:
                    raise
                except PredicateError:
                    if overrides.dry_run:  # a dry run must apply it to metadata; Spark may apply more
                        raise
            except PredicateError as error:
                raise RunParamsError(str(error)) from None
            log.info("%s will use %s: %s", procedure, what, where)
        return {procedure: where for procedure, (_, where, _) in chosen.items()}
