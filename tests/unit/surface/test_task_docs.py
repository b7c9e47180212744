"""What the UI says about each task: built from the table's own settings, and each says what to do when it fails."""

from __future__ import annotations

import pytest

from airflow_iceberg.surface import task_docs
from airflow_iceberg.table_list.schema import TableConfig


def config(**settings) -> TableConfig:
    return TableConfig.model_validate({"table": "lake.db.events", **settings})


def test_the_plan_says_what_makes_a_partition_need_work_by_the_tables_own_thresholds():
    text = task_docs.plan_compaction(config(health={"min_small_files": 7, "max_delete_ratio": 0.2}), full=False)
    assert "with 7 files under" in text and "over 0.2 of its data records" in text
    assert "Health planning is off" in task_docs.plan_compaction(config(health={"enabled": False}), full=False)
    assert "the daily full rewrite" in task_docs.plan_compaction(config(), full=True)
    assert "Checks this run's Params" in text and "names the bad parameter or predicate" in text  # its first step


def test_the_gate_names_its_spark_slots_only_for_a_table_that_has_them():
    assert "Spark slots" not in task_docs.close_gate(config())
    limited = task_docs.close_gate(config(spark_slots=2, spark_conn_id="spark_yarn"))
    assert "one of the 2 Spark slots of `spark_yarn`" in limited


def test_a_stuck_gate_is_opened_with_the_tables_own_command():
    text = task_docs.open_gate(config(write_gate_conn_id="gate_eu"))
    assert "airflow-iceberg force-open lake.db.events --conn-id gate_eu --reason" in text


@pytest.mark.parametrize(
    "doc",
    [
        lambda c: task_docs.plan_compaction(c, False),
        task_docs.record_run,
        task_docs.close_gate,
        task_docs.wait_until_snapshot_idle,
        lambda c: task_docs.rewrite_files(c, False),
        task_docs.open_gate,
        task_docs.expire_snapshots,
        task_docs.remove_orphan_files,
        lambda c: task_docs.REWRITE_MANIFESTS,
    ],
)
def test_every_task_says_what_to_do_when_it_fails(doc):
    assert "**If it fails**" in doc(config())
