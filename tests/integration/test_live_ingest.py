"""The proof under live streaming ingest: gated compaction loses nothing and never conflicts; ungated fails.

A real Spark Structured Streaming job MERGEs upserts and deletes into a real Iceberg table every 3 s while the
real compaction DAG runs, through ``dag.test()``, against the same table. The control runs the same load with
the gate not consulted and shows Iceberg's ``ValidationException``, so the gated test is able to fail.
"""

from __future__ import annotations

from typing import Any

import pytest
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_iceberg.core.tables import TableName, create_streaming_table_statements
from airflow_iceberg.planning.health import read_health
from devkit.live_ingest import measure
from devkit.tables import TableStats
from devkit.writer_jobs.ingest_events import expected_rows
from devkit.writers import BatchInsertJob, IngestJob, run_statements, ungated_rewrite

TRIGGER_SECONDS = 3.0
#: The reference writers' table (``gated_ingest.py`` makes it as well).
EVENTS_COLUMNS = "key BIGINT, value BIGINT, payload STRING, ts TIMESTAMP"


def table_rows(table: str) -> list[tuple[int, int, str]]:
    arrow = IcebergHook("lake").load_table(table.split(".", 1)[1]).scan().to_arrow()
    return list(zip(arrow["key"].to_pylist(), arrow["value"].to_pylist(), arrow["payload"].to_pylist(), strict=True))


@pytest.mark.stack_check("Spark merge-on-read writer, gated")
@pytest.mark.stack_smoke
def test_gated_compactions_under_live_ingest_lose_nothing_and_never_conflict(
    unique_name, table_config, compaction_dag, tmp_path, stack_check
):
    table = f"lake.live.{unique_name}"
    job = IngestJob(table_config(table), tmp_path / "ingest", trigger_seconds=TRIGGER_SECONDS).start()
    finals, figures = [], []
    try:
        job.wait_for_batches(3)
        # idle_seconds of half an hour: only the writer's acknowledgement can end the wait in time.
        dag = compaction_dag(table, idle_seconds=1800, max_pause_seconds=4000, poke_interval=1)
        compactions = stack_check.compactions(3)
        for number in range(compactions):
            if number == 1:  # a restart from the streaming checkpoint between compactions
                finals.append(job.stop())
                job.start()
            job.wait_for_batches(len(job.batches()) + 2)  # the writer is live and committing
            run = dag.test()
            assert run.state == "success", f"compaction {number + 1} ended {run.state}"
            if number == compactions - 1:
                files_after_last_compaction = TableStats.read("lake", table).data_files
            job.wait_for_batches(len(job.batches()) + 2)  # the writer commits what the gate held back
            figures.append(measure(run, TableName.parse(table), job))
            # A MERGE per batch changes rows of existing files: every compaction pauses it, on every stack.
            paused = stack_check.record_pauses(run, figures[-1].gate_closed_seconds, lambda writer: "Spark MERGE")
            assert paused == {job.writer_id: True}, paused
            stack_check.record(
                compactions=len(figures),
                gate_closed_seconds=[f.gate_closed_seconds for f in figures],
                rewrite_failed_commits=0,  # each run succeeded
            )
    finally:
        finals.append(job.stop())
    stack_check.record(
        writer_failed_commits=sum(f["failed_commits"] for f in finals),
        writer_failures=[failure for f in finals for failure in f["failures"]][:3],
    )
    assert job.processes_left() == [], "the writer's Spark processes outlived it"

    # Both sides: no failed commit. Every compaction task succeeded at its first try.
    assert [f["failed_commits"] for f in finals] == [0] * len(finals), [f["failures"] for f in finals]
    assert [f["exit_error"] for f in finals] == [None] * len(finals)
    for figure in figures:
        assert figure.state == "success"
        assert figure.rewritten_data_files > figure.added_data_files > 0
        # The writer acknowledged the pause: the wait ended within one commit interval plus 10 s of closing.
        assert figure.wait_for_writer_seconds <= figure.commit_interval_seconds + 10, figure
        # The job timed its CALLs, inside the task's own time (Spark's start-up is outside them).
        assert 0 < figure.calls_seconds < figure.rewrite_seconds, figure
    # Nothing lost, nothing duplicated: the table is exactly what the events up to the last committed one make.
    max_value = finals[-1]["max_value"]
    rows = table_rows(table)
    keys = [key for key, _, _ in rows]
    exact = len(keys) == len(set(keys)) and dict((k, (v, p)) for k, v, p in rows) == expected_rows(max_value, job.keys)
    stack_check.record(rows_exact=exact)
    assert len(keys) == len(set(keys)), "a key appears twice"
    assert {key: (value, payload) for key, value, payload in rows} == expected_rows(max_value, job.keys)
    # The last compaction left few files: one per bucket, plus what the writer added before they were counted.
    assert files_after_last_compaction <= 4 + 8
    assert figures[-1].added_data_files <= 4


