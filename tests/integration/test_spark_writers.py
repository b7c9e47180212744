"""Spark writers through the shipped helpers (``airflow_iceberg.core.spark_writers``), beside gated compactions.

A Structured Streaming MERGE (``gated_ingest.py``, through ``gated_foreach_batch``) and a batch job that takes turns
at a ``DELETE`` by a non-key condition and a ``MERGE`` (``batch_changes.py``, holding the gate for each statement
through ``exclusive_write``) write one merge-on-read table while the real compaction DAG compacts it three times.
The control runs the same load with the gate not consulted and prints what conflicts, so the gated run can fail.
"""

from __future__ import annotations

import re
import zlib

from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from devkit.writer_jobs.ingest_events import expected_rows
from devkit.writers import BatchChangesJob, IngestJob, ungated_rewrite

TRIGGER_SECONDS = 3.0
FIRST_BATCH_KEY = 1_000_000  # the batch job's keys, apart from the stream's
BATCH_KEYS = 400
STATEMENT_INTERVAL = 4.0


def table_rows(table: str) -> dict[int, tuple[int, str]]:
    """Each key's (value, payload); fails if a key appears twice."""
    arrow = IcebergHook("lake").load_table(table.split(".", 1)[1]).scan().to_arrow()
    keys = arrow["key"].to_pylist()
    assert len(keys) == len(set(keys)), "a key appears twice"
    return dict(zip(keys, zip(arrow["value"].to_pylist(), arrow["payload"].to_pylist(), strict=True), strict=True))


def batch_job(config, tmp_path, **options) -> BatchChangesJob:
    """The batch writer on the stream's table, its keys apart; a failed statement is a failure here, not retried."""
    return BatchChangesJob(
        config,
        tmp_path / "batch",
        first_key=FIRST_BATCH_KEY,
        keys=BATCH_KEYS,
        interval_seconds=STATEMENT_INTERVAL,
        max_attempts=1,
        layout="events",
        **options,
    )


def conflicts(lines: list[str]) -> list[str]:
    """The lines that report Iceberg's refusal of a commit, each cut to its exception and the start of its message."""
    found = (re.search(r"\w+Exception: .{0,120}", line) for line in lines if "ValidationException" in line)
    return [match.group(0) for match in found if match]


def test_a_streaming_merge_and_a_batch_delete_through_the_helpers_beside_gated_compactions_fail_no_commit(
    unique_name, table_config, compaction_dag, tmp_path
):
    table = f"lake.writers.{unique_name}"
    config = table_config(table)
    stream = IngestJob(config, tmp_path / "stream", trigger_seconds=TRIGGER_SECONDS, writer_id="events-merge")
    batch = batch_job(config, tmp_path, exclusive=True, writer_id="gdpr-deletes")
    runs = []
    try:
        stream.start().wait_for_batches(2)  # the stream has created the table
        batch.start().wait_for_batches(2)  # the insert of its keys, and a first DELETE
        # idle_seconds of half an hour: only the stream's acknowledgement can end the wait in time.
        dag = compaction_dag(table, idle_seconds=1800, max_pause_seconds=4000, poke_interval=1)
        for number in range(3):
            stream.wait_for_batches(len(stream.batches()) + 2)
            batch.wait_for_batches(len(batch.batches()) + 1)
            run = dag.test()
            assert run.state == "success", f"compaction {number + 1} ended {run.state}"
            wait = run.get_task_instance("wait_until_snapshot_idle").xcom_pull(task_ids="wait_until_snapshot_idle")
            assert wait["done_by"] == "writer acknowledgement" and wait["writers_acknowledged"] == ["events-merge"]
            runs.append(run.run_id)
        batch.wait_for_batches(len(batch.batches()) + 2)  # statements after the last compaction too
    finally:
        finals = [job.stop() for job in (batch, stream) if job._thread is not None]
    assert stream.processes_left() == [] and batch.processes_left() == []
    batch_final, stream_final = finals
    kinds = [r["kind"] for r in batch.batches()]
    print(
        f"gated, through the helpers: {len(runs)} compactions; stream {stream_final['batches']} batches, failed "
        f"commits {stream_final['failed_commits']}; batch statements {kinds}, failed {batch_final['failed_attempts']}"
        f", lost {batch_final['lost']}"
    )
    assert (stream_final["failed_commits"], stream_final["exit_error"]) == (0, None), stream_final["failures"]
    assert (batch_final["failed_attempts"], batch_final["lost"], batch_final["exit_error"]) == (0, 0, None), (
        batch_final["failures"]
    )
    assert {"insert", "delete", "merge"} <= set(kinds)
    rows = table_rows(table)
    stream_rows = {key: row for key, row in rows.items() if key < FIRST_BATCH_KEY}
    assert stream_rows == expected_rows(stream_final["max_value"], stream.keys)
    batch_rows = {key: payload for key, (_, payload) in rows.items() if key >= FIRST_BATCH_KEY}
    digest = sum(zlib.crc32(f"{key}:{payload}".encode()) for key, payload in batch_rows.items())
    assert (len(batch_rows), digest) == (batch_final["rows"], batch_final["digest"])


def test_the_same_load_ungated_shows_what_conflicts(unique_name, table_config, tmp_path):
    table = f"lake.writers.{unique_name}"
    config = table_config(table)
    stream = IngestJob(config, tmp_path / "stream", gated=False, trigger_seconds=TRIGGER_SECONDS)
    batch = batch_job(config, tmp_path, gated=False)
    rewrite_conflicts: list[str] = []
    rewrites = 0
    try:
        stream.start().wait_for_batches(2)
        batch.start().wait_for_batches(2)
        for _ in range(3):  # the rewrite the DAG runs, with the gate not consulted
            stream.wait_for_batches(len(stream.batches()) + 2)
            rewrites += 1
            failed = ungated_rewrite(config)
            if failed is not None:
                rewrite_conflicts += conflicts(failed)[:1]
        batch.wait_for_batches(len(batch.batches()) + 2)
    finally:
        finals = [job.stop() for job in (batch, stream) if job._thread is not None]
    batch_final, stream_final = finals
    stream_conflicts = conflicts(stream_final["failures"])
    batch_conflicts = conflicts(batch_final["failures"])
    print(
        f"ungated, the same load: {rewrites} rewrites, {len(rewrite_conflicts)} failed {rewrite_conflicts[:1]}; "
        f"stream failed commits {stream_final['failed_commits']} {stream_conflicts[:1]}; batch statements failed "
        f"{batch_final['failed_attempts']} of {batch_final['attempts']} {batch_conflicts[:2]}"
    )
    assert rewrite_conflicts or stream_conflicts or batch_conflicts, "nothing conflicted without the gate"
