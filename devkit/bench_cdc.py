"""``make bench``, fourth part: what compaction buys the readers of a CDC table, and what it costs next to a bare CALL.

1. A CDC table written as the design's users write one: changes to ``--keys`` keys (inserts, then updates,
   deletes and re-inserts) through Kafka into Flink's Iceberg sink in upsert mode (``CdcUpsertJob``: two
   subtasks, a checkpoint every 2 s), in ``--buckets`` buckets of the key, until the table holds at least
   ``--equality-delete-files`` equality-delete files. The job is then stopped.
2. An identical copy: a second catalog entry registered on the same metadata file (``register_table``). It shares
   the files; each table's rewrite commits new files to its own metadata only.
3. A full scan of the copy, best of 3 in one Spark application, before; the compaction DAG on the original
   (``dag.test()``); the same ``CALL`` (procedure, options, the plan's options and predicate) bare on the copy,
   as a whole ``spark-submit`` and as the statement alone; a full scan of the copy after. Goal: the scan at
   least 10 times faster after.

The tables live in namespace ``bench`` (``cdc_*``) and are dropped at the end. Figures are printed, never
asserted; the run fails only when a run or copy did not do what the measurement assumes.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.surface.dag_factory import REWRITE_TASK_ID
from airflow_iceberg.table_list.loader import load_table_list
from devkit.bench_health import CATALOG_CONN, REPEATS, TIMINGS, against_bare_call, bench_settings, local_cores, verdict
from devkit.cdc import CdcJob, ChangeStream, create_cdc_table
from devkit.kafka_broker import KafkaBroker
from devkit.tables import TableStats, drop_table

# Names of one length, so that nothing in the two tables' files differs by the name.
CDC_DAG = TableName("lake", "bench", "cdc_dag")
CDC_BARE = TableName("lake", "bench", "cdc_cli")
SCAN_GOAL = 10.0
RATE = 2_000  # changes per second the producer sends
PARALLELISM = 2


def write_cdc_table(table: TableName, keys: int, buckets: int, eq_delete_files: int, work: Path) -> dict[str, Any]:
    """Stream changes into ``table`` through Kafka and the Flink upsert job until it holds ``eq_delete_files``
    equality-delete files; the job's figures."""
    create_cdc_table(table, buckets=buckets)
    with KafkaBroker(work / "kafka") as kafka:
        topic = "bench_changes"
        kafka.create_topic(topic, partitions=PARALLELISM)
        job = CdcJob(
            work / "flink",
            kafka=kafka,
            topic=topic,
            table=str(table),
            writer_id="bench_cdc",
            parallelism=PARALLELISM,
            gate_conn_id=WriteGateHook.default_conn_name,
        )
        stream = ChangeStream(kafka, topic, keys)
        started = time.monotonic()
        job.start()
        try:
            stats = TableStats.read(CATALOG_CONN, table)
            while stats.equality_delete_files < eq_delete_files:
                if not job.running:
                    raise RuntimeError(f"the Flink job ended:\n{job.log()[-3000:]}")
                if time.monotonic() - started > 900:
                    raise RuntimeError(f"{table} holds {stats} after 900 s of changes")
                stream.produce(RATE * 2, RATE)
                stats = TableStats.read(CATALOG_CONN, table)
        finally:
            job.stop()
        streamed_s = time.monotonic() - started
    stats = TableStats.read(CATALOG_CONN, table)
    print(
        f"    {stream.produced} changes in {streamed_s:.0f} s: {stats.data_files} data files, "
        f"{stats.equality_delete_files} equality-delete and {stats.position_delete_files} position-delete "
        "files"
    )
    return {
        "changes": stream.produced,
        "streamed_s": streamed_s,
        "data_files": stats.data_files,
        "equality_delete_files": stats.equality_delete_files,
        "position_delete_files": stats.position_delete_files,
    }


def register_copy(original: TableName, copy: TableName) -> None:
    """``copy`` as a second catalog entry on ``original``'s current metadata file: the same table, files shared."""
    catalog = IcebergHook(CATALOG_CONN).catalog
    catalog.register_table(copy.in_catalog, catalog.load_table(original.in_catalog).metadata_location)


#: What a full scan of the CDC table reads: every live row, its keys, and a digest of each key's value.
CDC_SCAN = "count(*) AS row_count, count(DISTINCT id) AS keys, sum(crc32(concat(CAST(id AS STRING), ':', v))) AS digest"


def measure(dag_config: Any, bare_config: Any, work: Path) -> dict[str, Any]:
    """Scan the copy, compact the original through its DAG, the same CALL bare on the copy, scan again."""
    measured = against_bare_call(dag_config, bare_config, CDC_SCAN, work)
    task_row = measured["task_row"]
    after = {c.table: TableStats.read(CATALOG_CONN, c.table) for c in (dag_config, bare_config)}
    if len({(s.data_files, s.equality_delete_files) for s in after.values()}) != 1:
        raise RuntimeError(f"the DAG and the bare CALL left different tables: {after}")
    return {
        "rows": measured["scanned"]["row_count"],
        "rewritten_files": task_row["rewritten_data_files_count"],
        "removed_delete_files": task_row["removed_delete_files_count"],
        "rewritten_bytes": task_row["rewritten_bytes_count"],
        "files_after": after[bare_config.table].data_files,
        "equality_delete_files_after": after[bare_config.table].equality_delete_files,
        **{figure: measured[figure] for figure in TIMINGS},
    }