def test_gated_compactions_of_a_format_v3_table_fold_sparks_deletion_vectors_with_no_failed_commit(
    unique_name, table_config, compaction_dag, tmp_path
):
    """Format v3: Spark's MERGE writes deletion vectors, which a rewrite conflicts with as with position deletes."""
    table = f"lake.live.{unique_name}"
    job = IngestJob(table_config(table), tmp_path / "ingest", trigger_seconds=TRIGGER_SECONDS, format_version=3)
    job.start()
    vectors, results = [], []
    try:
        job.wait_for_batches(3)
        dag = compaction_dag(table, idle_seconds=1800, max_pause_seconds=4000, poke_interval=1)
        for number in range(2):
            job.wait_for_batches(len(job.batches()) + 2)  # MERGEs since the last compaction: new vectors
            health = read_health(IcebergHook("lake").load_table(table.split(".", 1)[1]), table, small_file_ratio=0.75)
            vectors.append(sum(p.deletion_vectors for p in health.partitions))
            run = dag.test()
            assert run.state == "success", f"compaction {number + 1} ended {run.state}"
            results.append(run.get_task_instance("rewrite_files").xcom_pull(task_ids="rewrite_files"))
        job.wait_for_batches(len(job.batches()) + 2)  # the writer commits what the gate held back
    finally:
        final = job.stop()
    assert job.processes_left() == [], "the writer's Spark processes outlived it"
    print(f"deletion vectors before each compaction: {vectors}; rewrites: {[r['rewrite_data_files'] for r in results]}")

    assert IcebergHook("lake").load_table(table.split(".", 1)[1]).metadata.format_version == 3
    assert all(count > 0 for count in vectors), "health counted no deletion vector"
    # No failed commit on either side.
    assert (final["failed_commits"], final["exit_error"]) == (0, None), final["failures"]
    for result in results:
        assert result["rewrite_data_files"]["failed_data_files_count"] == 0
        assert result["rewrite_data_files"]["rewritten_data_files_count"] > 0
    rows = table_rows(table)
    assert {key: (value, payload) for key, value, payload in rows} == expected_rows(final["max_value"], job.keys)
    assert len(rows) == len({key for key, _, _ in rows}), "a key appears twice"


@pytest.mark.parametrize(
    "format_version",
    [pytest.param(2, marks=pytest.mark.stack_check("Spark merge-on-read writer, ungated")), 3],
    ids=["v2-position-deletes", "v3-deletion-vectors"],
)
def test_the_same_load_without_the_gate_fails_with_iceberg_validation_exception(
    unique_name, table_config, tmp_path, format_version, request
):
    table = f"lake.live.{unique_name}"
    config = table_config(table)
    check = request.getfixturevalue("stack_check") if format_version == 2 else None
    rewrites = failed_rewrites = 0
    job = IngestJob(
        config, tmp_path / "ingest", gated=False, trigger_seconds=TRIGGER_SECONDS, format_version=format_version
    ).start()
    compaction_conflicts: list[str] = []
    try:
        job.wait_for_batches(3)
        for _ in range(4):  # the same rewrite the DAG runs, with the gate not consulted
            rewrites += 1
            failed = ungated_rewrite(config)
            if failed is not None:
                failed_rewrites += 1
                compaction_conflicts += [line for line in failed if "ValidationException" in line]
            writer_conflicts = [
                line for line in job.output if "COMMIT FAILED" in line and "ValidationException" in line
            ]
            if compaction_conflicts or writer_conflicts:
                break
    finally:
        final = job.stop()
    assert job.processes_left() == [], "the writer's Spark processes outlived it"
    writer_conflicts = [failure for failure in final["failures"] if "ValidationException" in failure]
    if check is not None:
        check.record(
            rewrites=rewrites,
            rewrite_failed_commits=failed_rewrites,
            rewrite_failures=compaction_conflicts[:2],
            writer_failed_commits=final["failed_commits"],
            writer_failures=writer_conflicts[:2],
        )
    print(
        f"ungated, Spark MERGE on format v{format_version}: rewrite conflicts {compaction_conflicts[:3]}; "
        f"writer conflicts {writer_conflicts[:3]}"
    )
    assert compaction_conflicts or writer_conflicts, "no ValidationException on either side without the gate"


