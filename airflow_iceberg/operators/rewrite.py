"""The gated rewrites of a table: ``rewrite_data_files`` and ``rewrite_position_delete_files``, following the plan
or the run's own parameters, as one PySpark job through spark-submit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import Asset, Context, literal
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from airflow_iceberg.core.procedures import REWRITE_PROCEDURES
from airflow_iceberg.core.spark_job import ProcedureCall
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.operators.procedure import IcebergProcedureOperator
from airflow_iceberg.operators.run_params import overrides_from_params


def table_asset(table: TableName) -> Asset:
    """The Airflow Asset standing for an Iceberg table: ``iceberg://<catalog>/<namespace>/<table>``."""
    return Asset(uri=f"iceberg://{table.catalog}/{table.namespace}/{table.table}", name=str(table))


def partial_failure(results: Mapping[str, Mapping[str, Any]]) -> str | None:
    """What a partial-progress rewrite left undone, in one sentence, or None if it did all it planned.

    ``failed_data_files_count`` is Iceberg's count of files whose group failed to rewrite;
    ``uncommitted_data_files_count`` the job's count of planned files whose group failed to commit
    (``run_procedure.py``), which Iceberg's result row leaves out.
    """
    parts = []
    for procedure, result in results.items():
        failed = int(result.get("failed_data_files_count") or 0)
        uncommitted = int(result.get("uncommitted_data_files_count") or 0)
        if failed or uncommitted:
            planned = result.get("planned_data_files_count")
            of = f" of {planned} planned" if planned is not None else ""
            what = [f"{failed} failed to rewrite"] if failed else []
            what += [f"{uncommitted} were rewritten but their commit failed"] if uncommitted else []
            parts.append(f"{procedure} left {failed + uncommitted} data files{of} as they were: {' and '.join(what)}")
    return "; ".join(parts) or None


