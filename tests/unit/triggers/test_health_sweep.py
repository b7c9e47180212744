"""The health watch's sweep: when a table that needs work gets a run, and when it waits."""

from __future__ import annotations

from datetime import datetime, timezone

from tests.unit.triggers.watchers import trigger


def unchanged(monkeypatch, sweep) -> None:
    """The catalog's second look, before a run starts, finds each table as the sweep's check read it."""
    monkeypatch.setattr(
        sweep, "list_locations", lambda tables: ({str(t): sweep.memory[str(t)].location for t in tables}, {})
    )


class _Runs:
    """The gate database's run records and recorded checks as ``hold_back`` reads them: none, or those a test sets;
    and how many times it asked."""

    def __init__(self) -> None:
        self.last: dict[str, dict] = {}
        self.checks: dict[str, dict] = {}
        self.asked = 0

    def last_runs(self, tables):
        self.asked += 1
        return {t: {"alive": False, **self.last[t]} for t in tables if t in self.last}

    def health_checks(self):
        return self.checks


def under_way(seconds_ago: float, alive: bool, dag_id: str = "iceberg_compact__lake__db__t") -> dict:
    """The record of a run its plan wrote ``seconds_ago`` and that has not ended."""
    return {
        "dag_id": dag_id,
        "run_id": "r1",
        "outcome": "running",
        "started_at": datetime.now(timezone.utc),
        "finished_at": None,
        "seconds_ago": seconds_ago,
        "alive": alive,
    }


def held_back_sweep(monkeypatch, pending: dict):
    """A sweep of catalog ``lake`` on a clock the test moves (``now["t"]``), with ``pending["count"]`` runs of each
    DAG queued or running (each DAG Airflow is asked about is appended to ``pending["asked"]``) and the run records a
    test sets (``runs.last``); returns (sweep, runs, now)."""
    import time as clock

    from airflow_iceberg.triggers import health_sweep
    from airflow_iceberg.triggers.health_sweep import CatalogSweep

    pending.setdefault("asked", [])

    async def pending_runs(dag_id):
        pending["asked"].append(dag_id)
        return pending["count"]

    monkeypatch.setattr(health_sweep, "_pending_runs", pending_runs)
    now = {"t": 1000.0}
    monkeypatch.setattr(clock, "monotonic", lambda: now["t"])
    runs = _Runs()
    sweep = CatalogSweep("lake", "write_gate_default", 60)
    monkeypatch.setattr(sweep, "_records", lambda: runs)
    unchanged(monkeypatch, sweep)
    return sweep, runs, now


def test_a_run_asked_for_but_not_yet_created_by_the_scheduler_holds_the_table_back_past_its_cooldown(monkeypatch):
    """Airflow's scheduler creates asset-triggered runs a few per loop: with 200 events at once, a run appeared a
    minute after its event, and the table, its cool-down over and no run of it queued yet, got a second event."""
    import asyncio

    from airflow_iceberg.triggers.health_sweep import Check, TableMemory

    pending = {"count": 0}
    sweep, runs, now = held_back_sweep(monkeypatch, pending)
    watcher = trigger(cooldown_minutes=1)
    sweep.memory["lake.db.t"] = TableMemory(location="s3://t", facts=None)

    def decide() -> Check:
        check = Check("lake.db.t", "needs_work", "1 of 1 partitions need work")
        asyncio.run(sweep.hold_back([check], {"lake.db.t": watcher}))
        return check

    assert decide().decision == "started"
    now["t"] += 61  # the cool-down is over; the scheduler has not created the run yet
    check = decide()
    assert check.decision == "waiting" and "has not been created yet" in check.reason, check.reason
    runs.last["lake.db.t"] = under_way(10.0, alive=True)  # created; its plan recorded it; it waits for a slot
    check = decide()
    assert check.decision == "waiting" and "its run r1 of iceberg_compact__lake__db__t is under way" in check.reason
    runs.last["lake.db.t"] = {  # it ran and ended a minute ago
        "run_id": "r1",
        "outcome": "succeeded",
        "started_at": datetime.now(timezone.utc),
        "finished_at": datetime.now(timezone.utc),
        "seconds_ago": 61.0,
    }
    now["t"] += 61
    assert decide().decision == "started"  # the table needs work again: a new need, a new run


