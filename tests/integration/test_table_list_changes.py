"""A table-list change, a pause and an unpause take effect within a minute under the fleet setting, with nobody
asking for a parse.

The suite's live Airflow runs the fleet setting (``FLEET_SETTINGS``: an unchanged table list parsed once an
hour, the DAG folder as a ``TableListDagBundle``). Here the table list is only written, as a user or a deploy
would write it: no REST call, no CLI, no touch of a DAG file. The new table's DAG must be parsed and runnable, and
the removed table's DAGs gone, within 60 s of the write.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone

import pyarrow as pa
import yaml
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.fleet.dag_bundle import FLEET_SETTINGS
from airflow_iceberg.fleet.dag_files import dag_file_name
from airflow_iceberg.fleet.shards import dag_file_of
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.surface.dag_factory import compaction_dag_id, full_rewrite_dag_id
from airflow_iceberg.table_list.loader import TABLES_PER_DAG_FILE_KEY
from airflow_iceberg.triggers.table_health import health_asset_name
from devkit.live_airflow import AIRFLOWS_OWN_IDLE_SLEEP, DAGS_FOLDER

#: What the issue allows from the write of the table list to the change having taken effect.
TAKES_EFFECT_SECONDS = 60
#: The health watch's poll interval in these tests.
POLL_SECONDS = 5


def _dags_of(table: TableName) -> tuple[str, str]:
    return compaction_dag_id(table), full_rewrite_dag_id(table)


def _announcements(live_airflow) -> int:
    """How often the dag-processor's bundle has logged a table-list change so far."""
    log = (live_airflow.home / "standalone.log").read_text(errors="replace")
    return log.count(f"The table list {live_airflow.table_list} changed")


def test_a_table_list_change_takes_effect_within_a_minute(unique_name, live_airflow):
    assert AIRFLOWS_OWN_IDLE_SLEEP.keys() <= FLEET_SETTINGS.keys(), "the suite's exemption names no line of the setting"
    for name, value in FLEET_SETTINGS.items():  # the setting this test holds to its promise
        if name not in AIRFLOWS_OWN_IDLE_SLEEP:  # the scheduler's, no part of the parse (conftest.py)
            assert live_airflow.env[name] == value, f"the live Airflow does not run the fleet setting's {name}"
    added = TableName.parse(f"lake.table_list.{unique_name}")
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    catalog = IcebergHook("lake").catalog
    catalog.create_namespace_if_not_exists(added.namespace)
    catalog.create_table(added.in_catalog, schema=rows.schema).append(rows)

    document = yaml.safe_load(live_airflow.table_list.read_text())
    removed = TableName.parse(document["tables"][-1]["table"])
    live_airflow.wait_for(  # the live Airflow's first parse of its table list, if this test comes first
        f"{removed}'s DAGs to remove", lambda: all(live_airflow.dag_parsed(d) for d in _dags_of(removed)), 600
    )
    announced = _announcements(live_airflow)

    document["tables"] = document["tables"][:-1] + [{"table": str(added), "full_rewrite": {"schedule": None}}]
    live_airflow.table_list.write_text(yaml.safe_dump(document))
    written = time.monotonic()

    def changed() -> bool:
        present = all(live_airflow.dag_parsed(d) for d in _dags_of(added))
        gone = not any(live_airflow.dag_parsed(d) for d in _dags_of(removed))
        return present and gone

    live_airflow.wait_for("the table list's change to take effect", changed, TAKES_EFFECT_SECONDS)
    took = time.monotonic() - written
    print(f"table added and table removed took effect {took:.1f} s after the write (goal: {TAKES_EFFECT_SECONDS} s)")
    # The bundle made it so, not the hourly parse (FLEET_PARSE_SECONDS) and not a parse someone asked for.
    assert _announcements(live_airflow) == announced + 1, "the bundle did not say it saw the table list change"

    _a_dry_run_succeeds(live_airflow, compaction_dag_id(added))


def _a_dry_run_succeeds(live_airflow, dag_id: str) -> None:
    """Trigger a dry run of the DAG through the REST API, as the UI does, and hold that it plans and succeeds."""
    response = live_airflow.api(
        "POST", f"dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": {"dry_run": True}}
    )
    assert response.status_code == 200, response.text
    run = live_airflow.wait_for_run(dag_id, response.json()["dag_run_id"], timeout=600)
    states = live_airflow.task_states(dag_id, run["dag_run_id"])
    assert run["state"] == "success", states
    assert states["plan_compaction"] == "success", states


