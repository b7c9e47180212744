"""A health watcher as the DAG factory builds one, for the trigger's and the sweep's tests."""

from __future__ import annotations

from airflow_iceberg.triggers.table_health import TableHealthTrigger


def trigger(table: str = "lake.db.t", **overrides) -> TableHealthTrigger:
    settings = {
        "table": table,
        "dag_id": f"iceberg_compact__{table.replace('.', '__')}",
        "iceberg_conn_id": "lake",
        "write_gate_conn_id": "write_gate_default",
        "poll_interval": 60,
        "min_small_files": 12,
        "rewrite_data_files_where": "ts >= '{{ macros.ds_add(ds, -2) }}'",
        **overrides,
    }
    return TableHealthTrigger(**settings)
