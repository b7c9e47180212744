"""A pre-started rewrite (``prestart_spark``) on a live Airflow, whose executor runs a run's tasks at once.

``rewrite_files`` starts beside ``close_gate``: its Spark application comes up while writers still commit, says it
is ready, and the gate closes only then; the job begins its ``CALL`` statements at the idle wait's go. A run whose
idle wait fails before the go ends the application without a ``CALL``, and the gate opens; so does a run whose
rewrite task is killed before the go, the idle wait seeing its work go silent.
"""

from __future__ import annotations

import time

from airflow_iceberg.core.gate_work import WORK_TABLE
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.surface.dag_factory import compaction_dag_id
from devkit.fault_bench import alive, rewrite_submit
from devkit.live_airflow import logged_at
from devkit.tables import data_file_paths
from devkit.writers import write_small_files

#: Every partition: the runs rewrite whatever the writer wrote.
EVERYTHING = {"where": "ts >= '2000-01-01'"}


def handshake_rows(gate_hook, dag_id: str) -> list[dict]:
    with gate_hook.store.transaction() as cursor:
        cursor.execute(f"SELECT * FROM {WORK_TABLE} WHERE owner_dag_id = %s", (dag_id,))
        return list(cursor.fetchall())


def small_table(unique_name: str, table_config) -> TableName:
    table = TableName.parse(f"lake.prestart.{unique_name}")
    write_small_files(table_config(table), "--days", "2", "--commits", "3", "--files-per-commit", "3")
    return table


def test_the_application_is_up_before_the_gate_closes_and_begins_at_the_go(
    unique_name, table_config, gate_hook, live_airflow
):
    table = small_table(unique_name, table_config)
    run_id = live_airflow.compacted(table, {"prestart_spark": True, "full_rewrite": {"schedule": None}}, EVERYTHING)
    dag_id = compaction_dag_id(table)
    log = live_airflow.task_log(dag_id, run_id, "rewrite_files")
    ready = logged_at(log, "Ready: waiting for the go")
    went = logged_at(log, "Go on ")
    running = logged_at(log, "Running: CALL")
    trail = gate_hook.audit_trail(table)
    assert [row["action"] for row in trail] == ["close", "open"]
    closed, opened = trail[0]["at"], trail[1]["at"]
    wait_log = live_airflow.task_log(dag_id, run_id, "wait_until_snapshot_idle")
    print(
        f"ready {ready.time()}, closed {closed.time()}, go {went.time()}, first CALL {running.time()}, "
        f"opened {opened.time()}: paused {(opened - closed).total_seconds():.1f} s, of which "
        f"{(went - closed).total_seconds():.1f} s before the go"
    )
    print("\n".join(line for line in wait_log.splitlines() if "idle for" in line or "gave the rewrite" in line))
    # The Spark application's start-up was over before the gate closed; its CALLs began after the go.
    assert ready < closed < went <= running < opened, (ready, closed, went, running, opened)
    # Between the go and the first CALL there is no scheduler round trip and no Spark start-up.
    assert (running - went).total_seconds() < 3, (went, running)
    assert handshake_rows(gate_hook, dag_id) == [], "open_gate left the run's handshake rows"
    assert gate_hook.get_state(table).state == "open"