def _watchers(live_airflow, table: TableName) -> int:
    """How many triggers Airflow has registered to watch the table's health (its asset's watchers)."""
    return live_airflow.query(
        "SELECT count(*) FROM asset_watcher w JOIN asset a ON a.id = w.asset_id WHERE a.name = %s",
        health_asset_name(table),
    )[0][0]


def _checked_at(table: TableName) -> datetime | None:
    check = WriteGateHook("write_gate_default").records.health_checks().get(str(table))
    return check["checked_at"] if check else None


def _pause(live_airflow, dag_id: str, paused: bool) -> None:
    """Pause or unpause through the REST API, as the UI does."""
    response = live_airflow.api("PATCH", f"dags/{dag_id}", json={"is_paused": paused})
    assert response.status_code == 200, response.text


class Quiet:
    """True once the table's last check has not changed for ``seconds``: its sweeps have stopped."""

    def __init__(self, table: TableName, seconds: float) -> None:
        self.table, self.seconds = table, seconds
        self.last, self.since = _checked_at(table), time.monotonic()

    def __call__(self) -> bool:
        checked = _checked_at(self.table)
        if checked != self.last:
            self.last, self.since = checked, time.monotonic()
        return time.monotonic() - self.since >= self.seconds


def test_a_paused_table_stops_being_watched_and_an_unpaused_one_starts_within_a_minute(unique_name, live_airflow):
    """Airflow registers a health watch at a parse, and only for an unpaused DAG: under the fleet setting's hourly
    parse, the bundle's look at the paused DAGs is what makes the watch follow a pause and an unpause."""
    table = TableName.parse(f"lake.table_list.{unique_name}")
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    catalog = IcebergHook("lake").catalog
    catalog.create_namespace_if_not_exists(table.namespace)
    catalog.create_table(table.in_catalog, schema=rows.schema).append(rows)
    health = {"watch": True, "poll_interval": POLL_SECONDS, "cooldown_minutes": 1}
    live_airflow.add_tables({"table": str(table), "full_rewrite": {"schedule": None}, "health": health})
    dag_id = compaction_dag_id(table)
    live_airflow.wait_for(f"the first health check of {table}", lambda: _checked_at(table), TAKES_EFFECT_SECONDS)
    assert _watchers(live_airflow, table) == 1

    paused_at = time.monotonic()
    _pause(live_airflow, dag_id, True)
    live_airflow.wait_for(f"{table}'s watch to go", lambda: _watchers(live_airflow, table) == 0, TAKES_EFFECT_SECONDS)
    print(f"paused: its watch went {time.monotonic() - paused_at:.1f} s after (goal: {TAKES_EFFECT_SECONDS} s)")
    quiet = Quiet(table, 3 * POLL_SECONDS)
    live_airflow.wait_for(f"{table}'s checks to stop", quiet, TAKES_EFFECT_SECONDS)
    last_check = quiet.last

    unpaused_at = time.monotonic()
    _pause(live_airflow, dag_id, False)
    live_airflow.wait_for(
        f"{table} to be checked after its unpause", lambda: _checked_at(table) != last_check, TAKES_EFFECT_SECONDS
    )
    print(f"unpaused: checked again {time.monotonic() - unpaused_at:.1f} s after (goal: {TAKES_EFFECT_SECONDS} s)")
    assert _watchers(live_airflow, table) == 1


def _files_of_dags(live_airflow) -> dict[str, tuple[str, bool]]:
    """Each compaction DAG's file (relative to the DAG folder) and whether Airflow holds it stale."""
    rows = live_airflow.query(
        "SELECT dag_id, relative_fileloc, is_stale FROM dag WHERE relative_fileloc LIKE %s", "iceberg_compaction%"
    )
    return {dag_id: (fileloc, stale) for dag_id, fileloc, stale in rows}


def _parses_of_files(live_airflow) -> dict[str, tuple[datetime, datetime]]:
    """Each compaction DAG file's active DAGs' earliest and latest stored parse."""
    rows = live_airflow.query(
        "SELECT relative_fileloc, min(last_parsed_time), max(last_parsed_time) FROM dag "
        "WHERE relative_fileloc LIKE %s AND NOT is_stale GROUP BY relative_fileloc",
        "iceberg_compaction%",
    )
    return {fileloc: (earliest, latest) for fileloc, earliest, latest in rows}


