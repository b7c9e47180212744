"""The demo behind ``make demo``: fill a table with small files, compact it with its DAG, show before/after.

Also the helpers the integration tests share with it: reading a table's file and row counts with pyiceberg,
and submitting the gated small-files writer (``spark_jobs/small_files_writer.py``) to Spark.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlparse

from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from pyiceberg.exceptions import NoSuchTableError

from airflow_iceberg.catalogs import spark_settings_for_connection
from airflow_iceberg.config import TableConfig, load_table_list
from airflow_iceberg.dag_factory import compaction_dag_id
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.operators.rewrite import SPARK_JOBS_DIR
from airflow_iceberg.spark_output import tap_spark_output
from spark_jobs.iceberg_call import TableName

DEMO_TABLE = "lake.demo.events"
_DATA, _POSITION_DELETES, _EQUALITY_DELETES = 0, 1, 2


@dataclass(frozen=True)
class TableStats:
    """A table's live files and rows in its current snapshot, read with pyiceberg."""

    snapshot_id: int | None
    data_files: int
    position_delete_files: int
    equality_delete_files: int
    rows: int

    @property
    def delete_files(self) -> int:
        return self.position_delete_files + self.equality_delete_files

    @classmethod
    def read(cls, iceberg_conn_id: str, table: str) -> TableStats:
        iceberg_table = IcebergHook(iceberg_conn_id).load_table(TableName.parse(table).in_catalog)
        contents = iceberg_table.inspect.files().column("content").to_pylist()
        snapshot = iceberg_table.current_snapshot()
        return cls(
            snapshot_id=snapshot.snapshot_id if snapshot else None,
            data_files=contents.count(_DATA),
            position_delete_files=contents.count(_POSITION_DELETES),
            equality_delete_files=contents.count(_EQUALITY_DELETES),
            # A scan applies the position deletes, so this is the row count a reader sees.
            rows=iceberg_table.scan(selected_fields=("id",)).to_arrow().num_rows,
        )


def write_small_files(config: TableConfig, *writer_args: str, log_file: Path | None = None) -> dict[str, object]:
    """Run the gated small-files writer on ``config.table`` in Spark; return the summary it prints.

    ``writer_args`` are the writer's own options (``--commits``, ``--days``, ...). The writer checks the
    table's gate in the database of ``config.write_gate_conn_id`` before every commit. With ``log_file``,
    spark-submit's output goes there instead of the Airflow log.
    """
    name = config.name
    catalog = spark_settings_for_connection(name.catalog, config.catalog_conn_id)
    gate = WriteGateHook.get_connection(config.write_gate_conn_id)
    summary: dict[str, object] = {}
    hook = SparkSubmitHook(
        conn_id=config.spark_conn_id,
        conf={**catalog.conf, **config.spark.conf, "spark.sql.session.timeZone": "UTC"},
        jars=",".join(config.spark.jars) or None,
        packages=",".join(config.spark.packages) or None,
        py_files=",".join(str(SPARK_JOBS_DIR / m) for m in ("iceberg_call.py", "write_gate.py")),
        name=f"small-files-writer-{name}",
        application_args=[
            "--table",
            str(name),
            "--gate-host",
            gate.host or "127.0.0.1",
            "--gate-port",
            str(gate.port or 3306),
            "--gate-user",
            gate.login or "root",
            "--gate-database",
            gate.schema,
            *writer_args,
        ],  # fmt: skip
        env_vars={**catalog.secret_env, "AIRFLOW_ICEBERG_GATE_PASSWORD": gate.password or ""},
    )

    def keep_summary(line: str) -> None:  # the writer's last stdout line is its JSON summary
        if line.startswith('{"table"'):
            summary.update(json.loads(line))

    if log_file is not None:
        file_logger = logging.getLogger(f"airflow_iceberg.demo.spark.{name}")
        file_logger.propagate = False
        file_logger.addHandler(logging.FileHandler(log_file, mode="w"))
        file_logger.setLevel(logging.INFO)
        hook._log = file_logger  # LoggingMixin.log returns this logger
    tap_spark_output(hook, keep_summary).submit(str(SPARK_JOBS_DIR / "small_files_writer.py"))
    if not summary:
        raise RuntimeError(f"the small-files writer for {name} printed no summary")
    return summary


def drop_table(iceberg_conn_id: str, table: str) -> None:
    """Drop ``table`` from its catalog and delete its local files, if it exists."""
    catalog = IcebergHook(iceberg_conn_id).catalog
    identifier = TableName.parse(table).in_catalog
    try:
        location = catalog.load_table(identifier).metadata.location
    except NoSuchTableError:
        return
    catalog.drop_table(identifier)
    if urlparse(location).scheme in ("", "file"):
        shutil.rmtree(urlparse(location).path, ignore_errors=True)


