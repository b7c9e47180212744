"""Health watched in the triggerer of a live Airflow, on a fleet of 50 real tables in the JDBC catalog.

Healthy tables create no runs; a table that needs work gets exactly one, which compacts it; a catalog that cannot
be reached neither crashes the triggerer nor creates runs; a triggerer killed with SIGKILL and replaced neither
starts a second run for a table nor forgets one that needs work. Each table's last check is in the gate database.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
import requests
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.surface.dag_factory import compaction_dag_id
from devkit.tables import TableStats

FLEET = 50
POLL_SECONDS = 5
#: A table needs work from this many small files (in its one partition).
MIN_SMALL_FILES = 4
ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": pa.array(["a", "b", "c"])})


def watched(table: TableName, **settings) -> dict:
    return {
        "table": str(table),
        "full_rewrite": {"schedule": None},
        "health": {
            "watch": True,
            "poll_interval": POLL_SECONDS,
            "cooldown_minutes": 1,
            "min_small_files": MIN_SMALL_FILES,
        },
        **settings,
    }


def append(table: TableName, files: int) -> None:
    """``files`` commits of one small file each, as a streaming writer's checkpoints make them."""
    iceberg_table = IcebergHook(table.catalog).load_table(table.in_catalog)
    for _ in range(files):
        iceberg_table.append(ROWS)


def runs(live_airflow, table: TableName) -> list[tuple[str, str, str]]:
    """(run_id, run_type, state) of every run of the table's compaction DAG."""
    return live_airflow.query(
        "SELECT run_id, run_type, state FROM dag_run WHERE dag_id = %s ORDER BY id", compaction_dag_id(table)
    )


def checks(tables: list[TableName]) -> dict[str, dict]:
    found = WriteGateHook("write_gate_default").records.health_checks()
    return {str(t): found[str(t)] for t in tables if str(t) in found}


@pytest.fixture(scope="module")
def fleet(live_airflow, integration_stack):
    """50 healthy tables (one small file each) watched by the live Airflow's triggerer."""
    catalog = IcebergHook("lake").catalog
    namespace = f"watch_{int(time.time())}"
    catalog.create_namespace(namespace)
    tables = [TableName("lake", namespace, f"t{n:02d}") for n in range(FLEET)]
    schema = ROWS.schema
    for table in tables:
        catalog.create_table(table.in_catalog, schema=schema).append(ROWS)
    live_airflow.add_tables(*(watched(t) for t in tables))
    return tables


def wait_for_checks(live_airflow, tables, decided, what: str, timeout: float = 120) -> dict[str, dict]:
    """Each table's check once every one satisfies ``decided``."""
    return live_airflow.wait_for(
        what,
        lambda: (found := checks(tables)) and len(found) == len(tables) and all(map(decided, found.values())) and found,
        timeout,
        every=1,
    )


def test_healthy_tables_create_no_runs_and_their_checks_say_why(live_airflow, fleet):
    since = time.time()
    found = wait_for_checks(live_airflow, fleet, lambda c: c["decision"] == "healthy", "every table checked healthy")
    # Several sweeps later, still no run.
    live_airflow.wait_for(
        "three more sweeps",
        lambda: all(c["checked_at"].timestamp() > since + 3 * POLL_SECONDS for c in checks(fleet).values()),
        120,
    )
    assert [t for t in fleet if runs(live_airflow, t)] == []
    check = found[str(fleet[0])]
    assert "healthy: no delete files, 1 data files in all" in check["reason"]
    # Nothing changed since the first sweep: later sweeps read the catalog's listing only, no metadata file.
    assert {c["reading"] for c in checks(fleet).values()} == {"listing"}
    # The report and the Iceberg tables page say when each table was last checked, and what the check decided.
    report = subprocess.run(
        [str(Path(sys.executable).with_name("airflow-iceberg")), "report", "--table", str(fleet[0])],
        env={**os.environ, "AIRFLOW_ICEBERG_CONFIG": str(live_airflow.table_list)},
        capture_output=True,
        text=True,
        check=True,
    )
    (line,) = [line for line in report.stdout.splitlines() if line.startswith("  last check ")]
    assert "healthy: no delete files, 1 data files in all" in line and line.endswith("(read listing)")
    listed = requests.get(
        f"{live_airflow.url}/iceberg/api/tables",
        params={"q": str(fleet[0])},
        headers={"Authorization": f"Bearer {live_airflow.token()}"},
        timeout=60,
    )
    assert listed.ok, listed.text
    [row] = listed.json()["rows"]
    assert row["need"] == "healthy" and "healthy: no delete files, 1 data files in all" in row["check"]["reason"]
    assert (row["data_files"], row["score"]) == (1, 0)  # the snapshot summary's total, and nothing to rewrite


