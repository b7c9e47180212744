"""The plan task's own checks, without a table: the predicates it hands the rewrite task; and what the run's record
says when the rewrites did not complete."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_iceberg.operators.plan import _check_predicates
from airflow_iceberg.surface.dag_factory import build_compaction_dag
from airflow_iceberg.table_list.schema import TableConfig


def test_the_plan_parses_every_predicate_it_hands_the_rewrite_and_fails_naming_a_bad_one():
    # The rewrite task trusts these (it runs with writers paused), so the plan fails first, before the gate.
    _check_predicates(
        {"rewrite_data_files": "ts >= TIMESTAMP '2026-11-22 00:00:00+00:00'", "rewrite_position_delete_files": None}
    )
    with pytest.raises(AirflowFailException, match="plan's where for rewrite_position_delete_files") as raised:
        _check_predicates(
            {
                "rewrite_data_files": "ts >= TIMESTAMP '2026-11-22 00:00:00+00:00'",
                "rewrite_position_delete_files": "ts >= '2026-11-22' OR 1 = (SELECT 1)",
            }
        )
    assert "SELECT 1" in str(raised.value)


class RecordingTaskInstance:
    """What ``record_run`` reads of its run when the rewrites did not complete: each task's state and the reason a
    task left as XCom ``failure``."""

    def __init__(self, states: dict[str, str], failures: dict[str, str]) -> None:
        self.states, self.failures = states, failures

    def get_task_states(self, dag_id, run_ids):
        return {run_ids[0]: self.states}

    def xcom_pull(self, task_ids, key):
        return self.failures.get(task_ids) if key == "failure" else None


def what_failed(states: dict[str, str], failures: dict[str, str] | None = None) -> str:
    dag = build_compaction_dag(TableConfig.model_validate({"table": "lake.sales.orders"}))
    context = {"ti": RecordingTaskInstance(states, failures or {}), "dag": dag, "run_id": "manual__1"}
    return dag.get_task("record_run")._what_failed(context)


@pytest.mark.parametrize(
    ("states", "failures", "said"),
    [
        (
            {"close_gate": "success", "wait_until_snapshot_idle": "failed", "rewrite_files": "upstream_failed"},
            {"wait_until_snapshot_idle": "a writer kept committing to lake.sales.orders while its gate was closed"},
            "wait_until_snapshot_idle failed, so rewrite_files did not run: a writer kept committing to "
            "lake.sales.orders while its gate was closed",
        ),
        (
            {"close_gate": "failed", "wait_until_snapshot_idle": "upstream_failed", "rewrite_files": "upstream_failed"},
            {},
            "close_gate failed, so rewrite_files did not run: see its log",
        ),
        # A pre-started rewrite fails too when the idle wait fails (it ended without the go): the wait is named.
        (
            {"close_gate": "success", "wait_until_snapshot_idle": "failed", "rewrite_files": "failed"},
            {"wait_until_snapshot_idle": "the writers had not gone idle"},
            "wait_until_snapshot_idle failed, so rewrite_files did not run: the writers had not gone idle",
        ),
        ({"wait_until_snapshot_idle": "success", "rewrite_files": "failed"}, {}, "rewrite_files failed: see its log"),
        ({"wait_until_snapshot_idle": "success", "rewrite_files": "skipped"}, {}, "rewrite_files ended skipped"),
    ],
)
def test_the_run_record_names_the_task_that_ended_the_run_and_why(states, failures, said):
    assert what_failed(states, failures) == said
