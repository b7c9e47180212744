"""A partial-progress rewrite whose commit groups fail is a failed run that says what it left undone.

Iceberg (1.11) ends such a ``rewrite_data_files`` normally: it logs each failed commit, leaves its groups out of
the result row, and counts only failed rewrites in ``failed_data_files_count``. The Spark job plans the rewrite
as Iceberg does and reports the planned files no commit accounts for (``uncommitted_data_files_count``); the
rewrite task, the run record and the run's state then say so.

To make commits fail, a writer that ignores the gate drops the files of every partition not yet rewritten,
right after the rewrite's first commit: each of those partitions' groups then fails Iceberg's validation
("Missing required files to delete").
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pyarrow as pa
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.expressions import In
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Operation
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from airflow_iceberg.core.tables import TableName

PARTITIONS = [f"2026-11-{day:02d}" for day in range(1, 13)]
APPENDS = 4  # files per partition
ROWS = 20  # per partition and append


def load(table: str):
    return IcebergHook("lake").load_table(TableName.parse(table).in_catalog)


def data_files_by_partition(iceberg_table) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for entry in iceberg_table.inspect.files().to_pylist():
        if entry["content"] == 0:
            counts[entry["partition"]["dt"]] += 1
    return dict(counts)


class GateIgnoringDeleter(threading.Thread):
    """Once the rewrite has committed a group, drops every partition that still holds its small files."""

    def __init__(self, table: str) -> None:
        super().__init__(daemon=True)
        self.table = table
        self.deleted_partitions: list[str] = []
        self.deleted_files = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            deadline = time.monotonic() + 600
            while not any(s.summary.operation == Operation.REPLACE for s in load(self.table).snapshots()):
                assert time.monotonic() < deadline, "the rewrite committed nothing within 600 s"
                time.sleep(0.05)
            while True:  # a rewrite commit may land between reading the files and committing: read again
                current = load(self.table)
                left = sorted(dt for dt, files in data_files_by_partition(current).items() if files > 1)
                assert left, "every partition was rewritten before the deleter could drop one"
                try:
                    current.delete(In("dt", left))
                except (CommitFailedException, ValidationException):  # a rewrite commit came in between
                    continue
                snapshot = load(self.table).current_snapshot()
                self.deleted_partitions = left
                self.deleted_files = int(snapshot.summary["deleted-data-files"])
                return
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.error = error


def test_a_rewrite_whose_commit_groups_fail_fails_its_run_and_says_so_in_result_record_and_state(
    unique_name, compaction_dag, gate_hook
):
    a_partial_failure_fails_the_run(unique_name, compaction_dag, gate_hook)


def a_partial_failure_fails_the_run(unique_name, compaction_dag, gate_hook, **settings) -> str:
    """The scenario, on the table list entry's ``settings`` besides its own (``tests/integration/test_yarn.py``
    runs it in YARN's cluster deploy mode); returns the sentence the run failed with."""
    catalog = IcebergHook("lake").catalog
    catalog.create_namespace_if_not_exists("partial")
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "dt", StringType(), required=False),
    )
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="dt"))
    iceberg_table = catalog.create_table(f"partial.{unique_name}", schema=schema, partition_spec=spec)
    for append in range(APPENDS):  # each append writes one small file to every partition
        ids = [append * 10_000 + p * 100 + row for p in range(len(PARTITIONS)) for row in range(ROWS)]
        days = [dt for dt in PARTITIONS for _ in range(ROWS)]
        iceberg_table.append(pa.table({"id": pa.array(ids, pa.int64()), "dt": pa.array(days, pa.string())}))
    table = f"lake.partial.{unique_name}"
    planned = len(PARTITIONS) * APPENDS

    dag = compaction_dag(
        table,
        rewrite_data_files={
            "partial-progress.enabled": True,
            "partial-progress.max-commits": len(PARTITIONS),  # a commit per partition's group
            "max-concurrent-file-group-rewrites": 1,  # one group after the other: time for the deleter
            "min-input-files": 2,
        },
        **settings,
    )
    deleter = GateIgnoringDeleter(table)
    deleter.start()
    run = dag.test()
    deleter.join(timeout=60)
    assert deleter.error is None, f"the deleter failed: {deleter.error!r}"
    lost = deleter.deleted_files
    print(
        f"{planned} data files planned in {len(PARTITIONS)} partitions; the deleter dropped "
        f"{len(deleter.deleted_partitions)} partitions ({lost} files) after the first rewrite commit"
    )
    assert 0 < lost < planned

    # The run's state: failed, at the rewrite, without a retry; the gate reopened and the run recorded.
    assert run.state == "failed"
    rewrite = run.get_task_instance("rewrite_files")
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["rewrite_files"] == "failed" and rewrite.try_number == 1, states
    assert states["open_gate"] == states["record_run"] == "success", states
    assert not gate_hook.get_state(table).pauses_writers

    # The result: every planned file is accounted for, and the ones whose commit failed are named as such.
    result = rewrite.xcom_pull(task_ids="rewrite_files", key="results")["rewrite_data_files"]
    assert result["planned_data_files_count"] == planned
    assert result["failed_data_files_count"] == 0  # no rewrite failed: their commits did
    assert result["uncommitted_data_files_count"] == lost
    assert result["rewritten_data_files_count"] == planned - lost
    failure = rewrite.xcom_pull(task_ids="rewrite_files", key="partial_failure")
    assert failure == (
        f"rewrite_data_files left {lost} data files of {planned} planned as they were: "
        f"{lost} were rewritten but their commit failed"
    )

    # The run record: failed, with that sentence as its detail.
    record = gate_hook.records.run_records(table)[-1]
    assert (record["run_id"], record["outcome"], record["detail"]) == (run.run_id, "failed", failure)

    # The partitions the rewrite did commit hold one file each; the dropped ones are gone, nothing else changed.
    after = data_files_by_partition(load(table))
    assert after == {dt: 1 for dt in PARTITIONS if dt not in deleter.deleted_partitions}
    return failure
