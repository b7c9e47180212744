"""Trust, then verify: what a writer's snapshots show it committed, read from a real table's history (pyiceberg), and
each way a snapshot's delete files are told apart."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace

import pyarrow as pa
import pytest

from airflow_iceberg.core.conflicts import CommitKind
from airflow_iceberg.core.gate_state import WriterState
from airflow_iceberg.planning import history
from airflow_iceberg.planning.health import DELETE_FILE_PATH_ID
from airflow_iceberg.planning.history import classify, observe_writers

SEEN = datetime(2026, 12, 1, tzinfo=timezone.utc)
MARK = "airflow-iceberg.writer"


def writer(name: str, kind: CommitKind | None, **kwargs) -> WriterState:
    return WriterState(name, SEEN, None, None, commit_kind=kind, commits_as=f"{MARK}={name}", **kwargs)


@pytest.fixture
def table(tmp_path):
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    catalog = SqlCatalog("lake", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("db")
    created = catalog.create_table("db.t", schema=Schema(NestedField(1, "id", LongType())), properties={})
    return SimpleNamespace(catalog=catalog, table=created)


ROWS = pa.schema([pa.field("id", pa.int64(), nullable=True)])


def append(table, name: str, ids: range) -> None:
    table.append(pa.table({"id": list(ids)}, schema=ROWS), snapshot_properties={MARK: name})


def test_a_writer_that_declared_appends_and_deleted_rows_of_older_files_is_seen_as_row_level(table):
    append(table.table, "ingest", range(0, 100))
    append(table.table, "liar", range(100, 200))
    table.table.delete("id < 150", snapshot_properties={MARK: "liar"})  # copy-on-write: it rewrites both files
    loaded = table.catalog.load_table("db.t")
    writers = [writer("ingest", CommitKind.APPENDS), writer("liar", CommitKind.APPENDS)]

    [seen] = observe_writers(loaded, writers, since_ms=None)

    deleting = [s.snapshot_id for s in loaded.snapshots()[2:]]  # pyiceberg's delete commits one or two snapshots
    assert (seen.writer_id, seen.kind) == ("liar", CommitKind.ROW_LEVEL) and seen.snapshot_id == deleting[0]
    assert seen.detail.startswith(f"snapshot {deleting[0]} (")
    assert "data files: it rewrote or deleted existing files" in seen.detail
    assert seen.as_xcom()["kind"] == "row-level"


def test_snapshots_before_the_last_check_and_writers_already_taken_as_row_level_are_not_read_again(table):
    append(table.table, "liar", range(0, 100))
    table.table.delete("id < 50", snapshot_properties={MARK: "liar"})
    loaded = table.catalog.load_table("db.t")
    checked = loaded.current_snapshot().timestamp_ms
    assert observe_writers(loaded, [writer("liar", CommitKind.APPENDS)], since_ms=checked) == []
    assert observe_writers(loaded, [writer("liar", CommitKind.ROW_LEVEL)], since_ms=None) == []
    seen_before = writer("liar", CommitKind.APPENDS, observed_kind=CommitKind.ROW_LEVEL)
    assert observe_writers(loaded, [seen_before], since_ms=None) == []


def test_writers_that_declared_nothing_or_name_nothing_their_snapshots_carry_are_not_looked_for(table):
    append(table.table, "silent", range(0, 10))
    table.table.delete("id < 5", snapshot_properties={MARK: "silent"})
    loaded = table.catalog.load_table("db.t")
    unnamed = WriterState("silent", SEEN, None, None, commit_kind=CommitKind.APPENDS)
    assert observe_writers(loaded, [writer("silent", None), unnamed], since_ms=None) == []


def test_appends_alone_show_nothing_new(table):
    append(table.table, "ingest", range(0, 10))
    append(table.table, "ingest", range(10, 20))
    loaded = table.catalog.load_table("db.t")
    assert observe_writers(loaded, [writer("ingest", CommitKind.APPENDS)], since_ms=None) == []
    assert classify(loaded, loaded.current_snapshot())[0] == CommitKind.APPENDS


# --- delete files, told apart ----------------------------------------------------------------------------------


def position_delete(lower: str | None, upper: str | None, file_format: str = "FileFormat.PARQUET") -> SimpleNamespace:
    from pyiceberg.manifest import DataFileContent

    bounds = [{DELETE_FILE_PATH_ID: b.encode()} if b is not None else {} for b in (lower, upper)]
    return SimpleNamespace(
        content=DataFileContent.POSITION_DELETES,
        lower_bounds=bounds[0],
        upper_bounds=bounds[1],
        file_format=file_format,
    )


def snapshot(operation: str = "overwrite", **summary: str) -> SimpleNamespace:
    return SimpleNamespace(
        snapshot_id=7,
        summary=SimpleNamespace(operation=SimpleNamespace(value=operation), additional_properties=summary),
    )


@pytest.fixture
def added(monkeypatch):
    """The data and delete files a snapshot added, as a test says."""
    files: dict[str, object] = {"data": set(), "deletes": []}
    monkeypatch.setattr(history, "_added_files", lambda table, snap: (files["data"], files["deletes"]))
    return files


def test_position_deletes_that_name_only_files_of_their_own_commit_are_upserts(added):
    added["data"] = {"file:///w/own-1.parquet", "file:///w/own-2.parquet"}
    added["deletes"] = [position_delete("file:///w/own-1.parquet", "file:///w/own-1.parquet")]
    kind, detail = classify(None, snapshot(**{"added-position-delete-files": "1"}))
    assert (
        kind == CommitKind.UPSERTS
        and detail == "snapshot 7 (overwrite) deleted rows only in data files it added itself"
    )


def test_a_position_delete_that_names_an_older_file_is_row_level(added):
    added["data"] = {"file:///w/own-1.parquet"}
    added["deletes"] = [
        position_delete("file:///w/own-1.parquet", "file:///w/own-1.parquet"),
        position_delete("file:///w/old-9.parquet", "file:///w/old-9.parquet"),
    ]
    kind, detail = classify(None, snapshot(**{"added-position-delete-files": "2"}))
    assert kind == CommitKind.ROW_LEVEL
    assert (
        detail
        == "snapshot 7 (overwrite) deleted rows in 1 data files older than its own commit (such as file:///w/old-9.parquet)"
    )


@pytest.mark.parametrize(("lower", "upper"), [("file:///w/a", "file:///w/b"), (None, None)])
def test_a_partition_scoped_position_delete_file_is_row_level(added, lower, upper):
    """Bounds that differ, or dropped (Iceberg 1.4+ keeps them only for a file that names one data file)."""
    added["deletes"] = [position_delete(lower, upper)]
    kind, detail = classify(None, snapshot(**{"added-position-delete-files": "1"}))
    assert kind == CommitKind.ROW_LEVEL and "1 partition-scoped position-delete files" in detail


def test_a_deletion_vector_whose_file_is_not_read_leaves_the_snapshot_untold(added):
    added["deletes"] = [position_delete(None, None, file_format="FileFormat.PUFFIN")]
    assert classify(None, snapshot(**{"added-dvs": "1"})) is None


def test_equality_deletes_alone_are_upserts_and_a_rewrite_is_no_writers(added):
    assert classify(None, snapshot(**{"added-equality-delete-files": "3"}))[0] == CommitKind.UPSERTS
    assert classify(None, snapshot("replace", **{"deleted-data-files": "9"})) is None
    assert classify(None, snapshot("append", **{"added-data-files": "1"}))[0] == CommitKind.APPENDS
