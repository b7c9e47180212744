"""Run an Iceberg rewrite procedure as a PySpark job through spark-submit."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow_iceberg._lazy_imports import defer_kubernetes_client

defer_kubernetes_client()  # before the Spark provider, which imports it at once

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook  # noqa: E402
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator  # noqa: E402
from airflow.sdk import Asset, Context, literal  # noqa: E402
from airflow.sdk.exceptions import (  # noqa: E402
    AirflowException,
    AirflowFailException,
    AirflowNotFoundException,
    AirflowSkipException,
)

from airflow_iceberg import spark_jobs  # noqa: E402
from airflow_iceberg.catalogs import spark_settings_for_connection  # noqa: E402
from airflow_iceberg.hooks.spark_submit import IcebergSparkSubmitHook  # noqa: E402
from airflow_iceberg.hooks.write_gate import WriteGateHook, WriteGateNotHeldError  # noqa: E402
from airflow_iceberg.job_secrets import job_secrets_file  # noqa: E402
from airflow_iceberg.operators.run_params import overrides_from_params  # noqa: E402
from airflow_iceberg.operators.write_gate import run_owner  # noqa: E402
from airflow_iceberg.spark_jobs.iceberg_call import (  # noqa: E402
    JOB_SECRETS_FILE,
    TableName,
    build_call,
    normalize_arguments,
    normalize_options,
)
from airflow_iceberg.spark_jobs.write_gate import LeaseKeeper, LeaseLostError  # noqa: E402

#: The Spark jobs this provider submits, installed with it.
SPARK_JOBS_DIR = Path(spark_jobs.__file__).resolve().parent
RUN_PROCEDURE_JOB = SPARK_JOBS_DIR / "run_procedure.py"
#: The modules the job imports, shipped beside it with ``--py-files``.
SPARK_JOB_HELPERS = ("iceberg_call.py", "write_gate.py")


def table_asset(table: TableName) -> Asset:
    """The Airflow Asset standing for an Iceberg table: ``iceberg://<catalog>/<namespace>/<table>``."""
    return Asset(uri=f"iceberg://{table.catalog}/{table.namespace}/{table.table}", name=str(table))


