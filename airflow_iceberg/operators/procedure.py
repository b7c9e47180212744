"""Run Iceberg procedures on one table as a PySpark job through spark-submit: the base of the rewrite and the
maintenance operators."""

from __future__ import annotations

import getpass
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

from airflow_iceberg.hooks.spark_submit import (
    RM_CONNECT_WAIT,
    HadoopSimpleAuth,
    IcebergSparkSubmitHook,
    defer_kubernetes_client,
)

defer_kubernetes_client()  # before the Spark provider's operator (the hook module did too, before its own import)

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook  # noqa: E402
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator  # noqa: E402
from airflow.sdk import Context  # noqa: E402
from airflow.sdk.exceptions import AirflowFailException, AirflowNotFoundException, AirflowSkipException  # noqa: E402

from airflow_iceberg.core.bundle import core_zip  # noqa: E402
from airflow_iceberg.core.gate_work import NoGo, WorkHandshake, await_go  # noqa: E402
from airflow_iceberg.core.iceberg_runtime import check_options, runtime_of  # noqa: E402
from airflow_iceberg.core.job_report import new_report_id  # noqa: E402
from airflow_iceberg.core.job_secrets import JOB_SECRETS_FILE, JobSecrets, job_secrets_file  # noqa: E402
from airflow_iceberg.core.lease import LeaseKeeper, LeaseLostError, lease_loss  # noqa: E402
from airflow_iceberg.core.procedures import checked_procedure, normalize_arguments, normalize_options  # noqa: E402
from airflow_iceberg.core.spark_job import JobAnswers, JobArguments, ProcedureCall  # noqa: E402
from airflow_iceberg.core.tables import TableName  # noqa: E402
from airflow_iceberg.hooks.catalogs import spark_settings_for_connection  # noqa: E402
from airflow_iceberg.hooks.write_gate import WriteGateHook, run_attempt, run_owner, telling_the_work  # noqa: E402

#: The Spark jobs this provider submits, installed with it.
SPARK_JOBS_DIR = Path(str(files("airflow_iceberg.spark_jobs"))).resolve()
RUN_PROCEDURE_JOB = SPARK_JOBS_DIR / "run_procedure.py"