def test_a_table_that_needs_work_gets_exactly_one_run_which_compacts_it(live_airflow, fleet, statsd):
    table = fleet[1]
    sweeps_before = len(statsd.sent("iceberg.health.tables_needing_work", "g", catalog="lake"))
    append(table, MIN_SMALL_FILES)  # 5 small files now
    first = live_airflow.wait_for("a run of the table", lambda: runs(live_airflow, table), 120)
    assert len(first) == 1 and first[0][1] == "asset_triggered"
    # The sweep that started it told Airflow's metrics that one table of the catalog needs work.
    needing = [v for _, v in statsd.sent("iceberg.health.tables_needing_work", "g", catalog="lake")[sweeps_before:]]
    assert any(value >= 1 for value in needing), needing
    run = live_airflow.wait_for_run(compaction_dag_id(table), first[0][0], timeout=600)
    assert run["state"] == "success", live_airflow.task_states(compaction_dag_id(table), first[0][0])
    assert TableStats.read("lake", table).data_files == 1
    # The asset event that started it says why.
    (extra,) = live_airflow.query(
        "SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.name = %s",
        f"iceberg_health__lake__{table.namespace}__{table.table}",
    )[0]
    payload = (extra if isinstance(extra, dict) else json.loads(extra))["payload"]
    assert payload["table"] == str(table) and "partitions need work" in payload["reason"]
    plan_log = live_airflow.task_log(compaction_dag_id(table), first[0][0], "plan_compaction")
    assert "Started by the health watch: 1 of 1 partitions need work" in plan_log
    # Healthy again: sweeps go on, and no second run comes.
    ended = time.time()
    live_airflow.wait_for(
        "three sweeps after the run",
        lambda: checks([table])[str(table)]["checked_at"].timestamp() > ended + 3 * POLL_SECONDS,
        120,
    )
    assert checks([table])[str(table)]["decision"] == "healthy"
    assert len(runs(live_airflow, table)) == 1
    assert [t for t in fleet if t != table and runs(live_airflow, t)] == []
    assert statsd.sent("iceberg.health.tables_needing_work", "g", catalog="lake")[-1][1] == 0  # healthy again


def test_an_unreachable_catalog_neither_crashes_the_triggerer_nor_creates_runs(live_airflow, fleet):
    # A catalog whose database nothing answers: port 1 on loopback.
    conn = {
        "conn_type": "iceberg",
        "extra": {"type": "sql", "uri": "mysql+pymysql://root@127.0.0.1:1/nowhere", "warehouse": "file:///nonexistent"},
    }
    live_airflow.cli("connections", "add", "lake_down", "--conn-json", json.dumps(conn))
    down = [TableName("lake_down", "watch", f"t{n}") for n in range(3)]
    live_airflow.add_tables(*(watched(t) for t in down))
    found = wait_for_checks(live_airflow, down, lambda c: c["decision"] == "unreachable", "the outage recorded")
    assert "catalog of Iceberg connection 'lake_down' unreachable" in found[str(down[0])]["reason"]
    since = time.time()
    # The other catalog's sweep goes on in the same triggerer.
    wait_for_checks(live_airflow, fleet, lambda c: c["checked_at"].timestamp() > since, "the fleet swept again")
    assert [t for t in down if runs(live_airflow, t)] == []
    assert live_airflow.query("SELECT count(*) FROM job WHERE job_type = 'TriggererJob' AND state = 'failed'") == [(0,)]


