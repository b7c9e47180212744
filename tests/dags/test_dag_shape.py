"""The DAG a table entry becomes: id, task chain, teardown, one run at a time."""

from __future__ import annotations

import pytest
from airflow.sdk import TriggerRule
from pydantic import ValidationError

from airflow_iceberg.planning.health import HealthThresholds
from airflow_iceberg.surface.dag_factory import WORK_READY_SECONDS, build_compaction_dag, build_full_rewrite_dag
from airflow_iceberg.table_list.schema import TableConfig

CHAIN = [
    "plan_compaction",
    "close_gate",
    "wait_until_snapshot_idle",
    "rewrite_files",
    "open_gate",
    "record_run",
]


def make_dag(**settings):
    return build_compaction_dag(TableConfig.model_validate({"table": "lake.sales.orders", **settings}))


def test_dag_id_and_chain_follow_the_table():
    dag = make_dag()
    assert dag.dag_id == "iceberg_compact__lake__sales__orders"
    assert set(dag.task_ids) == set(CHAIN)
    assert dag.max_active_runs == 1


def test_a_prestarted_rewrite_starts_beside_the_gate_and_the_gate_opens_after_both():
    dag = make_dag(prestart_spark=True)
    assert dag.get_task("rewrite_files").upstream_task_ids == {"plan_compaction"}
    assert dag.get_task("close_gate").upstream_task_ids == {"plan_compaction"}
    assert dag.get_task("wait_until_snapshot_idle").upstream_task_ids == {"close_gate"}
    assert dag.get_task("open_gate").upstream_task_ids == {"close_gate", "wait_until_snapshot_idle", "rewrite_files"}
    # The handshake that lets the pre-started application begin at the go, and only then.
    assert dag.get_task("close_gate").work_ready_seconds is not None
    assert dag.get_task("wait_until_snapshot_idle").prestarted_work
    assert dag.get_task("rewrite_files").wait_for_go_seconds is not None
    assert dag.get_task("open_gate").prestarted_work


@pytest.mark.parametrize("settings", [{}, {"prestart_spark": True, "spark_slots": 2}])
def test_otherwise_the_rewrite_follows_the_idle_wait_one_task_after_another(settings):
    dag = make_dag(**settings)
    for upstream, downstream in zip(CHAIN, CHAIN[1:], strict=False):
        assert downstream in dag.get_task(upstream).downstream_task_ids
    assert [t.task_id for t in dag.topological_sort()] == CHAIN
    assert dag.get_task("close_gate").work_ready_seconds is None
    assert not dag.get_task("wait_until_snapshot_idle").prestarted_work
    assert dag.get_task("rewrite_files").wait_for_go_seconds is None


def test_open_gate_is_the_teardown_of_close_gate_so_it_always_runs_but_never_masks_a_failure():
    dag = make_dag()
    open_gate = dag.get_task("open_gate")
    assert open_gate.is_teardown
    assert dag.get_task("close_gate").is_setup
    assert open_gate.trigger_rule == TriggerRule.ALL_DONE_SETUP_SUCCESS
    assert "close_gate" in open_gate.upstream_task_ids


def test_record_run_is_the_teardown_of_the_plan_so_every_planned_run_is_recorded_whatever_the_rewrites_did():
    dag = make_dag()
    record = dag.get_task("record_run")
    assert record.is_teardown and dag.get_task("plan_compaction").is_setup
    assert record.upstream_task_ids == {"plan_compaction", "open_gate"}
    assert record.trigger_rule == TriggerRule.ALL_DONE_SETUP_SUCCESS
    # The plan ends runs with nothing to do: everything after it is skipped, teardowns included.
    assert dag.get_task("plan_compaction").ignore_downstream_trigger_rules is True


def test_both_rewrites_run_in_one_task_data_files_first_as_the_plan_says():
    """One Spark application per pause: one start-up, not one per procedure."""
    rewrite = make_dag().get_task("rewrite_files")
    assert rewrite.procedures == ["rewrite_data_files", "rewrite_position_delete_files"]
    assert rewrite.plan_task_id == "plan_compaction" and rewrite.trigger_rule == TriggerRule.ALL_SUCCESS
    assert make_dag().get_task("record_run").rewrite_task_id == "rewrite_files"


