"""Reference gated streaming writer: Spark Structured Streaming MERGEs upserts and deletes into Iceberg.

Use it as the template for your own Spark writer. What makes it safe next to a gated compaction:

1. **Run every batch through the shipped helper**, ``airflow_iceberg.core.spark_writers.gated_foreach_batch``.
   It checks the gate before each batch's write: while the gate is closed the batch function blocks, so nothing
   is committed, no record is dropped and the streaming offsets do not advance; the source's backlog simply grows
   until the gate opens (or its lease ends) and the next commit takes it. It acknowledges the pause with the id
   of the table's last snapshot, so the compaction starts at once instead of waiting out an idle window, and it
   marks the write as under way, so a compaction whose gate closes during a long MERGE waits for it.
2. **Reload the table after a pause** (the helper runs ``REFRESH TABLE``; give the catalog ``cache-enabled=false``
   too): the compaction has replaced data files, and a MERGE planned on the old file list would write position
   deletes against files that no longer exist (Iceberg then refuses the commit: ``Cannot commit, missing data
   files``).
3. **Make every batch idempotent**: a restart from the checkpoint may replay the last batch. A MERGE that
   applies each key's latest event is idempotent.

The source is Spark's ``rate`` source, so the stream is deterministic: event ``value`` (0, 1, 2, ...) is an
upsert of key ``value % keys`` with payload ``v<value>``, or, when ``value % 7 == 3``, a delete of that key.
After processing every value up to ``M``, the table must hold, for each key, its latest event below or at
``M`` unless that event is a delete: anyone can recompute it (``ingest_events.expected_rows``).

Each committed batch appends one JSON line to ``--status-file``; the last line has ``"final": true``. Touch
``--stop-file`` to stop the stream between batches.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

from ingest_events import DELETE_AT, DELETE_EVERY

from airflow_iceberg.core.job_secrets import apply_job_secrets, read_job_secrets
from airflow_iceberg.core.spark_writers import gated_foreach_batch, newest_snapshot_id
from airflow_iceberg.core.tables import TableName, create_streaming_table_statements
from airflow_iceberg.core.writer import add_gate_arguments, client_from_arguments

MAX_COMMIT_ATTEMPTS = 5
STOP_MARKER = "gated-ingest: stop requested"


class StopRequested(RuntimeError):
    """Raised by the next batch once a stop is requested, before it reads or commits anything.

    Failing the batch (rather than returning from it) keeps its offsets out of the checkpoint, so a restart
    processes it; stopping the query directly could cancel a MERGE in the middle of its commit.
    """


def java_error_summary(error: BaseException) -> str:
    """The line of a (Py4J-wrapped) error that names the Java exception, not 'An error occurred while...'."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    named = next((line for line in lines if "Exception" in line or "Error:" in line), lines[0] if lines else "")
    return named.lstrip(": ")[:500]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", required=True, help="catalog.namespace.table")
    parser.add_argument("--job-secrets", default=None, help="the secrets file Airflow wrote for this job")
    parser.add_argument("--checkpoint", required=True, help="streaming checkpoint directory")
    parser.add_argument("--status-file", required=True, type=Path)
    parser.add_argument("--stop-file", required=True, type=Path)
    parser.add_argument("--rows-per-second", type=int, default=50)
    parser.add_argument("--keys", type=int, default=500)
    parser.add_argument("--trigger-seconds", type=float, default=3.0, help="commit interval")
    parser.add_argument("--format-version", type=int, default=2, choices=(2, 3), help="3: deletion vectors")
    add_gate_arguments(parser, ungated_help="omit to ignore the gate (the ungated control)")
    parser.add_argument(
        "--gate-protocol",
        choices=("current", "previous"),
        default="current",
        help="previous: read the gate as a writer built before gate schema version 9 does (previous_protocol.py)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    name = TableName.parse(args.table)
    table = name.quoted

    from pyspark.errors import StreamingQueryException
    from pyspark.sql import SparkSession, Window
    from pyspark.sql import functions as F

    builder = (
        SparkSession.builder.appName(f"gated-ingest-{name}")
        .config("spark.sql.session.timeZone", "UTC")
        .config(f"spark.sql.catalog.{name.catalog}.cache-enabled", "false")
    )
    spark = builder.getOrCreate()
    apply_job_secrets(spark, read_job_secrets(args.job_secrets))  # before the catalog is first used
    columns = "key BIGINT, value BIGINT, payload STRING, ts TIMESTAMP"
    for statement in create_streaming_table_statements(name, columns, "bucket(4, key)", args.format_version):
        spark.sql(statement)

    if args.gate_protocol == "previous":
        from previous_protocol import use_previous_protocol  # beside this script

        use_previous_protocol()
    gate = client_from_arguments(args, str(name), os.environ, poke_interval=0.5)
    state = {"last_snapshot_id": None, "max_value": -1, "batches": 0, "failed_commits": 0, "failures": []}
    status = args.status_file.open("a", buffering=1)

    stop_requested = threading.Event()

    def merge_batch(batch, batch_id: int) -> None:
        session = batch.sparkSession
        events = batch.select(
            (F.col("value") % args.keys).alias("key"),
            F.col("value"),
            F.concat(F.lit("v"), F.col("value").cast("string")).alias("payload"),
            F.col("timestamp").alias("ts"),
            F.when(F.col("value") % DELETE_EVERY == DELETE_AT, F.lit("D")).otherwise(F.lit("U")).alias("op"),
        )
        latest = (
            events.withColumn("rank", F.row_number().over(Window.partitionBy("key").orderBy(F.desc("value"))))
            .where("rank = 1")
            .drop("rank")
            .cache()
        )
        summary = latest.agg(F.count("*"), F.max("value"), F.min("ts")).first()
        stats = events.agg(F.count("*"), F.min("ts")).first()
        if summary[0] == 0:
            latest.unpersist()
            return
        paused = gated.waited if gated is not None else 0.0
        view = f"gated_ingest_batch_{batch_id}"
        latest.createOrReplaceTempView(view)
        started = time.time()
        for attempt in range(1, MAX_COMMIT_ATTEMPTS + 1):
            try:
                session.sql(
                    f"MERGE INTO {table} t USING {view} s ON t.key = s.key "
                    "WHEN MATCHED AND s.op = 'D' THEN DELETE "
                    "WHEN MATCHED THEN UPDATE SET t.value = s.value, t.payload = s.payload, t.ts = s.ts "
                    "WHEN NOT MATCHED AND s.op = 'U' THEN INSERT (key, value, payload, ts) "
                    "VALUES (s.key, s.value, s.payload, s.ts)"
                )
                break
            except Exception as error:  # a failed commit: record it, reload the table, try again
                message = java_error_summary(error)
                state["failed_commits"] += 1
                state["failures"].append(message)
                print(f"COMMIT FAILED (batch {batch_id}, attempt {attempt}): {message}", flush=True)
                if attempt == MAX_COMMIT_ATTEMPTS:
                    raise
                session.sql(f"REFRESH TABLE {table}")
        committed = time.time()
        session.catalog.dropTempView(view)
        latest.unpersist()
        state["last_snapshot_id"] = newest_snapshot_id(session, name)
        state["max_value"] = max(state["max_value"], summary[1])
        state["batches"] += 1
        oldest = stats[1].timestamp() if stats[1] is not None else committed
        record = {
            "batch_id": batch_id,
            "events": stats[0],
            "max_value": summary[1],
            "commit_started": started,
            "committed": committed,
            "paused_seconds": round(paused, 3),
            "max_record_wait_seconds": round(committed - oldest, 3),
            "snapshot_id": state["last_snapshot_id"],
            "failed_commits": state["failed_commits"],
        }
        status.write(json.dumps(record) + "\n")

    gated = gated_foreach_batch(gate, name, merge_batch) if gate is not None else None

    def commit_batch(batch, batch_id: int) -> None:
        if stop_requested.is_set():
            raise StopRequested(STOP_MARKER)
        (gated or merge_batch)(batch, batch_id)

    source = spark.readStream.format("rate").option("rowsPerSecond", args.rows_per_second).load()
    query = (
        source.writeStream.foreachBatch(commit_batch)
        .option("checkpointLocation", args.checkpoint)
        .trigger(processingTime=f"{args.trigger_seconds} seconds")
        .start()
    )

    def await_termination(seconds: float) -> None:
        try:
            query.awaitTermination(seconds)
        except StreamingQueryException:  # inspected below, through query.exception()
            pass

    try:
        while query.isActive and not args.stop_file.exists():
            await_termination(0.5)
        stop_requested.set()
        # The batch in progress, if any, finishes its commit; the next one raises StopRequested at once.
        await_termination(max(60.0, 10 * args.trigger_seconds))
        if query.isActive:
            query.stop()
        failure = query.exception()
        if failure is not None and STOP_MARKER not in str(failure):
            raise RuntimeError(f"the stream failed: {java_error_summary(failure)}")
    finally:
        final = {
            "final": True,
            "table": str(name),
            "max_value": state["max_value"],
            "keys": args.keys,
            "batches": state["batches"],
            "failed_commits": state["failed_commits"],
            "failures": state["failures"][:20],
            "last_snapshot_id": state["last_snapshot_id"],
        }
        status.write(json.dumps(final) + "\n")
        status.close()
        print(json.dumps(final), flush=True)
        if gate is not None:  # this writer stops for good: compactions need not wait for it
            gate.leave()
            gate.close()
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
