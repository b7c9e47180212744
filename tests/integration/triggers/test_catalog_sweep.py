"""The health sweep on real tables in the JDBC catalog when some of them go wrong.

A watched table dropped, one renamed, one whose current metadata file is corrupt and one whose file is gone: each
gets an ``error`` check that says what happened and what to do, logged once, not at every sweep; every other
table of the catalog is checked as before. (``tests/integration/test_health_watch.py`` shows the same on the
page of a live Airflow.)
"""

from __future__ import annotations

import logging
import os
import time
from urllib.parse import urlparse

import pyarrow as pa
import pytest
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.triggers.health_sweep import CatalogSweep
from airflow_iceberg.triggers.table_health import TableHealthTrigger

ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
HEALTHY = 6


def watcher(table: TableName) -> TableHealthTrigger:
    return TableHealthTrigger(
        table=str(table),
        dag_id=f"iceberg_compact__{table.catalog}__{table.namespace}__{table.table}",
        iceberg_conn_id="lake",
        write_gate_conn_id="write_gate_default",
        poll_interval=60,
    )


@pytest.fixture
def tables():
    catalog = IcebergHook("lake").catalog
    namespace = f"sweep_{int(time.time() * 1000)}"
    catalog.create_namespace(namespace)
    names = ["dropped", "renamed", "corrupt", "deleted"] + [f"ok{n}" for n in range(HEALTHY)]
    found = {name: TableName("lake", namespace, name) for name in names}
    for table in found.values():
        catalog.create_table(table.in_catalog, schema=ROWS.schema).append(ROWS)
    return catalog, found


def committed_metadata(catalog, table: TableName) -> str:
    """The local path of the metadata file of a new commit to ``table``."""
    iceberg_table = catalog.load_table(table.in_catalog)
    iceberg_table.append(ROWS)
    location = iceberg_table.metadata_location
    return urlparse(location).path if location.startswith("file:") else location


def test_a_dropped_a_renamed_and_an_unreadable_table_each_say_so_once_and_the_others_are_checked(tables, caplog):
    catalog, found = tables
    sweep = CatalogSweep("lake", "write_gate_default", 60)
    watchers = [watcher(t) for t in found.values()]
    first = {c.table: c for c in sweep.check_all(watchers)}
    assert {c.decision for c in first.values()} == {"healthy"}, first

    catalog.drop_table(found["dropped"].in_catalog)
    catalog.rename_table(found["renamed"].in_catalog, (found["renamed"].namespace, "renamed_new"))
    # A commit whose new metadata file is then cut off mid-write, and one whose new file is then lost. (A file
    # the sweep has read already is not read again while the table's metadata location stays the same.)
    corrupt = committed_metadata(catalog, found["corrupt"])
    with open(corrupt, "w") as f:
        f.write('{"format-version": 2, "table-uuid": ')
    deleted = committed_metadata(catalog, found["deleted"])
    os.remove(deleted)
    # The healthy tables take a commit each, so that the sweep reads them again rather than remembering them.
    for name in (f"ok{n}" for n in range(HEALTHY)):
        catalog.load_table(found[name].in_catalog).append(ROWS)

    with caplog.at_level(logging.INFO, logger="airflow_iceberg.triggers.health_sweep"):
        second = {c.table: c for c in sweep.check_all(watchers)}
        third = {c.table: c for c in sweep.check_all(watchers)}

    def reason(name: str) -> str:
        return second[str(found[name])].reason

    assert {second[str(found[n])].decision for n in ("dropped", "renamed", "corrupt", "deleted")} == {"error"}
    ns = found["renamed"].namespace
    assert reason("renamed") == (
        f"{found['renamed']} is not in the catalog of Iceberg connection 'lake': it was renamed to "
        f"lake.{ns}.renamed_new, which holds its last metadata file; put the new name in the table list"
    )
    assert reason("dropped") == (
        f"{found['dropped']} is not in the catalog of Iceberg connection 'lake': it was dropped or renamed; take it "
        "off the table list, or put its new name there"
    )
    assert reason("corrupt").startswith(f"could not read {found['corrupt']}'s current metadata file ")
    assert corrupt in reason("corrupt") and "JSONDecodeError" in reason("corrupt")
    assert deleted in reason("deleted") and "FileNotFoundError" in reason("deleted")
    assert reason("deleted").endswith("or its catalog entry points at a readable metadata file")
    # Every other table was read again (its new snapshot) and is healthy.
    for n in range(HEALTHY):
        check = second[str(found[f"ok{n}"])]
        assert (check.decision, check.reading) == ("healthy", "metadata"), check
        assert check.snapshot_id == catalog.load_table(found[f"ok{n}"].in_catalog).current_snapshot().snapshot_id
    # The next sweep says the same, and the log said each trouble once.
    assert {t: (c.decision, c.reason) for t, c in third.items()} == {
        t: (c.decision, c.reason) for t, c in second.items()
    }
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sorted(warnings) == sorted(
        f"Health check of {found[name]} failed: {reason(name)}" for name in ("dropped", "renamed", "corrupt", "deleted")
    )

    # Renamed back, the table is checked again, and the log says so.
    catalog.rename_table((ns, "renamed_new"), found["renamed"].in_catalog)
    with caplog.at_level(logging.INFO, logger="airflow_iceberg.triggers.health_sweep"):
        again = {c.table: c for c in sweep.check_all(watchers)}
    assert again[str(found["renamed"])].decision == "healthy"
    assert f"Health check of {found['renamed']}: readable again" in caplog.text
