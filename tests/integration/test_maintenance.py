"""Maintenance in the daily run, with a gated writer that stamps its snapshots as Flink does.

The writer commits snapshots carrying ``flink.max-committed-checkpoint-id``, pauses (and acknowledges) while
the daily run's gate is closed, commits twice more after the rewrite, then stops. Maintenance then runs with
``expire_older_than_hours: 0``: without the marker rule it would expire every snapshot but the current one.
"""

from __future__ import annotations

import threading
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pytest
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_iceberg.core.maintenance import FLINK_CHECKPOINT_MARKER
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.core.writer import WriteGateClient
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.surface.dag_factory import full_rewrite_dag_id
from devkit.dag_runs import load_dag


class MarkerWriter(threading.Thread):
    """Appends a small file every 0.3 s with a checkpoint marker, honouring the gate; stops 2 commits after a pause."""

    def __init__(self, table: str) -> None:
        super().__init__(name="marker-writer", daemon=True)
        self.table = table
        self.commits: list[int] = []  # snapshot ids, oldest first
        self.error: BaseException | None = None
        self.stop = threading.Event()
        settings = WriteGateHook("write_gate_writer").connection_settings()  # the writer user, with only its grants
        self.gate = WriteGateClient.connect(table, **settings, poke_interval=0.1, log=lambda m: None)

    def commit(self) -> None:
        iceberg_table = IcebergHook("lake").load_table(self.table.split(".", 1)[1])
        checkpoint = len(self.commits) + 1
        rows = pa.table({"id": pa.array(range(checkpoint * 10, checkpoint * 10 + 10), pa.int64())})
        iceberg_table.append(rows, snapshot_properties={FLINK_CHECKPOINT_MARKER: str(checkpoint)})
        self.commits.append(iceberg_table.current_snapshot().snapshot_id)

    def run(self) -> None:
        try:
            after_pause = None
            while not self.stop.is_set() and after_pause != 2:
                if self.gate.wait_until_open(self.commits[-1] if self.commits else None) and after_pause is None:
                    after_pause = 0
                self.commit()
                if after_pause is not None:
                    after_pause += 1
                self.stop.wait(0.3)
        except BaseException as error:  # surfaced by the test
            self.error = error
        finally:
            self.gate.close()


@pytest.fixture
def writer(unique_name: str):
    catalog = IcebergHook("lake").catalog
    catalog.create_namespace_if_not_exists("maintenance")
    catalog.create_table(f"maintenance.{unique_name}", schema=pa.schema([("id", pa.int64())]))
    thread = MarkerWriter(f"lake.maintenance.{unique_name}")
    yield thread
    thread.stop.set()
    thread.join(30)


def data_file_paths(table: str) -> set[str]:
    files = IcebergHook("lake").load_table(table.split(".", 1)[1]).inspect.files().to_pylist()
    return {f["file_path"] for f in files if f["content"] == 0}


@pytest.mark.stack_check("daily full rewrite and maintenance")
def test_daily_run_deletes_replaced_files_and_keeps_the_newest_checkpoint_snapshot(
    writer, compaction_dag, gate_hook, stack_check
):
    table = writer.table
    writer.commit(), writer.commit(), writer.commit()  # a few checkpoints before the writer goes live
    writer.start()
    compaction_dag(
        table,
        idle_seconds=2,
        poke_interval=1,
        maintenance={"expire_older_than_hours": 0, "retain_last": 1, "orphan_older_than_hours": 24},
    )
    small_files = data_file_paths(table)
    assert len(small_files) >= 3

    run = load_dag(full_rewrite_dag_id(TableName.parse(table))).test()
    writer.join(60)
    trail = [r for r in gate_hook.audit_trail(table) if r["owner_run_id"] == run.run_id]
    closed = [r["at"] for r in trail if r["action"] == "close"]
    opened = [r["at"] for r in trail if r["action"] == "open"]
    written = {i for k in range(1, len(writer.commits) + 1) for i in range(k * 10, k * 10 + 10)}
    ids = IcebergHook("lake").load_table(table.split(".", 1)[1]).scan().to_arrow()["id"].to_pylist()
    stack_check.record(
        gate_closed_seconds=[round((max(opened) - min(closed)).total_seconds(), 1)] if closed and opened else [],
        rewrite_failed_commits=0 if run.state == "success" else 1,
        writer_failed_commits=0 if writer.error is None else 1,
        rows_exact=len(ids) == len(set(ids)) and set(ids) == written,
        tasks={ti.task_id: ti.state for ti in run.get_task_instances()},
    )

    assert writer.error is None and not writer.is_alive()
    assert run.state == "success", {ti.task_id: ti.state for ti in run.get_task_instances()}
    metadata = IcebergHook("lake").load_table(table.split(".", 1)[1]).metadata
    surviving = {s.snapshot_id for s in metadata.snapshots}
    newest_marked = writer.commits[-1]  # committed after the rewrite, before maintenance
    # The newest checkpoint snapshot is not the current one (rewrite_manifests committed after it), so only
    # the marker rule kept it: with the cut-off at the current snapshot it would have been expired.
    assert metadata.current_snapshot_id != newest_marked
    assert newest_marked in surviving
    assert writer.commits[0] not in surviving  # older snapshots were expired
    # The small files the rewrite replaced are gone from the warehouse directory.
    for path in small_files:
        assert not Path(urlparse(path).path).exists(), f"{path} is still on disk"
    assert data_file_paths(table).isdisjoint(small_files)
