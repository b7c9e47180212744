"""A fleet's bad day on a live Airflow with real tables: the gate's MySQL down, the catalog's database down, and a
burst of tables needing work at once with the triggerer and the scheduler killed in the middle of it.

Each outage lasts two minutes, during the health watch's sweeps, on a MariaDB server of the test's own
(:class:`~devkit.private_mariadb.PrivateMariaDB`), so that the machine's MariaDB, which everything else uses, stays
up. The triggerer survives it, every table is checked again after it, and each table that needed work when it
began gets exactly one run, which compacts it. The burst (``AIRFLOW_ICEBERG_BURST_TABLES`` tables, 200 by default,
on ``spark_slots: 4``) never has more tables paused than slots, admits the worst first, and compacts each table
in exactly one run, through a SIGKILL of the triggerer and of the scheduler. Each test prints its figures.

``make bad-day`` runs these (about two and a half hours, most of it the burst), not ``make test``; the docs name it
(docs/operations.md).
"""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import datetime, timezone

import pytest
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_iceberg.core.gate_state import database_time
from airflow_iceberg.core.spark_slots import SparkSlotClaim, claim_order
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
    found = WriteGateHook(gate_conn_id).records.health_checks()
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


BURST = int(os.environ.get("AIRFLOW_ICEBERG_BURST_TABLES", "200"))
BURST_SLOTS = 4
BURST_SPARK = "spark_burst"


class SlotQueueWatch(threading.Thread):
    """Reads the burst's Spark slot queue every second: each time a table was seen waiting, its claim (score,
    since when it asked) and until when it keeps its place (``expires_at``); and each table's claim as admitted,
    with when. Times are the gate database's, in UTC."""

    def __init__(self, gate_conn_id: str, spark_conn_id: str) -> None:
        super().__init__(daemon=True)
        self.hook, self.spark_conn_id = WriteGateHook(gate_conn_id), spark_conn_id
        self.waiting: dict[str, list[tuple[SparkSlotClaim, datetime]]] = {}
        self.admitted: dict[str, tuple[datetime, SparkSlotClaim]] = {}
        self.done = threading.Event()

    def run(self) -> None:
        connection = self.hook.get_conn()
        try:
            while not self.done.wait(1):
                with connection.cursor() as cursor:
                    cursor.execute(
                        "SELECT table_name, owner_dag_id, owner_run_id, score, queued_at, expires_at, admitted_at, "
                        "NOW(6) AS database_now, FALSE AS holds_gate FROM iceberg_spark_queue WHERE spark_conn_id = %s",
                        (self.spark_conn_id,),
                    )
                    rows = cursor.fetchall()
                connection.commit()  # a fresh snapshot at each read
                for row in rows:
                    claim = SparkSlotClaim.from_row(row)
                    if row["admitted_at"] is None:
                        self.waiting.setdefault(claim.table, []).append((claim, database_time(row["expires_at"])))
                    else:
                        self.admitted.setdefault(claim.table, (database_time(row["admitted_at"]), claim))
        finally:
            connection.close()

    def stop(self) -> None:
        self.done.set()
        self.join(30)

    def passed_over(self, opened: dict[str, datetime]) -> list[str]:
        """Each admission that the rule forbids: a table admitted while at least as many waiters ranked ahead of
        it (:func:`claim_order`: a higher score, or the same score and queued earlier) as there were free slots.

        A waiter counts only where a read showed it waiting from before the admission until after it (its place
        kept past it); slots held are those of tables admitted before it whose gate had not opened yet.
        """
        wrong = []
        never = datetime.max.replace(tzinfo=timezone.utc)
        for table, (at, mine) in self.admitted.items():
            holders = [t for t, (a, _) in self.admitted.items() if a < at and opened.get(t, at) >= at and t != table]
            ahead = [
                other
                for other, seen in self.waiting.items()
                if other != table
                and self.admitted.get(other, (never,))[0] > at
                and any(
                    claim.queued_at <= at < expires and claim_order(claim) < claim_order(mine)
                    for claim, expires in seen
                )
            ]
            if len(ahead) >= BURST_SLOTS - len(holders):
                wrong.append(f"{table} (score {mine.score}) at {at}: {len(holders)} held, ahead: {ahead}")
        return wrong

    def waits(self) -> dict[str, float]:
        """Seconds from each admitted table's first request to its admission."""
        return {
            t: (at - min(claim.queued_at for claim, _ in self.waiting[t])).total_seconds()
            for t, (at, _) in self.admitted.items()
            if t in self.waiting
        }


def paused_at_once(audit: list[dict]) -> int:
    """The most gates closed at once, from the close and open rows of the gate's audit trail in time order."""
    closed: set[str] = set()
    most = 0
    for row in sorted(audit, key=lambda r: r["at"]):
        if row["action"] == "close":
            closed.add(row["table_name"])
        elif row["action"] in ("open", "force_open", "expire"):
            closed.discard(row["table_name"])
        most = max(most, len(closed))
    return most


