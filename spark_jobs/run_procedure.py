"""Spark job: run Iceberg maintenance procedures on one table, one after another, and print each result row.

Submitted by ``IcebergRewriteOperator`` (``spark-submit run_procedure.py --table ... --calls [...]``): the
rewrites of one gated run (``rewrite_data_files``, then ``rewrite_position_delete_files``) share this one Spark
application, so a pause pays for one Spark start-up, not one per procedure. The catalog's settings arrive as
``spark.sql.catalog.<name>.*`` confs from spark-submit; its secrets (a JDBC password, REST credentials) arrive
in the job's secrets file (``--job-secrets``), which the job reads and deletes, so that they never show on a
command line.

Behind a write gate (the secrets file then holds the gate's connection and the run that holds it), the job
renews the run's lease while it works (``LeaseKeeper``): right before each ``CALL``, which never starts on a
lease that has ended, and from a thread meanwhile. When a renewal finds the run no longer holds the gate, or the
lease is about to end without one (MySQL away, or the pause's ceiling reached), it cancels the Spark jobs and
exits with :data:`LEASE_LOST_EXIT`, before writers resume.

In local and client deploy modes the job dies with the spark-submit that started it (Linux parent-death signal),
so a killed Airflow task leaves no Spark job running.

Exit status 0 means every procedure committed (or had nothing to do); anything else means the job committed
nothing after its last completed commit: an Iceberg procedure commits atomically or not at all, and with
partial progress each file group on its own. Each procedure that completed printed its result line first.

With partial progress, ``rewrite_data_files`` returns normally even when some of its commits failed: Iceberg
(1.11) logs those and leaves them out of its result row, whose ``failed_data_files_count`` counts only groups
whose rewrite failed (apache/iceberg#15226 was closed unmerged; its count of failed commits is wrong too,
apache/iceberg#16971). So the job plans the rewrite as Iceberg's action does, at the same snapshot, and adds
to the result row ``planned_data_files_count`` and ``uncommitted_data_files_count``: the planned files that
neither a commit nor a reported rewrite failure accounts for. The Airflow task fails on either count.

A ``rewrite_data_files`` with ``remove-dangling-deletes`` runs without it, and the job then removes the dangling
delete files itself, again when a writer's commit beat it (Iceberg 1.12 fails the removal on any commit since it
began; ``core/spark_job.split_dangling_removal``). Its count replaces the procedure's
``removed_delete_files_count``; when every attempt lost, the rewrite stands and the files stay for the next run,
which the result row says (``dangling_deletes_left``). A ``rewrite_manifests``, which runs with the gate open, is
likewise called again when a writer's commit replaced a manifest it rewrote; when every attempt lost, the table
stays as it was and the result row says so (``left_as_it_was``), for the next run.

Pre-started (the secrets file's gate then has ``wait_for_go_seconds``), the job builds its session and loads the
catalog while the writers still commit, says it is ready, and waits for the go that the idle wait gives
(``core/gate_work.py``): it renews no lease meanwhile, and ends with :data:`NO_GO_EXIT`, having called nothing, at a
stop, when the gate it saw closed for its run is no longer (its lease ran out), or when no go came in time.

Behind a write gate, the job also writes each line it says to Airflow (its result rows, a lost lease, no go, the
line of a commit conflict) into the gate's MySQL, under the report id its secrets file gives
(``core/job_report.py``): in cluster deploy mode its output stays on the cluster, and the task reads the report.

Each result row also says how long the work took, by the job's own clock: ``call_seconds``, the ``CALL`` alone
(Spark's start-up and the job's planning outside it), and ``removal_seconds``, the removal of dangling deletes.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from airflow_iceberg.core.gate_protocol import owner_connection
from airflow_iceberg.core.gate_state import GateOwner
from airflow_iceberg.core.gate_store import GateLease
from airflow_iceberg.core.gate_work import NoGo, WorkHandshake, await_go
from airflow_iceberg.core.job_report import JobReport
from airflow_iceberg.core.job_secrets import GateOwnerSecrets, apply_job_secrets, read_job_secrets
from airflow_iceberg.core.lease import LeaseKeeper, LeaseLostError
from airflow_iceberg.core.procedures import normalize_options
from airflow_iceberg.core.processes import die_with_parent
from airflow_iceberg.core.spark_job import (
    COMMIT_CONFLICT_EXCEPTIONS,
    LEASE_LOST_MARKER,
    NO_GO_MARKER,
    RETRIED_WHEN_BEATEN,
    Attempts,
    JobArguments,
    ProcedureCall,
    format_result_line,
    split_dangling_removal,
    until_it_wins,
)
from airflow_iceberg.core.tables import TableName

#: The exit status of a job that stopped because its run lost the write gate (or would have, at the lease's end).
LEASE_LOST_EXIT = 3
#: The exit status of a pre-started job that ended without a CALL: no go came (``core/gate_work.py``).
NO_GO_EXIT = 4


def planned_data_files(spark: Any, table: TableName, call: ProcedureCall) -> int | None:
    """How many data files ``call`` (a ``rewrite_data_files`` with partial progress) will rewrite, or None for any
    other call: planned by Iceberg's own planner, with the call's options and ``where``, at the table's current
    snapshot, as the procedure's action plans it a moment later.

    The shuffling planner of ``sort`` and ``zorder`` differs only in how many files it writes, not in what it
    reads, so the bin-pack planner counts for every strategy. Behind a closed gate no writer commits between
    the two plans; without one, a writer's commit in between can make the count differ.
    """
    options = normalize_options(call.procedure, call.options)
    if call.procedure != "rewrite_data_files" or options.get("partial-progress.enabled", "").lower() != "true":
        return None
    jvm, session = spark.sparkContext._jvm, spark._jsparkSession
    name = str(table)
    iceberg = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(session, name)
    snapshot = iceberg.currentSnapshot()
    if snapshot is None:
        return 0
    where = call.where
    if where:
        converter = jvm.org.apache.spark.sql.execution.datasources.SparkExpressionConverter
        expression = converter.convertToIcebergExpression(
            converter.collectResolvedSparkExpression(session, name, where)
        )
    else:
        expression = jvm.org.apache.iceberg.expressions.Expressions.alwaysTrue()
    case_sensitive = spark.conf.get("spark.sql.caseSensitive", "false").lower() == "true"
    planner = jvm.org.apache.iceberg.actions.BinPackRewriteFilePlanner(
        iceberg, expression, snapshot.snapshotId(), case_sensitive
    )
    java_options = jvm.java.util.HashMap()
    for key, value in options.items():
        java_options.put(key, value)
    planner.init(java_options)
    groups = planner.plan().groups().iterator()
    planned = 0
    while groups.hasNext():
        planned += groups.next().inputFileNum()
    return planned


def with_uncommitted(result: dict[str, Any], planned: int | None) -> dict[str, Any]:
    """``result`` with the planned files that no commit and no reported failure accounts for, if it was planned."""
    if planned is None:
        return result
    accounted = (result.get("rewritten_data_files_count") or 0) + (result.get("failed_data_files_count") or 0)
    return {**result, "planned_data_files_count": planned, "uncommitted_data_files_count": max(planned - accounted, 0)}


def _validation_failure(error: Exception) -> str | None:
    """The message of the Iceberg ``ValidationException`` behind a py4j error (a commit that lost to another), or
    None for any other error."""
    java = getattr(error, "java_exception", None)
    while java is not None:
        if java.getClass().getName() == "org.apache.iceberg.exceptions.ValidationException":
            return str(java.getMessage())
        java = java.getCause()
    return None


def remove_dangling_deletes(spark: Any, table: TableName) -> Attempts:
    """Remove the delete files that apply to no live data file of ``table``, with Iceberg's own Spark action, each
    attempt at the table's newest snapshot, until one is not beaten by a writer's commit."""
    jvm, session = spark.sparkContext._jvm, spark._jsparkSession
    iceberg = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(session, str(table))
    actions = jvm.org.apache.iceberg.spark.actions.SparkActions.get(session)

    def attempt() -> int:
        iceberg.refresh()  # the catalog caches the table: the removal starts from the snapshot committed last
        removed = actions.removeDanglingDeleteFiles(iceberg).execute().removedDeleteFiles().iterator()
        count = 0
        while removed.hasNext():
            removed.next()
            count += 1
        return count

    return until_it_wins(attempt, _validation_failure)


def run_call(spark: Any, table: TableName, procedure: str, statement: str) -> dict[str, Any]:
    """The CALL's result row. A procedure of ``RETRIED_WHEN_BEATEN`` whose commit a writer's beat is called again
    at the table's newest snapshot, until it wins or has lost ``DANGLING_REMOVAL_ATTEMPTS`` times; then the table
    stays as it was and the result says so (``left_as_it_was``), for the next run: such a procedure is upkeep beside
    the writers, and a writer that commits faster than it runs would otherwise fail every run."""
    if procedure not in RETRIED_WHEN_BEATEN:
        return _first_row(spark.sql(statement).collect())
    failures: list[Exception] = []

    def attempt() -> list[Any]:
        if failures:
            spark.catalog.refreshTable(str(table))  # the catalog caches the table: start from the newest snapshot
        try:
            return spark.sql(statement).collect()
        except Exception as error:
            failures.append(error)
            raise

    tries = until_it_wins(attempt, _validation_failure)
    for loss in tries.lost_to:
        print(f"{procedure} lost to a writer's commit, called again: {loss}", flush=True)
    if tries.result is None:
        left = f"every one of {tries.attempts} attempts lost to a writer's commit, the last to: {tries.lost_to[-1]}"
        print(f"{procedure} left the table as it was: {left}", flush=True)
        return {"left_as_it_was": left}
    return _first_row(tries.result)


def _first_row(rows: list[Any]) -> dict[str, Any]:
    return rows[0].asDict() if rows else {}


def with_removal(result: dict[str, Any], removal: Attempts) -> dict[str, Any]:
    """``result`` with what the job's own removal of dangling deletes did."""
    result = {
        **result,
        "removed_delete_files_count": removal.result or 0,
        "dangling_removal_attempts": removal.attempts,
    }
    if removal.result is None:
        result["dangling_deletes_left"] = f"every attempt lost to a commit: {removal.lost_to[-1]}"
    return result