def test_health_thresholds_reach_the_plan_and_the_full_rewrite_plans_without_them():
    health = {"min_small_files": 3, "max_delete_ratio": 0.5, "max_delete_age_minutes": 5, "small_file_ratio": 0.5}
    plan = make_dag(health=health).get_task("plan_compaction")
    assert (plan.thresholds.min_small_files, plan.thresholds.max_delete_ratio) == (3, 0.5)
    assert (plan.thresholds.max_delete_age_minutes, plan.thresholds.small_file_ratio) == (5, 0.5)
    assert make_dag(health={"enabled": False}).get_task("plan_compaction").thresholds is None
    assert make_full_rewrite_dag().get_task("plan_compaction").thresholds is None


def test_a_predicate_per_procedure_reaches_the_plan_and_only_through_the_plan_the_rewrite():
    where = {"rewrite_data_files": 'dt >= "20240620"'}
    dag = make_dag(where=where)
    assert dag.get_task("plan_compaction").where == {**where, "rewrite_position_delete_files": None}
    # The plan renders and checks it, then narrows it: the rewrite's CALLs take the plan's predicates, and nothing else.
    rewrite = dag.get_task("rewrite_files")
    assert (rewrite.where, rewrite.plan_task_id) == ({}, "plan_compaction")


def test_spark_slots_need_no_airflow_pool_the_slot_queue_is_the_one_limit():
    """A task whose pool does not exist never starts: with spark_slots, every task stays in Airflow's default pool,
    and close_gate's slot queue alone bounds the tables paused and rewritten."""
    for dag in (
        make_dag(spark_conn_id="spark_yarn", spark_slots=3),
        make_full_rewrite_dag(spark_conn_id="spark_yarn", spark_slots=3),
    ):
        assert {task.pool for task in dag.tasks} == {"default_pool"}, dag.dag_id


def test_with_spark_slots_close_gate_waits_for_a_slot_of_the_connection_by_the_plans_score():
    for dag in (
        make_dag(spark_conn_id="spark_yarn", spark_slots=3),
        make_full_rewrite_dag(spark_conn_id="spark_yarn", spark_slots=3),
    ):
        close = dag.get_task("close_gate")
        assert (close.spark_conn_id, close.spark_slots, close.plan_task_id) == ("spark_yarn", 3, "plan_compaction")
        assert "one of the 3 Spark slots of `spark_yarn`" in close.doc_md
        assert close.deferrable  # it waits for its slot in the triggerer, holding no worker
    assert make_dag().get_task("close_gate").spark_slots is None
    assert not make_dag().get_task("close_gate").deferrable
    assert make_dag(deferrable=True).get_task("close_gate").deferrable


def test_table_settings_reach_the_tasks():
    dag = make_dag(
        schedule="@hourly",
        idle_seconds=90,
        lease_seconds=900,
        max_pause_seconds=2400,
        poke_interval=3,
        gate_wait_seconds=120,
        deferrable=True,
        where="dt >= '{{ ds_nodash }}'",
        rewrite_data_files={"target-file-size-bytes": 134217728},
        spark_conn_id="spark_yarn",
        iceberg_conn_id="lake_catalog",
        write_gate_conn_id="gate_prod",
        spark={"packages": ["org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2"]},
        prestart_spark=True,
    )
    close, wait = dag.get_task("close_gate"), dag.get_task("wait_until_snapshot_idle")
    rewrite = dag.get_task("rewrite_files")
    assert (close.lease_seconds, close.max_pause_seconds, close.write_gate_conn_id) == (900, 2400, "gate_prod")
    assert (close.gate_wait_seconds, close.poke_interval) == (120, 3)
    assert wait.poke_interval == 3
    assert (wait.idle_seconds, wait.deferrable, wait.iceberg_conn_id) == (90, True, "lake_catalog")
    assert wait.timeout == 1200  # half the longest pause, leaving the rest for the rewrites
    # Pre-started, the job waits for the application's readiness, the gate and the go first (at most
    # wait_for_go_seconds), then works at most the pause's ceiling; it stops itself there too.
    assert rewrite.wait_for_go_seconds == WORK_READY_SECONDS + 120 + 2400
    assert rewrite.execution_timeout.total_seconds() == rewrite.wait_for_go_seconds + 2400
    # Under the table's own options, the provider's: data files that carry deletes are rewritten, and the delete
    # files that then apply to nothing are removed; every position-delete file the run takes is rewritten.
    folding = {"delete-file-threshold": 1, "remove-dangling-deletes": True}
    assert rewrite.options == {
        "rewrite_data_files": {**folding, "target-file-size-bytes": 134217728},
        "rewrite_position_delete_files": {"rewrite-all": True},
    }
    assert dag.get_task("plan_compaction").where == dict.fromkeys(rewrite.procedures, "dt >= '{{ ds_nodash }}'")
    assert rewrite.where == {}  # the plan's predicates are the CALLs' own
    assert rewrite._conn_id == "spark_yarn"
    assert rewrite.packages == "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2"
    assert rewrite.write_gate_conn_id == "gate_prod"
    assert dag.schedule.timetable.summary == "0 * * * *"  # @hourly, with the health watch by default


