"""``TableListDagBundle``: a table-list change, or a DAG paused or unpaused, marks the DAG files that read the table
list as changed, once, and nothing else.

Airflow's metadata database is not here: the DAGs' rows come from the test (``Bundle.rows``); the live Airflow's
test (``tests/integration/test_table_list_changes.py``) reads them from PostgreSQL.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from airflow.dag_processing.bundles.manager import DagBundlesManager
from airflow.sdk import conf

from airflow_iceberg.fleet import dag_bundle, handover
from airflow_iceberg.fleet.dag_bundle import FLEET_SETTINGS, DagRow, TableListDagBundle
from airflow_iceberg.fleet.dag_files import COMPACTION_DAG_FILE, dag_file_name, dag_file_text
from airflow_iceberg.surface.cli import DAG_FILES

DAGS = Path(__file__).resolve().parents[3] / "dags"
HOUR_AGO = 3600 * 10**9


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A DAG folder with the shipped DAG files, another team's DAG file and the table list, all an hour old."""
    dags = tmp_path / "dags"
    (dags / "other").mkdir(parents=True)
    for name in DAG_FILES:
        (dags / name).write_text((DAGS / name).read_text())
    (dags / "other" / "unrelated.py").write_text("from airflow.sdk import DAG\n")
    (dags / "iceberg_tables.yaml").write_text("tables: []\n")
    for path in dags.rglob("*"):
        _age(path, HOUR_AGO)
    return dags


def _age(path: Path, by_ns: int) -> None:
    then = path.stat().st_mtime_ns - by_ns
    os.utime(path, ns=(then, then))