def test_every_table_due_is_held_back_by_one_question_to_the_gate_database_and_none_to_airflow(monkeypatch):
    """200 tables needing work at once: asking Airflow about each one's runs made sweeps of up to 268 s."""
    import asyncio

    from airflow_iceberg.triggers.health_sweep import Check, TableMemory

    pending = {"count": 0}
    sweep, runs, now = held_back_sweep(monkeypatch, pending)
    tables = [f"lake.db.t{n}" for n in range(200)]
    for n, table in enumerate(tables):
        sweep.memory[table] = TableMemory(location=f"s3://{table}", facts=None)
        if n % 2:  # half have a run under way: waiting for a slot, or holding the gate
            runs.last[table] = under_way(3600.0, alive=True, dag_id=f"iceberg_compact__lake__db__t{n}")
    checks = [Check(table, "needs_work", "needs work") for table in tables]
    asyncio.run(sweep.hold_back(checks, {table: trigger(table=table, cooldown_minutes=1) for table in tables}))
    assert [c.decision for c in checks] == ["started", "waiting"] * 100
    assert (runs.asked, pending["asked"]) == (1, [])


def test_the_sweep_reads_in_its_own_thread_while_the_triggerers_shared_pool_is_busy(monkeypatch):
    """In the 200-table burst the sweep's reads waited in the triggerer's shared thread pool behind the looks of the
    runs waiting for their gates (py-spy): a sweep must not need a thread of that pool."""
    import asyncio
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from airflow_iceberg.triggers.health_sweep import Check, TableMemory

    sweep, runs, now = held_back_sweep(monkeypatch, {"count": 0})
    sweep.memory["lake.db.t"] = TableMemory(location="s3://t", facts=None)
    check = Check("lake.db.t", "needs_work", "needs work")
    looks_may_end = threading.Event()

    async def main() -> list[bool]:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=2))
        # Every thread of the shared pool taken by a look that ends when the sweep is done, or after 10 s.
        looks = asyncio.gather(*(asyncio.to_thread(looks_may_end.wait, 10) for _ in range(2)))
        await asyncio.sleep(0)
        await sweep.hold_back([check], {"lake.db.t": trigger()})
        looks_may_end.set()
        return await looks

    ended_by_the_sweep = asyncio.run(main())
    assert ended_by_the_sweep == [True, True], "the sweep waited for the shared pool's looks to time out"
    assert check.decision == "started" and runs.asked == 1


def test_the_sweeps_thread_ends_when_its_stream_is_closed():
    """The triggerer closes a shared stream when its last watcher goes: the sweep's own thread goes with it."""
    import asyncio
    import threading

    from airflow_iceberg.triggers.health_sweep import CatalogSweep

    sweep = CatalogSweep("lake-of-no-watchers", "write_gate_default", 60)

    async def main() -> threading.Thread:
        thread = await sweep._in_thread(threading.current_thread)
        stream = sweep.stream()
        waiting = asyncio.ensure_future(anext(stream))  # no watchers: it waits for the next interval
        await asyncio.sleep(0)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        await stream.aclose()
        return thread

    thread = asyncio.run(main())
    thread.join(timeout=30)
    assert thread.name.startswith("health-sweep") and not thread.is_alive()


def test_a_run_whose_record_never_ended_and_that_shows_no_life_is_asked_about_in_airflow(monkeypatch):
    """Its run may have died without completing its record (marked failed by hand, say): only Airflow can tell."""
    import asyncio

    from airflow_iceberg.triggers.health_sweep import QUIET_RUN_SECONDS, Check, TableMemory

    pending = {"count": 1}
    sweep, runs, now = held_back_sweep(monkeypatch, pending)
    asked_airflow = pending["asked"]
    sweep.memory["lake.db.t"] = TableMemory(location="s3://t", facts=None)

    def decide() -> Check:
        check = Check("lake.db.t", "needs_work", "needs work")
        asyncio.run(sweep.hold_back([check], {"lake.db.t": trigger(cooldown_minutes=1)}))
        return check

    runs.last["lake.db.t"] = under_way(QUIET_RUN_SECONDS - 1, alive=False)
    assert decide().decision == "waiting" and asked_airflow == [], "quiet, but not for long: between two tasks"
    runs.last["lake.db.t"] = under_way(QUIET_RUN_SECONDS + 1, alive=True)
    assert decide().decision == "waiting" and asked_airflow == [], "alive: it holds the gate or keeps its place"
    runs.last["lake.db.t"] = under_way(QUIET_RUN_SECONDS + 1, alive=False)
    check = decide()
    assert check.decision == "waiting" and "(queued or running in Airflow)" in check.reason
    assert asked_airflow == ["iceberg_compact__lake__db__t"]
    pending["count"] = 0  # Airflow has no such run: it died, and its record will never end
    assert decide().decision == "started"