def _say(line: str) -> None:
    print(line, flush=True)


def job_report(gate: GateOwnerSecrets | None) -> JobReport:
    """Where the job says what Airflow reads: its output, and behind a gate the report the task asked for."""
    if not gate:
        return JobReport(None, None, _say)
    return JobReport(_connector(gate), gate.get("report_id"), _say)


def conflict_line(error: BaseException) -> str | None:
    """The line of ``error`` (its Java exception's, as py4j gives it) that names an Iceberg commit conflict."""
    for line in str(error).splitlines():
        if any(name in line for name in COMMIT_CONFLICT_EXCEPTIONS):
            return line.strip()
    return None


def _connector(gate: GateOwnerSecrets) -> Callable[[], Any]:
    return lambda: owner_connection(gate["host"], gate["port"], gate["user"], gate["password"], gate["database"])


def lease_keeper(gate: GateOwnerSecrets, on_lost: Callable[[str], None]) -> LeaseKeeper:
    """A ``LeaseKeeper`` for the run the secrets file names."""
    lease = GateLease(gate["table"], gate["dag_id"], gate["run_id"], _connector(gate))
    return LeaseKeeper.for_lease(lease, float(gate["lease_seconds"]), on_lost)


def await_the_go(spark: Any, table: TableName, gate: GateOwnerSecrets) -> GateOwnerSecrets:
    """Pre-started: with the session up, load the catalog, say the job is ready, and wait for the go; the gate's
    settings with the lease the run closed with. :class:`NoGo` if none comes.

    The catalog is loaded (its connection made) but not the table: a catalog caches the tables it loaded, and the
    ``CALL`` must plan from the snapshot the writers left at the go.
    """
    spark.sql(f"SHOW NAMESPACES IN `{table.catalog}`").collect()
    handshake = WorkHandshake(
        _connector(gate), gate["table"], GateOwner(gate["dag_id"], gate["run_id"]), gate["attempt"]
    )
    print(f"Ready: waiting for the go on {table}", flush=True)
    started = time.monotonic()
    try:
        look = await_go(handshake, float(gate["wait_for_go_seconds"]))
    finally:
        handshake.close()
    print(f"Go on {table} after {time.monotonic() - started:.1f} s of waiting", flush=True)
    return {**gate, "lease_seconds": int(look.lease_seconds or 0)}


