"""The daily full rewrite, backfilled by a live Airflow scheduler over three days of a five-day table.

In Airflow 3 ``airflow backfill create`` only creates the runs; a running scheduler executes them: the suite's
live ``airflow standalone`` (``devkit/live_airflow.py``), with a fleet of 200 other tables in its table list.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import date, datetime, timedelta, timezone

from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.surface.dag_factory import full_rewrite_dag_id
from devkit.writers import write_small_files


def files_by_day(table: str) -> dict[date, dict[int, set[str]]]:
    """day partition -> content (0 data, 1 position deletes) -> file paths, as the table's metadata says."""
    layout: dict[date, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    for entry in IcebergHook("lake").load_table(table.split(".", 1)[1]).inspect.files().to_pylist():
        layout[entry["partition"]["ts_day"]][entry["content"]].add(entry["file_path"])
    return layout


def test_backfilling_three_days_rewrites_exactly_those_partitions(unique_name, table_config, live_airflow):
    table = f"lake.backfill.{unique_name}"
    today = datetime.now(timezone.utc).date()
    last_day = today - timedelta(days=6)
    days = [last_day - timedelta(days=n) for n in range(4, -1, -1)]  # five consecutive past days
    write_small_files(
        table_config(table),
        *("--days", "5", "--end-day", last_day.isoformat(), "--commits", "3", "--files-per-commit", "4"),
        *("--delete-commits", "5", "--deletes-per-commit", "3"),
    )
    before = files_by_day(table)
    assert sorted(before) == days and all(len(before[d][0]) == 12 for d in days)
    assert any(before[d][1] for d in days[1:4]), "no position deletes in the days to backfill"

    settings = {
        "table": table,
        "idle_seconds": 2,
        "poke_interval": 1,
        "full_rewrite": {"start_date": days[0].isoformat(), "partition": {"column": "ts", "transform": "day"}},
        # Upkeep after the rewrite is test_maintenance's: here it would add three Spark start-ups to every run.
        "maintenance": {"rewrite_manifests": False, "expire_snapshots": False, "remove_orphan_files": False},
    }
    live_airflow.add_tables(settings)
    dag_id = full_rewrite_dag_id(TableName.parse(table))
    backfilled = days[1:4]
    live_airflow.cli(
        "backfill",
        "create",
        "--dag-id",
        dag_id,
        "--from-date",
        backfilled[0].isoformat(),
        "--to-date",
        backfilled[-1].isoformat(),
        "--max-active-runs",
        "1",
    )

    def backfill_runs():
        return live_airflow.query(
            "SELECT logical_date, state FROM dag_run WHERE dag_id = %s AND run_type = 'backfill' ORDER BY 1", dag_id
        )

    def backfill_finished() -> bool:
        runs = backfill_runs()
        return len(runs) == 3 and all(state in ("success", "failed") for _, state in runs)

    live_airflow.wait_for("three backfill runs to finish", backfill_finished, 600)
    runs = [(logical.astimezone(timezone.utc).date(), state) for logical, state in backfill_runs()]
    assert runs == [(day, "success") for day in backfilled]

    after = files_by_day(table)
    for day in backfilled:
        assert len(after[day][0]) == 1, f"{day}: {len(after[day][0])} data files"
        assert not after[day][1], f"{day} kept position-delete files"
    for day in (days[0], days[4]):  # untouched: the very same files as before
        assert after[day][0] == before[day][0] and after[day][1] == before[day][1]
