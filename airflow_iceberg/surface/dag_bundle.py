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

:class:`TableListDagBundle` is Airflow's ``LocalDagBundle`` (the DAG folder) plus that. At each refresh, every
``refresh_interval`` seconds, it looks at the table list's modification time and at which DAGs of the folder are
paused; when the list is newer than a DAG file that reads it, or a DAG of such a file was paused or unpaused, it
sets the file's modification time to now, and the dag-processor parses it in the next seconds. A refresh that
finds nothing changed costs one ``stat`` and one query of the DAGs' pause states.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from airflow.dag_processing.bundles.local import LocalDagBundle

from airflow_iceberg.table_list import config_path

log = logging.getLogger(__name__)

#: What marks a DAG file that reads the table list: it imports one of these modules.
READER_MARKERS = ("airflow_iceberg.surface.dag_factory", "airflow_iceberg.table_list")

#: How often the bundle looks at the table list, in seconds: with Airflow's check for due refreshes every 5 s
#: (``[dag_processor] bundle_refresh_check_interval``), a change is seen within 15 s.
REFRESH_SECONDS = 10

#: How often the dag-processor parses an unchanged table list under the fleet setting, in seconds.
FLEET_PARSE_SECONDS = 3600

#: How often Airflow deactivates the DAGs a parse no longer found (``[scheduler] parsing_cleanup_interval``, 60 s
#: by default): a table taken off the list loses its DAGs this long after the parse at most.
CLEANUP_SECONDS = 20

#: The fleet setting, as Airflow's environment variables: the DAG folder as a :class:`TableListDagBundle`, an
#: unchanged table list parsed once an hour, and a removed table's DAGs deactivated within 20 s of the parse.
#: A table-list change, a pause and an unpause take effect within a minute
#: (``tests/integration/test_table_list_changes.py``).
FLEET_SETTINGS = {
    "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(
        [
            {
                "name": "dags-folder",
                "classpath": "airflow_iceberg.surface.dag_bundle.TableListDagBundle",
                "kwargs": {"refresh_interval": REFRESH_SECONDS},
            }
        ]
    ),
    "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": str(FLEET_PARSE_SECONDS),
    "AIRFLOW__SCHEDULER__PARSING_CLEANUP_INTERVAL": str(CLEANUP_SECONDS),
}


class TableListDagBundle(LocalDagBundle):
    """The DAG folder; a table-list change, or a DAG paused or unpaused, makes the dag-processor parse the DAG files
    that read the table list, at once (see the module doc).

    :param path: The DAG folder (default: ``[core] dags_folder``).
    :param table_list: The table list (default: the one the DAG files read, ``$AIRFLOW_ICEBERG_CONFIG`` or
        ``iceberg_tables.yaml`` in the DAG folder).
    :param refresh_interval: Seconds between looks (Airflow's bundle refresh).
    """

    def __init__(self, *, table_list: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._table_list = Path(table_list) if table_list else None
        self._seen: int | None = None  # the table list's mtime (ns) at the last look that acted on it
        self._states: dict[str, tuple[str, bool]] | None = None  # each DAG's file and pause, at the last look

    @property
    def table_list(self) -> Path:
        return self._table_list or config_path()

    def refresh(self) -> None:
        self._follow_table_list()
        self._follow_pauses()

    def _follow_table_list(self) -> None:
        """Touch each DAG file that reads the table list and is older than it; one ``stat`` when nothing changed.

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
        touched = touch_readers(self.path, changed)
        if touched:
            log.info(
                "The table list %s changed: the dag-processor parses %s now",
                self.table_list,
                ", ".join(str(path.relative_to(self.path)) for path in touched),
            )

    def _follow_pauses(self) -> None:
        """Touch each DAG file that reads the table list and has a DAG paused or unpaused since the last look.

        A DAG new since the last look, or gone, is not a pause: the parse that made or removed it registered its
        watch as it was. The first look only remembers: the dag-processor parses every file when it starts.
        """
        try:
            states = self.pause_states()
        except Exception as error:  # the metadata database: the manager's own next query will say more
            log.warning("Cannot read which DAGs of bundle %r are paused: %s", self.name, error)
            return
        before, self._states = self._states, states
        if before is None:
            return
        flipped = {states[d][0] for d in states.keys() & before.keys() if states[d][1] != before[d][1]}
        touched = [path for path in (self.path / f for f in sorted(flipped)) if is_reader(path) and touch(path)]
        if touched:
            log.info(
                "DAGs were paused or unpaused: the dag-processor parses %s now, so their health watches follow",
                ", ".join(str(path.relative_to(self.path)) for path in touched),
            )

    def pause_states(self) -> dict[str, tuple[str, bool]]:
        """Each of this bundle's DAGs: its file (relative to the folder) and whether it is paused, from Airflow's
        database."""
        from airflow.models.dag import DagModel
        from airflow.utils.session import create_session
        from sqlalchemy import select

        query = select(DagModel.dag_id, DagModel.relative_fileloc, DagModel.is_paused).where(
            DagModel.bundle_name == self.name, ~DagModel.is_stale
        )
        with create_session() as session:
            return {dag_id: (str(fileloc), bool(paused)) for dag_id, fileloc, paused in session.execute(query)}


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
