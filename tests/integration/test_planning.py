"""Compact only what needs it: plans from real table metadata, on real tables, run by the real DAGs.

- A healthy table: the run succeeds without closing the gate or starting Spark, and its record says why.
- A table the run cannot read: the run fails before the gate, and its record says so.
- Five day partitions, two of them full of small files and position deletes: only those two are rewritten.
- The source design's two statements, written in the table list, match the same two CALLs typed into a bare
  Spark application on an identical copy.
"""

from __future__ import annotations

from collections import defaultdict

import pyarrow as pa
import pytest
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.planning.health import read_health
from devkit.writers import run_statements

GATED = ["close_gate", "wait_until_snapshot_idle", "rewrite_files", "open_gate", "record_run"]
DAYS = ["20240618", "20240619", "20240620", "20240621", "20240622"]


def load(table: str):
    return IcebergHook("lake").load_table(table.split(".", 1)[1])


def files_by_partition(table: str, content: int | None = None) -> dict[str, set[str]]:
    """dt -> the live file paths of that partition: all of them, or data (0) or position-delete (1) files only."""
    layout: dict[str, set[str]] = defaultdict(set)
    for entry in load(table).inspect.files().to_pylist():
        if content is None or entry["content"] == content:
            layout[entry["partition"]["dt"]].add(entry["file_path"])
    return dict(layout)


def rows(table: str) -> list[dict]:
    found = load(table).scan().to_arrow().select(["id", "dt", "payload"]).to_pylist()
    return sorted(found, key=lambda r: (r["id"], r["dt"]))


@pytest.fixture
def spark_submits(monkeypatch):
    """The spark-submit commands started during the test (the real hook's submit, counted)."""
    started: list[str] = []
    real = SparkSubmitHook.submit

    def submit(self, application: str = "", **kwargs):
        started.append(application)
        return real(self, application, **kwargs)

    monkeypatch.setattr(SparkSubmitHook, "submit", submit)
    return started


def test_a_healthy_table_is_left_alone_no_gate_no_spark_and_the_record_says_why(
    unique_name, compaction_dag, spark_submits
):
    catalog = IcebergHook("lake").catalog
    catalog.create_namespace_if_not_exists("plan")
    iceberg_table = catalog.create_table(f"plan.{unique_name}", schema=pa.schema([("id", pa.int64())]))
    for start in (0, 5000):  # two files, both large for the 4 KiB target below; no deletes
        iceberg_table.append(pa.table({"id": pa.array(range(start, start + 5000), pa.int64())}))
    table = f"lake.plan.{unique_name}"
    before = load(table).current_snapshot().snapshot_id
    assert all(f["file_size_in_bytes"] > 3072 for f in load(table).inspect.files().to_pylist())

    run = compaction_dag(table, rewrite_data_files={"target-file-size-bytes": 4096}).test()

    assert run.state == "success"
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    assert states["plan_compaction"] == "success"
    assert {states[task] for task in GATED} == {"skipped"}, states
    assert WriteGateHook().audit_trail(table) == []
    assert load(table).current_snapshot().snapshot_id == before
    assert spark_submits == []
    plan = run.get_task_instance("plan_compaction").xcom_pull(task_ids="plan_compaction", key="plan")
    assert plan["decision"] == "skip" and plan["reason"].startswith("no partition needs work")
    [record] = WriteGateHook().records.run_records(table)
    assert (record["decision"], record["outcome"], record["run_id"]) == ("skip", "skipped", run.run_id)
    assert record["reason"] == plan["reason"] and record["finished_at"] is not None
    assert (record["data_files_before"], record["delete_files_before"]) == (2, 0)


def test_a_run_that_fails_before_planning_is_recorded_as_failed_and_never_closes_the_gate(
    unique_name, compaction_dag, spark_submits
):
    table = f"lake.plan.{unique_name}"  # never created: the catalog cannot load it

    run = compaction_dag(table).test()

    assert run.state == "failed"
    assert run.get_task_instance("plan_compaction").state == "failed"  # it reads the table's schema
    assert WriteGateHook().audit_trail(table) == []
    assert spark_submits == []
    [record] = WriteGateHook().records.run_records(table)
    assert (record["decision"], record["outcome"], record["run_id"]) == ("none", "failed", run.run_id)
    assert record["reason"] == "plan_compaction failed (LookupError); see its log"
    assert record["finished_at"] is not None


def _counts(result: dict) -> dict:
    """The procedure's counts, bytes aside. `dangling_removal_attempts` is ours: the job removes dangling deletes
    itself after the procedure (core/spark_job.py), so bare Spark has no such key to compare it with, nor the job's
    timings."""
    return {
        key: value
        for key, value in result.items()
        if not key.endswith("bytes_count")
        and key not in ("dangling_removal_attempts", "call_seconds", "removal_seconds")
    }


