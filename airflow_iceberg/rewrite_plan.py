"""What a rewrite would do, estimated from table metadata alone (pyiceberg; no Spark, no commit), for dry runs."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from spark_jobs.iceberg_call import TableName

DEFAULT_TARGET_FILE_SIZE = 512 * 1024 * 1024  # Iceberg's write.target-file-size-bytes default
DEFAULT_MIN_INPUT_FILES = 5
MAX_FILE_GROUP_SIZE = 100 * 1024**3  # Iceberg's max-file-group-size-bytes default


def plan_rewrite(
    iceberg_conn_id: str,
    table: str,
    row_filter: str | None,
    options: dict[str, Any],
) -> dict[str, Any]:
    """Per partition: the data files, bytes and delete files a binpack ``rewrite_data_files`` would take.

    An estimate of Iceberg's selection: files under 75 % of the target size or carrying deletes are
    candidates, and a partition is rewritten when it has ``min-input-files`` of them (any number with
    ``rewrite-all``). ``row_filter`` is tried as a pyiceberg filter; if pyiceberg cannot read it, every
    partition is listed and ``row_filter_applied`` says so.
    """
    name = TableName.parse(table)
    iceberg_table = IcebergHook(iceberg_conn_id).load_table(name.in_catalog)
    target = int(options.get("target-file-size-bytes", DEFAULT_TARGET_FILE_SIZE))
    min_input_files = int(options.get("min-input-files", DEFAULT_MIN_INPUT_FILES))
    rewrite_all = str(options.get("rewrite-all", "false")).lower() == "true"
    applied = bool(row_filter)
    try:
        tasks = list(iceberg_table.scan(row_filter=row_filter).plan_files()) if row_filter else None
    except Exception:  # not a predicate pyiceberg can parse: list every partition instead
        tasks, applied = None, False
    if tasks is None:
        tasks = list(iceberg_table.scan().plan_files())
    partitions: dict[str, dict[str, Any]] = defaultdict(lambda: {"data_files": 0, "bytes": 0, "delete_files": set()})
    for task in tasks:
        has_deletes = bool(task.delete_files)
        if not (rewrite_all or has_deletes or task.file.file_size_in_bytes < 0.75 * target):
            continue
        entry = partitions[repr(task.file.partition)]
        entry["data_files"] += 1
        entry["bytes"] += task.file.file_size_in_bytes
        entry["delete_files"].update(d.file_path for d in task.delete_files)
    report = []
    for partition, entry in sorted(partitions.items()):
        if not rewrite_all and entry["data_files"] < min_input_files:
            continue
        report.append(
            {
                "partition": partition,
                "data_files": entry["data_files"],
                "bytes": entry["bytes"],
                "delete_files": len(entry["delete_files"]),
                "file_groups": math.ceil(entry["bytes"] / MAX_FILE_GROUP_SIZE) or 1,
            }
        )
    return {
        "table": str(name),
        "row_filter": row_filter,
        "row_filter_applied": applied,
        "partitions": report,
        "data_files": sum(p["data_files"] for p in report),
        "bytes": sum(p["bytes"] for p in report),
        "file_groups": sum(p["file_groups"] for p in report),
    }