def test_a_triggerer_killed_mid_sweep_neither_starts_a_second_run_nor_forgets_a_table(live_airflow, fleet):
    started, forgotten = fleet[2], fleet[3]
    append(started, MIN_SMALL_FILES)
    # Kill the triggerer the moment the watch has started a run for the first table, before it could remember it.
    live_airflow.wait_for(
        "the watch to start a run",
        lambda: checks([started]).get(str(started), {}).get("decision") == "started",
        120,
        every=0.2,
    )
    append(forgotten, MIN_SMALL_FILES)  # needs work while no triggerer runs
    live_airflow.restart("triggerer")
    for table in (started, forgotten):
        first = live_airflow.wait_for(f"a run of {table}", lambda t=table: runs(live_airflow, t), 300)
        run = live_airflow.wait_for_run(compaction_dag_id(table), first[0][0], timeout=600)
        assert run["state"] == "success"
    # The new triggerer checks both healthy after their runs, and neither gets another run.
    ended = time.time()
    wait_for_checks(
        live_airflow,
        [started, forgotten],
        lambda c: c["checked_at"].timestamp() > ended + 2 * POLL_SECONDS and c["decision"] == "healthy",
        "both healthy again",
        timeout=180,
    )
    assert [len(runs(live_airflow, t)) for t in (started, forgotten)] == [1, 1]
    assert [TableStats.read("lake", t).data_files for t in (started, forgotten)] == [1, 1]


def test_a_dropped_a_renamed_and_an_unreadable_table_say_so_on_the_page_and_in_the_log(live_airflow, fleet):
    catalog = IcebergHook("lake").catalog
    troubled = dropped, renamed, corrupt = fleet[45], fleet[46], fleet[47]
    others = [t for t in fleet if t not in troubled]
    wait_for_checks(live_airflow, troubled, lambda c: c["decision"] == "healthy", "the three checked healthy")
    catalog.drop_table(dropped.in_catalog)
    new_name = (renamed.namespace, f"{renamed.table}_new")
    catalog.rename_table(renamed.in_catalog, new_name)
    # A commit whose new metadata file is then cut off mid-write.
    iceberg_table = catalog.load_table(corrupt.in_catalog)
    iceberg_table.append(ROWS)
    path = iceberg_table.metadata_location.removeprefix("file://")
    good = Path(path).read_bytes()
    Path(path).write_bytes(good[:40])
    since = time.time()

    found = wait_for_checks(live_airflow, troubled, lambda c: c["decision"] == "error", "three failed checks")
    failed_after = time.time() - since
    reasons = {table: found[str(table)]["reason"] for table in troubled}
    assert reasons[dropped].endswith("it was dropped or renamed; take it off the table list, or put its new name there")
    assert f"it was renamed to lake.{renamed.namespace}.{renamed.table}_new" in reasons[renamed]
    assert path in reasons[corrupt] and "JSONDecodeError" in reasons[corrupt]
    # Every other table's checks go on, from the same sweeps.
    wait_for_checks(
        live_airflow,
        others,
        lambda c: c["checked_at"].timestamp() > since + 2 * POLL_SECONDS and c["decision"] != "error",
        "the other tables checked twice since",
    )
    # The page says it: each is a failed check, with the check's reason.
    headers = {"Authorization": f"Bearer {live_airflow.token()}"}
    for table in troubled:
        listed = requests.get(
            f"{live_airflow.url}/iceberg/api/tables", params={"q": str(table)}, headers=headers, timeout=60
        )
        assert listed.ok, listed.text
        [row] = [r for r in listed.json()["rows"] if r["table"] == str(table)]
        assert (row["need"], row["check"]["reason"]) == ("check_failed", reasons[table])

    # The triggerer's log says it once, not at every sweep.
    def logged(table: TableName) -> int:
        return live_airflow.log_text().count(f"Health check of {table} failed: {reasons[table]}")

    assert [logged(table) for table in troubled] == [1, 1, 1]
    later = time.time()
    wait_for_checks(
        live_airflow, troubled, lambda c: c["checked_at"].timestamp() > later + 2 * POLL_SECONDS, "two more sweeps"
    )
    assert [logged(table) for table in troubled] == [1, 1, 1]

    # Put right, each is checked healthy again.
    catalog.create_table(dropped.in_catalog, schema=ROWS.schema).append(ROWS)
    catalog.rename_table(new_name, renamed.in_catalog)
    Path(path).write_bytes(good)
    put_right = time.time()
    wait_for_checks(live_airflow, troubled, lambda c: c["decision"] == "healthy", "the three healthy again")
    print(f"\nbad day, a table dropped, one renamed, one unreadable: 3 failed checks {failed_after:.0f} s after")
    for table in troubled:
        print(f"  {table}: {reasons[table]}")
    print(f"  the other {len(others)} tables: checked twice since, no error; each trouble logged once")
    print(f"  put right: the three healthy again {time.time() - put_right:.0f} s later")