def five_day_statements(table: str, unhealthy: list[str], healthy: list[str]) -> list[str]:
    """A day-partitioned merge-on-read table: one file per healthy day; six files and their position deletes
    (two DELETEs) per unhealthy day. Deterministic, so two tables built from it are identical."""
    name = table.split(".", 1)[1]
    statements = [
        f"CREATE TABLE lake.{name} (id BIGINT, dt STRING, payload STRING) USING iceberg PARTITIONED BY (dt) "
        "TBLPROPERTIES ('format-version'='2', 'write.delete.mode'='merge-on-read', "
        "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read')"
    ]

    def insert(days: list[str], batch: int) -> str:
        values = ", ".join(f"('{d}')" for d in days)
        return (
            f"INSERT INTO lake.{name} SELECT /*+ REPARTITION(1) */ {batch} * 1000 + r.id AS id, d.dt, "
            f"concat('row-', r.id) AS payload FROM range(40) r CROSS JOIN (VALUES {values}) AS d(dt)"
        )

    if healthy:
        statements.append(insert(healthy, 0))
    for batch in range(1, 7):
        statements.append(insert(unhealthy, batch))
    for remainder in (3, 7):
        days = ", ".join(f"'{d}'" for d in unhealthy)
        statements.append(f"DELETE FROM lake.{name} WHERE dt IN ({days}) AND id % 10 = {remainder}")
    return statements


def test_only_the_two_partitions_that_need_work_are_rewritten(unique_name, compaction_dag, table_config):
    table = f"lake.plan.{unique_name}"
    unhealthy, healthy = DAYS[3:], DAYS[:3]
    run_statements(
        table_config(table),
        ["CREATE NAMESPACE IF NOT EXISTS lake.plan", *five_day_statements(table, unhealthy, healthy)],
    )
    before, data_before = files_by_partition(table), files_by_partition(table, content=0)
    deletes_before = files_by_partition(table, content=1)
    assert all(len(before[d]) == 1 for d in healthy) and all(len(data_before[d]) == 6 for d in unhealthy)
    assert set(deletes_before) == set(unhealthy)  # position deletes in the two unhealthy days only
    rows_before = rows(table)

    # The table's own options keep the position deletes its rewrite made dangling (and give the position-delete
    # rewrite too few files to take up): the record still counts them, as the snapshot's summary does. The new data
    # files take a new sequence number, so Iceberg's removal can tell the deletes older than every live data file.
    dag = compaction_dag(
        table,
        health={"min_small_files": 4, "max_delete_ratio": 0.5, "max_delete_age_minutes": 600},
        rewrite_data_files={"remove-dangling-deletes": False, "use-starting-sequence-number": False},
        rewrite_position_delete_files={"rewrite-all": False, "min-input-files": 100},
    )
    run = dag.test()

    assert run.state == "success"
    plan = run.get_task_instance("plan_compaction").xcom_pull(task_ids="plan_compaction", key="plan")
    assert plan["decision"] == "compact", plan
    assert plan["partitions"] == {procedure: [f"dt={d}" for d in unhealthy] for procedure in plan["predicates"]}
    after = files_by_partition(table)
    for day in healthy:
        assert after[day] == before[day], f"partition {day} was touched"
    data_after = files_by_partition(table, content=0)
    for day in unhealthy:
        assert len(data_after[day]) == 1 and not (data_after[day] & data_before[day]), f"partition {day}: {after[day]}"
    assert rows(table) == rows_before
    trail = WriteGateHook().audit_trail(table)
    assert [row["action"] for row in trail] == ["close", "open"]
    [record] = WriteGateHook().records.run_records(table)
    assert (record["decision"], record["outcome"]) == ("compact", "success")
    assert record["partitions"] and all(f"dt={d}" in record["partitions"] for d in unhealthy)
    assert not any(f"dt={d}" in record["partitions"] for d in healthy)
    assert (record["data_files_before"], record["delete_files_before"]) == (15, sum(map(len, deletes_before.values())))
    assert record["data_files_after"] == 5
    total = int(load(table).current_snapshot().summary["total-delete-files"])
    dangling = read_health(load(table), table, small_file_ratio=0.75).dangling_delete_files
    assert record["delete_files_after"] == total == dangling == record["delete_files_before"], record
    assert record["gate_closed_seconds"] > 0 and record["rewrite_seconds"] > 0

    # Dangling position deletes alone make a partition need the cheap rewrite only, of its delete files, which
    # drops them: no data file is planned for them (a dry run shows the plan and closes no gate).
    run = compaction_dag(table).test(run_conf={"dry_run": True})
    assert run.state == "success"
    plan = run.get_task_instance("plan_compaction").xcom_pull(task_ids="plan_compaction", key="plan")
    assert plan["decision"] == "compact", plan
    assert plan["partitions"] == {"rewrite_position_delete_files": [f"dt={d}" for d in unhealthy]}, plan
    reasons = {tuple(p["reasons"]) for p in plan["health"]["unhealthy"]}
    assert all(len(r) == 1 and r[0].endswith("position-delete files that apply to nothing") for r in reasons), plan
    assert [row["action"] for row in WriteGateHook().audit_trail(table)] == ["close", "open"]  # no new close

    # With Iceberg's removal on (the default), the job removes the dangling files itself, after the rewrite (Iceberg
    # 1.12 fails the procedure's own removal on any commit since it began): a forced run, and a position-delete
    # rewrite that leaves them, so the removal is what takes them.
    run = compaction_dag(table, rewrite_position_delete_files={"rewrite-all": False, "min-input-files": 100}).test(
        run_conf={"force": True}
    )
    assert run.state == "success"
    result = run.get_task_instance("rewrite_files").xcom_pull(task_ids="rewrite_files")["rewrite_data_files"]
    assert (result["removed_delete_files_count"], result["dangling_removal_attempts"]) == (dangling, 1), result
    assert "dangling_deletes_left" not in result
    assert read_health(load(table), table, small_file_ratio=0.75).all_delete_files == 0
    assert rows(table) == rows_before