@pytest.mark.timeout(4 * 3600)  # 200 tables on 4 local Spark slots of 2 cores: about 1.8 runs a minute
def test_a_burst_of_tables_needing_work_at_once_with_the_triggerer_and_scheduler_killed(live_airflow):
    """BURST tables need work at once on BURST_SLOTS Spark slots; a third of the way through, the triggerer and
    the scheduler are SIGKILLed and restarted. Never more paused than slots, the worst first, each table compacted
    in exactly one run, and the queue drains."""
    live_airflow.cli(
        "connections", "add", BURST_SPARK, "--conn-json", json.dumps({"conn_type": "spark", "host": "local[1]"})
    )
    namespace = f"burst_{int(time.time())}"
    iceberg = IcebergHook("lake").catalog
    iceberg.create_namespace(namespace)
    tables = [TableName("lake", namespace, f"t{n:03d}") for n in range(BURST)]
    appends = {str(t): MIN_SMALL_FILES + n % 5 for n, t in enumerate(tables)}  # 4 to 8 small files: scores differ
    for table in tables:
        created = iceberg.create_table(table.in_catalog, schema=ROWS.schema)
        for _ in range(appends[str(table)]):
            created.append(ROWS)
    entries = []
    for table in tables:
        entry = watched(table, "write_gate_default", 5)
        entry.update({"spark_conn_id": BURST_SPARK, "spark_slots": BURST_SLOTS, "gate_wait_seconds": 3 * 3600})
        entries.append(entry)
    queue = SlotQueueWatch("write_gate_default", BURST_SPARK)
    queue.start()
    began = time.monotonic()
    live_airflow.add_tables(*entries, timeout=900)

    def finished() -> list[str]:
        return [state for t in tables for _, state in runs(live_airflow, t) if state in ("success", "failed")]

    live_airflow.wait_for("a third of the runs finished", lambda: len(finished()) >= BURST // 3, 3 * 3600, every=5)
    killed_at = time.monotonic() - began
    live_airflow.restart("triggerer")
    live_airflow.restart("scheduler")
    live_airflow.wait_for("every table's run finished", lambda: len(finished()) >= BURST, 3 * 3600, every=5)
    took = time.monotonic() - began
    queue.stop()
    # The health watch's sweeps of the burst's tables (the first triggerer's, then its successor's): each asks the
    # gate database one question for every table that needs work.
    swept = sorted(seconds for tables_swept, seconds, _ in live_airflow.sweeps() if tables_swept >= BURST)
    assert swept, "no health sweep of the burst's tables in the triggerers' logs"

    hook = WriteGateHook("write_gate_default")
    audit = [{**row, "table_name": str(t)} for t in tables for row in hook.audit_trail(t)]
    opened = {}
    for row in sorted(audit, key=lambda r: r["at"]):
        if row["action"] == "open":
            opened[row["table_name"]] = row["at"]
    per_table = {str(t): [state for _, state in runs(live_airflow, t)] for t in tables}
    waits = queue.waits()
    last = max(queue.admitted, key=lambda t: queue.admitted[t][0])
    closes = sorted((r["at"], r["table_name"]) for r in audit if r["action"] == "close")
    pauses = sorted((opened[name] - at).total_seconds() for at, name in closes if name in opened)
    most = paused_at_once(audit)
    print(
        f"\nburst of {BURST} tables on {BURST_SLOTS} Spark slots, the triggerer and the scheduler SIGKILLed at "
        f"{killed_at:.0f} s: all done in {took:.0f} s; runs per table: "
        f"{sorted({len(r) for r in per_table.values()})}, states: "
        f"{sorted({s for r in per_table.values() for s in r})}; at most {most} paused at once; "
        f"small files of the first 20 tables admitted: {[appends[n] for _, n in closes[:20]]}; the last admitted "
        f"({last}) waited {waits.get(last, 0):.0f} s, the longest wait {max(waits.values()):.0f} s; each table "
        f"paused {pauses[len(pauses) // 2]:.0f} s (median), {pauses[-1]:.0f} s at most; {len(swept)} sweeps of the "
        f"{BURST} tables took {swept[len(swept) // 2]:.1f} s (median), {swept[-1]:.1f} s at most"
    )
    assert per_table == {str(t): ["success"] for t in tables}  # one run each: no duplicate, none forgotten
    assert most <= BURST_SLOTS
    assert queue.passed_over(opened) == []
    assert sorted(queue.admitted) == sorted(per_table)  # each admitted, through the queue
    assert hook.spark_slots.queue(BURST_SPARK) == []  # the queue drained
    assert {t: s.state for t, s in hook.gate_states().items() if t in per_table and s.state != "open"} == {}
    stats = [TableStats.read("lake", t) for t in tables]
    assert [(s.data_files, s.rows) for s in stats] == [(1, 3 * appends[str(t)]) for t in tables]