#: A try's Spark connection before its first lookup.
_UNREAD = object()


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

    Each procedure's result row is logged and returned by procedure name, so it lands in XCom, and the job's wall
    time is pushed under ``seconds``. Behind a write gate the job also writes its result rows and markers into the
    gate's MySQL (``core/job_report.py``), and the task takes them from there first: in cluster deploy mode the
    driver's output stays on the cluster, and the answers are the same as in client mode. Without a gate, in
    cluster deploy mode, the task returns None.

    :param table: The table: a :class:`TableName`, or its text ``catalog.namespace.table``.
    :param procedures: The procedures to call, in this order, e.g. ``["rewrite_manifests"]``.
    :param options: Each procedure's options by Iceberg's names, by procedure, e.g.
        ``{"rewrite_data_files": {"target-file-size-bytes": 134217728}}``.
    :param arguments: Each procedure's other named arguments, by procedure, e.g.
        ``{"expire_snapshots": {"older_than": "2026-11-20 00:00:00"}}``.
    :param iceberg_conn_id: Iceberg connection of the table's catalog; defaults to the catalog's name.
    :param write_gate_conn_id: If set, check that this run holds the gate before submitting.
    :param wait_for_go_seconds: Pre-start the work (with ``write_gate_conn_id``): submit the job before the gate
        closes, as the gate's ``close_gate`` waits for it; the job builds its session, says it is ready, and begins
        at the idle wait's go, waiting at most this long for it (``core/gate_work.py``). The lease is renewed from
        the go on, by the job and by this task. None: the gate is closed already, and the job begins at once.
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
        wait_for_go_seconds: int | None = None,
        iceberg_version: str | None = None,
        **kwargs: Any,
    ) -> None:
        name = TableName.of(table)
        if wait_for_go_seconds is not None and (not write_gate_conn_id or wait_for_go_seconds <= 0):
            raise ValueError(
                f"wait_for_go_seconds ({wait_for_go_seconds!r}) needs a write_gate_conn_id and a positive number: "
                "the work waits for its gate's go"
            )
        self.check_procedures(procedures, options=options, arguments=arguments)
        listed = {key: str(kwargs.get(key) or "").split(",") for key in ("packages", "jars")}
        self.iceberg_runtime = runtime_of(listed["packages"], listed["jars"], iceberg_version)
        for procedure in procedures:
            check_options(procedure, normalize_options(procedure, (options or {}).get(procedure)), self.iceberg_runtime)
            normalize_arguments(procedure, (arguments or {}).get(procedure))
        kwargs.setdefault("application", str(RUN_PROCEDURE_JOB))
        kwargs.setdefault("name", f"iceberg-{','.join(procedures)}-{name}")
        super().__init__(**kwargs)
        # Each try submits an application of its own, under its own lease and report: a retry never takes over an
        # earlier try's application (which the Spark provider's durable tracking would do).
        if hasattr(self, "durable") and "durable" not in kwargs:
            self.durable = False
        self.table = name
        self.procedures = list(procedures)
        self.options = {p: dict(o) for p, o in (options or {}).items()}
        self.arguments = {p: dict(a) for p, a in (arguments or {}).items()}
        self.iceberg_conn_id = iceberg_conn_id or name.catalog
        self.write_gate_conn_id = write_gate_conn_id
        self.wait_for_go_seconds = wait_for_go_seconds
        self._declared_files = self.files
        self._result_hook: IcebergSparkSubmitHook | None = None
        #: This try's report through the gate's MySQL (``core/job_report.py``), and what it said once read.
        self._report_id: str | None = None
        self._reported: JobAnswers | None = None
        self._lease_lost: str | None = None
        self._went_at: float | None = None  # pre-started: when this task saw the go (monotonic)
        self._spark_conn: Any = _UNREAD

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
        handshake = self._handshake(context)
        # Pre-started work that will not run again says so, or close_gate would wait for it to be ready.
        with telling_the_work(handshake, context, self.retries, self.task_id):
            try:
                return self._execute(context, handshake)
            except AirflowSkipException as skipped:
                if handshake is not None:
                    handshake.stop(f"{self.task_id} was skipped: {skipped}")
                raise

    def _handshake(self, context: Context) -> WorkHandshake | None:
        if self.wait_for_go_seconds is None or not self.write_gate_conn_id:
            return None
        return WriteGateHook(self.write_gate_conn_id).handshake(self.table, run_owner(context), run_attempt(context))

    def _execute(self, context: Context, handshake: WorkHandshake | None) -> dict[str, Any] | None:
        name = self.table
        calls = self._calls(context)
        started = time.monotonic()
        self._spark_conn = _UNREAD  # this try's lookup
        cluster = self._in_cluster_deploy_mode()
        self._hook = None  # built anew from this try's settings (a retry in the same process keeps none)
        self._lease_lost = None
        self._went_at = None
        self._report_id = self._reported = None
        secrets: JobSecrets = {}
        keeper = watch = None
        if self.write_gate_conn_id:
            gate = WriteGateHook(self.write_gate_conn_id)
            owner = run_owner(context)
            if handshake is not None:
                # A try after a stop (the idle wait failed, or saw an earlier try's work go silent) would start Spark
                # only for its job to read the stop: the writers wait for this try to end, so end it now.
                if stop := handshake.look().stop_reason:
                    raise AirflowFailException(
                        f"{', '.join(self.procedures)} on {name} did not run: {stop}. No CALL ran; the table is as "
                        "it was."
                    )
                # Pre-started: the gate is not closed yet. The job and this task renew the lease from the go on.
                secrets["gate"] = {
                    **gate.owner_settings(name, owner, 0),
                    "attempt": handshake.attempt,
                    "wait_for_go_seconds": self.wait_for_go_seconds,  # type: ignore[typeddict-item]
                }
                watch = _GoWatch(handshake.copy(), float(self.wait_for_go_seconds or 0), self._went, self.log.info)
            else:
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
            # The job says its answers through the gate's MySQL too: in cluster deploy mode that is all there is.
            self._report_id = secrets["gate"]["report_id"] = new_report_id()
        catalog = spark_settings_for_connection(name.catalog, self.iceberg_conn_id)
        secrets.update(catalog.job_secrets)
        # Set after template rendering on purpose: neither the catalog settings nor the secrets are rendered.
        self.conf = {**catalog.conf, **(RM_CONNECT_WAIT if self._on_yarn() else {}), **(self.conf or {})}
        with job_secrets_file(secrets) as secrets_path:
            # In cluster modes the driver runs elsewhere: spark-submit ships the file, the job finds it by name.
            self.files = ",".join(filter(None, [self._declared_files, str(secrets_path) if cluster else None]))
            self.application_args = JobArguments(name, calls, JOB_SECRETS_FILE if cluster else str(secrets_path)).argv()
            try:
                if keeper is not None:
                    keeper.start()
                if watch is not None:
                    watch.start()
                super().execute(context)
            except BaseException as error:  # AirflowTaskTimeout is a BaseException
                self._end_spark_work()
                if not isinstance(error, Exception):
                    raise
                raise self._failure(error) from error
            finally:
                if keeper is not None:
                    keeper.stop()
                if watch is not None:
                    watch.stop()
        results = dict(self._answers().results)
        if not results and cluster and self._report_id is not None:
            raise AirflowFailException(  # it may have committed: a retry would rewrite again inside the pause
                f"{', '.join(self.procedures)} on {name}: the Spark job succeeded but reported no result rows, "
                f"neither through the gate's MySQL (connection {self.write_gate_conn_id!r}) nor on spark-submit's "
                "output, so what it committed cannot be checked. The driver's log on the cluster says why."
            )
        if not results:
            why = " (in cluster deploy mode without a write gate, the driver's output stays on the cluster)"
            self.log.warning("The Spark job reported no result rows%s", why if cluster else "")
        for procedure, result in results.items():
            self.log.info("%s on %s: %s", procedure, name, result)
        self._check_results(context, results)
        # Pre-started, the work's time counts from the go: the wait before it was the writers', not the rewrite's.
        began = self._went_at if self._went_at is not None else started
        context["ti"].xcom_push(key="seconds", value=round(time.monotonic() - began, 3))
        for outlet in self.outlets:  # the table's asset event carries what each procedure did
            context["outlet_events"][outlet].extra = {"procedures": results}  # type: ignore[dict-item]  # JSON rows
        return results or None

    def _answers(self) -> JobAnswers:
        """What the job said: from its report through the gate's MySQL first, from spark-submit's output the rest."""
        said = self._result_hook.answers if self._result_hook is not None else JobAnswers()
        if self._report_id is None or self.write_gate_conn_id is None:
            return said
        if self._reported is None:
            try:
                lines = WriteGateHook(self.write_gate_conn_id).job_report(self._report_id)
            except Exception as error:  # the output may still have it all (local and client deploy modes)
                self.log.warning("Could not read the Spark job's report from the gate's MySQL: %s", error)
                lines = []
            self._reported = JobAnswers.of(lines)
        return self._reported.before(said)

    def _went(self, look: Any) -> LeaseKeeper:
        """The go came (seen by this task's watch): keep the lease from here on, as the job does."""
        self._went_at = time.monotonic()
        assert self.write_gate_conn_id is not None
        gate = WriteGateHook(self.write_gate_conn_id)
        keeper = LeaseKeeper.for_lease(
            gate.lease(self.table, look.owner), float(look.lease_seconds or 0), self._stop_spark, log=self.log.warning
        )
        keeper.start()
        return keeper

    def _end_spark_work(self) -> None:
        """A try that failed or timed out leaves no Spark work running: in cluster deploy mode the application
        outlives spark-submit (on YARN, tracked through the ResourceManager, spark-submit is gone already), and
        Airflow calls ``on_kill`` only for a task killed from outside, not for one whose ``execute`` raised."""
        if self._hook is None:
            return
        try:
            self._hook.on_kill()
        except Exception as error:  # best effort: the job stops itself at its next lease renewal anyway
            self.log.warning("Could not end the Spark application of %s: %s", self.table, error)

    def _stop_spark(self, reason: str) -> None:
        """The task's lease keeper lost the gate: end spark-submit (the job, if started, stops on its own too)."""
        self._lease_lost = reason
        if self._hook is not None:
            self._hook.on_kill()

    def _failure(self, error: Exception) -> Exception:
        """What the task raises for a failed Spark job: failures a retry cannot mend fail it at once."""
        answers = self._answers()
        what = f"{', '.join(self.procedures)} on {self.table}"
        hook = self._result_hook
        if hook is not None and hook.unreachable is not None:
            rm = "YARN's ResourceManager" if hook.resource_manager else "a Hadoop server (its ResourceManager?)"
            return AirflowFailException(
                f"{what} did not start: spark-submit of Spark connection {self._conn_id!r} could not reach {rm} "
                f"at {hook.unreachable} ({hook.unreachable_how}). Check that it runs, and that "
                "yarn.resourcemanager.address in the yarn-site.xml of HADOOP_CONF_DIR "
                f"({os.environ.get('HADOOP_CONF_DIR') or 'not set on this worker'}) points at it. Nothing was "
                "submitted; the table is as it was."
            )
        done = f" ({', '.join(answers.results)} had completed and committed)" if answers.results else ""
        if answers.no_go is not None:
            return AirflowFailException(
                f"{what} did not run: {answers.no_go}. No CALL ran; the table is as it was{done}."
            )
        lost = answers.lease_lost or self._lease_lost or (str(error) if isinstance(error, LeaseLostError) else None)
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
        if answers.commit_conflict is not None:
            # Retrying inside the same gate window would only race the same writer again.
            return AirflowFailException(
                f"{what} lost an Iceberg commit conflict, so that procedure committed nothing{done}: a writer "
                f"committed to the table during the pause. Check that every writer of {self.table} reads the "
                f"write gate. Spark said: {answers.commit_conflict}"
            )
        return error

    def _in_cluster_deploy_mode(self) -> bool:
        """Whether the driver runs on the cluster, as the Spark provider's hook decides it (operator, then extra).

        Python applications cannot run in cluster deploy mode on a standalone master: that is refused here,
        naming the connection, before anything is submitted.
        """
        mode, master = self._deploy_mode, ""
        connection = self._spark_connection()
        if connection is not None:
            mode = mode or connection.extra_dejson.get("deploy-mode")
            master = connection.host or ""
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
        if self._yarn_rm_address() and hasattr(self, "_yarn_track_via_rm_api"):
            # YARN in cluster mode, its ResourceManager's REST API named: the provider tracks the application there
            # and kills it there at a kill (on_kill), with no `yarn` command on the worker. Without Kerberos, as
            # the user spark-submit submits as.
            self._yarn_track_via_rm_api = True
            if self._yarn_rm_auth is None and not (self.keytab or self.principal or self._kerberos_in_connection()):
                self._yarn_rm_auth = HadoopSimpleAuth(os.environ.get("HADOOP_USER_NAME") or getpass.getuser())
        self._result_hook = IcebergSparkSubmitHook.adopt(super()._get_hook())
        return self._result_hook

    def _spark_connection(self) -> Any:
        """The Spark connection, or None if it does not exist: looked up once per try (a secrets backend may be
        slow, and a try asks several times, once with the gate closed)."""
        if self._spark_conn is _UNREAD:
            try:
                self._spark_conn = SparkSubmitHook.get_connection(self._conn_id)
            except AirflowNotFoundException:
                self._spark_conn = None
        return self._spark_conn

    def _on_yarn(self) -> bool:
        connection = self._spark_connection()
        return connection is not None and (connection.host or "").strip() == "yarn"

    def _kerberos_in_connection(self) -> bool:
        connection = self._spark_connection()
        extra = connection.extra_dejson if connection is not None else {}
        return bool(extra.get("keytab") and extra.get("principal"))

    def _yarn_rm_address(self) -> str | None:
        """The ResourceManager's web address of a YARN connection in cluster deploy mode, if its extra names it."""
        connection = self._spark_connection()
        if connection is None:
            return None
        extra = connection.extra_dejson
        if (connection.host or "").strip() != "yarn" or (self._deploy_mode or extra.get("deploy-mode")) != "cluster":
            return None
        return extra.get("yarn_resourcemanager_webapp_address") or None


class _GoWatch:
    """The task's side of pre-started work: watch for the go in a daemon thread (as the job does, without saying it
    is alive), then keep the run's lease from the go until the job ends (``went`` returns the keeper).
    A stop or no go ends the watch; the job ends by itself then, having called nothing."""

    def __init__(
        self,
        handshake: WorkHandshake,
        timeout: float,
        went: Callable[[Any], LeaseKeeper],
        log: Callable[[str], None],
    ) -> None:
        self._handshake = handshake
        self._timeout = timeout
        self._went = went
        self._log = log
        self._stopped = threading.Event()
        self._keeper: LeaseKeeper | None = None
        self._thread = threading.Thread(target=self._run, name="gate-go-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _sleep(self, seconds: float) -> None:
        if self._stopped.wait(seconds):
            raise NoGo("the job ended")

    def _run(self) -> None:
        try:
            look = await_go(self._handshake, self._timeout, sleep=self._sleep, say_alive=False, log=self._log)
        except NoGo as no_go:
            self._log(f"no go: {no_go}")
            return
        if not self._stopped.is_set():
            self._log("go: the writers that must pause are done")
            self._keeper = self._went(look)

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)
        if self._keeper is not None:
            self._keeper.stop()