def test_an_idle_wait_that_fails_before_the_go_ends_the_application_without_a_call(
    unique_name, table_config, gate_hook, gate_writer, live_airflow
):
    table = small_table(unique_name, table_config)
    before = data_file_paths(table)
    # A writer mid-write (a batch DELETE, say) that never acknowledges: the idle wait times out after 10 s.
    writer = gate_writer(str(table), writer_id="batch-delete")
    live_airflow.add_tables(
        {
            "table": str(table),
            "prestart_spark": True,
            "lease_seconds": 10,
            "max_pause_seconds": 20,
            "full_rewrite": {"schedule": None},
        }
    )
    dag_id = compaction_dag_id(table)

    with writer.writing(lambda: None):
        run_id = live_airflow.trigger(dag_id, EVERYTHING)
        run = live_airflow.wait_for_run(dag_id, run_id, timeout=900)

    states = live_airflow.task_states(dag_id, run_id)
    assert run["state"] == "failed", states
    assert states["wait_until_snapshot_idle"] == "failed", states
    assert states["rewrite_files"] == "failed", states
    assert states["open_gate"] == "success", states
    log = live_airflow.task_log(dag_id, run_id, "rewrite_files")
    assert "Ready: waiting for the go" in log, log[-3000:]
    # Ended at the wait's stop, or when the lease the wait no longer renewed ran out, whichever it saw first.
    assert "did not run: " in log and "No CALL ran" in log, log[-3000:]
    assert "wait_until_snapshot_idle failed" in log or "its lease ended before the go" in log, log[-3000:]
    assert "Running: CALL" not in log
    assert data_file_paths(table) == before, "a CALL ran"
    assert [row["action"] for row in gate_hook.audit_trail(table)] == ["close", "open"]
    assert gate_hook.get_state(table).state == "open"


def test_a_rewrite_killed_before_the_go_calls_nothing_and_writers_resume_within_a_lease(
    unique_name, table_config, gate_hook, gate_writer, live_airflow
):
    table = small_table(unique_name, table_config)
    before = data_file_paths(table)
    # A writer mid-write that never acknowledges holds the idle wait: no go can come while the task is killed.
    writer = gate_writer(str(table), writer_id="batch-delete")
    lease_seconds = 60
    live_airflow.add_tables(
        {
            "table": str(table),
            "prestart_spark": True,
            "lease_seconds": lease_seconds,
            "max_pause_seconds": 600,
            # The idle wait in the triggerer, which looks every poke_interval without a task start per look.
            "deferrable": True,
            "poke_interval": 1,
            "full_rewrite": {"schedule": None},
        }
    )
    dag_id = compaction_dag_id(table)
    with writer.writing(lambda: None):
        run_id = live_airflow.trigger(dag_id, EVERYTHING)
        live_airflow.wait_for("the gate to close", lambda: gate_hook.get_state(table).state == "closed", 600, 0.2)
        spark_submit = live_airflow.wait_for("the rewrite's spark-submit", lambda: rewrite_submit(table), 60)
        application = [spark_submit, *spark_submit.children(recursive=True)]
        task = spark_submit.parent()
        task.kill()  # SIGKILL of the task's process, and only it: it says nothing to anybody
        killed = time.monotonic()
        live_airflow.wait_for(
            "the killed task's Spark application to end",
            lambda: not any(map(alive, application)),
            60,
            0.2,
        )
        spark_gone = time.monotonic() - killed
        live_airflow.wait_for("the writers to be let go", lambda: not gate_hook.get_state(table).pauses_writers, 300)
        resumed = time.monotonic() - killed
        run = live_airflow.wait_for_run(dag_id, run_id, timeout=600)

    states = live_airflow.task_states(dag_id, run_id)
    wait_log = live_airflow.task_log(dag_id, run_id, "wait_until_snapshot_idle")
    print(
        f"killed the rewrite task before the go: its Spark application ended {spark_gone:.1f} s later, the writers "
        f"were let go {resumed:.1f} s after the kill (lease {lease_seconds} s); task states {states}"
    )
    assert spark_gone < 15, spark_gone
    assert resumed <= lease_seconds, resumed
    assert run["state"] == "failed" and states["wait_until_snapshot_idle"] == "failed", states
    # The wait saw the work go silent and ended, rather than keep writers paused for nothing.
    assert "has not said it is alive" in wait_log, wait_log[-3000:]
    assert states["open_gate"] == "success", states
    assert data_file_paths(table) == before, "a CALL ran"
    assert gate_hook.get_state(table).state == "open"
    assert handshake_rows(gate_hook, dag_id) == [], "open_gate left the run's handshake rows"
