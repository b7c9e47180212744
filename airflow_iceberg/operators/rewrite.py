"""Run an Iceberg rewrite procedure as a PySpark job through spark-submit."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow_iceberg._lazy_imports import defer_kubernetes_client

defer_kubernetes_client()  # before the Spark provider, which imports it at once

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook  # noqa: E402
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator  # noqa: E402
from airflow.sdk import Asset, Context, literal  # noqa: E402
from airflow.sdk.exceptions import AirflowFailException  # noqa: E402

from airflow_iceberg import spark_jobs  # noqa: E402
from airflow_iceberg.catalogs import spark_settings_for_connection  # noqa: E402
from airflow_iceberg.hooks.spark_submit import IcebergSparkSubmitHook  # noqa: E402
from airflow_iceberg.hooks.write_gate import WriteGateHook, WriteGateNotHeldError  # noqa: E402
from airflow_iceberg.operators.run_params import overrides_from_params  # noqa: E402
from airflow_iceberg.operators.write_gate import run_owner  # noqa: E402
from airflow_iceberg.spark_jobs.iceberg_call import (  # noqa: E402
    TableName,
    build_call,
    normalize_arguments,
    normalize_options,
)

#: The Spark jobs this provider submits, installed with it.
SPARK_JOBS_DIR = Path(spark_jobs.__file__).resolve().parent
RUN_PROCEDURE_JOB = SPARK_JOBS_DIR / "run_procedure.py"


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
    secrets go to the job in its environment, never on the command line or into rendered templates. If
    ``write_gate_conn_id`` is set, the job is submitted only while this run still holds the table's gate.

    In local and client deploy modes the job's result row (for ``rewrite_data_files``:
    ``rewritten_data_files_count``, ``added_data_files_count``, ``rewritten_bytes_count``, ...) is logged and
    returned, so it lands in XCom. In cluster deploy mode the driver's output stays on the cluster and the
    task returns None.

    :param table: The table: a :class:`TableName`, or its text ``catalog.namespace.table``.
    :param procedure: ``rewrite_data_files`` or ``rewrite_position_delete_files``.
    :param options: Procedure options by Iceberg's names, e.g. ``{"target-file-size-bytes": 134217728}``.
    :param where: Spark SQL predicate selecting the partitions to rewrite. (templated; with
        ``apply_run_params``, a run that gives its own ``where`` uses that, as written, and this template is not
        rendered)
    :param arguments: The procedure's other named arguments, e.g. ``{"strategy": "sort"}`` or, for
        ``expire_snapshots``, ``{"older_than": "2026-11-20 00:00:00", "retain_last": 10}``.
    :param iceberg_conn_id: Iceberg connection of the table's catalog; defaults to the catalog's name.
    :param write_gate_conn_id: If set, check that this run holds the gate before submitting.
    :param apply_run_params: Let the run's Params (``where``, ``rewrite_all``, ``target_file_size_bytes``,
        ``min_input_files``, ``partial_progress``, ``strategy``, ``sort_order``) override the settings above.
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
        **kwargs: Any,
    ) -> None:
        name = TableName.of(table)
        normalize_options(procedure, options)
        normalize_arguments(procedure, arguments)
        kwargs.setdefault("application", str(RUN_PROCEDURE_JOB))
        kwargs.setdefault("py_files", str(SPARK_JOBS_DIR / "iceberg_call.py"))
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
        self._result_hook: IcebergSparkSubmitHook | None = None

    def render_template_fields(self, context: Context, jinja_env: Any = None) -> None:
        # A run's own `where` replaces the table's before rendering: the table's template is then never rendered
        # (it may need a logical date the run lacks), and the run's text is taken as written, never as a template.
        if self.apply_run_params:
            run_where = overrides_from_params(context["params"]).where
            if run_where is not None:
                self.where = literal(run_where)
        super().render_template_fields(context, jinja_env)

    def execute(self, context: Context) -> dict[str, Any] | None:
        name = self.table
        options, arguments, where = self.options, self.arguments, self.where
        if self.apply_run_params:
            overrides = overrides_from_params(context["params"])
            options = {**options, **overrides.options.get(self.procedure, {})}
            arguments = {**arguments, **overrides.arguments.get(self.procedure, {})}
        build_call(self.procedure, name, options, where, arguments)  # checked before Spark starts
        if self.write_gate_conn_id:
            try:
                WriteGateHook(self.write_gate_conn_id).get_state(name).require_held_by(run_owner(context))
            except WriteGateNotHeldError as error:
                raise AirflowFailException(str(error)) from None  # a retry would not get the gate back
        catalog = spark_settings_for_connection(name.catalog, self.iceberg_conn_id)
        # Set after template rendering on purpose: neither the catalog settings nor the secret are rendered.
        self.conf = {**catalog.conf, **(self.conf or {})}
        self.env_vars = {**(self.env_vars or {}), **catalog.job_env}
        self.application_args = [
            "--table", str(name),
            "--procedure", self.procedure,
            "--options", json.dumps(options),
        ]  # fmt: skip
        if where:
            self.application_args += ["--where", where]
        if arguments:
            self.application_args += ["--arguments", json.dumps(arguments)]
        try:
            super().execute(context)
        except Exception as error:
            conflict = self._result_hook.commit_conflict if self._result_hook else None
            if conflict is None:
                raise
            # Retrying inside the same gate window would only race the same writer again.
            raise AirflowFailException(
                f"{self.procedure} on {name} lost an Iceberg commit conflict, so it committed nothing: a writer "
                f"committed to the table during the pause. Check that every writer of {name} reads the write "
                f"gate. Spark said: {conflict}"
            ) from error
        result = self._result_hook.result if self._result_hook else None
        if result is None:
            self.log.warning("The Spark job reported no result row (cluster deploy mode keeps driver output)")
        else:
            self.log.info("%s on %s: %s", self.procedure, name, result)
        for outlet in self.outlets:  # the table's asset event carries what this procedure did
            context["outlet_events"][outlet].extra = {"procedure": self.procedure, **(result or {})}
        return result

    def _get_hook(self) -> SparkSubmitHook:
        self._result_hook = IcebergSparkSubmitHook.adopt(super()._get_hook())
        return self._result_hook
