"""A table's files and rows, read with pyiceberg, and dropping a table: shared by the demo, bench and tests."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook
from pyiceberg.exceptions import NoSuchTableError

from airflow_iceberg.core.tables import TableName

_DATA, _POSITION_DELETES, _EQUALITY_DELETES = 0, 1, 2


@dataclass(frozen=True)
class TableStats:
    """A table's live files and rows in its current snapshot, read with pyiceberg."""

    snapshot_id: int | None
    data_files: int
    position_delete_files: int
    equality_delete_files: int
    rows: int | None  # None while the table holds equality deletes, which pyiceberg cannot apply

    @property
    def delete_files(self) -> int:
        return self.position_delete_files + self.equality_delete_files

    @classmethod
    def read(cls, iceberg_conn_id: str, table: TableName | str) -> TableStats:
        return cls.read_at(IcebergHook(iceberg_conn_id).load_table(TableName.of(table).in_catalog))

    @classmethod
    def read_at(cls, iceberg_table: Any) -> TableStats:
        """The stats of a pyiceberg table at its current snapshot (a table as of an earlier one works too)."""
        snapshot = iceberg_table.current_snapshot()
        contents = iceberg_table.inspect.files(snapshot.snapshot_id if snapshot else None).column("content")
        contents = contents.to_pylist()
        return cls(
            snapshot_id=snapshot.snapshot_id if snapshot else None,
            data_files=contents.count(_DATA),
            position_delete_files=contents.count(_POSITION_DELETES),
            equality_delete_files=contents.count(_EQUALITY_DELETES),
            # A scan applies the position deletes, so this is the row count a reader sees. pyiceberg cannot apply
            # equality deletes (it refuses to scan): with any, Spark must count.
            rows=None
            if _EQUALITY_DELETES in contents
            else iceberg_table.scan(selected_fields=(iceberg_table.schema().fields[0].name,)).to_arrow().num_rows,
        )


def drop_table(iceberg_conn_id: str, table: TableName | str) -> None:
    """Drop ``table`` from its catalog and delete its local files, if it exists.

    A table whose metadata file is gone (its warehouse was deleted, by ``make clean`` for one, while the catalog
    database kept its row) is dropped from the catalog all the same.
    """
    catalog = IcebergHook(iceberg_conn_id).catalog
    identifier = TableName.of(table).in_catalog
    try:
        location = catalog.load_table(identifier).metadata.location
    except NoSuchTableError:
        return
    except FileNotFoundError:
        catalog.drop_table(identifier)
        return
    catalog.drop_table(identifier)
    if urlparse(location).scheme in ("", "file"):
        shutil.rmtree(urlparse(location).path, ignore_errors=True)


def data_file_paths(table: TableName, iceberg_conn_id: str = "lake") -> set[str]:
    """The paths of the table's live data files (no delete files)."""
    files = IcebergHook(iceberg_conn_id).load_table(table.in_catalog).inspect.files().to_pylist()
    return {entry["file_path"] for entry in files if entry["content"] == 0}
