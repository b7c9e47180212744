"""The order in which the DAG files that read the table list must be parsed, so that no listed table's DAGs are ever
deactivated on the way: the fleet bundle's hand-over, as a state machine, pure (no Airflow, no files, no clock).

What Airflow does that makes an order necessary:

- A table moves between compaction DAG files when the list grows past, or shrinks below, a multiple of
  ``tables_per_dag_file`` (:mod:`airflow_iceberg.fleet.shards`). Airflow deactivates, at its next clean-up, a DAG
  that the last parse of the DAG's file did not find; and two parses run at once finish in either order. So a
  moved table's DAGs must be stored from the file that gains it before a parse of the file it leaves no longer
  finds them.
- Airflow parses a file again only for a change newer than the end of its last parse, so a parse already under way
  when the table list changed may have read the old list and still count as the parse after the change.
- Airflow kills a parse that outlasts ``[dag_processor] dag_file_processor_timeout`` and takes the file as parsed.
- Airflow deactivates a DAG that a parse no longer found only if the DAG's own last parse is more than ``[dag_processor]
  stale_dag_threshold`` older than that parse.

Two machines, both driven by :class:`TableListDagBundle` (:mod:`.dag_bundle`), which reads Airflow's DAG table
and the table list and touches the files the machines name:

**The hand-over**, one per bundle (:class:`Handover`, :class:`Phase`):

- ``SETTLED``: no table is on its way between files. A table-list change in which no table moves touches every
  reader of the list at once (``list_changed`` returns False and the bundle touches them).
- ``list_changed`` with *gainers* (the new files the bundle wrote as the list grew, or the lower files it touched as
  the list shrank, where the tables of the file they leave move) → ``GAINERS_FIRST``: only the gainers are parsed.
  A further change while in ``GAINERS_FIRST`` adds its gainers and stays there.
- ``release`` in ``GAINERS_FIRST``, once each gainer has a parse stored since it was written or touched, or once a
  parse's time-out and a refresh have passed since the last one was (Airflow could not parse it: its tables go back
  to waiting for their old file's next parse, as before the change, and the bundle says so) → ``SETTLED``, and the
  bundle touches the other readers for the latest change.

**A followed file**, one per file the bundle touched (:class:`FollowedFile`, :class:`Wait`), until ``follow``
lets it go:

- ``PARSE``: touched, its parse not stored yet. After a parse's time-out (and a refresh) for each round of
  ``[dag_processor] parsing_processes`` parses that the waiting files take, a file that had DAGs is touched again
  (``RETOUCH``), up to :data:`RETOUCHES` times, then let go with advice; one without DAGs (the table-list check,
  while the list is sound; a file the list left without tables) shows no parse and is let go.
- Its parse stored: for a pause or unpause, done. For a table-list change, a parse that began before the change
  (its DAGs' last parse less its duration and :data:`STORE_SLACK_SECONDS`) is run once more (``AGAIN``). Then, if
  the file's DAGs that the parse no longer found (tables taken off the list) were parsed less than the stale
  threshold before the touch, Airflow would keep them active: → ``STALE_THRESHOLD``.
- ``STALE_THRESHOLD``: once the threshold has passed, touched once more (``ONCE_MORE``) so that they go; done.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import Enum

#: How long Airflow may take to store a parse after it ends: a DAG's ``last_parsed_time`` is taken as it is
#: stored, so a parse began at least its ``last_parse_duration`` and this much before it. A parse that may have
#: begun before the table list changed is run once more.
STORE_SLACK_SECONDS = 5

#: How many times a file is touched again whose parse was not stored within the time-out after its touch (a parse
#: killed at the time-out): after that, the file's DAGs wait for its next parse, and the bundle says so.
RETOUCHES = 2


@dataclass(frozen=True)
class ParseTiming:
    """Airflow's settings that the machines' waits follow, in seconds, and how many parses run at once."""

    parse_timeout: float  # [dag_processor] dag_file_processor_timeout
    refresh: float  # the bundle's refresh_interval
    stale_threshold: float  # [dag_processor] stale_dag_threshold
    parsing_processes: int = 2  # [dag_processor] parsing_processes

    def due(self, rounds: int = 1) -> timedelta:
        """A parse's time-out and a refresh to see it stored, for each of ``rounds`` rounds of parses."""
        return timedelta(seconds=(self.parse_timeout + self.refresh) * rounds)