class IcebergRewriteOperator(IcebergProcedureOperator):
    """The rewrites of a gated run, ``rewrite_data_files`` then ``rewrite_position_delete_files``, in one PySpark
    application (an :class:`IcebergProcedureOperator`), each on the partitions its ``where`` selects.

    The writers' pause pays for one Spark start-up, not one per rewrite. The predicates come from the plan
    (``plan_task_id``) or from the table's templates, and a manual run's Params may override them and the
    options (``apply_run_params``). Each predicate travels to the job as an escaped string literal, and a
    predicate of the run's own is parsed here before Spark starts, so bad input fails before writers wait long.

    Besides the base's failures (a lost gate, an Iceberg commit conflict), a partial-progress rewrite that left
    planned files as they were (:func:`partial_failure`) fails the task without retries: inside the same gate
    window a retry would meet the same writer.

    Each rewrite's result row (for ``rewrite_data_files``: ``rewritten_data_files_count``,
    ``added_data_files_count``, ``rewritten_bytes_count``, ...) is returned by procedure name, in local and client
    deploy modes, and lands in XCom.

    :param table: The table: a :class:`TableName`, or its text ``catalog.namespace.table``.
    :param procedures: The rewrites to call, in this order; both by default.
    :param where: Each rewrite's Spark SQL predicate selecting the partitions to rewrite, by procedure; a
        procedure without one takes the whole table. (templated; with ``apply_run_params``, a run that gives its
        own ``where`` uses that, as written, and the template is not rendered.) Not with ``plan_task_id``: the
        plan's predicates are then the one source of each ``CALL``'s.
    :param apply_run_params: Let the run's Params (``where``, ``rewrite_all``, ``target_file_size_bytes``,
        ``min_input_files``, ``partial_progress``, ``strategy``, ``sort_order``) override the settings above.
    :param plan_task_id: The ``plan_compaction`` task: only the procedures the plan gives a predicate run, each
        with that predicate, and the task is skipped when it gives none. It pushes its wall time to XCom under
        ``seconds``.
    :param kwargs: Passed to :class:`IcebergProcedureOperator` and :class:`SparkSubmitOperator` (``options``,
        ``arguments``, ``iceberg_conn_id``, ``write_gate_conn_id``, ``conn_id``, ``jars``, ``conf``, ...).
        With ``outlets=[table_asset(table)]`` each successful run emits an asset event whose extra holds each
        procedure's result row by name, so downstream DAGs can be scheduled on "this table was compacted".
    """

    template_fields: Sequence[str] = (*IcebergProcedureOperator.template_fields, "where")

    def __init__(
        self,
        *,
        table: TableName | str,
        procedures: Sequence[str] = REWRITE_PROCEDURES,
        where: Mapping[str, str | None] | None = None,
        apply_run_params: bool = False,
        plan_task_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.check_procedures(procedures, where=where)
        if plan_task_id and where:
            raise ValueError(
                f"IcebergRewriteOperator takes where or plan_task_id, not both: with a plan, its predicates are the "
                f"CALLs' ({plan_task_id!r} rendered and narrowed them), so the table's where {dict(where)} would never "
                "be used"
            )
        others = [p for p in procedures if p not in REWRITE_PROCEDURES]
        if others:
            raise ValueError(
                f"IcebergRewriteOperator runs the rewrites {list(REWRITE_PROCEDURES)}, not {', '.join(others)}: run "
                "other procedures with IcebergProcedureOperator (or a maintenance operator)"
            )
        super().__init__(table=table, procedures=procedures, **kwargs)
        self.where: dict[str, Any] = dict(where or {})  # templates, or literal() text of a run's own
        self.apply_run_params = apply_run_params
        self.plan_task_id = plan_task_id

    def render_template_fields(self, context: Context, jinja_env: Any = None) -> None:
        # A run's own `where` replaces the table's before rendering: the table's template is then never rendered
        # (it may need a logical date the run lacks), and the run's text is taken as written, never as a template.
        # With a plan there are no templates: the predicates come from it (rendered and narrowed there).
        if self.apply_run_params and not self.plan_task_id:
            overrides = overrides_from_params(context["params"], self.iceberg_runtime)
            for procedure in self.procedures:
                run_where = overrides.where_for(procedure)
                if run_where is not None:
                    self.where[procedure] = literal(run_where)
        super().render_template_fields(context, jinja_env)

    def _calls(self, context: Context) -> list[ProcedureCall]:
        """The procedures this try runs, each with its options, predicate and arguments, checked."""
        procedures, where = self.procedures, dict(self.where)
        planned: dict[str, dict[str, Any]] = {}  # options the plan adds, by procedure
        if self.plan_task_id:
            plan = context["ti"].xcom_pull(task_ids=self.plan_task_id, key="plan")
            if plan is None:
                raise AirflowFailException(f"{self.plan_task_id} pushed no plan for {self.table} to follow")
            procedures = [p for p in self.procedures if p in plan["predicates"]]
            if not procedures:
                raise AirflowSkipException(
                    f"no partition of {self.table} needs a rewrite ({plan['decision']}: {plan['reason']})"
                )
            where = {p: plan["predicates"][p] for p in procedures}
            planned = plan.get("options", {})
            for procedure in procedures:
                self.log.info("%s takes %s: %s", procedure, plan["partitions"].get(procedure), where[procedure])
                if planned.get(procedure):
                    self.log.info("%s runs with %s: equality deletes to fold", procedure, planned[procedure])
        overrides = None
        if self.apply_run_params:  # with a plan, the run's where is in its predicates: not parsed again here
            overrides = overrides_from_params(
                context["params"], self.iceberg_runtime, parse_where=not self.plan_task_id
            )
        calls = []
        for procedure in procedures:
            options = {
                **self.options.get(procedure, {}),
                **planned.get(procedure, {}),
                **(overrides.options.get(procedure, {}) if overrides else {}),
            }
            arguments = {
                **self.arguments.get(procedure, {}),
                **(overrides.arguments.get(procedure, {}) if overrides else {}),
            }
            call = ProcedureCall(procedure, options, where.get(procedure), arguments)
            self.check_call(call)  # before Spark starts
            predicate = call.where
            # A plan's predicates were parsed by the plan task, before the gate closed: not again while writers wait.
            if predicate is not None and not self.plan_task_id:
                from airflow_iceberg.planning.predicates import check_predicate  # sqlglot: off the parse path

                check_predicate(predicate, f"{procedure}'s where")
            calls.append(call)
        return calls

    def _check_results(self, context: Context, results: dict[str, Any]) -> None:
        failure = partial_failure(results)
        if failure is not None:  # partial progress reports failed file groups instead of failing the procedure
            context["ti"].xcom_push(key="results", value=results)  # what did commit, for the record and for users
            context["ti"].xcom_push(key="partial_failure", value=failure)
            # Not retried: its commits failed behind the closed gate, so something else commits to the table, and
            # a retry in the same window would meet it again while the writers wait.
            raise AirflowFailException(
                f"On {self.table}, {failure} (see Spark's errors above). The file groups that did succeed were "
                f"committed, the others are as they were; the next run plans them again. {results}"
            )