def restarted_sweep(monkeypatch, pending: int):
    """A new triggerer's sweep: the one before it recorded a ``started`` check for ``lake.db.t`` 120 s ago, and the
    table's last run record is from hours before; ``pending`` runs of its DAG are queued or running in Airflow.
    Returns (decide, runs, now, asked, asked_airflow): ``asked`` when that start was recorded, ``asked_airflow``
    the DAGs Airflow was asked about."""
    import asyncio
    from datetime import timedelta

    from airflow_iceberg.triggers.health_sweep import Check, TableMemory

    airflow = {"count": pending}
    sweep, runs, now = held_back_sweep(monkeypatch, airflow)
    asked = datetime.now(timezone.utc) - timedelta(seconds=120)
    runs.checks["lake.db.t"] = {"started_at": asked}
    runs.last["lake.db.t"] = {  # its previous run, long before
        "dag_id": "iceberg_compact__lake__db__t",
        "run_id": "r0",
        "outcome": "success",
        "started_at": asked - timedelta(hours=2),
        "finished_at": asked - timedelta(hours=1),
        "seconds_ago": 3720.0,
    }
    sweep.memory["lake.db.t"] = TableMemory(location="s3://t", facts=None)

    def decide() -> Check:
        check = Check("lake.db.t", "needs_work", "needs work")
        asyncio.run(sweep.hold_back([check], {"lake.db.t": trigger(cooldown_minutes=1)}))
        return check

    return decide, runs, now, asked, airflow["asked"]


def test_after_a_restart_a_recorded_start_whose_run_is_queued_holds_the_table_until_its_run_appears(monkeypatch):
    """The triggerer was killed after the watch asked for a run that the scheduler has queued and not begun: the
    new triggerer's first sweep finds the table needing work, no run record since, and its cool-down over."""
    from datetime import timedelta

    decide, runs, now, asked, asked_airflow = restarted_sweep(monkeypatch, pending=1)
    check = decide()
    assert check.decision == "waiting" and "the run the watch asked for 120 s ago has not been created yet" in (
        check.reason
    )
    assert decide().decision == "waiting"
    assert asked_airflow == ["iceberg_compact__lake__db__t"], "Airflow is asked once, not at every sweep"
    runs.last["lake.db.t"] = {**under_way(5.0, alive=True), "started_at": asked + timedelta(seconds=100)}
    assert decide().decision == "waiting"  # it appeared, and is under way
    runs.last["lake.db.t"] = {**runs.last["lake.db.t"], "finished_at": datetime.now(timezone.utc), "seconds_ago": 61}
    now["t"] += 600
    assert decide().decision == "started"  # it ended a cool-down ago, and the table needs work again
    assert len(asked_airflow) == 1


def test_after_a_restart_a_recorded_start_with_no_run_in_airflow_asks_again_at_once(monkeypatch):
    """The triggerer was killed between recording a ``started`` check and handing its event on (seen in make test):
    the event was lost, and holding the table back until a run appeared kept it without one for half an hour."""
    decide, runs, now, asked, asked_airflow = restarted_sweep(monkeypatch, pending=0)
    assert decide().decision == "started"
    assert asked_airflow == ["iceberg_compact__lake__db__t"]
    now["t"] += 61  # its own start now holds it until its run appears, without asking Airflow again
    check = decide()
    assert check.decision == "waiting" and "has not been created yet" in check.reason, check.reason
    assert len(asked_airflow) == 1


def test_a_run_that_never_appears_holds_the_table_back_no_longer_than_run_appear_seconds(monkeypatch):
    import asyncio
    import time as clock

    from airflow_iceberg.triggers import health_sweep
    from airflow_iceberg.triggers.health_sweep import RUN_APPEAR_SECONDS, CatalogSweep, Check, TableMemory

    async def no_runs(dag_id):
        return 0

    monkeypatch.setattr(health_sweep, "_pending_runs", no_runs)
    now = {"t": 1000.0}
    monkeypatch.setattr(clock, "monotonic", lambda: now["t"])
    sweep = CatalogSweep("lake", "write_gate_default", 60)
    monkeypatch.setattr(sweep, "_records", lambda: _Runs())
    unchanged(monkeypatch, sweep)
    sweep.memory["lake.db.t"] = TableMemory(location="s3://t", facts=None)
    watcher = trigger(cooldown_minutes=1)

    def decide() -> str:
        check = Check("lake.db.t", "needs_work", "needs work")
        asyncio.run(sweep.hold_back([check], {"lake.db.t": watcher}))
        return check.decision

    assert decide() == "started"
    now["t"] += RUN_APPEAR_SECONDS - 1
    assert decide() == "waiting"
    now["t"] += 2
    assert decide() == "started"


