"""Run an Iceberg rewrite procedure as a PySpark job through spark-submit."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

from airflow_iceberg._lazy_imports import defer_kubernetes_client

defer_kubernetes_client()  # before the Spark provider, which imports it at once

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook  # noqa: E402
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator  # noqa: E402
from airflow.sdk import Asset, Context, literal  # noqa: E402
from airflow.sdk.exceptions import (  # noqa: E402
    AirflowFailException,
    AirflowNotFoundException,
    AirflowSkipException,
)

from airflow_iceberg.catalogs import spark_settings_for_connection  # noqa: E402
from airflow_iceberg.core.bundle import core_zip  # noqa: E402
from airflow_iceberg.core.lease import LeaseKeeper, LeaseLostError, lease_loss  # noqa: E402
from airflow_iceberg.core.procedures import normalize_arguments, normalize_options  # noqa: E402
from airflow_iceberg.core.spark_job import JOB_SECRETS_FILE, JobArguments, ProcedureCall  # noqa: E402
from airflow_iceberg.core.tables import TableName  # noqa: E402
from airflow_iceberg.hooks.spark_submit import IcebergSparkSubmitHook  # noqa: E402
from airflow_iceberg.hooks.write_gate import WriteGateHook  # noqa: E402
from airflow_iceberg.job_secrets import job_secrets_file  # noqa: E402
from airflow_iceberg.operators.run_params import check_predicate, overrides_from_params  # noqa: E402
from airflow_iceberg.operators.write_gate import run_owner  # noqa: E402

#: The Spark jobs this provider submits, installed with it.
SPARK_JOBS_DIR = Path(str(files("airflow_iceberg.spark_jobs"))).resolve()
RUN_PROCEDURE_JOB = SPARK_JOBS_DIR / "run_procedure.py"


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


class IcebergRewriteOperator(SparkSubmitOperator):
    """Run ``CALL <catalog>.system.<procedure>(...)`` for each of ``procedures`` on one table, one after another,
    in one PySpark application, and push their result rows.

    Built for the rewrites of a gated run (``rewrite_data_files``, then ``rewrite_position_delete_files``): they
    share one Spark application, so the writers' pause pays for one Spark start-up (a JVM locally, a YARN or
    Kubernetes application on a cluster) rather than one per procedure. It runs the maintenance procedures
    (``rewrite_manifests``, ``expire_snapshots``, ``remove_orphan_files``) the same way.

    The job (``run_procedure.py`` in ``airflow_iceberg.spark_jobs``, installed with the provider) builds each
    ``CALL`` from checked parts: the table name must be ``catalog.namespace.table``, option names come from the
    procedure's known list, and option values and the ``where`` predicate travel as escaped string literals. The
    same checks run here when the DAG is parsed, so bad input fails before any gate is closed.

    The Spark catalog settings come from the Iceberg connection that the sensor also reads; the catalog's
    secrets, and the gate's, go to the job in a secrets file (mode 0600, read and deleted by the job, shipped
    with ``--files`` in cluster deploy modes), never on a command line, in a driver's spec or in rendered
    templates.

    If ``write_gate_conn_id`` is set, the task renews this run's lease on the table's gate and submits the job
    only if the run still holds it; the job then renews the lease itself while it works, starts each ``CALL``
    only on a lease with time left, and stops (cancelling its Spark jobs, before writers resume) when the run
    no longer holds the gate or the pause reaches its ceiling. That failure, an Iceberg commit conflict, and a
    partial-progress rewrite that left planned files as they were (:func:`partial_failure`) fail the task without
    retries: inside the same gate window a retry would meet the same writer.

    In local and client deploy modes each procedure's result row (for ``rewrite_data_files``:
    ``rewritten_data_files_count``, ``added_data_files_count``, ``rewritten_bytes_count``, ...) is logged and
    returned by procedure name, so it lands in XCom. In cluster deploy mode the driver's output stays on the
    cluster and the task returns None.

    :param table: The table: a :class:`TableName`, or its text ``catalog.namespace.table``.
    :param procedures: The procedures to call, in this order, e.g. ``["rewrite_data_files",
        "rewrite_position_delete_files"]``.
    :param options: Each procedure's options by Iceberg's names, by procedure, e.g.
        ``{"rewrite_data_files": {"target-file-size-bytes": 134217728}}``.
    :param where: Each rewrite's Spark SQL predicate selecting the partitions to rewrite, by procedure; a
        procedure without one takes the whole table. (templated; with ``apply_run_params``, a run that gives its
        own ``where`` uses that, as written, and the template is not rendered; with ``plan_task_id``, the plan's
        predicates are used instead)
    :param arguments: Each procedure's other named arguments, by procedure, e.g. ``{"rewrite_data_files":
        {"strategy": "sort"}}`` or ``{"expire_snapshots": {"older_than": "2026-11-20 00:00:00"}}``.
    :param iceberg_conn_id: Iceberg connection of the table's catalog; defaults to the catalog's name.
    :param write_gate_conn_id: If set, check that this run holds the gate before submitting.
    :param apply_run_params: Let the run's Params (``where``, ``rewrite_all``, ``target_file_size_bytes``,
        ``min_input_files``, ``partial_progress``, ``strategy``, ``sort_order``) override the settings above.
    :param plan_task_id: The ``plan_compaction`` task: only the procedures the plan gives a predicate run, each
        with that predicate, and the task is skipped when it gives none. It pushes its wall time to XCom under
        ``seconds``.
    :param kwargs: Passed to :class:`SparkSubmitOperator` (``conn_id``, ``jars``, ``packages``, ``conf``, ...).
        With ``outlets=[table_asset(table)]`` each successful run emits an asset event whose extra holds each
        procedure's result row by name, so downstream DAGs can be scheduled on "this table was compacted".
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "where")

    def __init__(
        self,
        *,
        table: TableName | str,
        procedures: Sequence[str],
        options: Mapping[str, Mapping[str, Any]] | None = None,
        where: Mapping[str, str | None] | None = None,
        arguments: Mapping[str, Mapping[str, Any]] | None = None,
        iceberg_conn_id: str | None = None,
        write_gate_conn_id: str | None = None,
        apply_run_params: bool = False,
        plan_task_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        name = TableName.of(table)
        if isinstance(procedures, str) or not procedures or len(set(procedures)) != len(procedures):
            raise ValueError(f"procedures must be a list of distinct procedure names, got {procedures!r}")
        for what, by_procedure in (("options", options), ("where", where), ("arguments", arguments)):
            unknown = sorted(set(by_procedure or {}) - set(procedures))
            if unknown:
                raise ValueError(f"{what} given for {', '.join(unknown)}, which is not among procedures {procedures}")
        for procedure in procedures:
            normalize_options(procedure, (options or {}).get(procedure))
            normalize_arguments(procedure, (arguments or {}).get(procedure))
        kwargs.setdefault("application", str(RUN_PROCEDURE_JOB))
        kwargs.setdefault("name", f"iceberg-{','.join(procedures)}-{name}")
        super().__init__(**kwargs)
        self.table = name
        self.procedures = list(procedures)
        self.options = {p: dict(o) for p, o in (options or {}).items()}
        self.where: dict[str, Any] = dict(where or {})  # templates, or literal() text of a run's own
        self.arguments = {p: dict(a) for p, a in (arguments or {}).items()}
        self.iceberg_conn_id = iceberg_conn_id or name.catalog
        self.write_gate_conn_id = write_gate_conn_id
        self.apply_run_params = apply_run_params
        self.plan_task_id = plan_task_id
        self._declared_files = self.files
        self._result_hook: IcebergSparkSubmitHook | None = None
        self._lease_lost: str | None = None

    def render_template_fields(self, context: Context, jinja_env: Any = None) -> None:
        # A run's own `where` replaces the table's before rendering: the table's template is then never rendered
        # (it may need a logical date the run lacks), and the run's text is taken as written, never as a template.
        # With a plan, the predicates come from it (rendered and narrowed there): these templates are not rendered.
        if self.plan_task_id:
            self.where = {}
        elif self.apply_run_params:
            overrides = overrides_from_params(context["params"])
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
        overrides = overrides_from_params(context["params"]) if self.apply_run_params else None
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
            call.statement(self.table)  # checked before Spark starts
            predicate = call.where
            # A plan's predicates were parsed by the plan task, before the gate closed: not again while writers wait.
            if predicate is not None and not self.plan_task_id:
                check_predicate(predicate, f"{procedure}'s where")
            calls.append(call)
        return calls

    def execute(self, context: Context) -> dict[str, Any] | None:  # type: ignore[override]  # results to XCom
        name = self.table
        calls = self._calls(context)
        started = time.monotonic()
        cluster = self._in_cluster_deploy_mode()
        self._hook = None  # built anew from this try's settings (a retry in the same process keeps none)
        self._lease_lost = None
        secrets: dict[str, Any] = {}
        keeper = None
        if self.write_gate_conn_id:
            gate = WriteGateHook(self.write_gate_conn_id)
            owner = run_owner(context)
            try:
                held = gate.renew_lease(name, owner)
            except LeaseLostError as error:
                raise AirflowFailException(str(error)) from None  # a retry would not get the gate back
            if held.lease_seconds is None:  # a gate this run holds has a lease
                raise AirflowFailException(f"the write gate of {name} has no lease after its renewal")
            secrets["gate"] = {**gate.owner_settings(name, owner), "lease_seconds": held.lease_seconds}
            # The task renews too, from spark-submit's start (a JVM, a YARN container) until the job ends.
            keeper = LeaseKeeper.for_lease(
                gate.lease(name, owner), held.lease_seconds, self._stop_spark, log=self.log.warning
            )
        catalog = spark_settings_for_connection(name.catalog, self.iceberg_conn_id)
        secrets.update(catalog.job_secrets)
        # Set after template rendering on purpose: neither the catalog settings nor the secrets are rendered.
        self.conf = {**catalog.conf, **(self.conf or {})}
        with job_secrets_file(secrets) as secrets_path:
            # In cluster modes the driver runs elsewhere: spark-submit ships the file, the job finds it by name.
            self.files = ",".join(filter(None, [self._declared_files, str(secrets_path) if cluster else None]))
            self.application_args = JobArguments(name, calls, JOB_SECRETS_FILE if cluster else str(secrets_path)).argv()
            try:
                if keeper is not None:
                    keeper.start()
                super().execute(context)
            except Exception as error:
                raise self._failure(error) from error
            finally:
                if keeper is not None:
                    keeper.stop()
        hook = self._result_hook
        results = dict(hook.results) if hook is not None else {}
        if not results:
            self.log.warning("The Spark job reported no result rows (cluster deploy mode keeps driver output)")
        for procedure, result in results.items():
            self.log.info("%s on %s: %s", procedure, name, result)
        failure = partial_failure(results)
        if failure is not None:  # partial progress reports failed file groups instead of failing the procedure
            context["ti"].xcom_push(key="results", value=results)  # what did commit, for the record and for users
            context["ti"].xcom_push(key="partial_failure", value=failure)
            # Not retried: its commits failed behind the closed gate, so something else commits to the table, and
            # a retry in the same window would meet it again while the writers wait.
            raise AirflowFailException(
                f"On {name}, {failure} (see Spark's errors above). The file groups that did succeed were committed, "
                f"the others are as they were; the next run plans them again. {results}"
            )
        context["ti"].xcom_push(key="seconds", value=round(time.monotonic() - started, 3))
        for outlet in self.outlets:  # the table's asset event carries what each procedure did
            context["outlet_events"][outlet].extra = {"procedures": results}  # type: ignore[dict-item]  # JSON rows
        return results or None

    def _stop_spark(self, reason: str) -> None:
        """The task's lease keeper lost the gate: end spark-submit (the job, if started, stops on its own too)."""
        self._lease_lost = reason
        if self._hook is not None:
            self._hook.on_kill()

    def _failure(self, error: Exception) -> Exception:
        """What the task raises for a failed Spark job: failures a retry cannot mend fail it at once."""
        hook = self._result_hook
        what = f"{', '.join(self.procedures)} on {self.table}"
        done = f" ({', '.join(hook.results)} had completed and committed)" if hook is not None and hook.results else ""
        lost = (
            (hook.lease_lost if hook is not None else None)
            or self._lease_lost
            or (str(error) if isinstance(error, LeaseLostError) else None)
        )
        if lost is not None:
            advice = {
                "taken": "The gate's audit trail (`airflow-iceberg report`) says who took it.",
                "ceiling": "Raise the table's max_pause_seconds, or rewrite less in one run (a narrower where).",
                "not renewed": f"Check that the gate's MySQL (connection {self.write_gate_conn_id!r}) answers from "
                "the workers and from Spark.",
            }.get(lease_loss(lost), "")
            return AirflowFailException(
                f"{what} was stopped because its run could not keep the write gate: {lost}. "
                f"Writers may commit now{done}; each commit it completed before it stopped stays (Iceberg commits "
                f"are atomic), and it committed nothing else. {advice}".rstrip()
            )
        if hook is not None and hook.commit_conflict is not None:
            # Retrying inside the same gate window would only race the same writer again.
            return AirflowFailException(
                f"{what} lost an Iceberg commit conflict, so that procedure committed nothing{done}: a writer "
                f"committed to the table during the pause. Check that every writer of {self.table} reads the "
                f"write gate. Spark said: {hook.commit_conflict}"
            )
        return error

    def _in_cluster_deploy_mode(self) -> bool:
        """Whether the driver runs on the cluster, as the Spark provider's hook decides it (operator, then extra).

        Python applications cannot run in cluster deploy mode on a standalone master: that is refused here,
        naming the connection, before anything is submitted.
        """
        mode, master = self._deploy_mode, ""
        try:
            connection = SparkSubmitHook.get_connection(self._conn_id)
            mode = mode or connection.extra_dejson.get("deploy-mode")
            master = connection.host or ""
        except AirflowNotFoundException:
            pass
        if mode == "cluster" and master.startswith("spark://"):
            raise AirflowFailException(
                f"Spark connection {self._conn_id!r} asks for cluster deploy mode on a standalone master "
                f"({master}), where Spark cannot run a Python application: use client deploy mode"
            )
        return mode == "cluster"

    def _get_hook(self) -> SparkSubmitHook:
        # The core the job imports, as one zip beside any py_files of the user's: built when the task runs, since a
        # constructor does no I/O.
        core = str(core_zip())
        if core not in (self.py_files or "").split(","):
            self.py_files = ",".join(filter(None, (core, self.py_files)))
        self._result_hook = IcebergSparkSubmitHook.adopt(super()._get_hook())
        return self._result_hook
