"""Spark job: run the given ``CALL`` statements in one Spark application, nothing else (``make bench``'s baseline).

What a user without Airflow would submit: ``spark-submit bare_calls.py --table T --statement "CALL ..."
--statement "CALL ..."``. It prints one result line per statement. The catalog's secrets arrive as for the
provider's own job (``airflow_iceberg.core.job_secrets.read_job_secrets``).
"""

from __future__ import annotations

import argparse
import sys

from airflow_iceberg.core.job_secrets import apply_job_secrets, read_job_secrets
from airflow_iceberg.core.spark_job import format_result_line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", required=True, help="catalog.namespace.table, for the application's name")
    parser.add_argument("--job-secrets", default=None, help="the secrets file Airflow wrote for this job")
    parser.add_argument("--statement", action="append", required=True, help="a CALL to run; repeat for more")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(f"bare-calls-{args.table}").getOrCreate()
    apply_job_secrets(spark, read_job_secrets(args.job_secrets))
    try:
        for statement in args.statement:
            rows = spark.sql(statement).collect()
            print(format_result_line(rows[0].asDict() if rows else {}), flush=True)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
