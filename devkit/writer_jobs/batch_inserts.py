"""Reference gated batch writer: a Spark job that inserts a batch of new rows every few seconds.

A second writer of the reference streaming writer's table (``gated_ingest.py``), for tests with two writers on
one table. Before every commit it checks the gate under its own writer id, so a compaction waits for both
writers; it never touches the streaming writer's keys. Rows are deterministic: key ``k`` (from ``--first-key``
on) holds value ``k`` and payload ``b<k>``. A commit that fails is counted and its rows are inserted again.

Writes a status line per committed batch and a final summary (``"final": true``) to ``--status-file``; stops
between batches once ``--stop-file`` exists.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from airflow_iceberg.core.job_secrets import apply_job_secrets, read_job_secrets
from airflow_iceberg.core.spark_writers import declare_spark_writer, newest_snapshot_id
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.core.writer import add_gate_arguments, client_from_arguments

MAX_COMMIT_ATTEMPTS = 5


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", required=True, help="catalog.namespace.table, created by the streaming writer")
    parser.add_argument("--job-secrets", default=None, help="the secrets file Airflow wrote for this job")
    parser.add_argument("--status-file", required=True, type=Path)
    parser.add_argument("--stop-file", required=True, type=Path)
    parser.add_argument("--first-key", type=int, required=True, help="keys from here on, apart from other writers'")
    parser.add_argument("--rows", type=int, default=10, help="rows per batch")
    parser.add_argument("--interval-seconds", type=float, default=2.0)
    add_gate_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    name = TableName.parse(args.table)
    quoted = name.quoted

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.appName(f"batch-inserts-{name}")
        .config("spark.sql.session.timeZone", "UTC")
        .config(f"spark.sql.catalog.{name.catalog}.cache-enabled", "false")
        .getOrCreate()
    )
    apply_job_secrets(spark, read_job_secrets(args.job_secrets))
    gate = client_from_arguments(args, str(name), os.environ, poke_interval=0.5)
    if gate is not None:
        declare_spark_writer(spark, gate)  # its snapshots carry its application's id
    state = {"next_key": args.first_key, "batches": 0, "failed_commits": 0, "failures": [], "last_snapshot_id": None}
    status = args.status_file.open("a", buffering=1)
    try:
        while not args.stop_file.exists():
            paused = gate.wait_until_open(state["last_snapshot_id"]) if gate is not None else 0.0
            keys = range(state["next_key"], state["next_key"] + args.rows)
            batch = spark.range(keys.start, keys.stop).select(
                F.col("id").alias("key"),
                F.col("id").alias("value"),
                F.concat(F.lit("b"), F.col("id").cast("string")).alias("payload"),
                F.current_timestamp().alias("ts"),
            )
            for attempt in range(1, MAX_COMMIT_ATTEMPTS + 1):
                try:
                    batch.writeTo(quoted).append()
                    break
                except Exception as error:  # a failed commit: record it, try the same rows again
                    state["failed_commits"] += 1
                    state["failures"].append(str(error).splitlines()[0][:300])
                    print(f"COMMIT FAILED (attempt {attempt}): {state['failures'][-1]}", flush=True)
                    if attempt == MAX_COMMIT_ATTEMPTS:
                        raise
                    spark.sql(f"REFRESH TABLE {quoted}")
            state["last_snapshot_id"] = newest_snapshot_id(spark, name)
            state["next_key"] = keys.stop
            state["batches"] += 1
            record = {
                "batch": state["batches"],
                "keys": [keys.start, keys.stop],
                "committed": time.time(),
                "paused_seconds": round(paused, 3),
                "snapshot_id": state["last_snapshot_id"],
            }
            status.write(json.dumps(record) + "\n")
            time.sleep(args.interval_seconds)
    finally:
        final = {
            "final": True,
            "table": str(name),
            "first_key": args.first_key,
            "next_key": state["next_key"],
            "batches": state["batches"],
            "failed_commits": state["failed_commits"],
            "failures": state["failures"][:20],
        }
        status.write(json.dumps(final) + "\n")
        status.close()
        print(json.dumps(final), flush=True)
        if gate is not None:  # this writer stops for good
            gate.leave()
            gate.close()
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
