"""Spark job: run the given SQL statements in one Spark application and time each one on the driver.

``spark-submit scan_timer.py --table T --statement "SELECT ..." --statement "CALL ..."`` prints one JSON line
per statement, in order: ``{"statement_seconds": ..., "row": {...}}``, its wall time from ``spark.sql`` to the
collected result (Spark's start-up excluded) and its first result row ({} for none). ``make bench``'s health
part times full scans and a bare ``CALL`` with it. The catalog's secrets arrive as for the provider's own job.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from airflow_iceberg.core.job_secrets import apply_job_secrets, read_job_secrets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", required=True, help="catalog.namespace.table, for the application's name")
    parser.add_argument("--job-secrets", default=None, help="the secrets file Airflow wrote for this job")
    parser.add_argument("--statement", action="append", required=True, help="a statement to time; repeat for more")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(f"scan-timer-{args.table}").getOrCreate()
    apply_job_secrets(spark, read_job_secrets(args.job_secrets))
    try:
        for statement in args.statement:
            started = time.monotonic()
            rows = spark.sql(statement).collect()
            seconds = time.monotonic() - started
            row = rows[0].asDict() if rows else {}
            print(json.dumps({"statement_seconds": round(seconds, 3), "row": row}, default=str), flush=True)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