def report(written: dict[str, Any], measured: dict[str, Any], cores: int | None) -> None:
    def per_core(seconds: float) -> str:
        rate = measured["rewritten_bytes"] / 1e6 / seconds
        return f"{rate / cores:.2f} MB/s/core" if cores else f"{rate:.2f} MB/s (cores unknown)"

    ratio = measured["scan_before_s"] / measured["scan_after_s"]
    mb = measured["rewritten_bytes"] / 1e6
    print()
    print(
        f"a CDC table's compaction: figures (Spark {f'local[{cores}]' if cores else 'not local'}; "
        f"os.cpu_count() = {os.cpu_count()})"
    )
    print("| what | figure | goal |")
    print("|---|---:|---|")
    print(
        f"| written by the Flink upsert job: {written['changes']} changes in {written['streamed_s']:.0f} s | "
        f"{written['data_files']} data files, {written['equality_delete_files']} equality-delete files, "
        f"{written['position_delete_files']} position-delete files | >= 500 equality-delete files |"
    )
    print(
        f"| {REWRITE_TASK_ID} task: {mb:.1f} MB in {measured['rewritten_files']} files -> "
        f"{measured['files_after']}, {measured['removed_delete_files']} delete files removed, "
        f"{measured['task_s']:.1f} s (Spark start-up included) | {per_core(measured['task_s'])} | |"
    )
    print(
        f"| bare CALL, whole spark-submit: {measured['bare_wall_s']:.1f} s (Spark start-up included) | "
        f"{per_core(measured['bare_wall_s'])} | |"
    )
    print(
        f"| bare CALL, statement alone: {measured['bare_statement_s']:.1f} s | "
        f"{per_core(measured['bare_statement_s'])} | |"
    )
    print(f"| rewrite task / bare spark-submit | {measured['task_s'] / measured['bare_wall_s']:.2f} | |")
    print(
        f"| full scan of {measured['rows']} rows, best of {REPEATS}: {measured['scan_before_s']:.2f} s before, "
        f"{measured['scan_after_s']:.2f} s after | {ratio:.1f}x faster | >= {SCAN_GOAL:g}x: "
        f"{verdict(ratio >= SCAN_GOAL)} |"
    )
    print(f"| equality-delete files after | {measured['equality_delete_files_after']} | 0 |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=20_000, help="keys the changes touch")
    parser.add_argument("--buckets", type=int, default=8, help="bucket partitions of the key")
    parser.add_argument("--equality-delete-files", type=int, default=500, help="stream until the table holds these")
    args = parser.parse_args(argv)
    logging.getLogger("pyiceberg.catalog.sql").setLevel(logging.ERROR)

    work = Path(tempfile.mkdtemp(prefix="airflow-iceberg-bench-cdc-"))
    table_list = work / "iceberg_tables.yaml"
    settings = bench_settings()
    entries = [{**settings, "table": str(CDC_DAG)}, {**settings, "table": str(CDC_BARE)}]  # the copy: read only
    table_list.write_text(yaml.safe_dump({"tables": entries}))
    os.environ["AIRFLOW_ICEBERG_CONFIG"] = str(table_list)
    configs = {c.table: c for c in load_table_list(table_list).tables}
    cores = local_cores(configs[CDC_DAG].spark_conn_id)

    catalog = IcebergHook(CATALOG_CONN).catalog
    catalog.create_namespace_if_not_exists(CDC_DAG.namespace)
    if catalog.table_exists(CDC_BARE.in_catalog):  # left by an interrupted run: the catalog entry only
        catalog.drop_table(CDC_BARE.in_catalog)
    drop_table(CATALOG_CONN, CDC_DAG)
    WriteGateHook(configs[CDC_DAG].write_gate_conn_id).force_open(CDC_DAG, "make bench recreates the table")
    try:
        print(
            f"==> {CDC_DAG}: changes to {args.keys} keys through Kafka and Flink's upsert sink, until "
            f"{args.equality_delete_files} equality-delete files"
        )
        written = write_cdc_table(CDC_DAG, args.keys, args.buckets, args.equality_delete_files, work)
        register_copy(CDC_DAG, CDC_BARE)
        print(f"==> {CDC_BARE}: registered on its metadata; scans, the DAG's rewrite, the bare CALL, scans")
        measured = measure(configs[CDC_DAG], configs[CDC_BARE], work)
    finally:
        if catalog.table_exists(CDC_BARE.in_catalog):
            catalog.drop_table(CDC_BARE.in_catalog)  # its files are the original's: dropped with it, next
        drop_table(CATALOG_CONN, CDC_DAG)
    report(written, measured, cores)
    print(f"(work files, Flink and Spark logs: {work})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
