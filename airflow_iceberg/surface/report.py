"""Every table at a glance: each table's gate, its health now, and its compaction history.

:func:`summarize` reads, for every table of the table list, the gate row (``WriteGateHook.get_state``), the
table's health from Iceberg metadata (``health.read_health``, no Spark), and the run records
(``WriteGateHook.records``). :func:`render_text` prints that as ``airflow-iceberg report`` does;
:func:`write_html` writes a static page with the history as PNG charts (matplotlib), for people who do not open
the Airflow UI.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from airflow_iceberg.core.gate_state import GateState
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.hooks.run_records import Outcome
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.planning.plan import COMPACTING


@dataclass(frozen=True)
class Health:
    """A table's health now, totalled over its partitions."""

    data_files: int
    small_files: int
    delete_files: int
    data_bytes: int

    @property
    def average_file_bytes(self) -> float | None:
        return self.data_bytes / self.data_files if self.data_files else None


@dataclass(frozen=True)
class TableSummary:
    """What the report says about one table."""

    table: str
    gate: GateState | None
    health: Health | None
    runs: list[dict[str, Any]]  # run records, oldest first
    errors: tuple[str, ...] = ()  # what could not be read, and why
    check: dict[str, Any] | None = None  # the health watch's last check (``iceberg_health_check``), if any

    @property
    def last_compaction(self) -> dict[str, Any] | None:
        """The newest run that closed the gate to rewrite (whatever its outcome), or None."""
        return next(
            (r for r in reversed(self.runs) if r["decision"] in COMPACTING and r["outcome"] != Outcome.DRY_RUN), None
        )


def summarize(tables: Iterable[Any], *, threads: int = 8) -> list[TableSummary]:
    """Summaries of ``tables`` (``TableConfig``), in their order; a part that cannot be read is an error, not a gap."""
    tables = list(tables)
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(tables)))) as pool:
        return list(pool.map(_summarize, tables))


def _summarize(config: Any) -> TableSummary:
    from airflow_iceberg.hooks.catalogs import load_iceberg_table
    from airflow_iceberg.planning.health import read_health

    table: TableName = config.table
    errors: list[str] = []
    gate_hook = WriteGateHook(config.write_gate_conn_id)
    gate = runs = health = check = None
    try:
        gate = gate_hook.get_state(table)
        runs = gate_hook.records.run_records(table)
        check = gate_hook.records.health_checks(table).get(str(table))
    except Exception as error:
        errors.append(f"gate: {type(error).__name__}: {error}")
    try:
        read = read_health(
            load_iceberg_table(config.iceberg_conn_id or table.catalog, table),
            str(table),
            small_file_ratio=config.health.small_file_ratio,
        )
        health = Health(
            data_files=read.data_files,
            small_files=sum(p.small_files for p in read.partitions),
            delete_files=read.delete_files,
            data_bytes=read.data_bytes,
        )
    except Exception as error:
        errors.append(f"health: {type(error).__name__}: {error}")
    return TableSummary(str(table), gate, health, runs or [], tuple(errors), check)


# --- text ------------------------------------------------------------------------------------------------------


def size(count: float | None) -> str:
    """Bytes in the unit that suits them, to three significant figures: ``812 B``, ``3.41 MB``, ``1.2 GB``."""
    if count is None:
        return "-"
    units = ("B", "KB", "MB", "GB", "TB", "PB")
    for unit in units:
        shown = float(f"{count:.3g}")
        if abs(shown) < 1000 or unit == units[-1]:
            return f"{shown:g} {unit}"
        count /= 1000
    raise AssertionError("unreachable")


def files(count: int, kind: str) -> str:
    """``1 data file``, ``6 data files``."""
    return f"{count} {kind} file{'' if count == 1 else 's'}"


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def gate_line(gate: GateState) -> str:
    if not gate.pauses_writers:
        return "open" if gate.state == "open" else "open (the last lease ended without an open)"
    assert gate.lease_expires_at is not None and gate.owner is not None
    left = (gate.lease_expires_at - gate.database_now).total_seconds()
    waiting = gate.writers_to_wait_for()
    acknowledged = sum(1 for w in waiting if gate.acknowledged_by(w))
    return (
        f"closed by dag {gate.owner.dag_id} run {gate.owner.run_id}, lease {left:.0f} s left; "
        f"writers acknowledged {acknowledged} of {len(waiting)}"
    )


def health_line(health: Health) -> str:
    return (
        f"{files(health.data_files, 'data')} ({health.small_files} small), {files(health.delete_files, 'delete')}, "
        f"average {size(health.average_file_bytes)}"
    )


def check_line(check: dict[str, Any] | None) -> str:
    """When the health watch last checked the table, what it decided, and why."""
    if check is None:
        return "never (health watch off, or no sweep yet)"
    started = f"; last started a run {_when(check['started_at'])}" if check.get("started_at") else ""
    return f"{_when(check['checked_at'])}  {check['decision']}: {check['reason']} (read {check['reading']}){started}"


def run_line(run: dict[str, Any]) -> str:
    def files(before: Any, after: Any) -> str:
        return f"{before if before is not None else '-'} -> {after if after is not None else '-'}"

    paused = run["gate_closed_seconds"]
    return (
        f"{_when(run['started_at'])}  {run['decision']}  {run['outcome']}  "
        f"data files {files(run['data_files_before'], run['data_files_after'])}  "
        f"delete files {files(run['delete_files_before'], run['delete_files_after'])}  "
        f"paused {'-' if paused is None else f'{paused:.1f} s'}"
    )


