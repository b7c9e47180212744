"""A DAG folder whose changes that matter to the compaction DAGs the dag-processor sees at once: the fleet setting's
bundle.

A fleet of healthy tables costs a live Airflow little but its dag-processor's parse of the table list, which
Airflow repeats every ``[dag_processor] min_file_process_interval`` (30 s by default) whether or not anything
changed. The fleet setting (:data:`FLEET_SETTINGS`, ``docs/fleets.md``) parses once an hour instead. The
dag-processor parses a DAG file at once when the file's own modification time is newer than its last parse (in
``file_parsing_sort_mode = modified_time``, Airflow's default). Two changes would otherwise wait up to the hour:

- an edited table list: it is not a DAG file;
- a DAG paused or unpaused: Airflow registers a health watch's trigger (an asset watcher) only when it parses the
  DAG file, and only for an unpaused DAG, so an unpaused table would go unwatched, and a paused one stay watched.

:class:`TableListDagBundle` is Airflow's ``LocalDagBundle`` (the DAG folder) plus that. Every ``look_interval``
seconds, in a thread of its own in the dag-processor, it looks at the table list's modification time and at which
DAGs of the folder are paused; when the list is newer than a DAG file that reads it, or a DAG of such a file was
paused or unpaused, it sets the file's modification time to now, and the dag-processor parses it in the next
seconds. A look that finds nothing changed costs one ``stat`` and a summary of each file's DAGs
(:class:`FileSummary`: one row per file, and the ids of the DAGs in its rarer pause state); a file's DAG rows are
read only when its summary changed.

The looks are not Airflow's bundle refreshes. After each refresh of a bundle that has no versions, Airflow's
dag-processor lists the folder and loads every active DAG of the bundle from its database, to deactivate those
whose file is gone: at 1,000 tables, done every 10 s, that was most of what the fleet setting cost above Airflow
alone (``docs/performance.md``). So Airflow refreshes the bundle at its own pace (``refresh_interval``, 5 minutes),
and a DAG file the bundle writes is asked for by a priority parsing request, which makes the dag-processor list the
folder at once.

When a table list grows past a multiple of ``tables_per_dag_file`` tables, the refresh writes the further compaction
DAG files it takes (:mod:`.dag_files`), and the tables those files take move to them; when it shrinks below one, the
tables of a numbered file the list no longer reaches move to the lower files. Either way, the files that gain tables
are parsed before those that lose them, a parse that began before a change is run again, a parse killed at the
time-out is asked for again, and a table taken off the list soon after the last parse gets one more parse so that
Airflow deactivates its DAGs: :mod:`.handover` holds those rules, as a state machine this bundle drives. A parse's
time under the fleet setting includes its wait for the dag-processor to store other files' DAGs, so the setting
allows :data:`PARSE_TIMEOUT_SECONDS`.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from airflow.dag_processing.bundles.local import LocalDagBundle
from airflow.sdk import conf

from airflow_iceberg.exceptions import IcebergConfigError
from airflow_iceberg.fleet.dag_files import (
    COMPACTION_DAG_FILE,
    ask_for_parses,
    builds_its_share,
    dag_file_index,
    dag_file_name,
    dag_files_in_use,
    dag_files_taken,
    surplus_dag_files,
    write_dag_files,
)
from airflow_iceberg.fleet.handover import Handover, Parse, ParseTiming
from airflow_iceberg.table_list.loader import TableListDocument, config_path, read_table_list

log = logging.getLogger(__name__)

#: What marks a DAG file that reads the table list: it imports one of these modules.
READER_MARKERS = (
    "airflow_iceberg.surface.dag_factory",
    "airflow_iceberg.fleet.dag_files",
    "airflow_iceberg.table_list.loader",
)

#: How often the bundle looks at the table list and at the pauses of the folder's DAGs, in seconds: a change is seen
#: within this long.
LOOK_SECONDS = 10

#: How often Airflow refreshes the bundle under the fleet setting (lists the folder's files and loads every DAG of it
#: to find those whose file is gone), in seconds: Airflow's default for a local bundle.
REFRESH_SECONDS = 300

#: How often the dag-processor parses an unchanged table list under the fleet setting, in seconds.
FLEET_PARSE_SECONDS = 3600

#: How often Airflow deactivates the DAGs a parse no longer found (``[scheduler] parsing_cleanup_interval``, 60 s
#: by default): a table taken off the list loses its DAGs this long after the parse at most.
CLEANUP_SECONDS = 20

#: How long Airflow's scheduler sleeps after a loop that found nothing to do, in seconds (``[scheduler]
#: scheduler_idle_sleep_time``, 1 s by default). Its idle loop, once a second, is the largest part of what Airflow
#: itself costs while a fleet is healthy (0.018 of 0.048 cores on two cores, ``docs/performance.md``); a loop that
#: queued or finished a task starts the next at once, so a running DAG's next task waits at most this long.
SCHEDULER_IDLE_SLEEP_SECONDS = 5

#: How much older than its file's last parse a DAG's own last parse must be for Airflow to deactivate it
#: (``[dag_processor] stale_dag_threshold``, 50 s by default). Airflow 3 takes a parse's finish time before it
#: stores the parse's DAGs, so a DAG of that parse is never older than it; what the threshold delays is a table
#: taken off the list soon after the last parse, for which the bundle then parses once more (:mod:`.handover`).
STALE_SECONDS = 10

#: How long a parse of one DAG file may take under the fleet setting (``[dag_processor] dag_file_processor_timeout``,
#: 50 s by default), in seconds. Airflow counts, in a parse's time, its wait while the dag-processor stores another
#: file's DAGs: at 5,000 tables (five files of 2,000 DAGs), with the fleet turned on at once, parses took up to 53 s
#: (``docs/performance.md``), and at 50 s two of five files lost their DAGs. The import itself keeps Airflow's own limit
#: (``[core] dagbag_import_timeout``, 30 s).
PARSE_TIMEOUT_SECONDS = 120

#: The fleet setting, as Airflow's environment variables: the DAG folder as a :class:`TableListDagBundle`, an
#: unchanged table list parsed once an hour, a parse allowed :data:`PARSE_TIMEOUT_SECONDS`, a removed table's DAGs
#: deactivated within 20 s of the parse that no longer found them, and an idle scheduler that loops every 5 s.
#: A table-list change, a pause and an unpause take effect within a minute
#: (``tests/integration/test_table_list_changes.py``).
FLEET_SETTINGS = {
    "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(
        [
            {
                "name": "dags-folder",
                "classpath": "airflow_iceberg.fleet.dag_bundle.TableListDagBundle",
                "kwargs": {"refresh_interval": REFRESH_SECONDS, "look_interval": LOOK_SECONDS},
            }
        ]
    ),
    "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": str(FLEET_PARSE_SECONDS),
    "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": str(PARSE_TIMEOUT_SECONDS),
    "AIRFLOW__DAG_PROCESSOR__STALE_DAG_THRESHOLD": str(STALE_SECONDS),
    "AIRFLOW__SCHEDULER__PARSING_CLEANUP_INTERVAL": str(CLEANUP_SECONDS),
    "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": str(SCHEDULER_IDLE_SLEEP_SECONDS),
}


class TableListDagBundle(LocalDagBundle):
    """The DAG folder; a table-list change, or a DAG paused or unpaused, makes the dag-processor parse the DAG files
    that read the table list, at once, in the order :mod:`.handover` gives (see the module doc).

    :param path: The DAG folder (default: ``[core] dags_folder``).
    :param table_list: The table list (default: the one the DAG files read, ``$AIRFLOW_ICEBERG_CONFIG`` or
        ``iceberg_tables.yaml`` in the DAG folder).
    :param look_interval: Seconds between looks, in a thread the first :meth:`refresh` starts; 0: a look at each
        refresh only.
    :param refresh_interval: Seconds between Airflow's refreshes of the bundle.
    """

    def __init__(self, *, table_list: str | None = None, look_interval: float = LOOK_SECONDS, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._table_list = Path(table_list) if table_list else None
        self.look_interval = look_interval
        self._looking = threading.Lock()  # one look at a time: the thread's, or a refresh's
        self._looker: threading.Thread | None = None
        self._stop = threading.Event()
        self._seen: int | None = None  # the table list's mtime (ns) at the last look that acted on it
        self._in_use: set[int] | None = None  # the compaction DAG files that take tables, by the list last read
        self._rows: dict[str, DagRow] | None = None  # this bundle's DAGs at the last look
        self._summaries: dict[str, FileSummary] = {}  # their files' summaries at the last look
        self.handover = Handover()
        #: The time of a look; the tests move it by hand.
        self.clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)

    @property
    def table_list(self) -> Path:
        return self._table_list or config_path()

    def refresh(self) -> None:
        """Airflow's refresh, every ``refresh_interval``: the first starts the looks' thread; each looks once."""
        if self.look_interval and self._looker is None:
            self._looker = threading.Thread(target=self._look_every, name=f"{self.name} looks", daemon=True)
            self._looker.start()
        self.look()

    def _look_every(self) -> None:
        while not self._stop.wait(self.look_interval):
            try:
                self.look()
            except Exception:  # a bug here must not end the looks
                log.exception("A look of bundle %r failed; looking again in %s s", self.name, self.look_interval)

    def stop_looking(self) -> None:
        """End the looks' thread (it ends with the dag-processor anyway)."""
        self._stop.set()
        if self._looker is not None:
            self._looker.join(timeout=30)

    def look(self) -> None:
        """Follow the table list, and the pauses and parses of the folder's DAGs, once (see the module doc)."""
        with self._looking:
            self._look()

    def _look(self) -> None:
        now = self.clock()
        timing = ParseTiming(
            parse_timeout=conf.getint("dag_processor", "dag_file_processor_timeout"),
            refresh=self.look_interval or self.refresh_interval,
            stale_threshold=conf.getint("dag_processor", "stale_dag_threshold"),
            parsing_processes=conf.getint("dag_processor", "parsing_processes"),
        )
        self._follow_table_list(now)
        try:
            self._follow_dags(now, timing)
        except Exception as error:  # the metadata database: the manager's own next query will say more
            log.warning("Cannot read the DAGs of bundle %r from Airflow's database: %s", self.name, error)
        released = self.handover.release({f: s.last_parsed for f, s in self._summaries.items()}, now, timing)
        if released is not None:
            log.log(released.level, "%s", released.message)
            self._touch_readers(self.handover.change, now)

    def _follow_dags(self, now: datetime, timing: ParseTiming) -> None:
        """Follow the pauses and parses of the folder's DAGs, reading the rows of only the files whose summary
        changed since the last look, or that the hand-over follows: in a fleet at rest, one summary row per file."""
        summaries, before = self.dag_summaries(), self._summaries
        if self._rows is None:  # the first look only remembers: the dag-processor parses every file as it starts
            self._rows, self._summaries = self.dag_rows(), summaries
            return
        changed = {f for f in summaries.keys() | before.keys() if summaries.get(f) != before.get(f)}
        files = changed | set(self.handover.followed)
        if files:
            rows = self.dag_rows(files)
            kept = {dag_id: row for dag_id, row in self._rows.items() if row.file not in files}
            self._follow_pauses({dag_id: row for dag_id, row in self._rows.items() if row.file in files}, rows, now)
            self._rows = kept | rows
            parses: dict[str, list[Parse]] = {}
            for row in rows.values():
                if row.last_parsed is not None:
                    parses.setdefault(row.file, []).append(Parse.of(row.last_parsed, row.parse_seconds))
            for step in self.handover.follow(parses, now, timing):
                if step.file is None or touch(self.path / step.file):
                    log.log(step.level, "%s", step.message)
        self._summaries = summaries  # once its rows are read: a look that could not read them is repeated

    def _follow_table_list(self, now: datetime) -> None:
        """On a table-list change: write the further compaction DAG files it takes, and touch the DAG files that
        read the list, in the hand-over's order; one ``stat`` when nothing changed.

        Each modification time is acted on once: a table list dated in the future (a skewed clock) makes one
        parse, not one every refresh.
        """
        try:
            changed = self.table_list.stat().st_mtime_ns
        except OSError:  # no table list (yet): the DAG files report that themselves
            return
        if changed == self._seen:
            return
        self._seen = changed
        try:
            document = read_table_list(self.table_list)
        except IcebergConfigError:  # the check DAG file reports the table list's own problems
            document = None
        self._in_use = dag_files_in_use(document) if document else None
        gainers = self._write_dag_files(document) if document else []
        if document and not gainers:
            gainers = self._touch_gainers(dag_files_taken(document), changed, now)
        if self.handover.list_changed(changed, gainers, now):
            if gainers:
                log.info(
                    "The dag-processor parses %s first, and the other DAG files that read the table list once it "
                    "is stored, so that the tables moving there keep their DAGs",
                    ", ".join(gainers),
                )
            return
        self._touch_readers(changed, now)

    def _touch_readers(self, changed: int | None, now: datetime) -> None:
        """Touch each DAG file that reads the table list and is older than its change at ``changed`` (ns)."""
        if changed is None:
            return
        touched = touch_readers(self.path, changed)
        self._follow_touches(touched, changed, now)
        if touched:
            shown = self._shown(touched)
            log.info("The table list %s changed: the dag-processor parses %s now", self.table_list, shown)

    def _follow_touches(self, touched: list[Path], changed: int, now: datetime) -> None:
        """Have the hand-over follow the parses of the DAG files ``touched`` for the table list's change at
        ``changed`` (ns)."""
        # No later than now: a list dated in the future (a skewed clock) was changed by now.
        list_changed = min(datetime.fromtimestamp(changed / 1e9, timezone.utc), now)
        files = [str(path.relative_to(self.path)) for path in touched]
        self.handover.touched({f: self._has_dags(f) and self._takes_tables(f) for f in files}, now, list_changed)

    def _touch_gainers(self, files: int, changed: int, now: datetime) -> list[str]:
        """When the table list no longer reaches a numbered compaction DAG file that still has DAGs, touch the
        compaction DAG files beside it that take tables, where its tables move; those touched, relative to the
        folder: the hand-over has them parsed before the file they leave drops them.

        A parse of such a file already under way when the list changed, and stored after this touch, may release
        the others too early; the hand-over then parses it once more, and the moved tables' DAGs are back within
        seconds."""
        touched: list[Path] = []
        for compaction in sorted(self.path.rglob(COMPACTION_DAG_FILE)):
            if not any(
                self._has_dags(str(path.relative_to(self.path))) for path in surplus_dag_files(compaction.parent, files)
            ):
                continue
            gainers = [compaction.parent / dag_file_name(index) for index in sorted(self._in_use or ())]
            touched += [path for path in gainers if path.exists() and touch(path)]
        self._follow_touches(touched, changed, now)
        return [str(path.relative_to(self.path)) for path in touched]

    def _write_dag_files(self, document: TableListDocument) -> list[str]:
        """Write the compaction DAG files that the table list takes beside each ``iceberg_compaction.py`` and that are
        missing (:mod:`airflow_iceberg.fleet.dag_files`): Airflow lists the folder's files right after this
        refresh, so it parses a new file in the next seconds. The files written that take at least one table,
        relative to the folder: the hand-over waits for their parses."""
        files = dag_files_taken(document)
        taking: list[str] = []
        for compaction in sorted(self.path.rglob(COMPACTION_DAG_FILE)):
            if files > 1 and not builds_its_share(compaction):
                log.warning(
                    "%s builds every table's DAGs (an older provider's file): wrote no further compaction DAG "
                    "files beside it, which would build them twice. Run `airflow-iceberg dags %s`",
                    compaction,
                    compaction.parent,
                )
                continue
            try:
                written, _ = write_dag_files(compaction.parent, files)
            except OSError as error:
                log.warning(
                    "Cannot write the compaction DAG files that the table list's tables take into %s (%s): %s "
                    "builds their DAGs meanwhile",
                    compaction.parent,
                    error,
                    compaction.name,
                )
                continue
            if written:
                log.info("The table list takes %d compaction DAG files: wrote %s", files, self._shown(written))
                taking += [str(p.relative_to(self.path)) for p in written if self._takes_tables(p.name)]
                self._ask_for_parses([str(p.relative_to(self.path)) for p in written])
        return taking

    def _ask_for_parses(self, files: list[str]) -> None:
        """Have the dag-processor list the folder and parse ``files``, new, at once, not at its next refresh."""
        try:
            ask_for_parses(self.name, files)
        except Exception as error:  # the metadata database: the next refresh lists them
            log.warning(
                "Cannot ask Airflow to parse %s now (%s): the dag-processor finds them at its next refresh of the "
                "folder, within %s s",
                ", ".join(files),
                error,
                self.refresh_interval,
            )

    def _follow_pauses(self, before: dict[str, DagRow], rows: dict[str, DagRow], now: datetime) -> None:
        """Touch each DAG file that reads the table list and has a DAG paused or unpaused since the last look.

        A DAG new since the last look was made by a parse that registered its watch as Airflow created it, paused
        or not by ``[core] dags_are_paused_at_creation``: it counts as paused or unpaused if it is not so now.
        A DAG gone is no pause.
        """
        created_paused = conf.getboolean("core", "dags_are_paused_at_creation")
        flipped = {
            row.file
            for dag_id, row in rows.items()
            if row.paused != (before[dag_id].paused if dag_id in before else created_paused)
        }
        touched = [path for path in (self.path / f for f in sorted(flipped)) if is_reader(path) and touch(path)]
        self.handover.touched({str(path.relative_to(self.path)): True for path in touched}, now)
        if touched:
            log.info(
                "DAGs were paused or unpaused: the dag-processor parses %s now, so their health watches follow",
                self._shown(touched),
            )

    def _has_dags(self, file: str) -> bool:
        return self._rows is not None and any(row.file == file for row in self._rows.values())

    def _takes_tables(self, file: str) -> bool:
        """Whether ``file`` builds DAGs by the table list last read: a compaction DAG file only if the list's tables
        reach its index (a file the list left without tables shows no parse: its DAGs go); any other reader may."""
        name = Path(file).name
        if self._in_use is None or not (name == COMPACTION_DAG_FILE or name.startswith("iceberg_compaction_")):
            return True
        return dag_file_index(name) in self._in_use

    def _shown(self, paths: list[Path]) -> str:
        return ", ".join(str(path.relative_to(self.path)) for path in paths)

    def dag_summaries(self) -> dict[str, FileSummary]:
        """A summary of each of this bundle's files' active DAGs, from Airflow's database: an aggregate per file, and
        the ids of the DAGs in each file's rarer pause state (none while a file's DAGs are all paused or all not)."""
        from airflow.models.dag import DagModel
        from airflow.utils.session import create_session
        from sqlalchemy import case, func, select

        active = (DagModel.bundle_name == self.name, ~DagModel.is_stale)
        counts = select(
            DagModel.relative_fileloc,
            func.count(),
            func.sum(case((DagModel.is_paused, 1), else_=0)),
            func.max(DagModel.last_parsed_time),
        ).where(*active)
        with create_session() as session:
            per_file: Any = session.execute(counts.group_by(DagModel.relative_fileloc))  # (str, int, int, datetime)
            files = {str(file): (int(dags), int(paused or 0), _utc(parsed)) for file, dags, paused, parsed in per_file}
            rarer: dict[str, set[str]] = {file: set() for file in files}
            for state in (True, False):
                named = [f for f, (dags, paused, _) in files.items() if _rarer_is_paused(dags, paused) == state]
                if not named:
                    continue
                ids = select(DagModel.dag_id, DagModel.relative_fileloc).where(
                    *active, DagModel.relative_fileloc.in_(named), DagModel.is_paused == state
                )
                for dag_id, file in session.execute(ids):
                    rarer[str(file)].add(dag_id)
        return {
            file: FileSummary(dags, paused, parsed, frozenset(rarer[file]))
            for file, (dags, paused, parsed) in files.items()
        }

    def dag_rows(self, files: set[str] | None = None) -> dict[str, DagRow]:
        """This bundle's active DAGs by id, of ``files`` (relative to the folder) or of all, from Airflow's
        database."""
        from airflow.models.dag import DagModel
        from airflow.utils.session import create_session
        from sqlalchemy import select

        query = select(
            DagModel.dag_id,
            DagModel.relative_fileloc,
            DagModel.is_paused,
            DagModel.last_parsed_time,
            DagModel.last_parse_duration,
        )
        query = query.where(DagModel.bundle_name == self.name, ~DagModel.is_stale)
        if files is not None:
            query = query.where(DagModel.relative_fileloc.in_(sorted(files)))
        with create_session() as session:
            return {
                dag_id: DagRow(str(fileloc), bool(paused), _utc(parsed), duration)
                for dag_id, fileloc, paused, parsed, duration in session.execute(query)
            }