def _mtimes(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*.py")}


class Clock:
    """Real time, moved on by hand: a time-out or a threshold passes without a wait."""

    def __init__(self) -> None:
        self.ahead = timedelta()

    def __call__(self) -> datetime:
        return datetime.now(timezone.utc) + self.ahead

    def advance(self, seconds: float) -> None:
        self.ahead += timedelta(seconds=seconds)


class Bundle(TableListDagBundle):
    """The bundle with the DAG rows a test sets, not Airflow's database's, on a clock the test moves."""

    rows: dict[str, DagRow]
    clock: Clock

    def __init__(self, **kwargs) -> None:
        super().__init__(**{"look_interval": 0, **kwargs})  # each refresh() looks once, in the test's thread
        self.clock = Clock()
        self.asked: list[list[str]] = []  # the priority parsing requests it made

    def _ask_for_parses(self, files: list[str]) -> None:
        self.asked.append(files)

    def dag_summaries(self) -> dict[str, dag_bundle.FileSummary]:
        return dag_bundle.summarize(self.rows)

    def dag_rows(self, files: set[str] | None = None) -> dict[str, DagRow]:
        return {dag_id: row for dag_id, row in self.rows.items() if files is None or row.file in files}


def _bundle(
    folder: Path,
    kind: type[Bundle] = Bundle,
    refresh_interval: int | None = None,
    look_interval: float = 0,
    **rows: DagRow,
) -> Bundle:
    """A ``kind`` of bundle on ``folder`` with the DAG ``rows``, after the dag-processor's first refresh; the table
    list, written last, dated a minute back first, so that it is not newer than the DAG files. With a
    ``look_interval``, the bundle looks in a thread of its own too."""
    _age(folder / "iceberg_tables.yaml", 60 * 10**9)
    interval = {} if refresh_interval is None else {"refresh_interval": refresh_interval}
    bundle = kind(
        name="dags-folder",
        path=str(folder),
        table_list=str(folder / "iceberg_tables.yaml"),
        look_interval=look_interval,
        **interval,
    )
    bundle.rows = rows
    bundle.refresh()
    return bundle


def test_an_edited_table_list_marks_only_the_dag_files_that_read_it(folder: Path):
    bundle = _bundle(folder)
    before = _mtimes(folder)
    (folder / "iceberg_tables.yaml").write_text("tables: [{table: lake.sales.orders}]\n")

    bundle.refresh()

    after = _mtimes(folder)
    assert {name for name in after if after[name] > before[name]} == set(DAG_FILES)
    assert after["other/unrelated.py"] == before["other/unrelated.py"]


def test_nothing_changed_nothing_touched(folder: Path):
    bundle = _bundle(folder)
    before = _mtimes(folder)
    bundle.refresh()
    assert _mtimes(folder) == before


def test_dag_files_newer_than_the_table_list_are_left_alone(folder: Path):
    bundle = _bundle(folder)
    (folder / "iceberg_tables.yaml").write_text("tables: [{table: lake.sales.orders}]\n")
    _age(folder / "iceberg_tables.yaml", HOUR_AGO // 2)  # edited half an hour ago, the DAG files deployed since
    for name in DAG_FILES:
        os.utime(folder / name)
    before = _mtimes(folder)
    bundle.refresh()
    assert _mtimes(folder) == before


def test_a_table_list_dated_in_the_future_makes_one_parse_not_one_per_refresh(folder: Path):
    bundle = _bundle(folder)
    table_list = folder / "iceberg_tables.yaml"
    future = table_list.stat().st_mtime_ns + 2 * HOUR_AGO
    os.utime(table_list, ns=(future, future))
    bundle.refresh()
    touched = _mtimes(folder)
    for name in DAG_FILES:
        _age(folder / name, 60 * 10**9)  # had the bundle looked again, these would be older than the list
    aged = _mtimes(folder)
    bundle.refresh()
    assert _mtimes(folder) == aged != touched


def test_a_dag_file_that_cannot_be_touched_is_logged_and_skipped(folder: Path, monkeypatch, caplog):
    bundle = _bundle(folder)
    (folder / "iceberg_tables.yaml").write_text("tables: [{table: lake.sales.orders}]\n")

    def read_only(path, *args, **kwargs):
        raise PermissionError(13, "Read-only file system", str(path))

    monkeypatch.setattr(dag_bundle.os, "utime", read_only)
    with caplog.at_level(logging.WARNING, logger=dag_bundle.__name__):
        bundle.refresh()  # no exception into the dag-processor's refresh
    assert "Cannot mark" in caplog.text and "iceberg_compaction.py" in caplog.text
    assert "min_file_process_interval" in caplog.text


def _grown(folder: Path) -> Bundle:
    """A bundle on ``folder`` whose table list of four tables in one DAG file has just grown to five at two tables a
    file: three files. By their names' hashes, t2 moves to iceberg_compaction_1.py, and iceberg_compaction_2.py
    takes none of the five."""
    bundle = _bundle(folder, **{f"t{n}": DagRow(COMPACTION_DAG_FILE, False, _parsed(3600)) for n in (0, 1, 2, 3)})
    listed = ", ".join(f"{{table: lake.sales.t{n}}}" for n in range(5))
    (folder / "iceberg_tables.yaml").write_text(f"tables_per_dag_file: 2\ntables: [{listed}]\n")
    return bundle


def test_a_list_grown_past_a_files_worth_of_tables_gets_its_further_dag_files_parsed_before_those_they_leave(
    folder: Path, caplog
):
    """Until the new file's DAGs are stored, no parse of iceberg_compaction.py may drop t2's: Airflow would deactivate
    them. A new file that takes no table is not waited for."""
    bundle = _grown(folder)
    before = _mtimes(folder)
    with caplog.at_level(logging.INFO, logger=dag_bundle.__name__):
        bundle.refresh()
    for index in (1, 2):
        assert (folder / dag_file_name(index)).read_text() == dag_file_text(index)
    assert not (folder / dag_file_name(3)).exists()
    assert "The table list takes 3 compaction DAG files: wrote iceberg_compaction_1.py, iceberg_compaction_2.py" in (
        caplog.text
    )
    assert "parses iceberg_compaction_1.py first" in caplog.text
    written = _mtimes(folder)
    assert {name: written[name] for name in before} == before, "no file that reads the list touched yet"
    bundle.refresh()
    assert _mtimes(folder) == written, "iceberg_compaction_1.py's parse is not stored yet"

    bundle.rows = {**bundle.rows, "t2": DagRow(dag_file_name(1), False, _parsed(0))}  # its parse, stored
    bundle.refresh()
    after = _mtimes(folder)
    assert {name for name in after if after[name] > written[name]} == set(DAG_FILES)
    bundle.refresh()  # once
    assert _mtimes(folder) == after


def test_a_new_dag_file_whose_parse_is_not_stored_within_the_time_out_lets_the_others_be_parsed(
    folder: Path, monkeypatch, caplog
):
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT", "1")
    bundle = _grown(folder)
    bundle.refresh_interval = 0
    bundle.refresh()
    written = _mtimes(folder)
    bundle.clock.advance(1.1)
    with caplog.at_level(logging.WARNING, logger=dag_bundle.__name__):
        bundle.refresh()
    after = _mtimes(folder)
    assert {name for name in after if after[name] > written[name]} == set(DAG_FILES)
    assert "No parse of iceberg_compaction_1.py was stored within 1 s of its writing or touch" in caplog.text


def test_a_list_changed_again_while_a_new_file_waits_is_read_once_that_file_is_parsed(folder: Path):
    bundle = _grown(folder)
    bundle.refresh()
    first = (folder / "iceberg_tables.yaml").stat().st_mtime_ns + 1
    for name in DAG_FILES:  # newer than the first change (deployed since), older than the second
        os.utime(folder / name, ns=(first, first))
    listed = ", ".join(f"{{table: lake.sales.t{n}}}" for n in (*range(5), 12))
    (folder / "iceberg_tables.yaml").write_text(f"tables_per_dag_file: 2\ntables: [{listed}]\n")
    changed = (folder / "iceberg_tables.yaml").stat().st_mtime_ns
    assert changed > first
    written = _mtimes(folder)
    bundle.refresh()
    assert _mtimes(folder) == written, "still waiting for iceberg_compaction_1.py"
    bundle.rows = {**bundle.rows, "t2": DagRow(dag_file_name(1), False, _parsed(0))}
    bundle.refresh()
    assert all((folder / name).stat().st_mtime_ns >= changed for name in DAG_FILES), "touched for the second change"


def _asks_for_no_parse_past_the_time_out(bundle: Bundle, folder: Path, caplog) -> None:
    """Two refreshes past a time-out of 1 s touch no file again and warn of no parse."""
    before = _mtimes(folder)
    bundle.clock.advance(1.1)
    with caplog.at_level(logging.WARNING, logger=dag_bundle.__name__):
        bundle.refresh()
        bundle.clock.advance(1.1)
        bundle.refresh()
    assert _mtimes(folder) == before
    assert "No parse" not in caplog.text


def _shrunk(folder: Path, kept: tuple[str, ...] = ("t0", "t2"), **rows: DagRow) -> Bundle:
    """A bundle on ``folder`` whose table list of t0, t1 and t2 at two tables a file (t2's DAGs in
    iceberg_compaction_1.py by its name's hash) has just shrunk to ``kept``: one file; by default t1 is taken off,
    and t2 moves to iceberg_compaction.py."""
    numbered = folder / dag_file_name(1)
    numbered.write_text(dag_file_text(1))
    _age(numbered, HOUR_AGO)
    (folder / "iceberg_tables.yaml").write_text(
        "tables_per_dag_file: 2\ntables: [{table: lake.sales.t0}, {table: lake.sales.t1}, {table: lake.sales.t2}]\n"
    )
    _age(folder / "iceberg_tables.yaml", 2 * HOUR_AGO)  # older than the DAG files, as the fixture's list
    bundle = _bundle(folder, **rows)
    listed = ", ".join(f"{{table: lake.sales.{name}}}" for name in kept)
    (folder / "iceberg_tables.yaml").write_text(f"tables_per_dag_file: 2\ntables: [{listed}]\n")
    _age(folder / "iceberg_tables.yaml", 60 * 10**9)  # a minute ago: a parse stored now began after it
    return bundle


def test_a_list_shrunk_below_a_files_worth_gets_the_file_its_tables_move_to_parsed_before_the_one_they_leave(
    folder: Path, caplog
):
    """Until iceberg_compaction.py's parse has stored t2's DAGs, no parse of iceberg_compaction_1.py may drop them:
    Airflow would deactivate them."""
    bundle = _shrunk(
        folder,
        t0=DagRow(COMPACTION_DAG_FILE, False, _parsed(3600)),
        t1=DagRow(COMPACTION_DAG_FILE, False, _parsed(3600)),
        t2=DagRow(dag_file_name(1), False, _parsed(3600)),
    )
    before = _mtimes(folder)
    with caplog.at_level(logging.INFO, logger=dag_bundle.__name__):
        bundle.refresh()
    touched = _mtimes(folder)
    assert {name for name in touched if touched[name] > before[name]} == {COMPACTION_DAG_FILE}
    assert "parses iceberg_compaction.py first" in caplog.text
    bundle.refresh()
    assert _mtimes(folder) == touched, "iceberg_compaction.py's parse is not stored yet"

    bundle.rows = {  # its parse, stored: t2 moved in, t1 no longer found (Airflow deactivates it)
        "t0": DagRow(COMPACTION_DAG_FILE, False, _parsed(0)),
        "t2": DagRow(COMPACTION_DAG_FILE, False, _parsed(0)),
    }
    bundle.refresh()
    after = _mtimes(folder)
    assert {name for name in after if after[name] > touched[name]} == {dag_file_name(1), "iceberg_table_list_check.py"}
    bundle.refresh()  # once
    assert _mtimes(folder) == after


def test_a_dag_file_the_list_leaves_without_tables_is_not_asked_for_again_when_its_parse_finds_none(
    folder: Path, monkeypatch, caplog
):
    """t2 taken off the list with t1: iceberg_compaction_1.py builds nothing now, so no parse of it shows, and that
    is no parse killed at the time-out."""
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT", "1")
    bundle = _shrunk(
        folder,
        kept=("t0",),
        t0=DagRow(COMPACTION_DAG_FILE, False, _parsed(3600)),
        t1=DagRow(COMPACTION_DAG_FILE, False, _parsed(3600)),
        t2=DagRow(dag_file_name(1), False, _parsed(3600)),
    )
    bundle.refresh_interval = 0
    bundle.refresh()  # iceberg_compaction.py first
    bundle.rows = {"t0": DagRow(COMPACTION_DAG_FILE, False, _parsed(0)), "t2": bundle.rows["t2"]}
    bundle.refresh()  # its parse stored: the others now
    bundle.rows = {"t0": bundle.rows["t0"]}  # iceberg_compaction_1.py's parse found nothing: t2's DAGs went
    _asks_for_no_parse_past_the_time_out(bundle, folder, caplog)


def test_a_list_shrunk_below_a_files_worth_whose_further_file_has_no_dags_touches_every_reader_at_once(folder: Path):
    bundle = _shrunk(folder, t0=DagRow(COMPACTION_DAG_FILE, False, _parsed(3600)))
    before = _mtimes(folder)
    bundle.refresh()
    after = _mtimes(folder)
    assert {name for name in after if after[name] > before[name]} == {*DAG_FILES, dag_file_name(1)}


def test_a_folder_the_bundle_cannot_write_is_logged_and_the_dag_files_still_marked(folder: Path, monkeypatch, caplog):
    bundle = _bundle(folder)
    before = _mtimes(folder)
    listed = ", ".join(f"{{table: lake.sales.t{n}}}" for n in range(3))
    (folder / "iceberg_tables.yaml").write_text(f"tables_per_dag_file: 2\ntables: [{listed}]\n")

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Read-only file system")

    monkeypatch.setattr(dag_bundle, "write_dag_files", read_only)
    with caplog.at_level(logging.WARNING, logger=dag_bundle.__name__):
        bundle.refresh()
    assert f"Cannot write the compaction DAG files that the table list's tables take into {folder}" in caplog.text
    assert "iceberg_compaction.py builds their DAGs meanwhile" in caplog.text
    after = _mtimes(folder)
    assert {name for name in after if after[name] > before[name]} == set(DAG_FILES)


def test_beside_an_older_providers_compaction_file_no_further_file_is_written(folder: Path, caplog):
    """An older ``iceberg_compaction.py`` builds every table: further files beside it would build them twice."""
    (folder / "iceberg_compaction.py").write_text(
        "from airflow_iceberg.surface.dag_factory import build_compaction_dags\n"
    )
    _age(folder / "iceberg_compaction.py", HOUR_AGO)
    bundle = _bundle(folder)
    listed = ", ".join(f"{{table: lake.sales.t{n}}}" for n in range(3))
    (folder / "iceberg_tables.yaml").write_text(f"tables_per_dag_file: 2\ntables: [{listed}]\n")
    with caplog.at_level(logging.WARNING, logger=dag_bundle.__name__):
        bundle.refresh()
    assert not (folder / dag_file_name(1)).exists()
    assert "an older provider's file" in caplog.text and f"Run `airflow-iceberg dags {folder}`" in caplog.text


def test_no_table_list_is_no_error(tmp_path: Path):
    bundle = Bundle(name="dags-folder", path=str(tmp_path), table_list=str(tmp_path / "missing.yaml"))
    bundle.rows = {}
    bundle.refresh()


def test_a_dag_paused_or_unpaused_marks_its_file_and_only_its_file(folder: Path):
    compaction, other = "iceberg_compaction.py", "other/unrelated.py"
    bundle = _bundle(folder, a=DagRow(compaction, True), b=DagRow(compaction, False), x=DagRow(other, False))
    unchanged = _mtimes(folder)
    bundle.refresh()
    assert _mtimes(folder) == unchanged, "nothing was paused or unpaused"

    bundle.rows = {**bundle.rows, "a": DagRow(compaction, False)}  # unpaused: its health watch must be registered
    bundle.refresh()
    after = _mtimes(folder)
    assert {name for name in after if after[name] > unchanged[name]} == {compaction}

    for name in after:
        _age(folder / name, 60 * 10**9)
    aged = _mtimes(folder)
    bundle.rows = {**bundle.rows, "x": DagRow(other, True)}  # another team's DAG, paused: not ours to parse
    bundle.refresh()
    assert _mtimes(folder) == aged


def test_one_dag_paused_and_another_unpaused_between_two_looks_is_seen(folder: Path):
    """The file's count of paused DAGs is the same; its summary's ids of the rarer state are not."""
    compaction = "iceberg_compaction.py"
    bundle = _bundle(folder, a=DagRow(compaction, True), b=DagRow(compaction, False), c=DagRow(compaction, False))
    before = _mtimes(folder)
    bundle.rows = {**bundle.rows, "a": DagRow(compaction, False), "b": DagRow(compaction, True)}
    bundle.refresh()
    assert _mtimes(folder)[compaction] > before[compaction]


def test_a_look_at_dags_at_rest_reads_their_summaries_only(folder: Path):
    """(A file touched and waiting for its parse is read too: the table list here is older than the DAG files.)"""

    class Counted(Bundle):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.reads: list[set[str] | None] = []

        def dag_rows(self, files=None):
            self.reads.append(files)
            return super().dag_rows(files)

    compaction = "iceberg_compaction.py"
    bundle = _bundle(
        folder, Counted, a=DagRow(compaction, True), b=DagRow(compaction, False), x=DagRow("other/unrelated.py", True)
    )
    assert bundle.reads == [None], "the first look reads every row"
    bundle.refresh()
    bundle.refresh()
    assert bundle.reads == [None], "nothing changed: no row read"
    bundle.rows = {**bundle.rows, "b": DagRow(compaction, True)}
    bundle.refresh()
    assert bundle.reads == [None, {compaction}], "the rows of the file whose summary changed"
    parsed = _parsed(0)  # the parse the pause asked for, stored: the file's summary changes once more
    bundle.rows = {**bundle.rows, "a": DagRow(compaction, True, parsed), "b": DagRow(compaction, True, parsed)}
    bundle.refresh()
    bundle.refresh()
    assert bundle.reads == [None, {compaction}, {compaction}], "at rest again: its new summary remembered"


def test_a_pause_whose_rows_could_not_be_read_is_followed_at_the_next_look(folder: Path, caplog):
    class Flaky(Bundle):
        fail = False

        def dag_rows(self, files=None):
            if self.fail:
                raise ConnectionError("server closed the connection unexpectedly")
            return super().dag_rows(files)

    compaction = "iceberg_compaction.py"
    bundle = _bundle(folder, Flaky, a=DagRow(compaction, True))
    before = _mtimes(folder)
    bundle.rows, bundle.fail = {"a": DagRow(compaction, False)}, True
    with caplog.at_level(logging.WARNING, logger=dag_bundle.__name__):
        bundle.refresh()
    assert "server closed the connection unexpectedly" in caplog.text
    assert _mtimes(folder) == before
    bundle.fail = False
    bundle.refresh()
    assert _mtimes(folder)[compaction] > before[compaction]


@pytest.mark.parametrize("created_paused", [True, False])
def test_a_new_dag_counts_as_paused_or_unpaused_only_against_how_airflow_created_it(
    folder: Path, monkeypatch, created_paused: bool
):
    """A table added: its parse registered its watch as Airflow created its DAG; a DAG gone is no pause."""
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION", str(created_paused))
    compaction = "iceberg_compaction.py"
    bundle = _bundle(folder, a=DagRow(compaction, False))
    before = _mtimes(folder)
    bundle.rows = {"b": DagRow(compaction, created_paused)}  # a created as Airflow creates it; a gone
    bundle.refresh()
    assert _mtimes(folder) == before
    bundle.rows = {"b": DagRow(compaction, created_paused), "c": DagRow(compaction, not created_paused)}
    bundle.refresh()  # c was paused or unpaused between its creation and this look
    assert _mtimes(folder)[compaction] > before[compaction]


def _parsed(seconds_ago: float) -> datetime:
    return datetime.now(timezone.utc) - timedelta(seconds=seconds_ago)


def _list_changed(bundle: Bundle, text: str, seconds_ago: float) -> dict[str, int]:
    """The table list written, dated ``seconds_ago``, and seen by ``bundle``, which touches the DAG files (dated an
    hour back first, as the bundle's first look left them touched); then those dated a minute back, so that a
    later touch shows. Their modification times."""
    folder = Path(bundle.path)
    table_list = folder / "iceberg_tables.yaml"
    table_list.write_text(text)
    _age(table_list, int(seconds_ago * 10**9))
    for name in DAG_FILES:
        _age(folder / name, HOUR_AGO)
    bundle.refresh()
    for name in DAG_FILES:
        _age(folder / name, 60 * 10**9)
    return _mtimes(folder)


def test_a_table_taken_off_the_list_soon_after_the_last_parse_gets_one_more_parse(folder: Path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__STALE_DAG_THRESHOLD", "1")
    compaction = "iceberg_compaction.py"
    bundle = _bundle(folder, kept=DagRow(compaction, False, _parsed(0.5)), gone=DagRow(compaction, False, _parsed(0.5)))
    # Edited 30 s ago: the parse stored below began after it. Touched; its parse not stored yet.
    aged = _list_changed(bundle, "tables: [{table: lake.sales.kept}]\n", seconds_ago=30)
    bundle.rows = {**bundle.rows, "kept": DagRow(compaction, False, _parsed(0))}  # the parse after it, stored
    bundle.refresh()
    assert _mtimes(folder) == aged, "'gone' was parsed 0.5 s before the change: too soon to parse again"
    bundle.clock.advance(1.0)  # the threshold passes
    bundle.refresh()
    assert _mtimes(folder)[compaction] > aged[compaction], "the parse that lets Airflow deactivate 'gone'"
    _age(folder / compaction, 60 * 10**9)
    aged = _mtimes(folder)
    bundle.refresh()
    assert _mtimes(folder) == aged, "one more parse, not one per refresh"


def test_a_table_taken_off_long_after_the_last_parse_needs_no_second_parse(folder: Path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__STALE_DAG_THRESHOLD", "10")
    compaction = "iceberg_compaction.py"
    bundle = _bundle(
        folder, kept=DagRow(compaction, False, _parsed(3600)), gone=DagRow(compaction, False, _parsed(3600))
    )
    aged = _list_changed(bundle, "tables: [{table: lake.sales.kept}]\n", seconds_ago=30)
    bundle.rows = {**bundle.rows, "kept": DagRow(compaction, False, _parsed(0))}
    bundle.refresh()
    assert _mtimes(folder) == aged, "Airflow deactivates 'gone' after the one parse"


def test_a_parse_under_way_when_the_list_changed_is_followed_by_one_more(folder: Path, monkeypatch, caplog):
    """The parse stored after the touch began 20 s before the list changed: it may have read the old list, and
    Airflow takes the touch, older than its end, as seen."""
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION", "True")  # 'b' is created paused: no unpause
    compaction = "iceberg_compaction.py"
    bundle = _bundle(folder, a=DagRow(compaction, False, _parsed(3600), 25.0))
    aged = _list_changed(bundle, "tables: [{table: lake.sales.a}, {table: lake.sales.b}]\n", seconds_ago=1)
    bundle.rows = {"a": DagRow(compaction, False, _parsed(0), 21.0)}  # began 21 s ago; 'b' not in it
    with caplog.at_level(logging.INFO, logger=dag_bundle.__name__):
        bundle.refresh()
    assert _mtimes(folder)[compaction] > aged[compaction], "the parse that reads the changed list"
    assert "began before the table list changed" in caplog.text
    _age(folder / compaction, 60 * 10**9)
    aged = _mtimes(folder)
    bundle.rows = {
        "a": DagRow(compaction, False, _parsed(0), 21.0),  # the second parse, also long: still once more only
        "b": DagRow(compaction, True, _parsed(0), 21.0),
    }
    bundle.refresh()
    assert _mtimes(folder) == aged, "one more parse, not one per refresh"


def test_a_parse_begun_after_the_list_changed_is_not_repeated(folder: Path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION", "True")
    compaction = "iceberg_compaction.py"
    bundle = _bundle(folder, a=DagRow(compaction, False, _parsed(3600), 2.0))
    aged = _list_changed(bundle, "tables: [{table: lake.sales.a}, {table: lake.sales.b}]\n", seconds_ago=20)
    # Stored now after 2 s: it began 2 s ago, and at the latest 7 s ago with the slack for storing it.
    stored = _parsed(0)
    bundle.rows = {"a": DagRow(compaction, False, stored, 2.0), "b": DagRow(compaction, True, stored, 2.0)}
    bundle.refresh()
    assert _mtimes(folder) == aged


def _unpaused(folder: Path, compaction: str) -> Bundle:
    """A bundle whose DAG 'a' of ``compaction`` was just unpaused; the file touched for it, then dated a minute
    back. The table list is unchanged."""
    bundle = _bundle(folder, refresh_interval=0, a=DagRow(compaction, True, _parsed(3600), 20.0))
    bundle.rows = {"a": DagRow(compaction, False, _parsed(3600), 20.0)}
    bundle.refresh()
    _age(folder / compaction, 60 * 10**9)
    return bundle


def test_a_parse_not_stored_within_the_time_out_is_asked_for_again_then_left_with_advice(
    folder: Path, monkeypatch, caplog
):
    """Airflow killed the parse at the time-out, took the file as parsed and deactivated its DAGs."""
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT", "1")
    compaction = "iceberg_compaction.py"
    bundle = _unpaused(folder, compaction)
    bundle.rows = {}  # deactivated
    for attempt in range(1, handover.RETOUCHES + 1):
        aged = _mtimes(folder)
        bundle.refresh()
        assert _mtimes(folder) == aged, "within the time-out the parse may still be queued or under way"
        bundle.clock.advance(1.1)
        with caplog.at_level(logging.WARNING, logger=dag_bundle.__name__):
            bundle.refresh()
        assert _mtimes(folder)[compaction] > aged[compaction], f"touch {attempt} of {handover.RETOUCHES}"
        assert f"No parse of {compaction} was stored" in caplog.text
        assert f"touching it again, {attempt} of {handover.RETOUCHES}" in caplog.text
        _age(folder / compaction, 60 * 10**9)
    aged = _mtimes(folder)
    bundle.clock.advance(1.1)
    with caplog.at_level(logging.WARNING, logger=dag_bundle.__name__):
        bundle.refresh()
    assert _mtimes(folder) == aged, "touched again at most RETOUCHES times"
    assert (
        "raise [dag_processor] dag_file_processor_timeout or lower the table list's tables_per_dag_file" in caplog.text
    )
    bundle.clock.advance(1.1)
    bundle.refresh()
    assert _mtimes(folder) == aged, "no longer followed"


def test_a_file_queued_behind_other_parses_is_not_taken_for_killed(folder: Path, monkeypatch, caplog):
    """Two files wait and one parse runs at a time: the second may wait two time-outs; once the first is stored,
    one."""
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT", "1")
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES", "1")
    first, second = DAG_FILES
    bundle = _bundle(
        folder, refresh_interval=0, a=DagRow(first, True, _parsed(3600)), b=DagRow(second, True, _parsed(3600))
    )
    bundle.rows = {"a": DagRow(first, False, _parsed(3600)), "b": DagRow(second, False, _parsed(3600))}
    bundle.refresh()  # both unpaused: both touched
    for name in DAG_FILES:
        _age(folder / name, 60 * 10**9)
    aged = _mtimes(folder)
    bundle.clock.advance(1.1)
    with caplog.at_level(logging.WARNING, logger=dag_bundle.__name__):
        bundle.refresh()
    assert _mtimes(folder) == aged, "two files waiting, one parse at a time: two time-outs allowed"
    assert "No parse" not in caplog.text
    bundle.rows = {**bundle.rows, "a": DagRow(first, False, _parsed(0))}  # the first stored
    bundle.refresh()
    assert _mtimes(folder)[second] > aged[second], "one file waiting, touched over a time-out ago"
    assert _mtimes(folder)[first] == aged[first]


def test_a_touched_file_without_dags_is_not_asked_for_again(folder: Path, monkeypatch, caplog):
    """The table-list check builds no DAG while the list is sound: no parse of it ever shows."""
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT", "1")
    compaction = "iceberg_compaction.py"
    bundle = _unpaused(folder, compaction)
    bundle.rows = {"a": DagRow(compaction, False, _parsed(0), 20.0)}
    _list_changed(bundle, "tables: [{table: lake.sales.a}]\n", seconds_ago=30)
    bundle.rows = {"a": DagRow(compaction, False, _parsed(0), 1.0)}
    _asks_for_no_parse_past_the_time_out(bundle, folder, caplog)


def test_a_parse_stored_after_the_touch_is_not_asked_for_again(folder: Path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT", "1")
    compaction = "iceberg_compaction.py"
    bundle = _unpaused(folder, compaction)
    bundle.rows = {"a": DagRow(compaction, False, _parsed(0), 20.0)}  # the parse after the touch, stored
    bundle.refresh()
    aged = _mtimes(folder)
    bundle.clock.advance(1.1)
    bundle.refresh()
    assert _mtimes(folder) == aged


def test_a_database_that_does_not_answer_leaves_the_table_list_followed(folder: Path, caplog):
    class Unreachable(Bundle):
        def dag_summaries(self):
            raise ConnectionError("could not connect to server")

    bundle = _bundle(folder, Unreachable)
    before = _mtimes(folder)
    (folder / "iceberg_tables.yaml").write_text("tables: [{table: lake.sales.orders}]\n")
    with caplog.at_level(logging.WARNING, logger=dag_bundle.__name__):
        bundle.refresh()
    assert "could not connect to server" in caplog.text
    assert all(_mtimes(folder)[name] > before[name] for name in DAG_FILES)


def test_the_first_refresh_starts_the_looks_in_a_thread_of_their_own_between_airflows_refreshes(folder: Path):
    """Airflow refreshes the bundle every 5 minutes under the fleet setting (each refresh lists the folder and loads
    every DAG of it); the looks at the table list run every look_interval meanwhile."""
    looked = threading.Semaphore(0)

    class Counted(Bundle):
        def look(self) -> None:
            super().look()
            looked.release()

    bundle = _bundle(folder, Counted, look_interval=0.05)
    try:
        assert bundle._looker is not None and bundle._looker.is_alive()
        looker = bundle._looker
        for _ in range(3):  # the thread's looks, with no refresh asked
            assert looked.acquire(timeout=30), "the thread did not look"
        (folder / "iceberg_tables.yaml").write_text("tables: [{table: lake.sales.orders}]\n")
        before = _mtimes(folder)

        def touched() -> bool:
            now = _mtimes(folder)
            return all(now[name] > before[name] for name in DAG_FILES)

        deadline = time.monotonic() + 30
        while not touched():
            assert time.monotonic() < deadline, "the thread's looks did not follow the table list"
            looked.acquire(timeout=1)
        bundle.refresh()
        assert bundle._looker is looker, "one thread of looks, whatever the refreshes"
    finally:
        bundle.stop_looking()
    assert not looker.is_alive()


def test_a_new_dag_file_is_asked_for_by_a_priority_parsing_request(folder: Path):
    """Airflow lists the folder at its refreshes only, every 5 minutes: the request makes it list and parse now."""
    bundle = _grown(folder)
    assert bundle.asked == []
    bundle.refresh()
    assert bundle.asked == [[dag_file_name(1), dag_file_name(2)]]


def test_the_fleet_setting_gives_airflow_this_bundle_for_the_dag_folder(monkeypatch):
    for name, value in FLEET_SETTINGS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
    # "dags-folder": Airflow's default bundle name, which existing DAG rows carry.
    bundle = DagBundlesManager().get_bundle("dags-folder")  # as the dag-processor loads it
    assert isinstance(bundle, TableListDagBundle)
    assert bundle.refresh_interval == dag_bundle.REFRESH_SECONDS
    assert bundle.look_interval == dag_bundle.LOOK_SECONDS
    assert conf.getint("dag_processor", "dag_file_processor_timeout") == dag_bundle.PARSE_TIMEOUT_SECONDS