def render_text(summaries: list[TableSummary]) -> str:
    """The per-table summary ``airflow-iceberg report`` prints."""
    blocks = []
    for summary in summaries:
        outcomes = [r["outcome"] for r in summary.runs]
        lines = [
            summary.table,
            f"  gate             {gate_line(summary.gate) if summary.gate else '-'}",
            f"  health           {health_line(summary.health) if summary.health else '-'}",
            f"  last check       {check_line(summary.check)}",
            f"  last compaction  {run_line(summary.last_compaction) if summary.last_compaction else 'none recorded'}",
            f"  runs             {len(summary.runs)}: "
            + ", ".join(
                f"{outcomes.count(o)} {o}" for o in (Outcome.SUCCESS, Outcome.SKIPPED, Outcome.FAILED, Outcome.DRY_RUN)
            ),
        ]
        lines += [f"  error            {error}" for error in summary.errors]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


# --- HTML and charts ---------------------------------------------------------------------------------------------


def history(runs: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The points the charts draw: each run's figures before it started and, when it rewrote, after it ended."""
    points: dict[str, list[Any]] = {"at": [], "data_files": [], "delete_files": [], "average_mb": []}
    for run in runs:
        for moment, suffix in ((run["started_at"], "before"), (run["finished_at"], "after")):
            data, deletes, size = (run[f"{what}_{suffix}"] for what in ("data_files", "delete_files", "bytes"))
            if moment is None or data is None:
                continue
            points["at"].append(moment)
            points["data_files"].append(data)
            points["delete_files"].append(deletes)
            points["average_mb"].append(size / data / 1e6 if data and size is not None else None)
    return points


def chart_names(table: str) -> dict[str, str]:
    """The PNG file of each chart of ``table``."""
    return {chart: f"{table}.{chart}.png" for chart in CHARTS}


#: Each chart of a table's history, by name.
CHARTS = ("files", "file_size", "paused")


def chart_png(summary: TableSummary, chart: str) -> bytes:
    """One chart of ``summary``'s history (one of :data:`CHARTS`), drawn by matplotlib, as PNG."""
    import io

    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    if chart not in CHARTS:
        raise ValueError(f"no chart {chart!r}: the charts are {', '.join(CHARTS)}")
    points = history(summary.runs)
    figure, axes = plt.subplots(figsize=(7, 3))
    if chart == "files":
        axes.plot(points["at"], points["data_files"], marker="o", label="data files")
        axes.plot(points["at"], points["delete_files"], marker="s", label="delete files")
        axes.set_title(f"{summary.table}: files")
        axes.legend()
        figure.autofmt_xdate()
    elif chart == "file_size":
        axes.plot(points["at"], points["average_mb"], marker="o", color="tab:green")
        axes.set_title(f"{summary.table}: average data file size")
        axes.set_ylabel("MB")
        figure.autofmt_xdate()
    else:
        paused = [r for r in summary.runs if r["gate_closed_seconds"] is not None]
        axes.bar([str(i + 1) for i in range(len(paused))], [r["gate_closed_seconds"] for r in paused], color="tab:red")
        axes.set_title(f"{summary.table}: seconds writers were paused, per run")
        axes.set_xlabel("run (oldest first)")
        axes.set_ylabel("s")
    png = io.BytesIO()
    figure.savefig(png, format="png", dpi=100, bbox_inches="tight")
    plt.close(figure)
    return png.getvalue()


def _charts(summary: TableSummary, directory: Path) -> dict[str, str]:
    names = chart_names(summary.table)
    for chart, name in names.items():
        (directory / name).write_bytes(chart_png(summary, chart))
    return names


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Iceberg tables</title>
<style>body{font-family:sans-serif;margin:2em} table{border-collapse:collapse} td,th{border:1px solid #ccc;
padding:4px 8px;text-align:left} img{display:block;margin:1em 0}</style></head><body>
<h1>Iceberg tables</h1><p>Written {{ written }}.</p>
<table><tr><th>table</th><th>gate</th><th>health</th><th>last check</th><th>last compaction</th></tr>
{% for s in summaries %}<tr><td><a href="#{{ s.table }}">{{ s.table }}</a></td><td>{{ gate(s) }}</td>
<td>{{ health(s) }}</td><td>{{ checked(s) }}</td><td>{{ last(s) }}</td></tr>
{% endfor %}</table>
{% for s in summaries %}<h2 id="{{ s.table }}">{{ s.table }}</h2>
{% for error in s.errors %}<p>error: {{ error }}</p>{% endfor %}
{% for name in charts[s.table].values() %}<img src="{{ name }}" alt="{{ name }}">{% endfor %}
{% endfor %}</body></html>
"""


def write_html(summaries: list[TableSummary], directory: Path, written: datetime) -> Path:
    """Write ``index.html`` and each table's PNG charts into ``directory``; the page's path."""
    import jinja2

    directory.mkdir(parents=True, exist_ok=True)
    charts = {summary.table: _charts(summary, directory) for summary in summaries}
    page = jinja2.Environment(autoescape=True).from_string(_PAGE)
    index = directory / "index.html"
    index.write_text(
        page.render(
            summaries=summaries,
            charts=charts,
            written=_when(written),
            gate=lambda s: gate_line(s.gate) if s.gate else "-",
            health=lambda s: health_line(s.health) if s.health else "-",
            checked=lambda s: check_line(s.check),
            last=lambda s: run_line(s.last_compaction) if s.last_compaction else "none recorded",
        )
    )
    return index