class Phase(Enum):
    """The hand-over's states."""

    SETTLED = "settled"
    GAINERS_FIRST = "gainers first"


class Wait(Enum):
    """What a followed file waits for."""

    PARSE = "its parse"
    STALE_THRESHOLD = "Airflow's stale threshold"


class Why(Enum):
    """Why a step touches a file."""

    RETOUCH = "no parse stored within the time-out"
    AGAIN = "its parse began before the table list changed"
    ONCE_MORE = "the DAGs of tables taken off the list go"


@dataclass(frozen=True)
class Step:
    """What the bundle does for a machine: touch ``file`` (None: none), and log ``message`` at ``level``."""

    file: str | None
    why: Why | None
    level: int
    message: str


@dataclass(frozen=True)
class Parse:
    """A parse of a file's DAG as Airflow's DAG table shows it: when it was stored, and when it began at the latest."""

    stored: datetime
    began: datetime

    @classmethod
    def of(cls, stored: datetime, seconds: float | None) -> Parse:
        return cls(stored, stored - timedelta(seconds=seconds or 0.0))


@dataclass(frozen=True)
class FollowedFile:
    """A file the bundle touched: when; when the table list changed (None for a pause or unpause); whether it had DAGs
    then (a file without shows no parse); whether it was touched again for a parse that began before the change;
    how many times it was touched again for a parse not stored in time; what it waits for, and until when for the
    stale threshold."""

    touched: datetime
    list_changed: datetime | None = None
    had_dags: bool = False
    again: bool = False
    retouches: int = 0
    wait: Wait = Wait.PARSE
    until: datetime | None = None