@dataclass(frozen=True)
class DagRow:
    """One DAG as the bundle follows it: its file (relative to the folder), whether it is paused, when its last
    parse was stored and how long that parse took."""

    file: str
    paused: bool
    last_parsed: datetime | None = None
    parse_seconds: float | None = None


@dataclass(frozen=True)
class FileSummary:
    """One DAG file's active DAGs, in brief: how many, how many paused, their latest parse, and the ids of those in
    the rarer pause state (paused when as many or fewer are paused than not).

    Two looks with equal summaries saw the same pauses: a DAG is created only by a parse, which moves the latest
    parse on, and goes only by a deactivation or a deletion, which lowers the count; with the same DAGs, the same
    count paused and the same ids in the rarer state, each DAG's state is the same.
    """

    dags: int
    paused: int
    last_parsed: datetime | None
    rarer: frozenset[str]


def summarize(rows: dict[str, DagRow]) -> dict[str, FileSummary]:
    """The summaries of ``rows``' files (what :meth:`TableListDagBundle.dag_summaries` reads from the database)."""
    by_file: dict[str, dict[str, DagRow]] = {}
    for dag_id, row in rows.items():
        by_file.setdefault(row.file, {})[dag_id] = row
    summaries = {}
    for file, dags in by_file.items():
        paused = sum(row.paused for row in dags.values())
        state = _rarer_is_paused(len(dags), paused)
        parsed = [row.last_parsed for row in dags.values() if row.last_parsed is not None]
        rarer = frozenset(dag_id for dag_id, row in dags.items() if row.paused == state)
        summaries[file] = FileSummary(len(dags), paused, max(parsed, default=None), rarer)
    return summaries


