"""Spark job: run one Iceberg maintenance procedure on one table and print its result row.

Submitted by ``IcebergRewriteOperator`` (``spark-submit run_procedure.py --table ... --procedure ...``). The
catalog's settings arrive as ``spark.sql.catalog.<name>.*`` confs from spark-submit; its secrets (a JDBC
password, REST credentials) arrive in an environment variable so that they never show on a command line.

Exit status 0 means the procedure committed (or had nothing to do); anything else means the table is unchanged
by this job, since an Iceberg procedure commits atomically or not at all.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from iceberg_call import TableName, build_call, format_result_line, with_secret_conf


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", required=True, help="catalog.namespace.table")
    parser.add_argument("--procedure", required=True, help="rewrite_data_files, expire_snapshots, ...")
    parser.add_argument("--options", default="{}", help="JSON object of procedure options")
    parser.add_argument("--where", default=None, help="Spark SQL predicate that selects partitions")
    parser.add_argument("--arguments", default="{}", help="JSON object of the procedure's other arguments")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    table = TableName.parse(args.table)
    # Validate everything before Spark starts: a bad value fails in a second and touches nothing.
    statement = build_call(args.procedure, table, json.loads(args.options), args.where, json.loads(args.arguments))

    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(f"iceberg-{args.procedure}-{table}")
    spark = with_secret_conf(builder, os.environ).getOrCreate()
    try:
        print(f"Running: {statement}", flush=True)
        rows = spark.sql(statement).collect()
        result = rows[0].asDict() if rows else {}
        print(format_result_line(result), flush=True)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