def test_the_table_name_is_parsed_once_and_every_task_holds_that_value():
    config = TableConfig.model_validate({"table": "lake.sales.orders"})
    for dag in (build_compaction_dag(config), build_full_rewrite_dag(config)):
        assert {id(task.table) for task in dag.tasks} == {id(config.table)}  # the very object, not a re-parse


def test_what_an_entry_leaves_unset_reaches_the_tasks_as_the_configs_default():
    config = TableConfig.model_validate({"table": "lake.sales.orders"})
    dag = build_full_rewrite_dag(config)
    close, wait = dag.get_task("close_gate"), dag.get_task("wait_until_snapshot_idle")
    assert (close.lease_seconds, close.gate_wait_seconds, close.poke_interval) == (
        config.lease_seconds,
        config.gate_wait_seconds,
        config.poke_interval,
    )
    assert (wait.idle_seconds, wait.poke_interval) == (config.idle_seconds, config.poke_interval)
    expire = dag.get_task("expire_snapshots")
    maintenance = config.maintenance
    assert (expire.older_than_hours, expire.retain_last, expire.checkpoint_marker) == (
        maintenance.expire_older_than_hours,
        maintenance.retain_last,
        maintenance.checkpoint_marker,
    )
    assert expire.retain_last == 10  # the one default, written once, in the config
    assert dag.get_task("remove_orphan_files").older_than_hours == maintenance.orphan_older_than_hours


def test_sensor_reschedules_unless_deferrable():
    assert make_dag().get_task("wait_until_snapshot_idle").mode == "reschedule"
    assert make_dag(deferrable=True).get_task("wait_until_snapshot_idle").mode == "poke"


def make_full_rewrite_dag(**settings):
    return build_full_rewrite_dag(TableConfig.model_validate({"table": "lake.sales.orders", **settings}))


def render_where(dag, logical_date: str) -> str:
    """The data-file rewrite's where predicate rendered for a run on ``logical_date``, as Jinja renders it in
    plan_compaction's check (the plan then narrows it for the rewrite)."""
    import pendulum
    from airflow.macros import ds_add

    task = dag.get_task("plan_compaction")  # its check renders the table's where; the plan narrows it
    moment = pendulum.parse(logical_date)
    context = {"ds": moment.to_date_string(), "logical_date": moment, "macros": type("M", (), {"ds_add": ds_add})}
    return task.render_template(task.where["rewrite_data_files"], context)


def test_full_rewrite_dag_rewrites_everything_of_the_days_partitions_behind_the_gate():
    dag = make_full_rewrite_dag(full_rewrite={"partition": {"column": "dt", "format": "yyyyMMdd"}, "catchup": True})
    assert dag.dag_id == "iceberg_full_rewrite__lake__sales__orders"
    maintenance = ["rewrite_manifests", "expire_snapshots", "remove_orphan_files"]
    order = [t.task_id for t in dag.topological_sort()]
    assert [t for t in order if t not in maintenance] == CHAIN and [t for t in order if t in maintenance] == maintenance
    # Maintenance runs once the gate is open again, and only after the rewrites succeeded.
    assert dag.get_task("rewrite_manifests").upstream_task_ids == {"open_gate", "rewrite_files"}
    assert dag.get_task("remove_orphan_files").upstream_task_ids == {"expire_snapshots"}
    assert dag.get_task("open_gate").is_teardown and dag.max_active_runs == 1
    assert dag.timetable.summary == "0 0 * * *" and dag.catchup is True  # @daily
    everything = {"rewrite-all": True, "max-concurrent-file-group-rewrites": 200}
    assert dag.get_task("rewrite_files").options == {
        "rewrite_data_files": {**everything, "remove-dangling-deletes": True},  # then drops what applies to nothing
        "rewrite_position_delete_files": everything,
    }
    assert render_where(dag, "2026-11-20T00:00:00+00:00") == "`dt` = '20261120'"


