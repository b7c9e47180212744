"""Reference batch writer of a CDC table: a Spark ``DELETE`` with a non-key condition, then a ``MERGE``, in turns.

The design's CDC write-up puts batch updates beside the stream: GDPR deletes by arbitrary conditions, and merges.
This job owns the keys ``--first-key`` to ``--first-key + --keys`` of a table that a CDC stream writes below them,
so that the rows each side should leave are known. Its rows' values start with ``b`` (the stream's with ``v``).
It inserts its keys first (round 0), then every ``--interval-seconds``, in turns:

- a ``DELETE ... WHERE v LIKE 'b%' AND seq % 3 = <round % 3>``: a condition on values, not on the key;
- a ``MERGE`` of the keys with ``id % 4 = <round % 4>``, each to ``b<id>_<round>`` (update or re-insert), its
  target scoped to this job's keys (``t.id >= --first-key``), which Iceberg's conflict detection then prunes by.

On a merge-on-read table each commits delete files, which a rewrite committing meanwhile conflicts with. A failed
statement is retried, up to ``--max-attempts`` in all; one that fails every time is lost, and counted. With the gate
arguments it takes the gate as a writer does, through the shipped helper ``spark_writers.gated_write``: each
statement waits while the gate is closed (acknowledging the pause with its last snapshot), and no compaction
starts under it. With ``--exclusive`` as well, it holds the gate for each statement instead
(``spark_writers.exclusive_write``): the stream pauses and acknowledges before the statement runs and resumes after
it commits, so the statement meets neither a compaction's commit nor the stream's. Its own state, what the
table's rows of its keys should be, is updated only by a statement that committed; the final status line holds its
count and digest.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from airflow_iceberg.core.gate_holder import GateHolder
from airflow_iceberg.core.gate_protocol import owner_connection
from airflow_iceberg.core.gate_state import GateOwner
from airflow_iceberg.core.job_secrets import apply_job_secrets, read_job_secrets
from airflow_iceberg.core.spark_writers import exclusive_write, gated_write, newest_snapshot_id
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.core.writer import GATE_PASSWORD_ENV, add_gate_arguments, client_from_arguments


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", required=True, help="catalog.namespace.table, with the --layout's columns")
    parser.add_argument("--layout", choices=sorted(LAYOUTS), default="cdc", help="the table's columns (LAYOUTS)")
    parser.add_argument("--job-secrets", default=None, help="the secrets file written for this job")
    parser.add_argument("--status-file", required=True, type=Path)
    parser.add_argument("--stop-file", required=True, type=Path)
    parser.add_argument("--first-key", type=int, required=True, help="this job's keys, above the stream's")
    parser.add_argument("--keys", type=int, default=2000)
    parser.add_argument("--interval-seconds", type=float, default=30.0)
    parser.add_argument("--max-attempts", type=int, default=3, help="tries of one statement, the first included")
    parser.add_argument("--exclusive", action="store_true", help="hold the gate for each statement (GateHolder)")
    add_gate_arguments(parser)
    return parser.parse_args(argv)


#: The tables it writes, by the names of their key, value and sequence columns: the CDC stream's (``devkit/cdc.py``)
#: and the reference streaming writer's (``gated_ingest.py``, which has an event time as well).
LAYOUTS = {"cdc": ("id", "v", "seq"), "events": ("key", "payload", "value")}


def _rows(layout: str, first: int, keys: int, round_: int, where: str = "") -> str:
    """This job's rows of round ``round_`` for keys ``first`` to ``first + keys``, in the table's column order."""
    text = f"concat('b', CAST(id AS STRING), '_{round_}')"
    columns = (
        f"id, {text} AS v, {round_}L AS seq"
        if layout == "cdc"
        else f"id AS key, {round_}L AS value, {text} AS payload, current_timestamp() AS ts"
    )
    return f"SELECT {columns} FROM range({first}, {first + keys}){where}"


def statements(table: str, first: int, keys: int, round_: int, layout: str = "cdc") -> tuple[str, str]:
    """Round ``round_``'s kind and statement (round 0: the insert of every key)."""
    key, value, seq = LAYOUTS[layout]
    if round_ == 0:
        return "insert", f"INSERT INTO {table} {_rows(layout, first, keys, 0)}"
    if round_ % 2 == 1:
        return "delete", f"DELETE FROM {table} WHERE {value} LIKE 'b%' AND {seq} % 3 = {round_ % 3}"
    source = _rows(layout, first, keys, round_, f" WHERE id % 4 = {round_ % 4}")
    return "merge", (
        f"MERGE INTO {table} t USING ({source}) s ON t.{key} = s.{key} AND t.{key} >= {first} "
        f"WHEN MATCHED THEN UPDATE SET {value} = s.{value}, {seq} = s.{seq} "
        "WHEN NOT MATCHED THEN INSERT *"
    )


