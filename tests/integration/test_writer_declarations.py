"""Trust, then verify, with real Spark writes: a writer that declares less than it commits is seen in the table's
history before the next compaction, which pauses it; the run record, the tables page and the plan's log name it
and its snapshot, and it costs at most one failed commit."""

from __future__ import annotations

import json
import zlib

from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_iceberg.core.tables import TableName, create_streaming_table_statements
from airflow_iceberg.plugins import tables_view
from devkit.writers import BatchChangesJob, run_statements

EVENTS_COLUMNS = "key BIGINT, value BIGINT, payload STRING, ts TIMESTAMP"


def rows_digest(table: str) -> tuple[int, int]:
    """The table's rows and the sum of CRC-32s of ``<key>:<payload>`` (what the batch job's state digests)."""
    arrow = IcebergHook("lake").load_table(table.split(".", 1)[1]).scan().to_arrow()
    keys, payloads = arrow["key"].to_pylist(), arrow["payload"].to_pylist()
    return len(keys), sum(zlib.crc32(f"{k}:{p}".encode()) for k, p in zip(keys, payloads, strict=True))


def test_a_writer_that_declares_appends_but_deletes_rows_is_paused_from_the_next_compaction_and_named_for_it(
    unique_name, table_config, compaction_dag, gate_hook, tmp_path, capfd
):
    table = f"lake.live.{unique_name}"
    config = table_config(table)
    run_statements(config, create_streaming_table_statements(TableName.parse(table), EVENTS_COLUMNS, "bucket(4, key)"))
    # Its statements: an INSERT, then a DELETE by a non-key condition and a MERGE in turns (merge-on-read: position
    # deletes on its older files). It declares "appends" all the same.
    liar = BatchChangesJob(
        config, tmp_path / "liar", first_key=0, keys=200, interval_seconds=2.0, writer_id="liar", layout="events",
        commit_kind="appends",
    )  # fmt: skip
    runs = []
    try:
        liar.start().wait_for_batches(3)  # it has run a DELETE
        [declared] = gate_hook.get_state(table).writers
        assert (declared.commit_kind, declared.observed_kind) == ("appends", None)
        assert declared.commits_as and declared.commits_as.startswith("spark.app.id=")
        dag = compaction_dag(table, idle_seconds=1800, max_pause_seconds=4000, poke_interval=1)
        for number in range(2):
            liar.wait_for_batches(len(liar.batches()) + 1)
            run = dag.test(run_conf={"force": True})
            assert run.state == "success", f"compaction {number + 1} ended {run.state}"
            runs.append(run)
    finally:
        final = liar.stop(timeout=300)
    log = "".join(capfd.readouterr())  # dag.test() runs the tasks in this process

    # The first compaction's plan read the history: the writer's DELETE, named by its snapshot.
    plan = runs[0].get_task_instance("plan_compaction").xcom_pull(task_ids="plan_compaction", key="plan")
    [observed] = plan["observed"]
    snapshot = observed["snapshot_id"]
    assert (observed["writer"], observed["kind"]) == ("liar", "row-level"), observed
    assert observed["detail"].startswith(f"snapshot {snapshot} (") and "older than its own commit" in observed["detail"]
    # ... and from it on, each compaction paused the writer, saying why.
    for run in runs:
        [decided] = run.get_task_instance("close_gate").xcom_pull(task_ids="close_gate")["writers"]
        assert decided["writer"] == "liar" and decided["pause"], decided
        assert decided["reason"].startswith("it declared appends (Iceberg "), decided
        assert "but the table's history shows row-level changes to existing files" in decided["reason"]
        assert f"snapshot {snapshot} (" in decided["reason"]
    # The run record names it and its snapshot.
    records = {r["run_id"]: r for r in gate_hook.records.run_records(table)}
    [recorded] = json.loads(records[runs[0].run_id]["writers"])
    assert recorded["writer"] == "liar" and recorded["pause"] and f"snapshot {snapshot}" in recorded["reason"]
    # So does the tables page, from the writer's row.
    state = gate_hook.get_state(table)
    [shown] = [tables_view.writer(state, w) for w in state.writers]
    assert (shown["commit_kind"], shown["observed_kind"], shown["observed_snapshot_id"]) == (
        "appends",
        "row-level",
        snapshot,
    )
    assert f"snapshot {snapshot} (" in shown["observed_detail"]
    # And the plan's log.
    assert f"Writer liar declared appends, but snapshot {snapshot} (" in log, log[-3000:]
    # At most one failed commit in all (here none: it was seen before any compaction met it).
    failed = final["failed_attempts"]
    print(f"the mis-declared writer: {final['statements']} statements, {failed} failed commits, {final['lost']} lost")
    assert failed <= 1 and final["lost"] == 0, final["failures"]
    assert rows_digest(table) == (final["rows"], final["digest"])
