"""Table health from Iceberg metadata: dangling delete files, and the health read from a real table's manifests."""

from __future__ import annotations

from datetime import date

import pyarrow as pa
import pytest

from airflow_iceberg.planning.health import read_health


@pytest.mark.parametrize(
    ("content", "sequence", "oldest_data", "applies"),
    [
        ("equality", 5, 4, True),  # an older data file is live: it may delete rows of it
        ("equality", 5, 5, False),  # only data of its own sequence number or newer: a rewrite kept none older
        ("position", 5, 5, True),  # position deletes apply to their own sequence number too
        ("position", 5, 6, False),
        ("equality", 5, None, False),  # the partition has no live data file
    ],
)
def test_a_delete_file_dangles_once_no_live_data_file_is_older_than_it(content, sequence, oldest_data, applies):
    from types import SimpleNamespace

    from pyiceberg.manifest import DataFileContent

    from airflow_iceberg.planning.health import _may_apply

    kind = DataFileContent.EQUALITY_DELETES if content == "equality" else DataFileContent.POSITION_DELETES
    assert _may_apply(SimpleNamespace(content=kind), sequence, oldest_data, set()) is applies


def test_a_deletion_vector_dangles_once_the_data_file_it_names_is_gone():
    from types import SimpleNamespace

    from pyiceberg.manifest import DataFileContent

    from airflow_iceberg.planning.health import _may_apply

    vector = SimpleNamespace(content=DataFileContent.POSITION_DELETES, referenced_data_file="file:///d/a.parquet")
    assert _may_apply(vector, 5, 1, {"file:///d/a.parquet"})
    assert not _may_apply(vector, 5, 1, {"file:///d/b.parquet"})


def test_a_position_delete_whose_path_bounds_name_one_data_file_dangles_once_that_file_is_gone():
    """Flink's file-scoped position deletes (Iceberg 1.6+) and Spark's name one data file in equal bounds."""
    from types import SimpleNamespace

    from pyiceberg.manifest import DataFileContent

    from airflow_iceberg.planning.health import DELETE_FILE_PATH_ID, _may_apply, referenced_data_file

    def delete(lower: bytes | None, upper: bytes | None) -> SimpleNamespace:
        bounds = [{DELETE_FILE_PATH_ID: bound} if bound is not None else {} for bound in (lower, upper)]
        return SimpleNamespace(content=DataFileContent.POSITION_DELETES, lower_bounds=bounds[0], upper_bounds=bounds[1])

    one = delete(b"file:///d/a.parquet", b"file:///d/a.parquet")
    assert referenced_data_file(one) == "file:///d/a.parquet"
    assert not _may_apply(one, 5, 5, {"file:///d/b.parquet"})  # rewritten away: by sequence alone it would apply
    assert _may_apply(one, 5, 5, {"file:///d/a.parquet"})
    several = delete(b"file:///d/a.parquet", b"file:///d/b.parquet")
    for unknown in (several, delete(None, None)):  # several files, or bounds dropped for several (Iceberg 1.4+)
        assert referenced_data_file(unknown) is None
        assert _may_apply(unknown, 5, 5, {"file:///d/c.parquet"})  # the sequence rule decides
        # ... and the commits that added the live files: a rewrite's files keep its starting data sequence number
        # (5) but were committed later (6), so a delete committed at 5 cannot name them; one committed at 5 can.
        assert not _may_apply(unknown, 5, 5, {"file:///d/c.parquet"}, oldest_added=6)
        assert _may_apply(unknown, 5, 5, {"file:///d/c.parquet"}, oldest_added=5)


@pytest.mark.parametrize("format_version", [1, 2])
def test_health_read_from_a_real_tables_manifests_of_format_v1_and_v2(tmp_path, format_version):
    """Format v3, which pyiceberg cannot write yet, is read from Spark's tables with deletion vectors in
    tests/integration/test_live_ingest.py."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import DateType, LongType, NestedField

    catalog = SqlCatalog("lake", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}")
    catalog.create_namespace("db")
    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "day", DateType()))
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="day"))
    table = catalog.create_table(
        "db.t", schema=schema, partition_spec=spec, properties={"format-version": str(format_version)}
    )
    arrow = pa.schema([pa.field("id", pa.int64(), nullable=True), pa.field("day", pa.date32(), nullable=True)])
    for batch in range(3):  # three commits: three files in each of two day partitions
        ids = list(range(batch * 100, batch * 100 + 100))
        days = [date(2024, 6, 20) if i % 2 else date(2024, 6, 21) for i in ids]
        table.append(pa.table({"id": ids, "day": days}, schema=arrow))
    table = catalog.load_table("db.t")
    assert table.metadata.format_version == format_version

    health = read_health(table, "lake.db.t", small_file_ratio=0.75, target=10 * 1024 * 1024)

    assert health.snapshot_id == table.current_snapshot().snapshot_id
    assert [p.label for p in health.partitions] == ["day=2024-06-20", "day=2024-06-21"]
    for day in health.partitions:
        assert (day.data_files, day.small_files, day.data_records, day.delete_files) == (3, 3, 150, 0)
        assert day.snapshots_since_rewrite == 3
    assert health.snapshots_since_rewrite == 3
    assert health.partitions[0].conditions == ["`day` = DATE '2024-06-20'"]
    large = read_health(table, "lake.db.t", small_file_ratio=0.75, target=1024)  # every file is over 768 bytes
    assert {p.small_files for p in large.partitions} == {0}
