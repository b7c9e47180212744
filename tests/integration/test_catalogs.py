"""The REST and Hive Metastore catalogs, live: Iceberg's own REST catalog server (``devkit/rest_catalog.py``, over a
JdbcCatalog in MariaDB) and a standalone Hive Metastore (``devkit/hive_metastore.py``, its schema in MariaDB), each
as the Iceberg connection a user writes, and everything of ours reading the catalog through it: a gated Spark
writer, the compaction DAG beside it, the health watch's sweep, and pyiceberg's reads. (The JDBC catalog is every
other integration test's.)
"""

from __future__ import annotations

import json
from dataclasses import asdict

import pyarrow as pa
import pytest
import requests
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.hooks.catalogs import spark_settings_for_connection
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.surface.dag_factory import compaction_dag_id
from airflow_iceberg.table_list.schema import TableConfig
from airflow_iceberg.triggers.health_sweep import CatalogSweep
from airflow_iceberg.triggers.table_health import TableHealthTrigger
from devkit.writer_jobs.ingest_events import expected_rows
from devkit.writers import IngestJob

TRIGGER_SECONDS = 3.0


@pytest.fixture(params=["rest", "hive"])
def catalog(request: pytest.FixtureRequest) -> tuple[str, str]:
    """The catalog's name (its Iceberg connection's id) and its server's address, the server up for the session."""
    server = request.getfixturevalue({"rest": "rest_catalog", "hive": "hive_metastore"}[request.param])
    return request.param, server.uri


def watcher(config: TableConfig) -> TableHealthTrigger:
    """The health watch's view of a table, with its table list entry's thresholds."""
    return TableHealthTrigger(
        table=str(config.table),
        dag_id=compaction_dag_id(config.table),
        iceberg_conn_id=config.catalog_conn_id,
        write_gate_conn_id=config.write_gate_conn_id,
        poll_interval=60,
        **asdict(config.health.thresholds()),
    )


def table_rows(table: TableName) -> dict[int, tuple[int, str]]:
    arrow = IcebergHook(table.catalog).load_table(table.in_catalog).scan().to_arrow()
    keys = arrow["key"].to_pylist()
    assert len(keys) == len(set(keys)), "a key appears twice"
    return dict(zip(keys, zip(arrow["value"].to_pylist(), arrow["payload"].to_pylist(), strict=True), strict=True))


def test_a_gated_compaction_beside_a_writer_on_a_rest_or_hive_catalog_loses_no_commit_and_the_watch_reads_it(
    catalog, unique_name, table_config, compaction_dag, tmp_path
):
    name, uri = catalog
    table = TableName(name, "writers", unique_name)
    config = table_config(str(table))
    assert config.catalog_conn_id == name
    assert spark_settings_for_connection(name, name).conf[f"spark.sql.catalog.{name}.uri"] == uri
    stream = IngestJob(config, tmp_path / "stream", trigger_seconds=TRIGGER_SECONDS, writer_id="events-merge")
    sweep = CatalogSweep(name, "write_gate_default", 60)
    records = []
    try:
        stream.start().wait_for_batches(3)  # the stream has created the table, through the catalog's server
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
    counts = [r["rewrite_data_files"]["rewritten_data_files_count"] for r in records]
    print(f"{name} catalog at {uri}: 2 gated compactions rewrote {counts} data files; the stream committed "
          f"{final['batches']} batches, {final['failed_commits']} failed")  # fmt: skip
    assert (final["failed_commits"], final["exit_error"]) == (0, None), final["failures"]
    assert all(count > 0 for count in counts), records
    assert table_rows(table) == expected_rows(final["max_value"], stream.keys)
    [after] = sweep.check_all([watcher(config)])  # the watch reads the compacted table's current snapshot
    current = IcebergHook(name).load_table(table.in_catalog).current_snapshot()
    assert after.decision in {"healthy", "needs_work"} and after.snapshot_id == current.snapshot_id, after


def test_the_live_health_watch_checks_a_rest_and_a_hive_catalogs_tables_and_the_page_lists_them(
    live_airflow, rest_catalog, hive_metastore, unique_name
):
    """The triggerer of a live Airflow reads each catalog through the connection a user adds with Airflow's CLI, and
    the Iceberg tables page lists its tables with what the watch decided."""
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    tables = []
    for server, name in ((rest_catalog, "rest"), (hive_metastore, "hive")):
        live_airflow.cli("connections", "add", name, "--conn-json", json.dumps(server.iceberg_connection()))
        table = TableName(name, "watched", unique_name)
        catalog = IcebergHook(name).catalog
        catalog.create_namespace_if_not_exists(table.namespace)
        catalog.create_table(table.in_catalog, schema=rows.schema).append(rows)
        tables.append(table)
    live_airflow.add_tables(
        *(
            {"table": str(t), "full_rewrite": {"schedule": None}, "health": {"watch": True, "poll_interval": 5}}
            for t in tables
        )
    )
    checks = live_airflow.wait_for(
        "each catalog's table checked",
        lambda: (found := WriteGateHook("write_gate_default").records.health_checks())
        and all(str(t) in found for t in tables)
        and {str(t): found[str(t)] for t in tables},
        180,
    )
    for table in tables:
        check = checks[str(table)]
        assert check["decision"] == "healthy", check
        assert "healthy: no delete files, 1 data files in all" in check["reason"]
        listed = requests.get(
            f"{live_airflow.url}/iceberg/api/tables",
            params={"q": str(table)},
            headers={"Authorization": f"Bearer {live_airflow.token()}"},
            timeout=60,
        )
        assert listed.ok, listed.text
        [row] = listed.json()["rows"]
        assert (row["table"], row["need"], row["data_files"]) == (str(table), "healthy", 1), row
    print(f"the live health watch checked {', '.join(map(str, tables))}: healthy, listed on the tables page")