SEED_DATA_OPTIONS = {
    "max-concurrent-file-group-rewrites": 200,
    "target-file-size-bytes": 134217728,
    "min-input-files": 5,
}
SEED_WHERE = 'dt >= "20240620"'


def test_the_seeds_two_statements_from_the_table_list_match_the_same_calls_in_bare_spark(
    unique_name, compaction_dag, table_config
):
    # Names of one length: position-delete files hold data file paths, so their bytes depend on the name's length.
    table, copy = f"lake.plan.{unique_name}_dag", f"lake.plan.{unique_name}_cli"
    options = ", ".join(f"'{k}', '{v}'" for k, v in SEED_DATA_OPTIONS.items())
    bare_calls = [
        f"CALL lake.system.rewrite_data_files(table => 'plan.{unique_name}_cli', options => map({options}), "
        f"where => '{SEED_WHERE}')",
        f"CALL lake.system.rewrite_position_delete_files(table => 'plan.{unique_name}_cli', "
        "options => map('rewrite-all', 'true'))",
    ]
    results = run_statements(
        table_config(table),
        [
            "CREATE NAMESPACE IF NOT EXISTS lake.plan",
            *five_day_statements(table, DAYS, []),
            *five_day_statements(copy, DAYS, []),
            *bare_calls,
        ],
    )
    bare_results = results[-2:]
    assert bare_results[0]["rewritten_data_files_count"] == 18  # six files in each of the three days from 0620

    dag = compaction_dag(
        table,
        where={"rewrite_data_files": SEED_WHERE},  # and none for position deletes: the whole table
        rewrite_data_files=SEED_DATA_OPTIONS,
        rewrite_position_delete_files={"rewrite-all": True},
        health={"min_small_files": 5},
    )
    run = dag.test()

    assert run.state == "success"
    results = run.get_task_instance("rewrite_files").xcom_pull(task_ids="rewrite_files")
    assert list(results) == ["rewrite_data_files", "rewrite_position_delete_files"]  # in one Spark application
    data, deletes = results["rewrite_data_files"], results["rewrite_position_delete_files"]
    # Counts must match exactly; bytes only nearly. Position-delete files hold the data files' paths, which
    # differ by a random UUID between the two tables, and a rewritten data file holds its rows in the order its
    # input files were read, which Spark's tasks do not fix: both compress to a few bytes more or less.
    for result, bare in zip((data, deletes), bare_results, strict=True):
        assert _counts(result) == _counts(bare)
        for key in ("rewritten_bytes_count", "added_bytes_count"):
            if key in bare:
                assert abs(result[key] - bare[key]) <= 0.01 * bare[key], (key, result, bare)
    assert deletes["rewritten_delete_files_count"] > 0
    for content in (0, 1):
        layout, bare_layout = files_by_partition(table, content), files_by_partition(copy, content)
        assert {d: len(f) for d, f in layout.items()} == {d: len(f) for d, f in bare_layout.items()}
    sizes = [
        sorted(f["file_size_in_bytes"] for f in load(t).inspect.files().to_pylist() if f["content"] == 0)
        for t in (table, copy)
    ]
    assert all(abs(a - b) <= 0.01 * b for a, b in zip(*sizes, strict=True)), sizes
    assert rows(table) == rows(copy)
