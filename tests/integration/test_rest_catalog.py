"""The REST catalog, live: Iceberg's own REST catalog server (``devkit/rest_catalog.py``, over a JdbcCatalog in
MariaDB), an Iceberg connection of type ``rest`` as a user writes it, and everything of ours reading the catalog
through it: a gated Spark writer, the compaction DAG beside it, the health watch's sweep, and pyiceberg's reads.
"""

from __future__ import annotations

import json
from dataclasses import asdict

from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.hooks.catalogs import spark_settings_for_connection
from airflow_iceberg.surface.dag_factory import compaction_dag_id
from airflow_iceberg.table_list.schema import TableConfig
from airflow_iceberg.triggers.health_sweep import CatalogSweep
from airflow_iceberg.triggers.table_health import TableHealthTrigger
from devkit.writer_jobs.ingest_events import expected_rows
from devkit.writers import IngestJob

TRIGGER_SECONDS = 3.0


def watcher(config: TableConfig) -> TableHealthTrigger:
    """The health watch's view of a table, with its table list entry's thresholds, for the REST connection."""
    return TableHealthTrigger(
        table=str(config.table),
        dag_id=compaction_dag_id(config.table),
        iceberg_conn_id=config.catalog_conn_id,
        write_gate_conn_id=config.write_gate_conn_id,
        poll_interval=60,
        **asdict(config.health.thresholds()),
    )


def table_rows(table: TableName) -> dict[int, tuple[int, str]]:
    arrow = IcebergHook("rest").load_table(table.in_catalog).scan().to_arrow()
    keys = arrow["key"].to_pylist()
    assert len(keys) == len(set(keys)), "a key appears twice"
    return dict(zip(keys, zip(arrow["value"].to_pylist(), arrow["payload"].to_pylist(), strict=True), strict=True))


def test_a_gated_compaction_beside_a_writer_on_a_rest_catalog_loses_no_commit_and_the_watch_reads_it(
    rest_catalog, unique_name, table_config, compaction_dag, tmp_path
):
    table = TableName("rest", "writers", unique_name)
    config = table_config(str(table))
    assert config.catalog_conn_id == "rest"
    assert spark_settings_for_connection("rest", "rest").conf["spark.sql.catalog.rest.uri"] == rest_catalog.uri
    stream = IngestJob(config, tmp_path / "stream", trigger_seconds=TRIGGER_SECONDS, writer_id="events-merge")
    sweep = CatalogSweep("rest", "write_gate_default", 60)
    records = []
    try:
        stream.start().wait_for_batches(3)  # the stream has created the table, through the REST server
        [before] = sweep.check_all([watcher(config)])
        assert (before.decision, before.reading) == ("needs_work", "manifests"), before
        dag = compaction_dag(str(table), idle_seconds=1800, max_pause_seconds=4000, poke_interval=1)
        for number in range(2):
            stream.wait_for_batches(len(stream.batches()) + 2)
            run = dag.test()
            assert run.state == "success", f"compaction {number + 1} ended {run.state}"
            wait = run.get_task_instance("wait_until_snapshot_idle").xcom_pull(task_ids="wait_until_snapshot_idle")
            assert wait["done_by"] == "writer acknowledgement" and wait["writers_acknowledged"] == ["events-merge"]
            records.append(run.get_task_instance("rewrite_files").xcom_pull(task_ids="rewrite_files"))
    finally:
        final = stream.stop()
    assert stream.processes_left() == []
    print(f"REST catalog {rest_catalog.uri}: 2 compactions {json.dumps(records)}; stream {final['batches']} batches")
    assert (final["failed_commits"], final["exit_error"]) == (0, None), final["failures"]
    assert all(r["rewrite_data_files"]["rewritten_data_files_count"] > 0 for r in records), records
    assert table_rows(table) == expected_rows(final["max_value"], stream.keys)
    [after] = sweep.check_all([watcher(config)])  # the watch reads the compacted table's current snapshot
    current = IcebergHook("rest").load_table(table.in_catalog).current_snapshot()
    assert after.decision in {"healthy", "needs_work"} and after.snapshot_id == current.snapshot_id, after
