"""A fleet's bad day on a live Airflow with real tables: the gate's MySQL down, then the catalog's database down.

Each outage lasts two minutes, during the health watch's sweeps, on a MariaDB server of the test's own
(:class:`~devkit.private_mariadb.PrivateMariaDB`), so that the machine's MariaDB, which everything else uses, stays
up. The triggerer survives it, every table is checked again after it, and each table that needed work when it
began gets exactly one run, which compacts it. Each test prints its figures.

``make bad-day`` runs these (about 15 minutes), not ``make test``; the docs name it (docs/operations.md).
"""

from __future__ import annotations

import json
import time

import pytest
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.surface.dag_factory import compaction_dag_id
from devkit.private_mariadb import PrivateMariaDB
from devkit.tables import TableStats
from tests.integration.test_health_watch import MIN_SMALL_FILES, ROWS, append

pytestmark = pytest.mark.bad_day

OUTAGE_SECONDS = 120
TABLES = 8
NEEDING = 2
GATE_CONN = "gate_bad_day"
CATALOG_CONN = "bad_day"


class Servers:
    """The two private servers: one holds a gate database, the other an Iceberg JDBC catalog."""

    def __init__(self, gate: PrivateMariaDB, catalog: PrivateMariaDB) -> None:
        self.gate, self.catalog = gate, catalog


@pytest.fixture(scope="module")
def servers(live_airflow, tmp_path_factory):
    root = tmp_path_factory.mktemp("bad-day")
    with PrivateMariaDB(root / "gate") as gate, PrivateMariaDB(root / "catalog") as catalog:
        gate.gate_connection("airflow_iceberg", GATE_CONN)
        catalog.create_database("iceberg_catalog")
        warehouse = root / "warehouse"
        warehouse.mkdir()
        iceberg = {
            "conn_type": "iceberg",
            "extra": {
                "type": "sql",
                "uri": f"mysql+pymysql://{catalog.user}@{catalog.host}:{catalog.port}/iceberg_catalog",
                "warehouse": f"file://{warehouse}",
            },
        }
        variable = f"AIRFLOW_CONN_{CATALOG_CONN.upper()}"
        with pytest.MonkeyPatch.context() as env:
            env.setenv(variable, json.dumps(iceberg))
            IcebergHook(CATALOG_CONN).get_conn()  # the catalog's own tables, before Spark's JDBC catalog looks
            live_airflow.cli(
                "connections", "add", GATE_CONN, "--conn-json", json.dumps(gate.airflow_connection("airflow_iceberg"))
            )
            live_airflow.cli("connections", "add", CATALOG_CONN, "--conn-json", json.dumps(iceberg))
            yield Servers(gate, catalog)


def create(catalog: str, namespace: str) -> list[TableName]:
    """``TABLES`` healthy tables, one small file each."""
    iceberg = IcebergHook(catalog).catalog
    iceberg.create_namespace(namespace)
    tables = [TableName(catalog, namespace, f"t{n}") for n in range(TABLES)]
    for table in tables:
        iceberg.create_table(table.in_catalog, schema=ROWS.schema).append(ROWS)
    return tables


def watched(table: TableName, gate_conn_id: str, poll_interval: float) -> dict:
    return {
        "table": str(table),
        "write_gate_conn_id": gate_conn_id,
        "full_rewrite": {"schedule": None},
        "health": {
            "watch": True,
            "poll_interval": poll_interval,
            "cooldown_minutes": 1,
            "min_small_files": MIN_SMALL_FILES,
        },
    }


def runs(live_airflow, table: TableName) -> list[tuple[str, str]]:
    """(run_id, state) of every run of the table's compaction DAG."""
    return live_airflow.query(
        "SELECT run_id, state FROM dag_run WHERE dag_id = %s ORDER BY id", compaction_dag_id(table)
    )


def checks(gate_conn_id: str, tables: list[TableName]) -> dict[str, dict]:
    found = WriteGateHook(gate_conn_id).health_checks()
    return {str(t): found[str(t)] for t in tables if str(t) in found}


def all_checked(gate_conn_id: str, tables: list[TableName], decided) -> dict[str, dict] | None:
    found = checks(gate_conn_id, tables)
    return found if len(found) == len(tables) and all(map(decided, found.values())) else None


def triggerer_job(live_airflow) -> list[tuple]:
    return live_airflow.query("SELECT id FROM job WHERE job_type = 'TriggererJob' AND state = 'running'")


def log_count(live_airflow, text: str) -> int:
    return live_airflow.log_text().count(text)


def outage(server: PrivateMariaDB, began: float) -> None:
    """Hold the outage until it has lasted ``OUTAGE_SECONDS``: the scenario's own length, not a wait for a state."""
    time.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - began)))
    server.start()


