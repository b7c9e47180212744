"""What the Airflow UI shows about each DAG and task: what it does, and what to do when it fails.

Plain text built from a table's settings when its DAGs are built, so it costs a few string joins per DAG.
"""

from __future__ import annotations

from typing import Any

from airflow_iceberg.table_list.schema import TableConfig

_WRITERS = (
    "**What a closed gate means for writers.** A gated writer (Flink, Spark Structured Streaming) reads the gate "
    "before each commit. While the gate is closed and its lease has not ended, it keeps reading its source but "
    "commits nothing, and it may acknowledge the pause. This run renews the lease while it works, never past "
    "`max_pause_seconds` after closing. A writer resumes when the gate opens, or on its own when the lease ends, "
    "even if this run died."
)


def _force_open(config: TableConfig) -> str:
    return (
        "**A stuck gate.** `open_gate` reopens it whatever the rewrites did, and retries on connection errors. If "
        "the run is gone and writers must not wait for the lease to end, open it by hand; the audit trail records "
        "who held it and why you opened it:\n\n"
        f"    airflow-iceberg force-open {config.table} --conn-id {config.write_gate_conn_id} --reason '...'"
    )


REWRITE_MANIFESTS = (
    "Rewrites the table's manifests (`rewrite_manifests`) after the gate is open again: metadata only, and it "
    "never pauses writers. A writer's commit that replaced a manifest it rewrote beats it: the job then calls it "
    "again at the newest snapshot, up to 5 times; if it loses every time, it leaves the manifests as they were for the "
    "next run and says so (`left_as_it_was` in its result).\n\n**If it fails**, it retries later; the table is as "
    "it was."
)


def plan_compaction(config: TableConfig, full: bool) -> str:
    health = config.health
    if full:
        what = "This DAG rewrites whatever health says (the daily full rewrite); the plan records the health."
    elif not health.enabled:
        what = "Health planning is off for this table (`health.enabled: false`): every run rewrites."
    else:
        what = (
            f"A partition needs work with {health.min_small_files} files under {health.small_file_ratio:g} of the "
            f"target size, delete records over {health.max_delete_ratio:g} of its data records, or a delete file "
            f"{health.max_delete_age_minutes:g} min old. When none does, the run ends here, successful: the gate "
            "stays open and no Spark application starts. Otherwise each rewrite's predicate is narrowed to the "
            "partitions that need it. The trigger form's `force` rewrites regardless."
        )
    return (
        "Checks this run's Params (the trigger form, or the REST API's `conf`) and renders each rewrite's "
        f"predicate, before anything is paused. Then reads the health of `{config.table}` from its metadata (no "
        f"Spark) and plans the run. {what} The plan "
        "(decision, reason, partitions and predicate per rewrite, health) is in XCom `plan`; a dry run ends here "
        "with it. The run's record (MySQL table `iceberg_compaction_run`) is written here, and completed by "
        "`record_run`.\n\n"
        "**If it fails**, the message names the bad parameter or predicate (not retried), or the catalog or the "
        "gate's database could not be read (retried). Nothing was changed: the gate was never closed. A run without "
        "a logical date (triggered with `logical_date: null`) needs its own `where` in its `conf` when the table's "
        "predicate uses the date (`ds`, `logical_date`, ...)."
    )


def record_run(config: TableConfig) -> str:
    return (
        f"Completes the run's record for `{config.table}` in `iceberg_compaction_run`: files and bytes after, the "
        "seconds the gate was closed and the rewrites took, and the outcome. It runs whatever the rewrites did "
        "(a teardown) and does not decide the run's state.\n\n**If it fails**, it retries; the table and gate are "
        "not affected."
    )


def close_gate(config: TableConfig) -> str:
    slots = (
        f" It closes only when this run gets one of the {config.spark_slots} Spark slots of "
        f"`{config.spark_conn_id}`; runs of the tables in the worst health get the free slots first, and the "
        "gate stays open while the run waits, in the triggerer: the wait holds no worker."
        if config.spark_slots
        else ""
    )
    return (
        f"Closes the write gate of `{config.table}` for this run, with a lease of {config.lease_seconds} s that "
        f"the tasks after it renew while they work, for at most {config.max_pause_seconds} s in all. If "
        f"another run holds it (the other DAG of this table, or a backfill run), waits up to "
        f"{config.gate_wait_seconds} s for it.{slots}\n\n{_WRITERS}\n\n"
        "**If it fails** on a connection error, it retries with back-off. A gate another run still holds fails it "
        "at once, having changed nothing; look at that run."
    )


def wait_until_snapshot_idle(config: TableConfig) -> str:
    return (
        f"Waits until the writer of `{config.table}` has gone idle: it acknowledged the pause, or no snapshot was "
        f"committed for {config.idle_seconds} s. Each look renews the lease. Gives up after half the longest pause "
        f"({config.max_pause_seconds // 2} s).\n\n"
        "**If it fails**: a time-out means the writer kept committing with the gate closed, so it does not read "
        "the gate (see *Writers that honour the gate* in the docs). It also fails at once if this run no longer "
        "holds the gate. `open_gate` runs either way."
    )


