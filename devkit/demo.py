"""The demo behind ``make demo``: fill a table with small files, compact it with its DAG, show before/after."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.surface.dag_factory import compaction_dag_id
from airflow_iceberg.table_list.loader import load_table_list
from devkit.tables import TableStats, drop_table
from devkit.writers import write_small_files

DEMO_TABLE = TableName("lake", "demo", "events")


def _airflow(*args: str) -> subprocess.CompletedProcess[str]:
    airflow = Path(sys.executable).with_name("airflow")
    return subprocess.run([str(airflow), *args], capture_output=True, text=True, check=False)


def _gate_closed_seconds(write_gate_conn_id: str, table: TableName, dag_id: str, run_id: str) -> float | None:
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
    dag_id = compaction_dag_id(config.table)

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
