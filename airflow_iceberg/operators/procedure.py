"""Run Iceberg procedures on one table as a PySpark job through spark-submit: the base of the rewrite and the
maintenance operators."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

from airflow_iceberg.hooks.spark_submit import IcebergSparkSubmitHook, defer_kubernetes_client

defer_kubernetes_client()  # before the Spark provider's operator (the hook module did too, before its own import)

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook  # noqa: E402
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator  # noqa: E402
from airflow.sdk import Context  # noqa: E402
from airflow.sdk.exceptions import AirflowFailException, AirflowNotFoundException  # noqa: E402

from airflow_iceberg.core.bundle import core_zip  # noqa: E402
from airflow_iceberg.core.iceberg_runtime import check_options, runtime_of  # noqa: E402
from airflow_iceberg.core.job_secrets import JOB_SECRETS_FILE, JobSecrets, job_secrets_file  # noqa: E402
from airflow_iceberg.core.lease import LeaseKeeper, LeaseLostError, lease_loss  # noqa: E402
from airflow_iceberg.core.procedures import checked_procedure, normalize_arguments, normalize_options  # noqa: E402
from airflow_iceberg.core.spark_job import JobArguments, ProcedureCall  # noqa: E402
from airflow_iceberg.core.tables import TableName  # noqa: E402
from airflow_iceberg.hooks.catalogs import spark_settings_for_connection  # noqa: E402
from airflow_iceberg.hooks.write_gate import WriteGateHook, run_owner  # noqa: E402

#: The Spark jobs this provider submits, installed with it.
SPARK_JOBS_DIR = Path(str(files("airflow_iceberg.spark_jobs"))).resolve()
RUN_PROCEDURE_JOB = SPARK_JOBS_DIR / "run_procedure.py"


class IcebergProcedureOperator(SparkSubmitOperator):
    """Run ``CALL <catalog>.system.<procedure>(...)`` for each of ``procedures`` on one table, one after another,
    in one PySpark application, and push their result rows.

    One Spark application runs them all, so a run pays for one Spark start-up (a JVM locally, a YARN or
    Kubernetes application on a cluster) rather than one per procedure. :class:`IcebergRewriteOperator` runs the
    gated rewrites with it; the maintenance operators (``ExpireSnapshotsOperator``, ``RemoveOrphanFilesOperator``)
    subclass it, and ``rewrite_manifests`` runs on it as it is.

    The job (``run_procedure.py`` in ``airflow_iceberg.spark_jobs``, installed with the provider) builds each
    ``CALL`` from checked parts: the table name must be ``catalog.namespace.table``, option and argument names
    come from the procedure's known list, and values travel as escaped string literals. The same checks run here
    when the DAG is parsed, so bad input fails before any gate is closed.

    The Spark catalog settings come from the Iceberg connection that the sensor also reads; the catalog's
    secrets, and the gate's, go to the job in a secrets file (mode 0600, read and deleted by the job, shipped
    with ``--files`` in cluster deploy modes), never on a command line, in a driver's spec or in rendered
    templates.

    If ``write_gate_conn_id`` is set, the task renews this run's lease on the table's gate and submits the job
    only if the run still holds it; the job then renews the lease itself while it works, starts each ``CALL``
    only on a lease with time left, and stops (cancelling its Spark jobs, before writers resume) when the run
    no longer holds the gate or the pause reaches its ceiling. That failure and an Iceberg commit conflict fail
    the task without retries: inside the same gate window a retry would meet the same writer.

    In local and client deploy modes each procedure's result row is logged and returned by procedure name, so it
    lands in XCom, and the job's wall time is pushed under ``seconds``. In cluster deploy mode the driver's
    output stays on the cluster and the task returns None.

    :param table: The table: a :class:`TableName`, or its text ``catalog.namespace.table``.
    :param procedures: The procedures to call, in this order, e.g. ``["rewrite_manifests"]``.
    :param options: Each procedure's options by Iceberg's names, by procedure, e.g.
        ``{"rewrite_data_files": {"target-file-size-bytes": 134217728}}``.
    :param arguments: Each procedure's other named arguments, by procedure, e.g.
        ``{"expire_snapshots": {"older_than": "2026-11-20 00:00:00"}}``.
    :param iceberg_conn_id: Iceberg connection of the table's catalog; defaults to the catalog's name.
    :param write_gate_conn_id: If set, check that this run holds the gate before submitting.
    :param iceberg_version: Iceberg's version in the job's Spark (e.g. ``1.5.2``), when neither ``jars`` nor
        ``packages`` name an ``iceberg-spark-runtime``: an option that version lacks is refused here, naming it.
    :param kwargs: Passed to :class:`SparkSubmitOperator` (``conn_id``, ``jars``, ``packages``, ``conf``, ...).
        With ``outlets=[table_asset(table)]`` each successful run emits an asset event whose extra holds each
        procedure's result row by name.
    """

    def __init__(
        self,
        *,
        table: TableName | str,
        procedures: Sequence[str],
        options: Mapping[str, Mapping[str, Any]] | None = None,
        arguments: Mapping[str, Mapping[str, Any]] | None = None,
        iceberg_conn_id: str | None = None,
        write_gate_conn_id: str | None = None,
        iceberg_version: str | None = None,
        **kwargs: Any,
    ) -> None:
        name = TableName.of(table)
        self.check_procedures(procedures, options=options, arguments=arguments)
        listed = {key: str(kwargs.get(key) or "").split(",") for key in ("packages", "jars")}
        self.iceberg_runtime = runtime_of(listed["packages"], listed["jars"], iceberg_version)
        for procedure in procedures:
            check_options(procedure, normalize_options(procedure, (options or {}).get(procedure)), self.iceberg_runtime)
            normalize_arguments(procedure, (arguments or {}).get(procedure))
        kwargs.setdefault("application", str(RUN_PROCEDURE_JOB))
        kwargs.setdefault("name", f"iceberg-{','.join(procedures)}-{name}")
        super().__init__(**kwargs)
        self.table = name
        self.procedures = list(procedures)
        self.options = {p: dict(o) for p, o in (options or {}).items()}
        self.arguments = {p: dict(a) for p, a in (arguments or {}).items()}
        self.iceberg_conn_id = iceberg_conn_id or name.catalog
        self.write_gate_conn_id = write_gate_conn_id
        self._declared_files = self.files
        self._result_hook: IcebergSparkSubmitHook | None = None
        self._lease_lost: str | None = None

    @staticmethod
    def check_procedures(procedures: Sequence[str], **by_procedure: Mapping[str, Any] | None) -> None:
        """Refuse, naming it, a ``procedures`` that is not a list of distinct procedures Iceberg has, or a setting
        given by procedure (``options=``, ``where=``, ...) for one not among them."""
        if isinstance(procedures, str) or not procedures or len(set(procedures)) != len(procedures):
            raise ValueError(f"procedures must be a list of distinct procedure names, got {procedures!r}")
        for procedure in procedures:
            checked_procedure(procedure)
        for what, given in by_procedure.items():
            unknown = sorted(set(given or {}) - set(procedures))
            if unknown:
                raise ValueError(f"{what} given for {', '.join(unknown)}, which is not among procedures {procedures}")

    def _calls(self, context: Context) -> list[ProcedureCall]:
        """The procedures this try runs, each with its options and arguments, checked before Spark starts."""
        calls = [ProcedureCall(p, self.options.get(p, {}), None, self.arguments.get(p, {})) for p in self.procedures]
        for call in calls:
            self.check_call(call)
        return calls

    def check_call(self, call: ProcedureCall) -> None:
        """Refuse, before Spark starts, a call that is not safe to build or that the job's Iceberg cannot take."""
        call.statement(self.table)
        check_options(call.procedure, normalize_options(call.procedure, call.options), self.iceberg_runtime)

    def _check_results(self, context: Context, results: dict[str, Any]) -> None:
        """After the job succeeded, with its result rows by procedure: raise to fail the task on what they say."""

    def execute(self, context: Context) -> dict[str, Any] | None:  # type: ignore[override]  # results to XCom
        name = self.table
        calls = self._calls(context)
        started = time.monotonic()
        cluster = self._in_cluster_deploy_mode()
        self._hook = None  # built anew from this try's settings (a retry in the same process keeps none)
        self._lease_lost = None
        secrets: JobSecrets = {}
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
            secrets["gate"] = gate.owner_settings(name, owner, held.lease_seconds)
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
        self._check_results(context, results)
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