def test_a_table_that_changed_while_a_long_sweep_ran_waits_for_the_next_sweep(monkeypatch):
    """With 200 tables a sweep took three minutes, most of it asking Airflow about each table's runs. A run that
    compacted a table after the sweep read it, and ended more than a cool-down before its turn came, left a stale
    "needs work": the watch started a second run, which found nothing to do."""
    import asyncio

    from airflow_iceberg.triggers import health_sweep
    from airflow_iceberg.triggers.health_sweep import CatalogSweep, Check, TableMemory

    async def no_runs(dag_id):
        return 0

    monkeypatch.setattr(health_sweep, "_pending_runs", no_runs)
    runs = _Runs()
    runs.last["lake.db.t"] = {
        "run_id": "r1",
        "outcome": "success",
        "started_at": datetime.now(timezone.utc),
        "finished_at": datetime.now(timezone.utc),
        "seconds_ago": 75.0,  # ended after the sweep read the table, a cool-down before its turn
    }
    sweep = CatalogSweep("lake", "write_gate_default", 60)
    monkeypatch.setattr(sweep, "_records", lambda: runs)
    sweep.memory["lake.db.t"] = TableMemory(location="s3://t/00007.metadata.json", facts=None)
    now_at = {"lake.db.t": "s3://t/00008.metadata.json"}  # the run's rewrite committed
    monkeypatch.setattr(sweep, "list_locations", lambda tables: (now_at, {}))
    watcher = trigger(cooldown_minutes=1)

    check = Check("lake.db.t", "needs_work", "1 of 1 partitions need work")
    asyncio.run(sweep.hold_back([check], {"lake.db.t": watcher}))
    assert check.decision == "waiting", check
    assert check.reason.endswith("waits: the table changed while this sweep ran; the next one decides")
    assert sweep.memory["lake.db.t"].started_at is None  # no run asked for

    now_at["lake.db.t"] = "s3://t/00007.metadata.json"  # as read: the need stands
    check = Check("lake.db.t", "needs_work", "1 of 1 partitions need work")
    asyncio.run(sweep.hold_back([check], {"lake.db.t": watcher}))
    assert check.decision == "started"


def test_a_catalog_that_does_not_answer_the_second_look_starts_nothing(monkeypatch):
    import asyncio

    from airflow_iceberg.triggers import health_sweep
    from airflow_iceberg.triggers.health_sweep import CatalogSweep, Check, TableMemory

    async def no_runs(dag_id):
        return 0

    def down(tables):
        raise ConnectionError("catalog database down")

    monkeypatch.setattr(health_sweep, "_pending_runs", no_runs)
    sweep = CatalogSweep("lake", "write_gate_default", 60)
    monkeypatch.setattr(sweep, "_records", lambda: _Runs())
    monkeypatch.setattr(sweep, "list_locations", down)
    sweep.memory["lake.db.t"] = TableMemory(location="s3://t", facts=None)

    check = Check("lake.db.t", "needs_work", "needs work")
    asyncio.run(sweep.hold_back([check], {"lake.db.t": trigger(cooldown_minutes=1)}))
    assert check.decision == "waiting"
    assert "the catalog did not answer a second look: ConnectionError: catalog database down" in check.reason


def test_a_new_snapshot_keeps_what_the_watch_asked_for_and_saw_of_runs(monkeypatch):
    """A streaming writer commits every minute: a new snapshot must not forget that the watch asked for a run that
    the scheduler has not created yet, or the table gets a second event a cool-down later."""
    from airflow_iceberg.planning.screen import SnapshotFacts
    from airflow_iceberg.triggers import health_sweep
    from airflow_iceberg.triggers.health_sweep import CatalogSweep, TableMemory

    asked = datetime(2026, 11, 29, 9, 0, tzinfo=timezone.utc)
    sweep = CatalogSweep("lake", "write_gate_default", 60)
    sweep.memory["lake.db.t"] = TableMemory(
        "s3://t/1.json", SnapshotFacts(1), started_at=5.0, started_wall=asked, run_seen=False
    )
    monkeypatch.setattr(sweep, "read_facts", lambda location: SnapshotFacts(2))
    monkeypatch.setattr(health_sweep, "screen", lambda facts, last_read, thresholds: (False, "its totals say healthy"))

    sweep.check(trigger(), "s3://t/2.json", {})

    memory = sweep.memory["lake.db.t"]
    assert (memory.location, memory.facts.snapshot_id) == ("s3://t/2.json", 2)
    assert (memory.started_at, memory.started_wall, memory.run_seen) == (5.0, asked, False)