class DagTableWatch(threading.Thread):
    """Airflow's DAG table, read every quarter second for as long as it runs: each compaction DAG's file and whether
    Airflow holds it stale. Any DAG of ``watched`` ever seen stale, or gone, is kept with when; and each move of a DAG
    to another file, with when it was first seen there."""

    EVERY = 0.25

    def __init__(self, live_airflow, watched: set[str]) -> None:
        super().__init__(daemon=True)
        self.live_airflow, self.watched = live_airflow, frozenset(watched)
        self.inactive: dict[str, float] = {}  # dag_id -> when first seen stale or gone
        self.moves: list[tuple[float, str, str]] = []  # (when, dag_id, the file it was first seen active in)
        self.looks, self.error = 0, None
        self._done = threading.Event()

    def run(self) -> None:
        files_of: dict[str, str] = {}
        try:
            while not self._done.is_set():
                now, files = time.monotonic(), _files_of_dags(self.live_airflow)
                self.looks += 1
                for dag_id, (fileloc, stale) in files.items():
                    if not stale and files_of.get(dag_id) != fileloc:
                        files_of[dag_id] = fileloc
                        self.moves.append((now, dag_id, fileloc))
                for dag_id in self.watched:
                    if files.get(dag_id, ("", True))[1]:
                        self.inactive.setdefault(dag_id, now)
                self._done.wait(self.EVERY)
        except Exception as error:  # said by stop(): a watch that stopped looking must not pass for a clean one
            self.error = error

    def moved_in(self, dag_ids: set[str], fileloc: str, since: float) -> float:
        """How long after ``since`` the last of ``dag_ids`` was first seen active in ``fileloc``."""
        arrived = {dag_id: at for at, dag_id, file in reversed(self.moves) if file == fileloc and at >= since}
        missing = dag_ids - arrived.keys()
        assert not missing, f"{len(missing)} DAGs never seen moving to {fileloc}, e.g. {sorted(missing)[:3]}"
        return max(arrived[dag_id] for dag_id in dag_ids) - since

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=30)
        assert self.error is None, f"the watch of Airflow's DAG table stopped: {self.error!r}"