def main(argv: list[str] | None = None) -> int:
    die_with_parent()
    # Validate everything before Spark starts: a bad value fails in a second and touches nothing.
    args = JobArguments.parse(argv)
    table = args.table
    calls = []
    for call in args.calls:
        call, removes_dangling = split_dangling_removal(call)
        calls.append((call, call.statement(table), removes_dangling))

    from pyspark.sql import SparkSession

    procedures = ",".join(call.procedure for call in args.calls)
    spark = SparkSession.builder.appName(f"iceberg-{procedures}-{table}").getOrCreate()
    keeper = None
    report = job_report(None)
    try:
        secrets = read_job_secrets(args.job_secrets)
        apply_job_secrets(spark, secrets)
        gate = secrets.get("gate")
        report = job_report(gate)
        if gate and gate.get("wait_for_go_seconds") is not None:
            try:
                gate = await_the_go(spark, table, gate)
            except NoGo as no_go:  # nothing was called: the table is as it was
                report.say(NO_GO_MARKER + str(no_go))
                return NO_GO_EXIT
        if gate:

            def stop_the_work(reason: str) -> None:
                report.say(LEASE_LOST_MARKER + reason)
                spark.sparkContext.cancelAllJobs()
                # The main thread exits once its CALL fails; if it is past its Spark jobs (committing), this
                # ends the process before the lease does.
                assert keeper is not None  # only the keeper calls this
                exit_soon = threading.Timer(keeper.margin / 2, os._exit, (LEASE_LOST_EXIT,))
                exit_soon.daemon = True  # a CALL that returns first ends the job normally
                exit_soon.start()

            keeper = lease_keeper(gate, stop_the_work)
            keeper.start()  # raises LeaseLostError if the lease has ended: no CALL starts then
        for index, (call, statement, removes_dangling) in enumerate(calls):
            procedure = call.procedure
            if keeper is not None and index:  # the next CALL, too, starts only on a lease with time left
                keeper.renew_before_work()
            planned = planned_data_files(spark, table, call)
            print(
                f"Running: {statement}" + (f" ({planned} data files planned)" if planned is not None else ""),
                flush=True,
            )
            started = time.monotonic()
            row = run_call(spark, table, procedure, statement)
            # The CALL returned, so the procedure committed: its result stands even if the lease was lost
            # meanwhile (Iceberg validated that commit against every writer's).
            result = with_uncommitted(row, planned)
            result["call_seconds"] = round(time.monotonic() - started, 3)  # the CALL's own time, as Spark ran it
            if keeper is not None and keeper.lost:
                print(f"{procedure} finished and committed as its lease was lost: {keeper.lost}", flush=True)
            elif removes_dangling:
                if keeper is not None:
                    keeper.renew_before_work()
                started = time.monotonic()
                removal = remove_dangling_deletes(spark, table)
                result["removal_seconds"] = round(time.monotonic() - started, 3)
                for loss in removal.lost_to:
                    print(f"Removing dangling delete files lost to a commit, tried again: {loss}", flush=True)
                result = with_removal(result, removal)
            report.say(format_result_line({"procedure": procedure, **result}))
    except Exception as error:
        lost = keeper.lost if keeper is not None else None
        if lost is None and isinstance(error, LeaseLostError):
            lost = str(error)
        if lost is None:
            if (conflict := conflict_line(error)) is not None:
                report.say(conflict)  # in cluster deploy mode, the task reads it only here
            raise
        report.say(LEASE_LOST_MARKER + lost)
        return LEASE_LOST_EXIT
    finally:
        if keeper is not None:
            keeper.stop()
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
