"""The health watch's sweep: one poll loop per catalog, shared by its tables' :class:`TableHealthTrigger` watchers
(``triggers/table_health.py``), which register here (:data:`WATCHERS`) and turn its ``started`` checks into events.

A sweep, for every watched table:

- lists the catalog's tables with their metadata locations: for a SQL (JDBC) catalog one query over its table
  rows; for any other catalog one ``load_table`` per table, the cheapest call such catalogs offer;
- reads a table's metadata file (its JSON, without building pyiceberg's model) only when that location changed
  since the last sweep, and its manifests only when the snapshot summary's totals say it may need work
  (:func:`airflow_iceberg.planning.screen.screen`); a table whose snapshot did not change keeps its last decision,
  and so does one that needs work and is held back (below) while its writers only add files (:func:`still_needs_work`);
- decides by :func:`airflow_iceberg.planning.plan.plan_table`, the rule ``plan_compaction`` applies when the run starts;
- starts a run (the watcher's event) for a table that needs work, unless a run of it is under way (its record has
  not ended: one query of the gate database for every table due, :meth:`CatalogSweep.hold_back`), or its last run
  ended (or the watch started one) less than ``cooldown_minutes`` ago, or the run its last event asked for has not
  been created yet (:data:`RUN_APPEAR_SECONDS`), or the table changed since the sweep read it (a run that ended
  during a long sweep): one event per need;
- writes what it decided for each table to the gate database (``iceberg_health_check``), for the Iceberg tables
  page and ``airflow-iceberg report``.

Catalog and database calls are synchronous and run in the sweep's own thread, off the triggerer's event loop and out of
the thread pool its other triggers share. A catalog or a gate database that cannot be reached makes the sweep log,
record and wait for the next interval; it never raises into the triggerer. What a sweep remembers is only a cache: after
a triggerer restart the first sweep reads every table's metadata again, and the hold-back rules above read the gate
database's run records and the watch's recorded checks (when it last started a run for each table), so a restart neither
forgets a table that needs work nor starts a second run for one. A recorded start with no run to show for it is
confirmed with Airflow once: the triggerer may have been stopped before it handed that start's event on, and then the
table asks again.

A run queued in Airflow whose first task has not begun (a manual or scheduled run, on a busy scheduler) has no
record yet: the watch may ask for one more. The DAGs run one run at a time, so that run waits for the first, plans
from the table's health then, and ends at once when nothing needs work.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import time
from collections.abc import AsyncIterator, Callable, Hashable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol, TypeVar

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.hooks import metrics
from airflow_iceberg.hooks.catalogs import iceberg_catalog
from airflow_iceberg.hooks.run_records import NEEDING_WORK, HealthDecision, RunRecords
from airflow_iceberg.planning.health import HealthThresholds
from airflow_iceberg.planning.plan import Decision, plan_table
from airflow_iceberg.planning.screen import ManifestRead, SnapshotFacts, screen
from airflow_iceberg.planning.templates import render_at

#: The first element of every health watch's shared-stream key.
HEALTH_STREAM = "airflow-iceberg-table-health"
#: The run states in which a table's run counts as pending: no second run is started meanwhile.
PENDING_RUN_STATES = ["queued", "running"]
#: How long, at most, the watch holds a table back until the run its event asked for appears. Airflow's scheduler
#: creates asset-triggered runs a few per loop (``[scheduler] max_dagruns_to_create_per_loop``, 10), so after a burst
#: of events a run may be created minutes after its event, and until then its DAG has no queued run: a table whose
#: cool-down ended meanwhile would get a second event (seen with 200 tables needing work at once).
RUN_APPEAR_SECONDS = 1800.0
#: How long a run whose record has not ended may show no sign of life (no gate held on a live lease, no place kept in
#: the Spark slot queue) before the watch asks Airflow whether it is still queued or running: its plan wrote the
#: record, and the scheduler may take a while to start its next task on a busy Airflow.
QUIET_RUN_SECONDS = 900.0
#: The difference allowed between the triggerer's clock and the gate database's when matching a run record.
CLOCK_SKEW_SECONDS = 5.0

#: The watchers subscribed to each shared stream, by table: the sweep checks each with its own settings. Filled and
#: emptied by ``TableHealthTrigger.filter_shared_stream``, in the triggerer's one event loop.
WATCHERS: dict[Hashable, dict[str, Watcher]] = {}

T = TypeVar("T")


class Watcher(Protocol):
    """What the sweep reads of each watched table: ``TableHealthTrigger`` is one."""

    table: str
    dag_id: str
    cooldown_minutes: float
    thresholds: HealthThresholds
    where: dict[str, str | None]

    @property
    def options(self) -> dict[str, Any]: ...


def stream_key(iceberg_conn_id: str, write_gate_conn_id: str, poll_interval: float) -> tuple[str, str, str, float]:
    return (HEALTH_STREAM, iceberg_conn_id, write_gate_conn_id, float(poll_interval))


@dataclass
class Check:
    """What one sweep decided for one table."""

    table: str
    decision: HealthDecision
    reason: str
    reading: str = "listing"  # what it read: listing, metadata or manifests
    snapshot_id: int | None = None
    partitions: dict[str, list[str]] = field(default_factory=dict)
    score: int | None = None  # the plan's: small plus delete files in the partitions needing work (0 if healthy)
    data_files: int | None = None  # the current snapshot's totals, as its summary gives them
    delete_files: int | None = None

    def row(self) -> dict[str, Any]:
        return {
            "table_name": self.table,
            "snapshot_id": self.snapshot_id,
            "decision": self.decision.value,
            "reason": self.reason[:1000],
            "reading": self.reading,
            "score": self.score,
            "data_files": self.data_files,
            "delete_files": self.delete_files,
        }


@dataclass
class TableMemory:
    """What a sweep keeps of one table until the next: a cache, rebuilt from the catalog after a restart."""

    location: str
    facts: SnapshotFacts
    last_read: ManifestRead | None = None
    started_at: float | None = None  # monotonic time of the last event
    started_wall: datetime | None = None  # the same, by the wall clock (UTC), to compare with run records
    run_seen: bool = True  # a run of the DAG was seen queued, running or recorded since the last event
    held_until: float = 0.0  # monotonic time until which the hold-back keeps the table from starting a run


class CatalogSweep:
    """The poll loop shared by the health watchers of one catalog (see the module doc)."""

    def __init__(self, iceberg_conn_id: str, write_gate_conn_id: str, poll_interval: float) -> None:
        import logging

        self.iceberg_conn_id = iceberg_conn_id
        self.write_gate_conn_id = write_gate_conn_id
        self.poll_interval = poll_interval
        self.key = stream_key(iceberg_conn_id, write_gate_conn_id, poll_interval)
        self.memory: dict[str, TableMemory] = {}
        # The trouble last logged for each table that has some (missing, unreadable): logged once, not each sweep.
        self.trouble: dict[str, str] = {}
        # The tables whose last start by the watch, as recorded before this triggerer started, is in their memory.
        self.remembered: set[str] = set()
        # Of those, the ones whose remembered start has no run to show for it yet, until Airflow has said whether one
        # is queued or running: the triggerer may have been stopped before it handed that start's event on.
        self.unconfirmed: set[str] = set()
        self.log = logging.getLogger(__name__)
        self._catalog: Any = None
        # The sweep's own thread: in the triggerer's shared default pool its reads would queue behind every waiting
        # run's look at its gate (CloseGateTrigger), which in a burst are hundreds each poke interval.
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="health-sweep")

    async def stream(self) -> AsyncIterator[dict[str, Any]]:
        """Sweep every ``poll_interval`` seconds, forever; yield each sweep's ``{"swept_at", "started"}``. The sweep's
        thread ends with the stream (its last watcher gone), once a read under way there has returned."""
        try:
            while True:
                began = time.monotonic()
                watchers = list(WATCHERS.get(self.key, {}).values())
                if watchers:
                    try:
                        yield await self.sweep(watchers)
                    except Exception:  # a bug here must not end every watcher of the catalog: log, sweep again later
                        self.log.exception("Health sweep of Iceberg connection %r failed", self.iceberg_conn_id)
                await asyncio.sleep(max(1.0, self.poll_interval - (time.monotonic() - began)))
        finally:
            self._thread.shutdown(wait=False)

    async def sweep(self, watchers: list[Watcher]) -> dict[str, Any]:
        began = time.monotonic()
        checks = await self._in_thread(self.check_all, watchers)
        by_table = {w.table: w for w in watchers}
        due = [c for c in checks if c.decision == HealthDecision.NEEDS_WORK]
        if due:
            await self.hold_back(due, by_table)
        try:
            await self._in_thread(self._records().record_health_checks, [c.row() for c in checks])
        except Exception as error:
            self.log.warning("Could not record the health checks in %r: %s", self.write_gate_conn_id, _say(error))
        counts: dict[str, int] = {}
        for check in checks:
            counts[check.decision] = counts.get(check.decision, 0) + 1
            counts[f"read {check.reading}"] = counts.get(f"read {check.reading}", 0) + 1
        # Every table the sweep found needing work, whether it started a run now or waits for one under way.
        needing = sum(counts.get(decision, 0) for decision in NEEDING_WORK)
        metrics.emit_sweep(self.iceberg_conn_id, needing)
        self.log.info(
            "Health sweep of %r: %d tables in %.2f s: %s",
            self.iceberg_conn_id,
            len(checks),
            time.monotonic() - began,
            ", ".join(f"{v} {k}" for k, v in sorted(counts.items())),
        )
        now = datetime.now(timezone.utc).isoformat()
        started = {
            c.table: {
                "table": c.table,
                "snapshot_id": c.snapshot_id,
                "reason": c.reason,
                "partitions": c.partitions,
                "checked_at": now,
            }
            for c in checks
            if c.decision == HealthDecision.STARTED
        }
        return {"swept_at": now, "started": started}

    async def _in_thread(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)`` in the sweep's own thread, off the event loop."""
        run = functools.partial(contextvars.copy_context().run, call, *args)  # as asyncio.to_thread does
        return await asyncio.get_running_loop().run_in_executor(self._thread, run)

    # --- reading the catalog (in a thread) ---------------------------------------------------------------------

    def check_all(self, watchers: list[Watcher]) -> list[Check]:
        try:
            locations, listed = self.list_locations([TableName.parse(w.table) for w in watchers])
        except Exception as error:
            self._catalog = None  # connect afresh next time
            reason = f"catalog of Iceberg connection {self.iceberg_conn_id!r} unreachable: {_say(error)}"
            self.log.warning("%s; every table of it waits for the next sweep", reason)
            return [Check(w.table, HealthDecision.UNREACHABLE, reason) for w in watchers]
        checks = []
        for watcher in watchers:
            try:
                checks.append(self.check(watcher, locations.get(watcher.table), listed))
            except Exception as error:
                self.log.warning("Health check of %s failed: %s", watcher.table, _say(error))
                checks.append(Check(watcher.table, HealthDecision.ERROR, f"could not read its health: {_say(error)}"))
        return checks

    def catalog(self) -> Any:
        if self._catalog is None:
            self._catalog = iceberg_catalog(self.iceberg_conn_id)
        return self._catalog

    def list_locations(self, tables: list[TableName]) -> tuple[dict[str, str | None], dict[str, str]]:
        """Each table's current metadata location (None if the catalog does not have it), and, for a SQL catalog,
        which table holds each metadata location it lists (``namespace.table``), to tell a rename from a drop."""
        from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
        from sqlalchemy import select

        catalog = self.catalog()
        if isinstance(catalog, SqlCatalog):
            columns = (IcebergTables.table_namespace, IcebergTables.table_name, IcebergTables.metadata_location)
            query = select(*columns).where(IcebergTables.catalog_name == catalog.name)
            with catalog.engine.connect() as connection:
                rows = {(ns, name): location for ns, name, location in connection.execute(query)}
            listed = {location: f"{ns}.{name}" for (ns, name), location in rows.items() if location}
            return {str(t): rows.get((t.namespace, t.table)) for t in tables}, listed
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        locations: dict[str, str | None] = {}
        for table in tables:
            try:
                locations[str(table)] = catalog.load_table(table.in_catalog).metadata_location
            except (NoSuchTableError, NoSuchNamespaceError):
                locations[str(table)] = None
        return locations, {}

    def read_facts(self, location: str) -> SnapshotFacts:
        """The current snapshot's facts from the metadata file's JSON."""
        from pyiceberg.io import load_file_io
        from pyiceberg.serializers import Compressor

        io = load_file_io(self.catalog().properties, location)
        with io.new_input(location).open() as raw, Compressor.get_compressor(location).stream_decompressor(raw) as f:
            return SnapshotFacts.from_metadata(json.load(f))

    def check(self, watcher: Watcher, location: str | None, listed: Mapping[str, str]) -> Check:
        table = watcher.table
        memory, reading = self.memory.get(table), "listing"
        if location is None:
            return self._troubled(table, self._missing(table, memory, listed))
        if memory is None or memory.location != location:
            try:
                facts, reading = self.read_facts(location), "metadata"
            except Exception as error:
                return self._troubled(
                    table,
                    f"could not read {table}'s current metadata file {location}: {_say(error)}. No engine can read "
                    "the table until that file is restored, or its catalog entry points at a readable metadata file",
                )
            # A new snapshot: new facts; what the watch asked for and saw of runs stays.
            memory = self.memory[table] = (
                replace(memory, location=location, facts=facts) if memory else TableMemory(location, facts)
            )
        if self.trouble.pop(table, None) is not None:
            self.log.info("Health check of %s: readable again", table)
        thresholds = watcher.thresholds
        facts, last_read = memory.facts, memory.last_read
        snapshot_id = facts.snapshot_id
        totals: dict[str, Any] = {"data_files": facts.data_files, "delete_files": facts.delete_files}
        now_ms = int(time.time() * 1000)
        if last_read is not None and still_needs_work(memory):
            reading = "snapshot summary"  # the last read's need stands: the table waits, and only grew since
        elif last_read is None or last_read.snapshot_id != snapshot_id or last_read.delete_age_due(thresholds, now_ms):
            must_read, why = screen(memory.facts, last_read, thresholds)
            if not must_read:
                return Check(table, HealthDecision.HEALTHY, why, reading, snapshot_id, score=0, **totals)
            iceberg_table = self.catalog().load_table(TableName.parse(table).in_catalog)
            where = {
                procedure: render_at(template, datetime.now(timezone.utc))
                for procedure, template in watcher.where.items()
            }
            health, plan = plan_table(iceberg_table, table, thresholds, where, watcher.options)
            memory.last_read = last_read = ManifestRead.of(health, plan)
            reading = "manifests"
        plan = last_read.plan
        if plan.decision == Decision.COMPACT:
            return Check(
                table,
                HealthDecision.NEEDS_WORK,
                plan.reason,
                reading,
                snapshot_id,
                plan.partitions,
                plan.score,
                **totals,
            )
        return Check(table, HealthDecision.HEALTHY, plan.reason, reading, snapshot_id, score=0, **totals)

    def _missing(self, table: str, memory: TableMemory | None, listed: Mapping[str, str]) -> str:
        catalog = TableName.parse(table).catalog
        gone = f"{table} is not in the catalog of Iceberg connection {self.iceberg_conn_id!r}"
        renamed = listed.get(memory.location) if memory is not None else None
        if renamed is not None:
            return (
                f"{gone}: it was renamed to {catalog}.{renamed}, which holds its last metadata file; put the new "
                "name in the table list"
            )
        return f"{gone}: it was dropped or renamed; take it off the table list, or put its new name there"

    def _troubled(self, table: str, reason: str) -> Check:
        """An ``error`` check: logged when a table's trouble begins or changes, not at every sweep."""
        if self.trouble.get(table) != reason:
            self.trouble[table] = reason
            self.log.warning("Health check of %s failed: %s", table, reason)
        return Check(table, HealthDecision.ERROR, reason)

    # --- holding back a second run ------------------------------------------------------------------------------

    async def hold_back(self, due: list[Check], watchers: Mapping[str, Watcher]) -> None:
        """Turn each ``needs_work`` check into ``started`` or, with the reason, ``waiting``.

        One question for every table due, to the gate database: each table's newest run record, and whether its run
        shows it is alive (:meth:`RunRecords.last_runs`). Airflow is asked about a DAG's runs only where that cannot
        tell: a run whose record never ended and that has shown no sign of life for :data:`QUIET_RUN_SECONDS` (its
        run may have died without completing it)."""
        tables = [c.table for c in due]
        try:
            runs = await self._in_thread(self._records().last_runs, tables)
            unasked = [t for t in tables if t not in self.remembered]
            if unasked:  # the first time a table is due here: what the watch asked for before, from its checks
                self._remember_starts(await self._in_thread(self._records().health_checks), unasked, runs)
        except Exception as error:
            for check in due:
                check.decision = HealthDecision.WAITING
                check.reason = f"{check.reason}; the gate database is unreachable: {_say(error)}"
            return
        await self._confirm_remembered([t for t in tables if t in self.unconfirmed], watchers)
        starting: list[Check] = []
        for check in due:
            watcher, memory = watchers[check.table], self.memory[check.table]
            cooldown = watcher.cooldown_minutes * 60
            wait, held_until = None, 0.0  # held_until: while a run is pending, or the cool-down lasts
            last = runs.get(check.table)
            if last is not None and last["finished_at"] is None:  # a run under way, by its record
                under_way = f"its run {last['run_id']} of {last['dag_id']} is under way"
                if last["alive"] or last["seconds_ago"] < QUIET_RUN_SECONDS:
                    wait, held_until = under_way, float("inf")
                else:
                    try:
                        pending = await _pending_runs(last["dag_id"])
                    except Exception as error:
                        wait = f"cannot tell whether a run of {last['dag_id']} is pending: {_say(error)}"
                    else:
                        if pending:
                            wait, held_until = f"{under_way} (queued or running in Airflow)", float("inf")
                memory.run_seen = memory.run_seen or wait is not None
            if _began_since(last, memory.started_wall):
                memory.run_seen = True
            if wait is None and memory.started_at is not None and not memory.run_seen:
                asked = time.monotonic() - memory.started_at
                if asked < RUN_APPEAR_SECONDS:
                    wait = f"the run the watch asked for {asked:.0f} s ago has not been created yet"
            if wait is None and memory.started_at is not None and time.monotonic() - memory.started_at < cooldown:
                wait = f"the watch started a run {time.monotonic() - memory.started_at:.0f} s ago"
                held_until = memory.started_at + cooldown
            if wait is None and last is not None and last["seconds_ago"] < cooldown:
                ended = "ended" if last["finished_at"] else "began"
                wait = f"its last run ({last['run_id']}, {last['outcome']}) {ended} {last['seconds_ago']:.0f} s ago"
                held_until = time.monotonic() + cooldown - last["seconds_ago"]
            memory.held_until = held_until
            if wait is None:
                starting.append(check)
            else:
                check.decision = HealthDecision.WAITING
                check.reason = f"{check.reason}; waits: {wait} (cooldown {watcher.cooldown_minutes:g} min)"
        if not starting:
            return
        # The checks read the catalog when the sweep began, and the look at each table's runs above takes a while
        # with many tables (a call to Airflow each): a run that committed meanwhile, and ended more than a
        # cool-down ago by now, has made its table's check stale. Only a table still as the check read it starts.
        relist_error: str | None = None
        try:
            now_at, _ = await self._in_thread(self.list_locations, [TableName.parse(c.table) for c in starting])
        except Exception as error:
            now_at, relist_error = {}, _say(error)
        for check in starting:
            memory = self.memory[check.table]
            if now_at.get(check.table) == memory.location:
                check.decision = HealthDecision.STARTED
                memory.started_at, memory.started_wall = time.monotonic(), datetime.now(timezone.utc)
                memory.run_seen = False
                continue
            check.decision = HealthDecision.WAITING
            if relist_error is not None:
                check.reason = f"{check.reason}; waits: the catalog did not answer a second look: {relist_error}"
            else:
                check.reason = f"{check.reason}; waits: the table changed while this sweep ran; the next one decides"

    def _remember_starts(
        self, checks: Mapping[str, Mapping[str, Any]], tables: list[str], runs: Mapping[str, Mapping[str, Any]]
    ) -> None:
        """Take the runs the watch last asked for, before this triggerer started (the ``started_at`` of the tables'
        recorded checks), as asked by this sweep's watch: a run asked for and not yet created holds its table back
        after a restart too."""
        now, monotonic_now = datetime.now(timezone.utc), time.monotonic()
        self.remembered.update(tables)
        for table in tables:
            asked = (checks.get(table) or {}).get("started_at")
            memory = self.memory[table]
            if asked is None or memory.started_at is not None:
                continue
            memory.started_wall = asked
            memory.started_at = monotonic_now - max(0.0, (now - asked).total_seconds())
            memory.run_seen = _began_since(runs.get(table), asked)
            if not memory.run_seen:
                self.unconfirmed.add(table)

    async def _confirm_remembered(self, tables: list[str], watchers: Mapping[str, Watcher]) -> None:
        """Ask Airflow, once, about each remembered start that has no run to show for it: a triggerer stopped
        between recording a ``started`` check and handing its event on loses the event, and holding the table back
        for :data:`RUN_APPEAR_SECONDS` would leave it without a run for half an hour. With no run of its DAG queued or
        running, the start is forgotten and the table asks again: an event the scheduler already holds but has not
        turned into a run merges with the new one (one queued run per asset and DAG), so it stays one run."""
        for table in tables:
            memory = self.memory[table]
            if memory.run_seen or memory.started_at is None:
                self.unconfirmed.discard(table)
                continue
            try:
                pending = await _pending_runs(watchers[table].dag_id)
            except Exception as error:  # ask again at the next sweep; the remembered start holds meanwhile
                self.log.warning("Cannot tell whether a run of %s is pending: %s", watchers[table].dag_id, _say(error))
                continue
            self.unconfirmed.discard(table)
            if pending:
                continue
            self.log.info(
                "The run the watch asked for %s at %s, before this triggerer started, is not in Airflow: asking again",
                table,
                memory.started_wall.isoformat() if memory.started_wall else "?",
            )
            memory.started_at, memory.started_wall, memory.run_seen = None, None, True

    def _records(self) -> RunRecords:
        """The run records and health checks of the gate connection."""
        from airflow_iceberg.hooks.write_gate import WriteGateHook

        return WriteGateHook(self.write_gate_conn_id).records


