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
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading

from iceberg_call import (
    LEASE_LOST_MARKER,
    TableName,
    apply_job_secrets,
    build_call,
    die_with_parent,
    format_result_line,
    read_job_secrets,
)
from write_gate import GateLease, LeaseKeeper, LeaseLostError, holder_connection

#: The exit status of a job that stopped because its run lost the write gate (or would have, at the lease's end).
LEASE_LOST_EXIT = 3


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", required=True, help="catalog.namespace.table")
    parser.add_argument(
        "--calls",
        required=True,
        help='JSON list of the procedures to run in order: [{"procedure": "rewrite_data_files", "options": {...}, '
        '"where": "...", "arguments": {...}}, ...]',
    )
    parser.add_argument("--job-secrets", default=None, help="the job's secrets file: a path, or a --files name")
    return parser.parse_args(argv)


def statements(table: TableName, calls: object) -> list[tuple[str, str]]:
    """Each call's procedure and its checked ``CALL`` statement; a bad call raises before anything runs."""
    if not isinstance(calls, list) or not calls:
        raise ValueError(f"--calls must be a non-empty JSON list of procedure calls, got {calls!r}")
    built = []
    for call in calls:
        if not isinstance(call, dict) or not isinstance(call.get("procedure"), str):
            raise ValueError(f"each call must be an object with a procedure, got {call!r}")
        statement = build_call(call["procedure"], table, call.get("options"), call.get("where"),
                               call.get("arguments"))  # fmt: skip
        built.append((call["procedure"], statement))
    return built


def lease_keeper(gate: dict, on_lost):
    """A ``LeaseKeeper`` for the run the secrets file names."""

    def connect():
        return holder_connection(gate["host"], gate["port"], gate["user"], gate["password"], gate["database"])

    lease = GateLease(gate["table"], gate["dag_id"], gate["run_id"], connect)
    return LeaseKeeper.for_lease(lease, float(gate["lease_seconds"]), on_lost)


def main(argv: list[str] | None = None) -> int:
    die_with_parent()
    args = parse_args(argv)
    table = TableName.parse(args.table)
    # Validate everything before Spark starts: a bad value fails in a second and touches nothing.
    calls = statements(table, json.loads(args.calls))

    from pyspark.sql import SparkSession

    procedures = ",".join(procedure for procedure, _ in calls)
    spark = SparkSession.builder.appName(f"iceberg-{procedures}-{table}").getOrCreate()
    keeper = None
    try:
        secrets = read_job_secrets(args.job_secrets)
        apply_job_secrets(spark, secrets)
        if secrets.get("gate"):

            def stop_the_work(reason: str) -> None:
                print(LEASE_LOST_MARKER + reason, flush=True)
                spark.sparkContext.cancelAllJobs()
                # The main thread exits once its CALL fails; if it is past its Spark jobs (committing), this
                # ends the process before the lease does.
                exit_soon = threading.Timer(keeper.margin / 2, os._exit, (LEASE_LOST_EXIT,))
                exit_soon.daemon = True  # a CALL that returns first ends the job normally
                exit_soon.start()

            keeper = lease_keeper(secrets["gate"], stop_the_work)
            keeper.start()  # raises LeaseLostError if the lease has ended: no CALL starts then
        for index, (procedure, statement) in enumerate(calls):
            if keeper is not None and index:  # the next CALL, too, starts only on a lease with time left
                keeper.renew_before_work()
            print(f"Running: {statement}", flush=True)
            rows = spark.sql(statement).collect()
            # The CALL returned, so the procedure committed: its result stands even if the lease was lost
            # meanwhile (Iceberg validated that commit against every writer's).
            result = rows[0].asDict() if rows else {}
            print(format_result_line({"procedure": procedure, **result}), flush=True)
            if keeper is not None and keeper.lost:
                print(f"{procedure} finished and committed as its lease was lost: {keeper.lost}", flush=True)
    except Exception as error:
        lost = keeper.lost if keeper is not None else None
        if lost is None and isinstance(error, LeaseLostError):
            lost = str(error)
        if lost is None:
            raise
        print(LEASE_LOST_MARKER + lost, flush=True)
        return LEASE_LOST_EXIT
    finally:
        if keeper is not None:
            keeper.stop()
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