def test_a_merge_writer_pauses_and_acknowledges_while_an_appending_writer_keeps_committing_through_three_compactions(
    unique_name, table_config, compaction_dag, tmp_path
):
    """The reference streaming writer (a MERGE per batch: row-level) and a batch writer that declares it appends, on
    one table: each compaction pauses the first alone, and its wait ends once that one acknowledges."""
    table = f"lake.live.{unique_name}"
    config = table_config(table)
    ingest = IngestJob(config, tmp_path / "ingest", trigger_seconds=TRIGGER_SECONDS, writer_id="ingest").start()
    batch = BatchInsertJob(config, tmp_path / "batch", first_key=1_000_000, writer_id="batch")
    finals = []
    try:
        ingest.wait_for_batches(2)  # the streaming writer has created the table
        # Two writers of one table: the MERGE must not conflict with the other's appends (Iceberg, gate or not).
        with IcebergHook("lake").load_table(table.split(".", 1)[1]).transaction() as transaction:
            transaction.set_properties({"write.merge.isolation-level": "snapshot"})
        batch.start().wait_for_batches(2)
        # idle_seconds of half an hour: only both writers' acknowledgements can end the wait in time.
        dag = compaction_dag(table, idle_seconds=1800, max_pause_seconds=4000, poke_interval=1)
        for number in range(3):
            ingest.wait_for_batches(len(ingest.batches()) + 1)
            batch.wait_for_batches(len(batch.batches()) + 1)
            run = dag.test()
            assert run.state == "success", f"compaction {number + 1} ended {run.state}"
            wait = run.get_task_instance("wait_until_snapshot_idle").xcom_pull(task_ids="wait_until_snapshot_idle")
            assert wait["done_by"] == "writer acknowledgement", wait
            assert (wait["writers_acknowledged"], wait["writers_keeping_on"]) == (["ingest"], ["batch"]), wait
    finally:
        finals = [job.stop() for job in (batch, ingest) if job._thread is not None]
    assert ingest.processes_left() == [] and batch.processes_left() == []
    assert [f["failed_commits"] for f in finals] == [0, 0], [f["failures"] for f in finals]
    assert [f["exit_error"] for f in finals] == [None, None]
    batch_final, ingest_final = finals
    expected = expected_rows(ingest_final["max_value"], ingest.keys)
    expected.update({key: (key, f"b{key}") for key in range(batch_final["first_key"], batch_final["next_key"])})
    rows = table_rows(table)
    assert len(rows) == len({key for key, _, _ in rows}), "a key appears twice"
    assert {key: (value, payload) for key, value, payload in rows} == expected


@pytest.mark.stack_check("append-only writer, gated")
def test_an_append_only_writer_keeps_committing_through_three_compactions_and_loses_nothing(
    unique_name, table_config, compaction_dag, tmp_path, stack_check
):
    """A Spark batch writer that appends only (``appends``, its snapshots named by its application id) is never
    paused: each compaction lets it keep committing, and its wait ends at once, its commits not waited out."""
    table = f"lake.live.{unique_name}"
    config = table_config(table)
    create = create_streaming_table_statements(TableName.parse(table), EVENTS_COLUMNS, "bucket(4, key)", 2)
    run_statements(config, list(create))
    job = BatchInsertJob(config, tmp_path / "appends", first_key=0, rows=20, interval_seconds=1.0, writer_id="appends")
    compactions: list[tuple[Any, Any]] = []
    final: dict[str, Any] = {}
    try:
        job.start().wait_for_batches(3)
        # idle_seconds of half an hour: were its commits waited out, no compaction would end in time.
        dag = compaction_dag(table, idle_seconds=1800, max_pause_seconds=4000, poke_interval=1)
        for number in range(stack_check.compactions(3)):
            job.wait_for_batches(len(job.batches()) + 3)  # new small files for the compaction to merge
            run = dag.test()
            assert run.state == "success", f"compaction {number + 1} ended {run.state}"
            closed, opened = gate_window(run, table)
            compactions.append((closed, opened))
            assert stack_check.record_pauses(run, (opened - closed).total_seconds(), str) == {"appends": False}
            wait = run.get_task_instance("wait_until_snapshot_idle").xcom_pull(task_ids="wait_until_snapshot_idle")
            assert (wait["writers"], wait["writers_keeping_on"]) == ([], ["appends"]), wait
            stack_check.record(
                compactions=len(compactions),
                gate_closed_seconds=[round((o - c).total_seconds(), 1) for c, o in compactions],
                rewrite_failed_commits=0,  # each run succeeded
            )
        job.wait_for_batches(len(job.batches()) + 2)
    finally:
        final = job.stop()
    stack_check.record(writer_failed_commits=final["failed_commits"], writer_failures=final["failures"][:3])
    assert job.processes_left() == [], "the writer's Spark processes outlived it"
    assert final["failed_commits"] == 0 and final["exit_error"] is None, final["failures"]
    # It kept committing through each compaction: its batches came a second apart, closed gate or not.
    batches = job.batches()
    for number, (closed, opened) in enumerate(compactions, 1):
        during = [b for b in batches if closed.timestamp() <= b["committed"] <= opened.timestamp()]
        print(f"compaction {number}: gate closed {(opened - closed).total_seconds():.1f} s, {len(during)} batches")
        assert all(b["paused_seconds"] == 0 for b in batches), "the append-only writer was paused"
        if (opened - closed).total_seconds() > 5:
            assert during, f"the writer committed nothing during compaction {number}"
    rows = table_rows(table)
    exact = sorted(rows) == [(key, key, f"b{key}") for key in range(final["first_key"], final["next_key"])]
    stack_check.record(rows_exact=exact)
    assert exact, f"{len(rows)} rows for keys {final['first_key']} to {final['next_key']}"