def _rarer_is_paused(dags: int, paused: int) -> bool:
    return paused <= dags - paused


def _utc(when: datetime | None) -> datetime | None:
    if when is None or when.tzinfo is not None:
        return when
    return when.replace(tzinfo=timezone.utc)


def is_reader(path: Path) -> bool:
    """Whether ``path`` is a Python file that imports the DAG factory or the table list."""
    if path.suffix != ".py":
        return False
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return False
    return any(marker in text for marker in READER_MARKERS)


def readers(folder: Path) -> list[Path]:
    """The Python files under ``folder`` that import the DAG factory or the table list."""
    return [path for path in sorted(folder.rglob("*.py")) if is_reader(path)]


def touch(path: Path) -> bool:
    """Set ``path``'s modification time to now; False, logged with what that costs, if it cannot be (a read-only
    DAG folder)."""
    try:
        os.utime(path)
    except OSError as error:
        log.warning(
            "Cannot mark %s as changed (%s): its DAGs follow the table list and their pauses at its next parse, "
            "within [dag_processor] min_file_process_interval",
            path,
            error,
        )
        return False
    return True


def touch_readers(folder: Path, changed_ns: int) -> list[Path]:
    """Touch each reader under ``folder`` older than ``changed_ns``; those touched."""
    older = []
    for path in readers(folder):
        try:
            if path.stat().st_mtime_ns < changed_ns:
                older.append(path)
        except OSError:
            continue
    return [path for path in older if touch(path)]
