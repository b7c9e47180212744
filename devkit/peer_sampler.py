"""Spark job: every ``--every`` seconds, what a reader of one table meets, until ``--stop-file`` exists.

A sample is also taken at once when ``--now-file`` appears (the file is removed): the bench's last look.

``make bench-peers`` runs one per arm, beside the writer and the arm's maintenance. Each sample is one result line:
the table's live data, position-delete and equality-delete files and its snapshots (from Iceberg's metadata
tables), and the wall time of a full scan (every live row: count, keys and a digest of each key's value). One
Spark application for the whole arm, so that a sample costs a scan and not a Spark start-up.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from airflow_iceberg.core.job_secrets import apply_job_secrets, read_job_secrets
from airflow_iceberg.core.spark_job import format_result_line

#: Iceberg's content codes in a ``files`` metadata table.
_CONTENTS = {0: "data_files", 1: "position_delete_files", 2: "equality_delete_files"}
SCAN = "count(*) AS row_count, count(DISTINCT id) AS keys, sum(crc32(concat(CAST(id AS STRING), ':', v))) AS digest"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", required=True, help="catalog.namespace.table")
    parser.add_argument("--job-secrets", default=None, help="the secrets file written for this job")
    parser.add_argument("--every", type=float, required=True, help="seconds from one sample's start to the next")
    parser.add_argument("--stop-file", type=Path, required=True, help="the job ends once this file exists")
    parser.add_argument("--now-file", type=Path, required=True, help="a sample at once when this file appears")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName(f"peer-sampler-{args.table}").getOrCreate()
    apply_job_secrets(spark, read_job_secrets(args.job_secrets))
    catalog = args.table.split(".", 1)[0]
    spark.conf.set(f"spark.sql.catalog.{catalog}.cache-enabled", "false")  # each sample reads the newest snapshot
    try:
        due = time.time()
        while not args.stop_file.exists():
            at = time.time()
            sample: dict[str, object] = {"at": at, **{name: 0 for name in _CONTENTS.values()}}
            for row in spark.sql(f"SELECT content, count(*) AS n FROM {args.table}.files GROUP BY content").collect():
                sample[_CONTENTS[row["content"]]] = row["n"]
            sample["snapshots"] = spark.sql(f"SELECT count(*) AS n FROM {args.table}.snapshots").first()["n"]
            started = time.perf_counter()
            scanned = spark.sql(f"SELECT {SCAN} FROM {args.table}").first().asDict()
            sample["scan_s"] = time.perf_counter() - started
            sample.update(scanned)
            print(format_result_line(sample), flush=True)
            due += args.every
            while time.time() < due and not args.stop_file.exists():
                if args.now_file.exists():
                    args.now_file.unlink()
                    break
                time.sleep(0.2)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