class IcebergRewriteOperator(SparkSubmitOperator):
    """Run ``CALL <catalog>.system.<procedure>(...)`` on one table in a PySpark job and push its result row.

    Built for the rewrites (``rewrite_data_files``, ``rewrite_position_delete_files``); it runs the table-care
    procedures (``rewrite_manifests``, ``expire_snapshots``, ``remove_orphan_files``) the same way.

    The job (``run_procedure.py`` in ``airflow_iceberg.spark_jobs``, installed with the provider) builds the
    ``CALL`` from checked parts: the table name must be ``catalog.namespace.table``, option names come from the
    procedure's known list, and option values and the ``where`` predicate travel as escaped string literals. The
    same checks run here when the DAG is parsed, so bad input fails before any gate is closed.

    The Spark catalog settings come from the Iceberg connection that the sensor also reads; the catalog's
    secrets, and the gate's, go to the job in a secrets file (mode 0600, read and deleted by the job, shipped
    with ``--files`` in cluster deploy modes), never on a command line, in a driver's spec or in rendered
    templates.

    If ``write_gate_conn_id`` is set, the task renews this run's lease on the table's gate and submits the job
    only if the run still holds it; the job then renews the lease itself while it works, and stops (cancelling
    its Spark jobs, before writers resume) when the run no longer holds the gate or the pause reaches its
    ceiling. That failure, and an Iceberg commit conflict, fail the task without retries: inside the same gate
    window a retry would meet the same writer.

    In local and client deploy modes the job's result row (for ``rewrite_data_files``:
    ``rewritten_data_files_count``, ``added_data_files_count``, ``rewritten_bytes_count``, ...) is logged and
    returned, so it lands in XCom. In cluster deploy mode the driver's output stays on the cluster and the
    task returns None.

    :param table: The table: a :class:`TableName`, or its text ``catalog.namespace.table``.
    :param procedure: ``rewrite_data_files`` or ``rewrite_position_delete_files``.
    :param options: Procedure options by Iceberg's names, e.g. ``{"target-file-size-bytes": 134217728}``.
    :param where: Spark SQL predicate selecting the partitions to rewrite. (templated; with
        ``apply_run_params``, a run that gives its own ``where`` uses that, as written, and this template is not
        rendered; with ``plan_task_id``, the plan's predicate is used instead)
    :param arguments: The procedure's other named arguments, e.g. ``{"strategy": "sort"}`` or, for
        ``expire_snapshots``, ``{"older_than": "2026-11-20 00:00:00", "retain_last": 10}``.
    :param iceberg_conn_id: Iceberg connection of the table's catalog; defaults to the catalog's name.
    :param write_gate_conn_id: If set, check that this run holds the gate before submitting.
    :param apply_run_params: Let the run's Params (``where``, ``rewrite_all``, ``target_file_size_bytes``,
        ``min_input_files``, ``partial_progress``, ``strategy``, ``sort_order``) override the settings above.
    :param plan_task_id: The ``plan_compaction`` task: the rewrite then runs with the predicate the plan gives
        it, or is skipped when the plan gives it none. It pushes its wall time to XCom under ``seconds``.
    :param kwargs: Passed to :class:`SparkSubmitOperator` (``conn_id``, ``jars``, ``packages``, ``conf``, ...).
        With ``outlets=[table_asset(table)]`` each successful run emits an asset event whose extra holds the
        procedure's name and result row, so downstream DAGs can be scheduled on "this table was compacted".
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "where")

    def __init__(
        self,
        *,
        table: TableName | str,
        procedure: str,
        options: Mapping[str, Any] | None = None,
        where: str | None = None,
        arguments: Mapping[str, Any] | None = None,
        iceberg_conn_id: str | None = None,
        write_gate_conn_id: str | None = None,
        apply_run_params: bool = False,
        plan_task_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        name = TableName.of(table)
        normalize_options(procedure, options)
        normalize_arguments(procedure, arguments)
        kwargs.setdefault("application", str(RUN_PROCEDURE_JOB))
        kwargs.setdefault("py_files", ",".join(str(SPARK_JOBS_DIR / helper) for helper in SPARK_JOB_HELPERS))
        kwargs.setdefault("name", f"iceberg-{procedure}-{name}")
        super().__init__(**kwargs)
        self.table = name
        self.procedure = procedure
        self.options = dict(options or {})
        self.where = where
        self.arguments = dict(arguments or {})
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
        # With a plan, the predicate comes from it (rendered and narrowed there): this template is not rendered.
        if self.plan_task_id:
            self.where = None
        elif self.apply_run_params:
            run_where = overrides_from_params(context["params"]).where_for(self.procedure)
            if run_where is not None:
                self.where = literal(run_where)
        super().render_template_fields(context, jinja_env)

    def execute(self, context: Context) -> dict[str, Any] | None:
        name = self.table
        options, arguments, where = self.options, self.arguments, self.where
        if self.plan_task_id:
            plan = context["ti"].xcom_pull(task_ids=self.plan_task_id, key="plan")
            if plan is None:
                raise AirflowFailException(f"{self.plan_task_id} pushed no plan for {self.procedure} to follow")
            if self.procedure not in plan["predicates"]:
                raise AirflowSkipException(
                    f"no partition of {name} needs {self.procedure} ({plan['decision']}: {plan['reason']})"
                )
            where = plan["predicates"][self.procedure]
            self.log.info("%s takes %s: %s", self.procedure, plan["partitions"].get(self.procedure), where)
        started = time.monotonic()
        if self.apply_run_params:
            overrides = overrides_from_params(context["params"])
            options = {**options, **overrides.options.get(self.procedure, {})}
            arguments = {**arguments, **overrides.arguments.get(self.procedure, {})}
        build_call(self.procedure, name, options, where, arguments)  # checked before Spark starts
        if where is not None:
            from airflow_iceberg.predicates import PredicateError, parse_predicate  # sqlglot: off the parse path

            try:
                parse_predicate(where, what=f"{self.procedure}'s where")
            except PredicateError as error:
                raise AirflowFailException(str(error)) from None
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
            except WriteGateNotHeldError as error:
                raise AirflowFailException(str(error)) from None  # a retry would not get the gate back
            secrets["gate"] = {**gate.holder_settings(name, owner), "lease_seconds": held.lease_seconds}
            # The task renews too, from spark-submit's start (a JVM, a YARN container) until the job ends.
            keeper = LeaseKeeper.for_lease(gate.lease(name, owner), held.lease_seconds, self._stop_spark,
                                           log=self.log.warning)  # fmt: skip
        catalog = spark_settings_for_connection(name.catalog, self.iceberg_conn_id)
        secrets.update(catalog.job_secrets)
        # Set after template rendering on purpose: neither the catalog settings nor the secrets are rendered.
        self.conf = {**catalog.conf, **(self.conf or {})}
        with job_secrets_file(secrets) as secrets_path:
            # In cluster modes the driver runs elsewhere: spark-submit ships the file, the job finds it by name.
            self.files = ",".join(filter(None, [self._declared_files, str(secrets_path) if cluster else None]))
            self.application_args = [
                "--table", str(name),
                "--procedure", self.procedure,
                "--options", json.dumps(options),
                "--job-secrets", JOB_SECRETS_FILE if cluster else str(secrets_path),
            ]  # fmt: skip
            if where:
                self.application_args += ["--where", where]
            if arguments:
                self.application_args += ["--arguments", json.dumps(arguments)]
            try:
                if keeper is not None:
                    keeper.start()
                super().execute(context)
            except Exception as error:
                raise self._failure(error) from error
            finally:
                if keeper is not None:
                    keeper.stop()
        result = self._result_hook.result if self._result_hook else None
        if result is None:
            self.log.warning("The Spark job reported no result row (cluster deploy mode keeps driver output)")
        else:
            self.log.info("%s on %s: %s", self.procedure, name, result)
            failed = result.get("failed_data_files_count") or 0
            if failed:  # partial progress reports failed file groups instead of failing the procedure
                raise AirflowException(
                    f"{self.procedure} on {name} could not rewrite {failed} data files (see Spark's errors above); "
                    f"file groups that did succeed were committed, the others are as they were: {result}"
                )
        context["ti"].xcom_push(key="seconds", value=round(time.monotonic() - started, 3))
        for outlet in self.outlets:  # the table's asset event carries what this procedure did
            context["outlet_events"][outlet].extra = {"procedure": self.procedure, **(result or {})}
        return result

    def _stop_spark(self, reason: str) -> None:
        """The task's lease keeper lost the gate: end spark-submit (the job, if started, stops on its own too)."""
        self._lease_lost = reason
        if self._hook is not None:
            self._hook.on_kill()

    def _failure(self, error: Exception) -> Exception:
        """What the task raises for a failed Spark job: failures a retry cannot mend fail it at once."""
        hook = self._result_hook
        lost = (
            (hook.lease_lost if hook is not None else None)
            or self._lease_lost
            or (str(error) if isinstance(error, LeaseLostError) else None)
        )
        if lost is not None:
            return AirflowFailException(
                f"{self.procedure} on {self.table} stopped because its run no longer holds the write gate, so "
                "writers may commit. Each commit it completed before it stopped stays (Iceberg commits are "
                f"atomic); it committed nothing else. It said: {lost}"
            )
        if hook is not None and hook.commit_conflict is not None:
            # Retrying inside the same gate window would only race the same writer again.
            return AirflowFailException(
                f"{self.procedure} on {self.table} lost an Iceberg commit conflict, so it committed nothing: a "
                f"writer committed to the table during the pause. Check that every writer of {self.table} reads "
                f"the write gate. Spark said: {hook.commit_conflict}"
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
        self._result_hook = IcebergSparkSubmitHook.adopt(super()._get_hook())
        return self._result_hook