def _airflow(*args: str) -> subprocess.CompletedProcess[str]:
    airflow = Path(sys.executable).with_name("airflow")
    return subprocess.run([str(airflow), *args], capture_output=True, text=True, check=False)


def _gate_closed_seconds(write_gate_conn_id: str, table: str, dag_id: str, run_id: str) -> float | None:
    trail = [r for r in WriteGateHook(write_gate_conn_id).audit_trail(table) if r["owner_run_id"] == run_id]
    closed = next((r["at"] for r in trail if r["action"] == "close" and r["owner_dag_id"] == dag_id), None)
    opened = next((r["at"] for r in trail if r["action"] == "open" and r["owner_dag_id"] == dag_id), None)
    return round((opened - closed).total_seconds(), 3) if closed and opened else None


def _show(label: str, stats: TableStats) -> None:
    print(
        f"  {label:<7} data files {stats.data_files:>5}   position-delete files {stats.position_delete_files:>4}"
        f"   equality-delete files {stats.equality_delete_files:>3}   rows {stats.rows:>7}"
    )


def main() -> int:
    # The summary is what the demo is for; pyiceberg's note that the catalog uses its v0 schema is not.
    logging.getLogger("pyiceberg.catalog.sql").setLevel(logging.ERROR)
    tables = {t.table: t for t in load_table_list().tables}
    if DEMO_TABLE not in tables:
        raise SystemExit(f"demo: {DEMO_TABLE} is not in the table list (or has errors)")
    config = tables[DEMO_TABLE]
    dag_id = compaction_dag_id(config)

    print(f"==> Creating {DEMO_TABLE} anew and filling it with small files and deletes (Spark, gated writer)")
    drop_table(config.catalog_conn_id, DEMO_TABLE)
    gate_hook = WriteGateHook(config.write_gate_conn_id)
    # The demo table is new, so its gate starts open, even if an interrupted demo left it closed.
    gate_hook.force_open(DEMO_TABLE, "make demo recreates the table")
    build = Path(os.environ.get("AIRFLOW_ICEBERG_BUILD", "build"))
    build.mkdir(parents=True, exist_ok=True)
    written = write_small_files(
        config, "--days", "3", "--commits", "5", "--files-per-commit", "14", log_file=build / "demo-writer.log"
    )
    print(f"    writer: {written} (log: {build / 'demo-writer.log'})")
    before = TableStats.read(config.catalog_conn_id, DEMO_TABLE)

    logical_date = datetime.now(timezone.utc).replace(microsecond=0).isoformat()
    print(f"==> airflow dags test {dag_id} {logical_date}")
    started = time.monotonic()
    test = _airflow("dags", "test", dag_id, logical_date)
    log_path = build / "demo-dags-test.log"
    log_path.write_text(test.stdout + test.stderr)
    print(f"    finished in {time.monotonic() - started:.1f} s (exit {test.returncode}); log: {log_path}")
    listing = _airflow("dags", "list-runs", dag_id, "--output", "json").stdout.splitlines()
    # Airflow's CLI may print log lines before the JSON document; the document is the line that is a list.
    runs = next((json.loads(line) for line in reversed(listing) if line.startswith("[")), [])
    run = next((r for r in runs if r["logical_date"].startswith(logical_date[:19])), None)
    run_state = run["state"] if run else "unknown"
    run_id = run["run_id"] if run else ""

    after = TableStats.read(config.catalog_conn_id, DEMO_TABLE)
    gate = gate_hook.get_state(DEMO_TABLE)
    closed_seconds = _gate_closed_seconds(config.write_gate_conn_id, DEMO_TABLE, dag_id, run_id)
    print(f"==> {DEMO_TABLE}: before and after the compaction run {run_id} ({run_state})")
    _show("before", before)
    _show("after", after)
    print(f"  gate    {gate.state}, closed for {closed_seconds} s during the run")
    summary = {
        "files_before": before.data_files,
        "files_after": after.data_files,
        "delete_files_before": before.delete_files,
        "delete_files_after": after.delete_files,
        "rows_before": before.rows,
        "rows_after": after.rows,
        "gate_state_after": gate.state,
        "dag_run_state": run_state,
        "gate_closed_seconds": closed_seconds,
    }
    print(json.dumps(summary))
    return 0 if run_state == "success" and after.rows == before.rows and gate.state == "open" else 1


if __name__ == "__main__":
    sys.exit(main())
