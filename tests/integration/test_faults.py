"""The fault-injection suite of ``make faults``, asserted: every fault leaves the gate released, the writer with no
failed commit and the table with every row, and each scenario does what it must.

The scenarios (``devkit/faults.py``) share one table, one gated writer appending through pyiceberg every half
second, and a MariaDB of their own for the gate, which they stop and start (``devkit/fault_bench.py``). They run in
the order listed there.
"""

from __future__ import annotations

import pytest

from airflow_iceberg.surface.dag_factory import compaction_dag_id, full_rewrite_dag_id
from devkit import faults
from devkit.fault_bench import TABLE, FaultBench, Outcome
from tests.integration.conftest import suite_defaults


@pytest.fixture(scope="module")
def bench(tmp_path_factory, integration_stack):
    with FaultBench(tmp_path_factory.mktemp("faults"), suite_defaults()) as shared:
        yield shared


def run(bench: FaultBench, scenario) -> Outcome:
    outcome = scenario(bench)
    print(Outcome.header())
    print(outcome.row(), outcome.checks)
    # What every scenario must leave: writers free again, nothing lost, no commit the gate should have prevented.
    assert outcome.gate_after in ("open", "released at lease end"), outcome
    assert outcome.failed_commits == 0, bench.writer.failed_commits
    assert outcome.rows_lost == 0, outcome
    return outcome


@pytest.mark.timeout(1800)
def test_a_killed_task_takes_its_spark_job_with_it_and_writers_resume_at_the_lease_end(bench):
    outcome = run(bench, faults.task_killed_mid_rewrite)
    assert outcome.checks["spark_gone_seconds"] < 15  # within seconds, not when Spark would have finished
    assert outcome.gate_after == "released at lease end"  # nobody was left to open it
    assert outcome.paused_seconds <= outcome.checks["lease_seconds"] + 30
    assert outcome.checks["secrets_left_after_an_hour"] == []  # a killed task's secrets file outlives it an hour


@pytest.mark.timeout(1800)
def test_a_killed_spark_submit_fails_the_try_and_the_retry_compacts(bench):
    outcome = run(bench, faults.spark_submit_killed)
    assert outcome.checks["killed"] and outcome.checks["rewrite_tries"] == 2
    assert (outcome.run_state, outcome.gate_after) == ("success", "open")


@pytest.mark.timeout(1800)
def test_a_rewrite_of_five_leases_keeps_the_writer_paused_throughout(bench):
    outcome = run(bench, faults.rewrite_five_times_the_lease)
    assert outcome.checks["rewrite_seconds"] >= 5 * outcome.checks["lease_seconds"]
    assert outcome.checks["writer_commits_while_closed"] == 0
    assert outcome.checks["writer_commits_during_rewrite"] == 0
    assert (outcome.run_state, outcome.gate_after) == ("success", "open")


@pytest.mark.timeout(1800)
def test_a_rewrite_past_the_pause_ceiling_is_stopped_before_it(bench):
    outcome = run(bench, faults.rewrite_past_max_pause)
    assert outcome.run_state == "failed" and outcome.checks["task_states"]["rewrite_files"] == "failed"
    assert outcome.checks["gate_closed_seconds"] < outcome.checks["max_pause_seconds"]
    assert outcome.gate_after == "open"


@pytest.mark.timeout(1800)
@pytest.mark.parametrize("moment", ["close", "rewrite", "open"])
def test_mysql_down_at_each_step_is_ridden_out(bench, moment):
    outcome = run(bench, faults.mysql_down(moment))
    assert outcome.checks["downtime_seconds"] >= 15
    assert (outcome.run_state, outcome.gate_after) == ("success", "open")
    tries = outcome.checks["tries"]
    if moment == "close":
        assert tries["close_gate"] > 1  # retried with back-off until MySQL was back
    if moment == "open":
        assert tries["open_gate"] > 1  # retried, soon and often, until it freed the writer


@pytest.mark.timeout(1800)
def test_two_runs_at_once_take_turns_at_the_gate(bench):
    outcome = run(bench, faults.two_runs_at_once)
    assert outcome.run_state == "success + success"
    assert sorted(outcome.checks["closes"]) == [
        compaction_dag_id(TABLE),
        full_rewrite_dag_id(TABLE),
    ]


@pytest.mark.timeout(1800)
def test_a_stale_opener_after_a_takeover_leaves_the_new_owners_gate_closed(bench):
    outcome = run(bench, faults.stale_opener_after_takeover)
    assert outcome.run_state == "A failed, B success"
    assert outcome.checks["a_open_actions"] == ["open_noop"]  # A's teardown never opened B's gate


@pytest.mark.timeout(1800)
def test_a_busy_writer_that_ignores_the_gate_times_the_wait_out_and_nothing_is_rewritten(bench):
    outcome = run(bench, faults.sensor_times_out_with_a_busy_writer)
    states = outcome.checks["task_states"]
    assert outcome.checks["busy_commits"] >= 2  # it did commit while the gate was closed
    assert states["wait_until_snapshot_idle"] == "failed" and states["rewrite_files"] == "upstream_failed"
    assert (outcome.run_state, outcome.gate_after) == ("failed", "open")
    # The run's record names the task that ended the run and says why, as the wait saw it on its last try.
    detail = outcome.checks["record_detail"]
    assert detail.startswith(
        f"wait_until_snapshot_idle failed, so rewrite_files did not run: the writers of {TABLE} had not gone "
        "idle when the sensor's timeout of 15 s ran out: a writer kept committing to "
    ), detail


@pytest.mark.timeout(1800)
def test_an_unwritable_warehouse_fails_the_rewrite_without_touching_the_table(bench):
    outcome = run(bench, faults.warehouse_unwritable)
    assert outcome.checks["froze"] and outcome.checks["rewrite_tries"] == 2  # the first try hit it
    assert outcome.gate_after == "open"