def test_a_table_held_back_by_its_cooldown_is_not_read_again_while_writers_only_add_files(monkeypatch):
    """A streaming table commits between sweeps: during the cool-down after its run, each sweep read its manifests
    again for a need that could start no run. It reads them again once the hold ends, or once a rewrite lands."""
    import asyncio

    from airflow_iceberg.planning.screen import ManifestRead, SnapshotFacts
    from airflow_iceberg.triggers import health_sweep

    sweep, runs, now = held_back_sweep(monkeypatch, {"count": 0})
    reads = []

    class Plan:
        decision, reason, partitions, score = "compact", "1 of 1 partitions need work", ["p=1"], 7

    def plan_table(iceberg_table, table, thresholds, where, options):
        reads.append(table)
        health = type("H", (), {"snapshot_id": snapshot["id"], "partitions": []})()
        return health, Plan()

    monkeypatch.setattr(health_sweep, "plan_table", plan_table)
    monkeypatch.setattr(health_sweep, "screen", lambda facts, last_read, thresholds: (True, "deletes"))
    monkeypatch.setattr(sweep, "catalog", lambda: type("C", (), {"load_table": lambda self, name: None})())
    appended = {"operation": "append", "added-data-files": "1"}
    rewritten = {"operation": "replace", "deleted-data-files": "4", "added-data-files": "1"}
    chain: list[tuple[int, dict]] = [(1, appended)]
    snapshot = {"id": 1}

    def commit(summary: dict) -> str:
        snapshot["id"] += 1
        chain.append((snapshot["id"], summary))
        return f"s3://t/{snapshot['id']}.json"

    def read_facts(location):
        metadata = {
            "current-snapshot-id": chain[-1][0],
            "snapshots": [
                {"snapshot-id": sid, "summary": summary, **({"parent-snapshot-id": chain[i - 1][0]} if i else {})}
                for i, (sid, summary) in enumerate(chain)
            ],
        }
        return SnapshotFacts.from_metadata(metadata)

    monkeypatch.setattr(sweep, "read_facts", read_facts)
    watcher = trigger(cooldown_minutes=10)

    def sweep_once(location: str) -> str:
        check = sweep.check(watcher, location, {})
        asyncio.run(sweep.hold_back([check], {watcher.table: watcher}))
        return check.decision

    runs.last[watcher.table] = {
        "run_id": "r1",
        "outcome": "succeeded",
        "started_at": datetime.now(timezone.utc),
        "finished_at": datetime.now(timezone.utc),
        "seconds_ago": 30.0,
    }
    assert sweep_once("s3://t/1.json") == "waiting" and len(reads) == 1  # read, needs work, in its cool-down
    assert isinstance(sweep.memory[watcher.table].last_read, ManifestRead)
    for _ in range(3):  # the writer appends between sweeps: no read, the need stands
        now["t"] += 60
        runs.last[watcher.table]["seconds_ago"] += 60
        assert sweep_once(commit(appended)) == "waiting"
    assert len(reads) == 1
    assert sweep.check(watcher, commit(appended), {}).reading == "snapshot summary"
    now["t"] += 60
    assert sweep_once(commit(rewritten)) == "waiting" and len(reads) == 2  # a rewrite landed: read again
    assert sweep_once(commit(appended)) == "waiting" and len(reads) == 2
    now["t"] += 600  # the cool-down is over: read again before the table may start a run
    runs.last[watcher.table]["seconds_ago"] += 600
    assert sweep_once(commit(appended)) == "started" and len(reads) == 3


def test_a_snapshot_summary_says_whether_its_commit_may_have_removed_a_file():
    from airflow_iceberg.planning.screen import removes_files

    assert not removes_files({"operation": "append", "added-data-files": "3"})
    assert not removes_files({"operation": "overwrite", "added-data-files": "1", "added-delete-files": "2"})
    assert removes_files({"operation": "replace", "added-data-files": "1"})
    assert removes_files({"operation": "overwrite", "deleted-data-files": "1"})
    assert removes_files({"operation": "overwrite", "removed-delete-files": "1"})
    assert removes_files({"operation": "overwrite", "removed-dvs": "1"})
    assert removes_files({"operation": "delete"})
    assert removes_files({}) and removes_files(None)  # says too little: taken as removing