def one_run_each(live_airflow, gate_conn_id: str, needing: list[TableName], everyone: list[TableName], poll: float):
    """Each needing table's run succeeds and compacts it; three sweeps later none has a second, nor anyone else one."""
    for table in needing:
        first = live_airflow.wait_for(f"a run of {table}", lambda t=table: runs(live_airflow, t), 300)
        run = live_airflow.wait_for_run(compaction_dag_id(table), first[0][0], timeout=600)
        assert run["state"] == "success", live_airflow.task_states(compaction_dag_id(table), first[0][0])
    ended = time.time()
    live_airflow.wait_for(
        "three sweeps after the runs",
        lambda: all_checked(gate_conn_id, everyone, lambda c: c["checked_at"].timestamp() > ended + 3 * poll),
        300,
    )
    assert [len(runs(live_airflow, t)) for t in everyone] == [1 if t in needing else 0 for t in everyone]
    assert [TableStats.read(t.catalog, t).data_files for t in needing] == [1] * len(needing)


def test_the_gate_database_down_for_two_minutes(live_airflow, servers):
    poll = 5
    tables = create("lake", f"gate_down_{int(time.time())}")
    needing = tables[:NEEDING]
    live_airflow.add_tables(*(watched(t, GATE_CONN, poll) for t in tables))
    live_airflow.wait_for(
        "every table checked healthy", lambda: all_checked(GATE_CONN, tables, lambda c: c["decision"] == "healthy"), 180
    )
    before = {t: c["checked_at"] for t, c in checks(GATE_CONN, tables).items()}
    job = triggerer_job(live_airflow)
    failed_records = f"Could not record the health checks in {GATE_CONN!r}"
    records_before = log_count(live_airflow, failed_records)

    began = time.monotonic()
    servers.gate.stop()
    for table in needing:
        append(table, MIN_SMALL_FILES)  # they need work while the gate's database is down
    live_airflow.wait_for(
        "a sweep without the gate database", lambda: log_count(live_airflow, failed_records) > records_before, 60
    )
    outage(servers.gate, began)
    back = time.time()
    sweeps_down = log_count(live_airflow, failed_records) - records_before
    runs_during = [len(runs(live_airflow, t)) for t in needing]
    assert runs_during == [0] * NEEDING  # no run can take a gate that is down: the watch held them back

    after = live_airflow.wait_for(
        "every table checked again",
        lambda: all_checked(GATE_CONN, tables, lambda c: c["checked_at"].timestamp() > back),
        120,
    )
    first_check = max(c["checked_at"].timestamp() for c in after.values()) - back
    one_run_each(live_airflow, GATE_CONN, needing, tables, poll)
    assert triggerer_job(live_airflow) == job  # the same triggerer, running all along
    print(
        f"\nbad day, the gate's MySQL down {OUTAGE_SECONDS} s: {len(tables)} tables checked before "
        f"(last {max(before.values()):%H:%M:%S}); {sweeps_down} sweeps could not record their checks; "
        f"runs during: {runs_during}; every table checked again {first_check:.0f} s after; runs per table: "
        f"{[len(runs(live_airflow, t)) for t in tables]} (the first {NEEDING} needed work); same triggerer"
    )


def test_the_catalog_database_down_for_two_minutes(live_airflow, servers):
    # A sweep every 30 s: the tables are made to need work just after one, and the catalog goes down before the
    # next, so that the watch first sees their need during the outage.
    poll = 30
    tables = create(CATALOG_CONN, f"catalog_down_{int(time.time())}")
    needing = tables[:NEEDING]
    live_airflow.add_tables(*(watched(t, "write_gate_default", poll) for t in tables))
    healthy = live_airflow.wait_for(
        "every table checked healthy",
        lambda: all_checked("write_gate_default", tables, lambda c: c["decision"] == "healthy"),
        180,
    )
    job = triggerer_job(live_airflow)
    last = max(c["checked_at"] for c in healthy.values())
    live_airflow.wait_for(
        "the next sweep",
        lambda: all_checked("write_gate_default", tables, lambda c: c["checked_at"] > last),
        2 * poll,
        every=0.2,
    )
    for table in needing:
        append(table, MIN_SMALL_FILES)
    began = time.monotonic()
    servers.catalog.stop()
    down = live_airflow.wait_for(
        "a sweep that finds the catalog unreachable",
        lambda: all_checked("write_gate_default", tables, lambda c: c["decision"] == "unreachable"),
        2 * poll,
    )
    reason = next(iter(down.values()))["reason"]
    assert reason.startswith(f"catalog of Iceberg connection {CATALOG_CONN!r} unreachable: OperationalError")
    outage(servers.catalog, began)
    back = time.time()
    runs_during = [len(runs(live_airflow, t)) for t in needing]
    assert runs_during == [0] * NEEDING

    after = live_airflow.wait_for(
        "every table checked again",
        lambda: all_checked(
            "write_gate_default",
            tables,
            lambda c: c["checked_at"].timestamp() > back and c["decision"] != "unreachable",
        ),
        2 * poll + 30,
    )
    first_check = max(c["checked_at"].timestamp() for c in after.values()) - back
    one_run_each(live_airflow, "write_gate_default", needing, tables, poll)
    assert triggerer_job(live_airflow) == job
    print(
        f"\nbad day, the catalog's database down {OUTAGE_SECONDS} s: {len(tables)} tables checked healthy before; "
        f"during: {len(down)} checks 'unreachable' ({reason[:90]}...); runs during: {runs_during}; every table "
        f"checked again {first_check:.0f} s after; runs per table: {[len(runs(live_airflow, t)) for t in tables]} "
        f"(the first {NEEDING} needed work); same triggerer"
    )