def test_a_list_grown_past_a_files_worth_and_shrunk_back_keeps_every_listed_tables_dags_active_throughout(
    unique_name, live_airflow
):
    """Under the fleet setting, a table added to the list makes it take two compaction DAG files: the bundle writes
    the new one, Airflow parses it, and each table's DAGs are in the file its name's hash picks, within 60 s of the
    write, and the new file's DAGs run. Then the table is removed again, so the list shrinks below a file's worth:
    the moved tables go back to iceberg_compaction.py. A watch reads Airflow's DAG table four times a second the
    whole time, both ways: no DAG of a table still listed is ever inactive."""
    original = live_airflow.table_list.read_text()
    document = yaml.safe_load(original)
    names = [entry["table"] for entry in document["tables"]]
    live_airflow.wait_for(  # the live Airflow's first parse of its table list, if this test comes first
        "every table's DAGs",
        lambda: all(live_airflow.dag_parsed(compaction_dag_id(TableName.parse(n))) for n in names),
        600,
    )
    before = _files_of_dags(live_airflow)
    assert {fileloc for fileloc, stale in before.values() if not stale} == {"iceberg_compaction.py"}
    # A real table, whose name's hash puts it in the new file: its DAG runs from there.
    added = next(
        name for name in (f"lake.table_list.{unique_name}_{n}" for n in range(100)) if dag_file_of(name, 2) == 1
    )
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    catalog = IcebergHook("lake").catalog
    catalog.create_namespace_if_not_exists("table_list")
    catalog.create_table(TableName.parse(added).in_catalog, schema=rows.schema).append(rows)
    moving = {n for n in names if dag_file_of(n, 2) == 1}
    assert moving and len(moving) < len(names), "the list's names must spread over both files"
    listed = {dag_id for name in names for dag_id in _dags_of(TableName.parse(name))}
    moved = {dag_id for name in moving for dag_id in _dags_of(TableName.parse(name))}
    expected = {
        dag_id: dag_file_name(dag_file_of(name, 2))
        for name in [*names, added]
        for dag_id in _dags_of(TableName.parse(name))
    }
    new_file, home = DAGS_FOLDER / dag_file_name(1), dag_file_name(0)
    assert not new_file.exists()
    watch = DagTableWatch(live_airflow, listed)
    watch.start()
    restored = False
    try:
        document[TABLES_PER_DAG_FILE_KEY] = len(names)  # the added table makes two files
        document["tables"].append({"table": added, "full_rewrite": {"schedule": None}})
        live_airflow.table_list.write_text(yaml.safe_dump(document))
        grown, grown_at = time.monotonic(), datetime.now(timezone.utc)

        def split() -> bool:
            now = _files_of_dags(live_airflow)
            return all(now.get(dag_id) == (fileloc, False) for dag_id, fileloc in expected.items())

        live_airflow.wait_for("each DAG in the file its table's hash picks", split, TAKES_EFFECT_SECONDS, every=0.5)
        print(
            f"grown: {len(moving)} of {len(names)} tables moved to {new_file.name}, and one was added there, "
            f"{time.monotonic() - grown:.1f} s after the write (goal: {TAKES_EFFECT_SECONDS} s)"
        )
        # The file they left reads the changed list too, and then no longer builds them: that parse must come after
        # the new file's, or Airflow deactivates them at its next clean-up.

        def home_parsed() -> bool:
            parsed = _parses_of_files(live_airflow).get(home)
            return parsed is not None and parsed[0] > grown_at

        live_airflow.wait_for(f"a parse of {home} after the write", home_parsed, TAKES_EFFECT_SECONDS, every=0.5)
        parses = _parses_of_files(live_airflow)
        new_parsed, home_parsed_at = parses[new_file.name][1], parses[home][0]
        print(
            f"grown: the moved tables in {new_file.name} {watch.moved_in(moved, new_file.name, grown):.1f} s after the "
            f"write; {new_file.name} stored {new_parsed - grown_at}, {home} {home_parsed_at - grown_at} after it"
        )
        assert new_parsed <= home_parsed_at, f"{home} was parsed before {new_file.name} stored the DAGs moving there"

        _a_dry_run_succeeds(live_airflow, compaction_dag_id(TableName.parse(added)))

        # And back: the list shrinks below a file's worth, the moved tables go home to iceberg_compaction.py, and
        # the file they leave must be parsed only after iceberg_compaction.py's parse has stored them.
        live_airflow.table_list.write_text(original)
        restored, shrunk = True, time.monotonic()

        def moved_home() -> bool:
            now = _files_of_dags(live_airflow)
            return all(now[dag_id] == (home, False) for dag_id in moved)

        live_airflow.wait_for(f"the moved tables' DAGs back in {home}", moved_home, TAKES_EFFECT_SECONDS, every=0.5)
        stored_home = _parses_of_files(live_airflow)[home][1]
        gone = _dags_of(TableName.parse(added))

        def left_file_parsed() -> bool:
            now = _files_of_dags(live_airflow)
            return all(now[dag_id][1] for dag_id in gone)

        live_airflow.wait_for(
            f"the removed table's DAGs deactivated after a parse of {new_file.name}",
            left_file_parsed,
            TAKES_EFFECT_SECONDS,
            every=0.5,
        )
        left_touched = datetime.fromtimestamp(new_file.stat().st_mtime, timezone.utc)
        print(
            f"shrunk: {len(moving)} tables back in {home} {watch.moved_in(moved, home, shrunk):.1f} s after the "
            f"write, the removed table's DAGs gone {time.monotonic() - shrunk:.1f} s after it; {home} stored them at "
            f"{stored_home}, {new_file.name} touched at {left_touched}"
        )
        assert stored_home <= left_touched, f"{new_file.name} was parsed before {home} stored the tables moving there"
        looks = watch.looks  # two more looks of the watch, after the last move
        live_airflow.wait_for("two more looks at the DAG table", lambda: watch.looks >= looks + 2, 30, every=0.1)
    finally:  # the other tests' live Airflow: one file again, as it was
        watch.stop()
        if not restored:
            live_airflow.table_list.write_text(original)
        live_airflow.wait_for(
            "every DAG back in iceberg_compaction.py",
            lambda: all(_files_of_dags(live_airflow).get(dag_id, ("", False))[0] == home for dag_id in listed),
            TAKES_EFFECT_SECONDS,
        )
        new_file.unlink(missing_ok=True)
    print(
        f"Airflow's DAG table read {watch.looks} times over {time.monotonic() - grown:.0f} s, both ways: "
        f"{len(watch.inactive)} DAGs of listed tables ever inactive"
    )
    assert watch.inactive == {}, f"DAGs of listed tables seen inactive: {sorted(watch.inactive)}"