def test_a_day_transform_selects_the_utc_day_of_the_logical_date():
    dag = make_full_rewrite_dag(full_rewrite={"partition": {"column": "ts", "transform": "day"}})
    assert render_where(dag, "2026-11-20T00:00:00+00:00") == (
        "`ts` >= TIMESTAMP '2026-11-20 00:00:00' AND `ts` < TIMESTAMP '2026-11-21 00:00:00'"
    )


def test_without_a_partition_the_full_rewrite_takes_the_whole_table():
    assert make_full_rewrite_dag().get_task("plan_compaction").where == {
        "rewrite_data_files": None,
        "rewrite_position_delete_files": None,
    }


def test_tasks_hold_no_copy_of_the_dags_params_which_the_run_still_sees():
    from airflow.sdk.definitions.param import process_params

    dag = build_compaction_dag(TableConfig(table="lake.db.events"))
    for task in dag.tasks:
        assert not task.params, f"{task.task_id} holds a copy of the DAG's Params"
        assert process_params(dag, task, {"where": "ts > '2026-01-01'"}, suppress_exception=False)["where"] == (
            "ts > '2026-01-01'"
        )


def test_every_task_retries_and_open_gate_retries_most_and_soonest():
    for dag in (
        build_compaction_dag(TableConfig(table="lake.db.events")),
        build_full_rewrite_dag(TableConfig(table="lake.db.events")),
    ):
        tasks = dag.task_dict
        assert all(task.retries >= 1 for task in tasks.values()), {t: tasks[t].retries for t in tasks}
        open_gate = tasks["open_gate"]
        others = [t for t in tasks.values() if t is not open_gate]
        assert open_gate.retries > max(t.retries for t in others)
        assert open_gate.retry_delay <= min(t.retry_delay for t in others)


GATE_HELD = {"close_gate", "wait_until_snapshot_idle", "rewrite_files", "open_gate"}


@pytest.mark.parametrize("settings", [{}, {"spark_slots": 4}, {"prestart_spark": True}])
def test_the_tasks_that_hold_a_gate_go_first_when_workers_are_short_before_any_runs_plan(settings):
    """The weight the scheduler queues by: Airflow's own strategy on the DAG as the scheduler stores it."""
    from types import SimpleNamespace

    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.task.priority_strategy import validate_and_load_priority_weight_strategy

    config = TableConfig.model_validate({"table": "lake.db.events", **settings})  # maintenance on, by default
    for built in (build_compaction_dag(config), build_full_rewrite_dag(config)):
        dag = DagSerialization.from_dict(DagSerialization.to_dict(built))
        weight = {
            task.task_id: validate_and_load_priority_weight_strategy(task.weight_rule).get_weight(
                SimpleNamespace(task=task)
            )
            for task in dag.tasks
        }
        held = {t: w for t, w in weight.items() if t in GATE_HELD}
        rest = {t: w for t, w in weight.items() if t not in GATE_HELD}
        assert set(held) == GATE_HELD and "plan_compaction" in rest, weight
        # Under Airflow's default rule the plan, first of a run, would weigh most of all.
        assert min(held.values()) > max(rest.values()), weight
        assert min(held.values()) >= 100, weight  # before the tasks of most DAGs of the same Airflow


def test_every_task_says_what_it_does_and_what_to_do_when_it_fails_and_the_dag_lists_the_settings():
    config = TableConfig(table="lake.db.events", lease_seconds=1200, spark={"conf": {"spark.secret.key": "s3cr3t"}})
    for dag in (build_compaction_dag(config), build_full_rewrite_dag(config)):
        for task in dag.tasks:
            assert task.doc_md and "**If it fails**" in task.doc_md, task.task_id
        assert "airflow-iceberg force-open lake.db.events" in dag.task_dict["open_gate"].doc_md
        assert "| `lease_seconds` | `1200` |" in dag.doc_md
        assert "| `idle_seconds` | `300` |" in dag.doc_md
        assert "spark.secret.key" in dag.doc_md and "s3cr3t" not in dag.doc_md
        assert "What a closed gate means for writers" in dag.doc_md