def gate_window(run: Any, table: str) -> tuple[Any, Any]:
    """When ``run`` closed the gate of ``table``, and when it opened it (database clock)."""
    from airflow_iceberg.hooks.write_gate import WriteGateHook

    trail = [r for r in WriteGateHook().audit_trail(table) if r["owner_run_id"] == run.run_id]
    return min(r["at"] for r in trail if r["action"] == "close"), max(r["at"] for r in trail if r["action"] == "open")


def test_a_writer_of_the_previous_protocol_pauses_for_each_compaction_as_before_and_loses_nothing(
    unique_name, table_config, compaction_dag, gate_hook, tmp_path
):
    """A writer built before gate schema version 9 (``devkit/writer_jobs/previous_protocol.py``: it declares
    nothing and reads the gate row alone), against the new tables: every compaction pauses it and waits for its
    acknowledgement, as before; no commit fails on either side, and every row is as written."""
    table = f"lake.live.{unique_name}"
    job = IngestJob(
        table_config(table), tmp_path / "ingest", trigger_seconds=TRIGGER_SECONDS, writer_id="old-writer",
        previous_protocol=True,
    )  # fmt: skip
    finals, figures = [], []
    try:
        job.start().wait_for_batches(3)
        dag = compaction_dag(table, idle_seconds=1800, max_pause_seconds=4000, poke_interval=1)
        for number in range(2):
            job.wait_for_batches(len(job.batches()) + 2)
            run = dag.test()
            assert run.state == "success", f"compaction {number + 1} ended {run.state}"
            [decided] = run.get_task_instance("close_gate").xcom_pull(task_ids="close_gate")["writers"]
            assert (decided["writer"], decided["pause"]) == ("old-writer", True), decided
            assert decided["reason"].startswith("it declares no commit kind (a writer of the previous protocol")
            wait = run.get_task_instance("wait_until_snapshot_idle").xcom_pull(task_ids="wait_until_snapshot_idle")
            assert (wait["done_by"], wait["writers_acknowledged"]) == ("writer acknowledgement", ["old-writer"])
            job.wait_for_batches(len(job.batches()) + 2)  # the writer commits what the gate held back
            figures.append(measure(run, TableName.parse(table), job))
    finally:
        finals.append(job.stop())
    [writer] = gate_hook.get_state(table).writers
    assert (writer.writer_id, writer.commit_kind, writer.commits_as) == ("old-writer", None, None)
    assert [f["failed_commits"] for f in finals] == [0], [f["failures"] for f in finals]
    for figure in figures:
        print(f"previous protocol: gate closed {figure.gate_closed_seconds} s, wait {figure.wait_for_writer_seconds} s")
        assert figure.rewritten_data_files > figure.added_data_files > 0
    rows = table_rows(table)
    assert len(rows) == len({key for key, _, _ in rows}), "a key appears twice"
    assert {key: (value, payload) for key, value, payload in rows} == expected_rows(finals[-1]["max_value"], job.keys)
