"""``make test-stacks``: the same checks on every stack of the matrix, each in environments of its own, then one
matrix of what they found.

For each stack of ``requirements/stacks.toml`` it runs the integration tests marked ``stack_check`` in a pytest of
their own, with ``AIRFLOW_ICEBERG_STACK`` naming the stack, so that ``scripts/env.sh`` hands them that stack's
Spark environment, Spark jars and Flink line's build (the Airflow side is one for all). The checks:

- the CDC pipeline, Kafka into ``KafkaSource`` in ``GatedSource`` into the Flink line's Iceberg sink in upsert mode,
  with gated compactions beside the running job; and the same load ungated;
- a Spark merge-on-read writer (a Structured Streaming MERGE) with gated compactions; and its ungated control;
- the daily full rewrite with its maintenance, beside a gated writer.

Each check writes what it measured to ``build/stacks/<stack>/checks/`` (``tests/integration/conftest.py``), and
this prints them as one table: stack by check, with pass or fail, how long each compaction closed the gate, how long
it paused each writer (0: the closing let it keep committing, its commits unable to conflict), failed commits on each
side and whether the table's rows are exactly what the writers wrote; then what the ungated controls saw fail,
exception by exception.

``--smoke`` runs only the checks also marked ``stack_smoke``, with one compaction each (a gated CDC compaction and
the Spark writer's), on every stack besides the environment's own, whose whole suite ``make test`` has just run;
the matrix then shows that stack's checks from that run too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from scripts import stacks

ROOT = Path(__file__).resolve().parents[1]
#: Tells the checks of a smoke run to compact once, not three times (tests/integration/conftest.py reads it).
SMOKE_ENV = "AIRFLOW_ICEBERG_SMOKE"
BUILD = Path(os.environ.get("AIRFLOW_ICEBERG_BUILD", ROOT / "build"))


def checks_folder(stack: str) -> Path:
    return BUILD / "stacks" / stack / "checks"


def run_checks(stack: str, smoke: bool, workers: int = 1) -> int:
    """Run the stack's checks in a pytest of their own, in the stack's environments (which writes their records
    anew), on ``workers`` pytest-xdist workers; its exit status."""
    marks = "stack_smoke" if smoke else "stack_check"
    if not stacks.load()[stack].flink_mysql_cdc:
        print(f"==> stack {stack}: no Flink CDC MySQL connector is served for its Flink line; not run: mysql_cdc")
        marks += " and not mysql_cdc"
    command = [
        "bash",
        "-c",
        'source scripts/env.sh && exec "$@"',
        "--",
        str(ROOT / ".venv" / "airflow" / "bin" / "python"),
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-m",
        marks,
        *(["-n", str(workers), "--dist", "loadgroup"] if workers > 1 else []),
        "tests/integration",
    ]
    print(f"==> stack {stack}: {'smoke checks' if smoke else 'checks'}", flush=True)
    env = {**os.environ, stacks.STACK_ENV: stack, **({SMOKE_ENV: "1"} if smoke else {})}
    return subprocess.run(command, cwd=ROOT, env=env, check=False).returncode


def records(stack: str) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(checks_folder(stack).glob("*.json"))]


def _seconds(values: list[float] | None) -> str:
    return " ".join(f"{value:.1f}" for value in values) if values else "-"


def _number(value: Any) -> str:
    return "-" if value is None else str(value)


def _yes_no(value: Any) -> str:
    return {True: "yes", False: "NO"}.get(value, "-")


def _pauses(values: dict[str, list[float]] | None) -> str:
    """Each writer's pause in each compaction: ``Flink 0.0 0.0 0.0; Spark 14.2 12.9 13.1``."""
    return "; ".join(f"{writer} {_seconds(seconds)}" for writer, seconds in (values or {}).items()) or "-"


def matrix(names: list[str]) -> str:
    """The table of every check recorded for the stacks ``names``, then what each ungated control saw fail."""
    rows = [
        ("stack", "check", "result", "gate closed s", "writers' pause s", "failed commits w/r", "rows exact", "took s")
    ]
    controls = []
    for name in names:
        for record in sorted(records(name), key=lambda r: (r["check"].endswith("ungated"), r["check"])):
            figures = record["figures"]
            writer, rewrite = figures.get("writer_failed_commits"), figures.get("rewrite_failed_commits")
            rows.append(
                (
                    name,
                    record["check"],
                    record["outcome"],
                    _seconds(figures.get("gate_closed_seconds")),
                    _pauses(figures.get("writer_pause_seconds")),
                    f"{_number(writer)} / {_number(rewrite)}",
                    _yes_no(figures.get("rows_exact")),
                    f"{record['seconds']:.0f}",
                )
            )
            if record["check"].endswith("ungated"):
                controls.append((name, record))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    if controls:
        lines += ["", "What the ungated controls saw (w: the writer, r: the rewrites):"]
    for name, record in controls:
        figures = record["figures"]
        lines.append(
            f"- {name}, {record['check'].removesuffix(', ungated')}: {_number(figures.get('rewrite_failed_commits'))} "
            f"of {_number(figures.get('rewrites'))} rewrites failed, the writer failed "
            f"{_number(figures.get('writer_failed_commits'))} commits"
            + (
                f"; {figures['rewrites_overlapping_a_flink_commit']} rewrites overlapped a Flink commit"
                if "rewrites_overlapping_a_flink_commit" in figures
                else ""
            )
            + (
                f"; position-delete files naming several data files: "
                f"{figures['position_delete_files_naming_several_data_files']}"
                if "position_delete_files_naming_several_data_files" in figures
                else ""
            )
        )
        for side in ("rewrite_failures", "writer_failures"):
            for line in figures.get(side) or []:
                lines.append(f"    {side.split('_')[0]}: {line.strip()[:300]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stacks", help="comma-separated stack names (default: every stack of the matrix)")
    parser.add_argument("--smoke", action="store_true", help="the smoke checks, on the stacks besides this one's")
    parser.add_argument("--workers", type=int, default=1, help="run each stack's checks on this many workers")
    args = parser.parse_args(argv)
    matrix_file = stacks.load()
    names = args.stacks.split(",") if args.stacks else list(matrix_file.stacks)
    for name in names:
        matrix_file[name]  # an unknown name fails here, naming the known ones
    own = stacks.current().name
    started = time.monotonic()
    failed = []
    for name in names:
        if args.smoke and name == own:
            continue  # its whole suite has just run
        if run_checks(name, args.smoke, args.workers) != 0:
            failed.append(name)
    print(f"\nThe stacks' checks ({time.monotonic() - started:.0f} s):\n")
    print(matrix(names))
    if failed:
        print(f"\nFAILED on {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