def test_by_default_the_compaction_dag_runs_on_its_tables_health_watch():
    dag = make_dag()
    (asset,) = dag.schedule
    (watcher,) = asset.watchers
    trigger = watcher.trigger
    assert asset.name == "iceberg_health__lake__sales__orders"
    assert (trigger.table, trigger.dag_id) == ("lake.sales.orders", dag.dag_id)
    assert trigger.shared_stream_key()[1:] == ("lake", "write_gate_default", 60.0)
    assert trigger.thresholds == HealthThresholds(
        small_file_ratio=0.75, min_small_files=12, max_delete_ratio=0.1, max_delete_age_minutes=60.0
    )


def test_a_cron_schedule_with_the_watch_is_a_safety_net_either_starts_a_run():
    dag = make_dag(schedule="@daily", health={"poll_interval": 30, "cooldown_minutes": 2, "min_small_files": 5})
    assert dag.schedule.timetable.summary == "0 0 * * *"  # @daily
    (watcher,) = dag.schedule.asset_condition.watchers
    assert (watcher.trigger.poll_interval, watcher.trigger.cooldown_minutes) == (30.0, 2.0)
    assert watcher.trigger.thresholds.min_small_files == 5


def test_without_the_watch_the_schedule_is_the_cron_alone():
    assert make_dag(schedule="@hourly", health={"watch": False}).timetable.summary == "0 * * * *"
    assert make_dag(health={"watch": False}).schedule is None
    assert make_dag(schedule="@hourly", health={"enabled": False}).timetable.summary == "0 * * * *"


def test_the_full_rewrite_keeps_its_cron():
    assert make_full_rewrite_dag().timetable.summary == "0 0 * * *"  # @daily


def test_a_once_schedule_cannot_go_with_the_watch_and_the_error_says_what_to_do():
    with pytest.raises(ValidationError, match="cannot go with the health watch.*health.watch: false"):
        TableConfig.model_validate({"table": "lake.db.t", "schedule": "@once"})


def test_both_dags_crons_are_the_shared_timetable_through_airflows_serialization():
    from airflow.serialization.serialized_objects import DagSerialization

    from airflow_iceberg.timetables.cron import SharedCronTriggerTimetable

    settings = {"schedule": "@daily", "full_rewrite": {"schedule": "0 3 * * *"}}
    stored = {}
    for name, table in (("one", "lake.sales.orders"), ("two", "lake.sales.items")):
        config = TableConfig.model_validate({"table": table, **settings})
        compaction, full = build_compaction_dag(config), build_full_rewrite_dag(config)
        stored[name] = [DagSerialization.from_dict(DagSerialization.to_dict(dag)) for dag in (compaction, full)]
    (compaction, full), (other_compaction, other_full) = stored["one"], stored["two"]
    assert isinstance(full.timetable, SharedCronTriggerTimetable)
    assert full.timetable.summary == "0 3 * * *"
    assert full.timetable is other_full.timetable  # one instance per schedule, not per DAG
    watch_cron = compaction.timetable.timetable  # the health watch's safety-net cron, inside AssetOrTimeSchedule
    assert isinstance(watch_cron, SharedCronTriggerTimetable)
    assert watch_cron is other_compaction.timetable.timetable
    assert watch_cron.summary == "0 0 * * *"


def test_with_cron_data_intervals_asked_for_airflow_makes_its_own_timetable_of_the_cron(monkeypatch):
    from airflow.sdk.definitions.timetables.interval import CronDataIntervalTimetable

    monkeypatch.setenv("AIRFLOW__SCHEDULER__CREATE_CRON_DATA_INTERVALS", "True")
    dag = make_full_rewrite_dag(full_rewrite={"schedule": "0 3 * * *"})
    assert isinstance(dag.timetable, CronDataIntervalTimetable)


@pytest.mark.parametrize(
    ("min_small_files", "own", "sent"),
    [
        (4, {}, 4),  # below Iceberg's 5: its rewrite would merge nothing the plan asked for, run after run
        (1, {}, 1),
        (5, {}, None),  # Iceberg's own default does it
        (12, {}, None),
        (3, {"min-input-files": 8}, 8),  # the table's own option wins
    ],
)
def test_a_min_small_files_below_icebergs_min_input_files_is_sent_as_min_input_files(min_small_files, own, sent):
    dag = make_dag(health={"min_small_files": min_small_files}, rewrite_data_files=own)
    options = dag.get_task("rewrite_files").options["rewrite_data_files"]
    assert options.get("min-input-files") == sent


def test_without_health_planning_min_input_files_is_icebergs_own():
    dag = make_dag(health={"enabled": False, "min_small_files": 2})
    assert "min-input-files" not in dag.get_task("rewrite_files").options["rewrite_data_files"]
