"""Spark job: fill an Iceberg table the way a streaming writer does, with many small files and deletes.

Creates the table if missing (format v2, merge-on-read, partitioned by day), then makes ``--commits`` append
commits of ``--files-per-commit`` small files in each of ``--days`` day partitions, and ``--delete-commits``
small DELETEs that become position-delete files. Before every commit it checks the table's write gate and
waits while the gate is closed, as a gated streaming writer does. Rows are deterministic: row ``id`` lands in
day ``id % days`` before ``--end-day``, so any reader can recompute what the table must hold.

Prints one JSON line at the end: rows written, rows deleted, commits made, seconds paused by the gate.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import date, datetime, timezone

from airflow_iceberg.core.job_secrets import apply_job_secrets, read_job_secrets
from airflow_iceberg.core.tables import TableName, create_streaming_table_statements
from airflow_iceberg.core.writer import add_gate_arguments, client_from_arguments


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", required=True, help="catalog.namespace.table")
    parser.add_argument("--job-secrets", default=None, help="the secrets file Airflow wrote for this job")
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--end-day", type=date.fromisoformat, default=datetime.now(timezone.utc).date())
    parser.add_argument("--commits", type=int, default=5)
    parser.add_argument("--files-per-commit", type=int, default=14, help="files per commit per day partition")
    parser.add_argument("--rows-per-file", type=int, default=20)
    parser.add_argument("--delete-commits", type=int, default=4)
    parser.add_argument("--deletes-per-commit", type=int, default=5)
    add_gate_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    name = TableName.parse(args.table)
    quoted = name.quoted

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    builder = SparkSession.builder.appName(f"small-files-writer-{name}").config("spark.sql.session.timeZone", "UTC")
    spark = builder.getOrCreate()
    apply_job_secrets(spark, read_job_secrets(args.job_secrets))  # before the catalog is first used
    gate = client_from_arguments(args, str(name), os.environ)
    paused_seconds = 0.0

    def honour_gate() -> None:
        nonlocal paused_seconds
        if gate is not None:
            paused_seconds += gate.wait_until_open()

    try:
        for statement in create_streaming_table_statements(name, "id BIGINT, ts TIMESTAMP, payload STRING", "days(ts)"):
            spark.sql(statement)
        first_id = (spark.table(quoted).agg(F.max("id")).first()[0] or -1) + 1
        end = datetime(args.end_day.year, args.end_day.month, args.end_day.day, tzinfo=timezone.utc)
        end_epoch = int(end.timestamp())
        rows_per_commit = args.files_per_commit * args.rows_per_file * args.days
        next_id = first_id
        for _ in range(args.commits):
            batch = (
                spark.range(next_id, next_id + rows_per_commit)
                .select(
                    F.col("id"),
                    F.timestamp_seconds(
                        F.lit(end_epoch) - (F.col("id") % args.days) * 86400 + F.col("id") % 3600
                    ).alias("ts"),
                    F.concat(F.lit("v"), F.col("id").cast("string")).alias("payload"),
                )
                .repartition(args.files_per_commit)
            )
            honour_gate()
            batch.writeTo(quoted).append()
            next_id += rows_per_commit

        deleted = 0
        stride = max(1, (next_id - first_id) // max(1, args.delete_commits))
        for commit in range(args.delete_commits):
            low = first_id + commit * stride
            high = low + args.deletes_per_commit - 1
            honour_gate()
            spark.sql(f"DELETE FROM {quoted} WHERE id BETWEEN {low} AND {high}")
            deleted += args.deletes_per_commit
        summary = {
            "table": str(name),
            "first_id": first_id,
            "rows_written": next_id - first_id,
            "rows_deleted": deleted,
            "commits": args.commits + args.delete_commits,
            "gate_paused_seconds": round(paused_seconds, 3),
        }
        print(json.dumps(summary), flush=True)
    finally:
        if gate is not None:  # this writer stops for good: compactions need not wait for it
            gate.leave()
            gate.close()
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
