"""What the "Iceberg tables" page lists: one row per table, from what the health watch and the run records already
know, and the summary of all tables. Pure: the plugin's app (:mod:`.tables_page`) reads the rows' sources, one query
per gate connection, and this module joins, filters, sorts and pages them. No table's metadata is read.

A table's **need** is what the page sorts by, worst first:

- ``needs_work``: the watch's last check found work (``needs_work``, ``started`` or ``waiting``), the worst
  score first (small plus delete files in the partitions needing work);
- ``check_failed``: the watch could not check it (``error``: not in the catalog, or a bug; ``unreachable``);
- ``unknown``: no check (a table on cron) and no run that tells;
- ``healthy``: the last check found nothing to do or, for a table on cron, its last run skipped or succeeded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_iceberg.core.gate_state import GateState, WriterState
from airflow_iceberg.exceptions import TablesQueryError
from airflow_iceberg.hooks.run_records import NEEDING_WORK, HealthDecision, Outcome

NEEDS = ("needs_work", "check_failed", "unknown", "healthy")
GATES = ("closed", "open")
#: A last run's outcome to filter by, or ``none``: no run recorded.
OUTCOMES = (*Outcome, "none")
SORTS = ("need", "table", "gate", "last_run")
_CHECK_FAILED = (HealthDecision.ERROR, HealthDecision.UNREACHABLE)


@dataclass(frozen=True)
class TablesQuery:
    """What the user asked the list for: a name filter, filters by gate, need and last outcome, an order, a page."""

    q: str = ""
    gate: str = ""
    need: str = ""
    outcome: str = ""
    sort: str = "need"
    page: int = 1
    page_size: int = 50

    def __post_init__(self) -> None:
        for name, allowed in (("gate", GATES), ("need", NEEDS), ("outcome", OUTCOMES), ("sort", SORTS)):
            value = getattr(self, name)
            if value and value not in allowed:
                raise TablesQueryError(f"{name}={value[:100]!r} is not one of {', '.join(allowed)}")
        if not 1 <= self.page_size <= 500:
            raise TablesQueryError(f"page_size={self.page_size} is not between 1 and 500")
        if self.page < 1:
            raise TablesQueryError(f"page={self.page} is not 1 or more")


def iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def owner_of(gate: Any, run_url: Callable[[str, str], str]) -> dict[str, str] | None:
    """The run that holds ``gate`` (a ``GateState``, or None), with a link to it; None if the gate pauses nobody."""
    owner = gate.owner if gate is not None and gate.pauses_writers else None
    if owner is None:
        return None
    return {"dag_id": owner.dag_id, "run_id": owner.run_id, "url": run_url(owner.dag_id, owner.run_id)}


def need_of(check: Mapping[str, Any] | None, last_run: Mapping[str, Any] | None) -> str:
    """A table's need (see the module) from its last check, else from its last run."""
    if check is not None:
        if check["decision"] in NEEDING_WORK:
            return "needs_work"
        return "check_failed" if check["decision"] in _CHECK_FAILED else "healthy"
    if last_run is not None and last_run["outcome"] in (Outcome.SKIPPED, Outcome.SUCCESS):
        return "healthy"
    return "unknown"


def row(
    table: str,
    dag_id: str,
    gate: Any,
    check: Mapping[str, Any] | None,
    last_run: Mapping[str, Any] | None,
    failed_runs: int,
    run_url: Callable[[str, str], str],
) -> dict[str, Any]:
    """One table's row of the list, as JSON. ``gate`` is its ``GateState``, or None if it was never closed."""
    owner = owner_of(gate, run_url)
    check = check or {}
    return {
        "table": table,
        "dag_id": dag_id,
        "gate": "open" if owner is None else "closed",
        "owner": owner,
        "closed_at": None if owner is None else iso(gate.closed_at),
        "need": need_of(check or None, last_run),
        "score": check.get("score"),
        "data_files": check.get("data_files"),
        "delete_files": check.get("delete_files"),
        "check": {**{k: check[k] for k in ("decision", "reason", "reading")}, "checked_at": iso(check["checked_at"])}
        if check
        else None,
        "last_run": None
        if last_run is None
        else {
            **{k: last_run[k] for k in ("run_id", "decision", "outcome")},
            "started_at": iso(last_run["started_at"]),
            "finished_at": iso(last_run["finished_at"]),
            "url": run_url(last_run["dag_id"], last_run["run_id"]),
        },
        "failed_runs_24h": failed_runs,
    }


def summary(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """The summary bar: tables, gates closed now, tables needing work, checks that failed, runs failed in 24 h."""
    rows = list(rows)
    return {
        "tables": len(rows),
        "gates_closed": sum(r["gate"] == "closed" for r in rows),
        "needing_work": sum(r["need"] == "needs_work" for r in rows),
        "check_failed": sum(r["need"] == "check_failed" for r in rows),
        "runs_failed_24h": sum(r["failed_runs_24h"] for r in rows),
    }


def _sort(rows: list[Mapping[str, Any]], sort: str) -> None:
    """Sort ``rows`` in place by ``sort`` (see :data:`SORTS`); ties by table name."""
    rows.sort(key=lambda r: r["table"])
    if sort == "gate":  # closed first, the longest closed first (times are UTC ISO strings: they sort as times)
        rows.sort(key=lambda r: (r["gate"] != "closed", r["closed_at"] or ""))
    elif sort == "last_run":  # the newest first, tables without a run last
        rows.sort(key=lambda r: r["last_run"]["started_at"] if r["last_run"] else "", reverse=True)
    elif sort == "need":
        rows.sort(key=lambda r: (NEEDS.index(r["need"]), -(r["score"] or 0)))


def page(rows: Iterable[Mapping[str, Any]], query: TablesQuery) -> dict[str, Any]:
    """The list's answer: the summary of every row, and one page of the rows the query keeps, in its order."""
    rows = list(rows)
    kept = [
        r
        for r in rows
        if query.q.lower() in r["table"].lower()
        and (not query.gate or r["gate"] == query.gate)
        and (not query.need or r["need"] == query.need)
        and (not query.outcome or (r["last_run"]["outcome"] if r["last_run"] else "none") == query.outcome)
    ]
    _sort(kept, query.sort)
    pages = max(1, -(-len(kept) // query.page_size))
    number = min(query.page, pages)
    start = (number - 1) * query.page_size
    return {
        "summary": summary(rows),
        "matching": len(kept),
        "page": number,
        "pages": pages,
        "page_size": query.page_size,
        "rows": kept[start : start + query.page_size],
    }


def writer(gate: GateState, writer: WriterState) -> dict[str, Any]:
    """A writer as the page shows it: what it declares and what its commits were seen to do, and whether the gate's
    closing now pauses it, with the closing's reason."""
    closed = gate.pauses_writers
    return {
        "writer_id": writer.writer_id,
        "seen_at": iso(writer.seen_at),
        "ack_at": iso(writer.ack_at),
        "ack_snapshot_id": writer.ack_snapshot_id,
        "commit_kind": writer.commit_kind,
        "iceberg_version": writer.iceberg_version,
        "commits_as": writer.commits_as,
        "observed_kind": writer.observed_kind,
        "observed_snapshot_id": writer.observed_snapshot_id,
        "observed_detail": writer.observed_detail,
        "paused": closed and not gate.exempt(writer),
        "pause_reason": writer.pause_reason if closed else None,
    }
