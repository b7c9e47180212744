"""What the Airflow UI shows about each DAG and task: what it does, and what to do when it fails.

Plain text built from a table's settings when its DAGs are built, so it costs a few string joins per DAG.
"""

from __future__ import annotations

from typing import Any

from airflow_iceberg.config import TableConfig

_WRITERS = (
    "**What a closed gate means for writers.** A gated writer (Flink, Spark Structured Streaming) reads the gate "
    "before each commit. While the gate is closed and its lease has not ended, it keeps reading its source but "
    "commits nothing, and it may acknowledge the pause. It resumes when the gate opens, or on its own when the "
    "lease ends, even if this run died."
)


def _force_open(config: TableConfig) -> str:
    return (
        "**A stuck gate.** `open_gate` reopens it whatever the rewrites did, and retries on connection errors. If "
        "the run is gone and writers must not wait for the lease to end, open it by hand; the audit trail records "
        "who held it and why you opened it:\n\n"
        f"    airflow-iceberg force-open {config.table} --conn-id {config.write_gate_conn_id} --reason '...'"
    )


CHECK_RUN_PARAMS = (
    "Checks this run's Params (the trigger form, or the REST API's `conf`) and renders the table's predicate, "
    "before anything is paused. On a dry run it reports what would be rewritten (XCom `plan`) and skips the rest "
    "of the run.\n\n"
    "**If it fails**, the message names the bad parameter or predicate. Nothing was changed: the gate was never "
    "closed. A run without a logical date (triggered with `logical_date: null`) needs its own `where` in its "
    "`conf` when the table's predicate uses the date (`ds`, `logical_date`, ...)."
)

REWRITE_MANIFESTS = (
    "Rewrites the table's manifests (`rewrite_manifests`) after the gate is open again: metadata only, and it "
    "never pauses writers.\n\n**If it fails**, it retries later; the table is as it was."
)


def close_gate(config: TableConfig) -> str:
    return (
        f"Closes the write gate of `{config.table}` for this run, with a lease of {config.lease_seconds} s. If "
        f"another run holds it (the other DAG of this table, or a backfill run), waits up to "
        f"{config.gate_wait_seconds} s for it.\n\n{_WRITERS}\n\n"
        "**If it fails** on a connection error, it retries with back-off. A gate another run still holds fails it "
        "at once, having changed nothing; look at that run."
    )


def wait_until_snapshot_idle(config: TableConfig) -> str:
    return (
        f"Waits until the writer of `{config.table}` has gone quiet: it acknowledged the pause, or no snapshot was "
        f"committed for {config.idle_seconds} s. Gives up after half the lease ({config.lease_seconds // 2} s).\n\n"
        "**If it fails**: a time-out means the writer kept committing with the gate closed, so it does not read "
        "the gate (see the writer protocol in the README). It also fails at once if this run no longer holds the "
        "gate. `open_gate` runs either way."
    )


def rewrite(config: TableConfig, procedure: str) -> str:
    return (
        f"`CALL {config.table.catalog}.system.{procedure}(...)` on `{config.table}`, in a PySpark job through "
        "spark-submit, only while this run holds the gate. The result row is in XCom and in the table's asset "
        "event.\n\n"
        "**If it fails**, Iceberg committed nothing of the failed rewrite and the table is as it was; `open_gate` "
        "still reopens the gate. It retries once; it does not retry an Iceberg commit conflict (a writer "
        "committed during the pause, which the gate exists to prevent: check that the writer reads the gate), or "
        "a run that lost its gate."
    )


def open_gate(config: TableConfig) -> str:
    return (
        f"Reopens the write gate of `{config.table}` if this run holds it. It runs whatever the rewrites did (it "
        "is the teardown of `close_gate`), and never opens a gate another run closed.\n\n"
        f"**If it fails**, it retries often and soon. Writers stay paused until the lease ends, "
        f"{config.lease_seconds} s after `close_gate`.\n\n{_force_open(config)}"
    )


def expire_snapshots(config: TableConfig) -> str:
    care = config.table_care
    return (
        f"Expires snapshots older than {care.expire_older_than_hours} h, keeping the last {care.retain_last} and "
        "the writer's newest checkpoint snapshot. Runs after the gate is open; never pauses writers.\n\n"
        "**If it fails**, it retries later; nothing was removed."
    )


def remove_orphan_files(config: TableConfig) -> str:
    return (
        f"Removes files no snapshot references that are older than {config.table_care.orphan_older_than_hours} h, "
        "longer than any lease, so a paused writer's uncommitted files are never taken. Never pauses writers.\n\n"
        "**If it fails**, it retries later."
    )


def _settings(config: TableConfig) -> str:
    """The table's settings as a Markdown table; Spark conf values are left out (they may hold credentials)."""
    settings: dict[str, Any] = config.model_dump(mode="json", exclude={"table", "spark", "full_rewrite", "table_care"})
    settings["spark"] = {
        **config.spark.model_dump(mode="json", exclude={"conf"}, exclude_none=True),
        "conf keys": sorted(config.spark.conf),
    }
    settings["full_rewrite"] = config.full_rewrite.model_dump(mode="json")
    settings["table_care"] = config.table_care.model_dump(mode="json")
    rows = "\n".join(f"| `{name}` | `{value}` |" for name, value in settings.items())
    return f"| setting | value |\n|---|---|\n{rows}"


def compaction_dag(config: TableConfig) -> str:
    return (
        f"Gated compaction of `{config.table}`: closes its write gate, waits until its writer is quiet, rewrites "
        "small data files and position-delete files with Spark, and reopens the gate whatever happened. A manual "
        "run takes its own settings in the trigger form (`where`, `rewrite_all`, ..., `dry_run`).\n\n"
        f"{_WRITERS}\n\n{_force_open(config)}\n\n**Settings** (from the table list):\n\n{_settings(config)}"
    )


def full_rewrite_dag(config: TableConfig, where: str | None) -> str:
    scope = f" in the partitions `{where}` selects" if where else ""
    return (
        f"Rewrites all data and position-delete files of `{config.table}`{scope} behind its write gate, then "
        "cares for the table once the gate is open. Backfill past days with `airflow backfill create`.\n\n"
        f"{_WRITERS}\n\n{_force_open(config)}\n\n**Settings** (from the table list):\n\n{_settings(config)}"
    )