def still_needs_work(memory: TableMemory) -> bool:
    """Whether the table's last manifest read found work that still stands, so the sweep need not read again: the
    hold-back keeps the table from a run for now (a run is pending, or its cool-down lasts), and no snapshot since
    that read removed a file (no rewrite landed; writers only added files).

    A streaming table commits between sweeps, so without this it was read at nearly every sweep of its cool-down
    for a decision that could not start a run. The read resumes when the hold ends or a rewrite lands; only a
    partition's delete ratio can fall by additions alone, and that is read again before the table starts a run.
    """
    last_read = memory.last_read
    return (
        last_read is not None
        and last_read.plan.decision == Decision.COMPACT
        and memory.held_until > time.monotonic()
        and last_read.snapshot_id in memory.facts.only_added_since | {memory.facts.snapshot_id}
    )


def _began_since(last: Mapping[str, Any] | None, asked_at: datetime | None) -> bool:
    """Whether the run record ``last`` began after the watch asked for a run at ``asked_at`` (less a few seconds for
    the triggerer's and the database's clocks)."""
    if last is None or asked_at is None or last.get("started_at") is None:
        return False
    return bool(last["started_at"] >= asked_at - timedelta(seconds=CLOCK_SKEW_SECONDS))


async def _pending_runs(dag_id: str) -> int:
    """How many runs of ``dag_id`` are queued or running, asked of Airflow through the triggerer's supervisor."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance
    from asgiref.sync import sync_to_async

    return await sync_to_async(RuntimeTaskInstance.get_dr_count)(dag_id=dag_id, states=PENDING_RUN_STATES)


def _say(error: BaseException) -> str:
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text[:300]}" if text else type(error).__name__