@dataclass
class Handover:
    """The bundle's hand-over and the files it follows (see the module doc for the states and transitions)."""

    phase: Phase = Phase.SETTLED
    gainers: dict[str, datetime] = field(default_factory=dict)  # each gainer and when it was written or touched
    change: int | None = None  # the table list's change (mtime, ns) whose other touches wait for the gainers
    followed: dict[str, FollowedFile] = field(default_factory=dict)

    # --- the hand-over --------------------------------------------------------------------------------------------

    def list_changed(self, change: int, gainers: list[str], now: datetime) -> bool:
        """The table list changed at ``change`` (ns); ``gainers`` are the files that tables move to, written or
        touched ``now``. Whether the other readers wait (``GAINERS_FIRST``); if not, the bundle touches them now."""
        if not gainers and self.phase is Phase.SETTLED:
            return False
        self.phase, self.change = Phase.GAINERS_FIRST, change
        self.gainers.update(dict.fromkeys(gainers, now))
        return True

    def release(self, last_parsed: Mapping[str, datetime | None], now: datetime, timing: ParseTiming) -> Step | None:
        """In ``GAINERS_FIRST``: once each gainer's last stored parse (``last_parsed``, by file) is newer than its
        writing or touch, or a parse's time-out and a refresh have passed since the last gainer was, → ``SETTLED``;
        the step to take then (log, and the bundle touches the other readers for :attr:`change`). None while it
        waits, and in ``SETTLED``."""
        if self.phase is not Phase.GAINERS_FIRST:
            return None
        waiting = [
            file for file, since in self.gainers.items() if (parsed := last_parsed.get(file)) is None or parsed < since
        ]
        if waiting and now - max(self.gainers.values()) <= timing.due():
            return None
        self.phase, self.gainers = Phase.SETTLED, {}
        if not waiting:
            return Step(None, None, logging.DEBUG, "The files the tables moved to are parsed: parsing the others")
        return Step(
            None,
            None,
            logging.WARNING,
            f"No parse of {', '.join(waiting)} was stored within {int(timing.due().total_seconds())} s of its writing "
            "or touch: parsing the files whose tables move there now, so those tables' DAGs may be deactivated until "
            "it is. The dag-processor's log says why",
        )

    # --- following touched files ----------------------------------------------------------------------------------

    def touched(self, files: Mapping[str, bool], now: datetime, list_changed: datetime | None = None) -> None:
        """The bundle touched ``files`` (each with whether it had DAGs that the list still gives it) ``now``, for a
        table-list change at ``list_changed``, or for a pause or unpause (None, and a file already followed keeps
        its reason)."""
        for file, had_dags in files.items():
            if list_changed is None and file in self.followed:
                continue
            self.followed[file] = FollowedFile(now, list_changed, had_dags)

    def follow(self, parses: Mapping[str, list[Parse]], now: datetime, timing: ParseTiming) -> list[Step]:
        """Move each followed file on by the parses of its DAGs now stored (``parses``, by file): the steps to take,
        in order. Files let go are no longer followed."""
        after = {
            file: [p.began for p in parses.get(file, []) if p.stored >= f.touched]
            for file, f in self.followed.items()
            if f.wait is Wait.PARSE
        }
        waiting = sum(1 for began in after.values() if not began)
        due = timing.due(-(-waiting // max(1, timing.parsing_processes)))
        steps: list[Step] = []
        for file, f in list(self.followed.items()):
            if f.wait is Wait.PARSE:
                if not after[file]:  # the parse after the touch is not stored yet
                    if now - f.touched > due:
                        steps += self._not_parsed(file, f, now, due)
                    continue
                moved = self._parsed(file, f, min(after[file]), parses[file], now, timing)
                if moved is None:
                    del self.followed[file]
                    continue
                self.followed[file] = f = moved
                if f.wait is Wait.PARSE:
                    steps.append(Step(file, Why.AGAIN, logging.INFO, f"A parse of {file} that began before the table "
                                      "list changed ended after it: parsing it again"))  # fmt: skip
                    continue
            if f.until is not None and now > f.until:  # STALE_THRESHOLD, passed
                steps.append(Step(file, Why.ONCE_MORE, logging.INFO, f"Parsing {file} once more so that the DAGs of "
                                  "tables taken off the list go"))  # fmt: skip
                del self.followed[file]
        return steps

    @staticmethod
    def _parsed(
        file: str, f: FollowedFile, began: datetime, parses: list[Parse], now: datetime, timing: ParseTiming
    ) -> FollowedFile | None:
        """``file``'s parse after its touch is stored, the first of them begun at ``began``: what it waits for now
        (touched ``AGAIN`` for its parse; the ``STALE_THRESHOLD``), or None when it is let go."""
        if f.list_changed is None:  # a pause or unpause: its parse is stored
            return None
        if not f.again and began - timedelta(seconds=STORE_SLACK_SECONDS) < f.list_changed:
            return replace(f, touched=now, again=True)
        left = [p.stored for p in parses if p.stored < f.touched]
        threshold = timedelta(seconds=timing.stale_threshold)
        if left and max(left) + threshold >= f.touched:  # Airflow would keep these active
            return replace(f, wait=Wait.STALE_THRESHOLD, until=max(left) + threshold)
        return None

    def _not_parsed(self, file: str, f: FollowedFile, now: datetime, due: timedelta) -> list[Step]:
        """No parse of ``file`` stored within ``due`` of its touch: touch it again, or after :data:`RETOUCHES`
        times, or if it had no DAGs to show, let it go."""
        del self.followed[file]
        if not f.had_dags:
            return []
        waited = int(due.total_seconds())
        if f.retouches >= RETOUCHES:
            return [
                Step(
                    None,
                    None,
                    logging.WARNING,
                    f"No parse of {file} was stored within {waited} s of any of its last {RETOUCHES + 1} touches: its "
                    "DAGs follow the table list and their pauses at its next parse, within [dag_processor] "
                    "min_file_process_interval. If the dag-processor's log says it killed the parse at the time-out, "
                    "raise [dag_processor] dag_file_processor_timeout or lower the table list's tables_per_dag_file",
                )
            ]
        self.followed[file] = replace(f, touched=now, retouches=f.retouches + 1)
        return [
            Step(
                file,
                Why.RETOUCH,
                logging.WARNING,
                f"No parse of {file} was stored within {waited} s of its touch (Airflow kills a parse that outlasts "
                "[dag_processor] dag_file_processor_timeout and deactivates its DAGs): touching it again, "
                f"{f.retouches + 1} of {RETOUCHES}",
            )
        ]