def apply(state: dict[int, tuple[str, int]], first: int, keys: int, round_: int) -> None:
    """What round ``round_``'s statement does to the rows of this job's keys, once it committed."""
    if round_ == 0:
        state.update({k: (f"b{k}_0", 0) for k in range(first, first + keys)})
    elif round_ % 2 == 1:
        for key in [k for k, (_, seq) in state.items() if seq % 3 == round_ % 3]:
            del state[key]
    else:
        state.update({k: (f"b{k}_{round_}", round_) for k in range(first, first + keys) if k % 4 == round_ % 4})


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    name = TableName.parse(args.table)
    table = name.quoted

    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.appName(f"batch-changes-{name}")
        .config(f"spark.sql.catalog.{name.catalog}.cache-enabled", "false")
        .getOrCreate()
    )
    apply_job_secrets(spark, read_job_secrets(args.job_secrets))
    holder = None
    if args.exclusive and args.gate_database:  # it holds the gate for each statement: no writer to register

        def connect() -> object:
            password = os.environ.get(GATE_PASSWORD_ENV, "")
            return owner_connection(args.gate_host, args.gate_port, args.gate_user, password, args.gate_database)

        owner = GateOwner(args.gate_writer_id or "batch-changes", uuid.uuid4().hex)
        holder = GateHolder(str(name), connect, owner, lease_seconds=120)
    gate = None if holder else client_from_arguments(args, str(name), os.environ, poke_interval=0.5)

    @contextmanager
    def gated(kind: str) -> Iterator[float]:
        """One statement's take on the gate (holding it, as a writer, or none: the ungated control); yields the
        seconds it waited for the gate as a writer. Holding it, the statement's kind decides who pauses."""
        if holder is not None:
            with exclusive_write(spark, holder, kind if kind in ("delete", "merge") else None):
                yield 0.0
        elif gate is not None:
            with gated_write(spark, gate, name) as waited:
                yield waited
        else:
            yield 0.0

    state: dict[int, tuple[str, int]] = {}
    counts = {"statements": 0, "attempts": 0, "failed_attempts": 0, "lost": 0, "paused_s": 0.0}
    failures: list[str] = []
    last_snapshot: int | None = None
    status = args.status_file.open("a", buffering=1)

    def wait(seconds: float) -> None:
        """Sleep ``seconds``, answering the gate meanwhile: a closed gate is acknowledged, and waited out."""
        until = time.monotonic() + seconds
        while time.monotonic() < until and not args.stop_file.exists():
            if gate is not None:
                counts["paused_s"] += gate.wait_until_open(last_snapshot)
            time.sleep(0.5)

    try:
        round_ = 0
        while not args.stop_file.exists():
            kind, statement = statements(table, args.first_key, args.keys, round_, args.layout)
            counts["statements"] += 1
            for attempt in range(1, args.max_attempts + 1):
                counts["attempts"] += 1
                try:
                    with gated(kind) as waited:
                        counts["paused_s"] += waited
                        spark.sql(statement)
                except Exception as error:  # a failed commit: nothing of it is in the table; try again
                    counts["failed_attempts"] += 1
                    named = re.search(r"org\.apache\.iceberg\.exceptions\.\w+: [^\n]{0,200}", str(error))
                    failures.append(f"{kind}: {named.group(0) if named else str(error).splitlines()[0][:300]}")
                    print(f"STATEMENT FAILED ({kind}, attempt {attempt}): {failures[-1]}", flush=True)
                    if attempt == args.max_attempts:
                        counts["lost"] += 1
                    continue
                apply(state, args.first_key, args.keys, round_)
                break
            last_snapshot = newest_snapshot_id(spark, name)
            status.write(json.dumps({"round": round_, "kind": kind, "at": time.time(), **counts}) + "\n")
            round_ += 1
            wait(args.interval_seconds)
    finally:
        final = {
            "final": True,
            **counts,
            "failures": failures[:20],
            "rows": len(state),
            "digest": sum(zlib.crc32(f"{k}:{v}".encode()) for k, (v, _) in state.items()),
        }
        status.write(json.dumps(final) + "\n")
        status.close()
        print(json.dumps(final), flush=True)
        if gate is not None:  # this writer stops for good
            gate.leave()
            gate.close()
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