def rewrite_files(config: TableConfig, full: bool) -> str:
    catalog = config.table.catalog
    which = (
        "every file of the run's partitions (`rewrite-all`)"
        if full
        else "the partitions `plan_compaction` found in need of it (its plan is in XCom), and every data file in "
        "them that carries a delete file (`delete-file-threshold: 1` unless the table sets it)"
    )
    return (
        f"`CALL {catalog}.system.rewrite_data_files(...)`, then `CALL {catalog}.system.rewrite_position_delete_files"
        f"(...)`, on `{config.table}`: {which}. The data-file rewrite applies the deletes of the files it rewrites "
        "and removes the delete files that then apply to nothing (`remove-dangling-deletes`). Both run one after "
        "another in one PySpark application through spark-submit, so the pause pays for one Spark start-up; a "
        "procedure the plan gives nothing to do is left out. They run only while this run holds the gate: the "
        "Spark job renews the lease while it works, starts each `CALL` only on a lease with time left,"
        f" and stops before the pause reaches {config.max_pause_seconds} "
        "s. Each procedure's result row is in XCom and in the table's asset event.\n\n"
        "**If it fails**, Iceberg committed nothing of the failed procedure (with partial progress, file groups "
        "already committed stay; a procedure that completed before it stays too) and `open_gate` still reopens the "
        "gate. It retries once; it does not retry an Iceberg commit conflict (a writer committed during the pause, "
        "which the gate exists to prevent: check that the writer reads the gate), a run that lost its gate or "
        "reached the ceiling, or a partial-progress rewrite whose file groups failed to rewrite or to commit (its "
        "XCom `partial_failure` and the run record's detail say how many planned files it left as they were; the "
        "next run plans them again)."
    )


def open_gate(config: TableConfig) -> str:
    return (
        f"Reopens the write gate of `{config.table}` if this run holds it. It runs whatever the rewrites did (it "
        "is the teardown of `close_gate`), and never opens a gate another run closed.\n\n"
        f"**If it fails**, it retries often and soon. Writers stay paused until the lease ends, at most "
        f"{config.lease_seconds} s after the run's last renewal.\n\n{_force_open(config)}"
    )


def expire_snapshots(config: TableConfig) -> str:
    maintenance = config.maintenance
    return (
        f"Expires snapshots older than {maintenance.expire_older_than_hours} h, keeping the last "
        f"{maintenance.retain_last} and the writer's newest checkpoint snapshot. Runs after the gate is open; "
        "never pauses writers.\n\n"
        "**If it fails**, it retries later; nothing was removed."
    )


def remove_orphan_files(config: TableConfig) -> str:
    return (
        f"Removes files no snapshot references that are older than {config.maintenance.orphan_older_than_hours} h, "
        "longer than any pause, so a paused writer's uncommitted files are never taken. Never pauses writers.\n\n"
        "**If it fails**, it retries later."
    )


def _settings(config: TableConfig) -> str:
    """The table's settings as a Markdown table; Spark conf values are left out (they may hold credentials)."""
    settings: dict[str, Any] = config.model_dump(
        mode="json", exclude={"table", "spark", "full_rewrite", "maintenance", "health"}
    )
    settings["spark"] = {
        **config.spark.model_dump(mode="json", exclude={"conf"}, exclude_none=True),
        "conf keys": sorted(config.spark.conf),
    }
    settings["full_rewrite"] = config.full_rewrite.model_dump(mode="json")
    settings["maintenance"] = config.maintenance.model_dump(mode="json")
    settings["health"] = config.health.model_dump(mode="json")
    rows = "\n".join(f"| `{name}` | `{value}` |" for name, value in settings.items())
    return f"| setting | value |\n|---|---|\n{rows}"


def compaction_dag(config: TableConfig) -> str:
    return (
        f"Gated compaction of `{config.table}`: closes its write gate, waits until its writer is idle, rewrites "
        "small data files and position-delete files with Spark, and reopens the gate whatever happened. A manual "
        "run takes its own settings in the trigger form (`where`, `rewrite_all`, ..., `force`, `dry_run`). Runs on a "
        "healthy table end after `plan_compaction`, without pausing writers.\n\n"
        f"{_WRITERS}\n\n{_force_open(config)}\n\n**Settings** (from the table list):\n\n{_settings(config)}"
    )


def full_rewrite_dag(config: TableConfig, where: str | None) -> str:
    scope = f" in the partitions `{where}` selects" if where else ""
    return (
        f"Rewrites all data and position-delete files of `{config.table}`{scope} behind its write gate, then "
        "cares for the table once the gate is open. Backfill past days with `airflow backfill create`.\n\n"
        f"{_WRITERS}\n\n{_force_open(config)}\n\n**Settings** (from the table list):\n\n{_settings(config)}"
    )
