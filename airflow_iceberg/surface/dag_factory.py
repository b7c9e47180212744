"""Build one gated compaction DAG and one daily full-rewrite DAG per table in the table list.

Built for fleets: the dag-processor parses the DAG file for every table at once, and every task's process parses
it again before it starts. So:

- tasks are built outside their DAG and then added to it (:func:`_add`). A task built inside a DAG gets a deep
  copy of the DAG's Params, which the task runner merges at run time anyway; at 1,000 tables those copies were
  most of the parse;
- a table list of more than ``tables_per_dag_file`` tables is split across several DAG files, each parsed in a
  process of its own (:mod:`airflow_iceberg.fleet.dag_files`);
- a task's process builds only its own DAG (:func:`build_compaction_dags` with ``dag_id``, from Airflow's
  parsing context), and validates only its own table's entry;
- the Spark provider, pyiceberg and Kubernetes clients are imported by the tasks that use them, not here.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import DAG, AssetOrTimeSchedule, BaseOperator, WeightRule, chain, conf, get_parsing_context

from airflow_iceberg.core.procedures import REWRITE_PROCEDURES
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.fleet.dag_files import dag_files_taken, files_built_by
from airflow_iceberg.fleet.shards import dag_file_of
from airflow_iceberg.operators.maintenance import ExpireSnapshotsOperator, RemoveOrphanFilesOperator
from airflow_iceberg.operators.plan import PlanCompactionOperator, RecordRunOperator
from airflow_iceberg.operators.procedure import IcebergProcedureOperator
from airflow_iceberg.operators.rewrite import IcebergRewriteOperator, table_asset
from airflow_iceberg.operators.run_params import run_params
from airflow_iceberg.operators.write_gate import CloseWriteGateOperator, OpenWriteGateOperator
from airflow_iceberg.planning.plan import Decision
from airflow_iceberg.sensors.snapshot_idle import SnapshotIdleSensor
from airflow_iceberg.surface import task_docs as docs
from airflow_iceberg.table_list.loader import TableList, load_table_list, read_table_list
from airflow_iceberg.table_list.schema import TableConfig
from airflow_iceberg.timetables.cron import cron_trigger

START_DATE = pendulum.datetime(2026, 1, 1, tz="UTC")
#: The task that runs a gated run's rewrites, in one Spark application.
REWRITE_TASK_ID = "rewrite_files"
#: The task that plans them: its XCom ``plan`` holds the predicate each rewrite runs with.
PLAN_TASK_ID = "plan_compaction"

#: Retries by kind of task. Every task retries at least once: a time-out of Airflow's own Execution API as a
#: task starts is enough to fail it. Failures that a retry cannot mend (bad input, a gate another run holds,
#: a run that lost its gate, an Iceberg commit conflict, a partial-progress rewrite with failed file groups)
#: fail at once, without retries (AirflowFailException).
RETRIES: dict[str, dict[str, Any]] = {
    # Reading Params and table metadata: cheap to repeat.
    "check": {"retries": 2, "retry_delay": timedelta(seconds=10), "retry_exponential_backoff": 2.0},
    # The gate and the idle wait: MySQL or catalog blips, backing off up to a minute.
    "gate": {
        "retries": 3,
        "retry_delay": timedelta(seconds=5),
        "retry_exponential_backoff": 2.0,
        "max_retry_delay": timedelta(minutes=1),
    },
    # open_gate frees the writers: retry often and soon, for longer than any blip.
    "open": {
        "retries": 10,
        "retry_delay": timedelta(seconds=3),
        "retry_exponential_backoff": 2.0,
        "max_retry_delay": timedelta(seconds=30),
    },
    # A rewrite inside the gate window: once, for a failure before Spark ran (a commit conflict is not retried).
    "rewrite": {"retries": 1, "retry_delay": timedelta(seconds=15)},
    # Maintenance after the gate is open: it never pauses writers, so it may try again later.
    "maintenance": {"retries": 2, "retry_delay": timedelta(minutes=1), "retry_exponential_backoff": 2.0},
}


#: Which tasks Airflow starts first when workers are short (``[core] parallelism``, a pool's slots): those from
#: closing a gate to opening it (``close_gate`` resumes after its trigger has closed the gate) before any other
#: task of ours, and before a task of weight under 100 of any DAG. A writer paused behind a closed gate then waits
#: for Spark, not for a worker. Weights are absolute: under Airflow's default rule (*downstream*) a run's first task
#: weighs most, so in a burst of 200 runs on 4 workers one table's writers stayed paused 402 s while its rewrite
#: queued behind the other runs' plans (docs/operations.md, the burst).
PRIORITY: dict[str, dict[str, Any]] = {
    "gate held": {"priority_weight": 100, "weight_rule": WeightRule.ABSOLUTE},
    "gate open": {"priority_weight": 1, "weight_rule": WeightRule.ABSOLUTE},
}

#: How long close_gate waits for the run's pre-started Spark application to be up and ready before it gives up, with
#: the gate never closed: a YARN or Kubernetes application may wait minutes for its containers on a busy cluster.
WORK_READY_SECONDS = 600


#: What the daily full rewrite adds to rewriting every data file: removing the delete files that then apply to
#: nothing (on an Iceberg that can: 1.7 and later).
FULL_FOLDING = {"remove-dangling-deletes": True}


def compaction_dag_id(table: TableName) -> str:
    """``iceberg_compact__<catalog>__<namespace>__<table>``."""
    return f"iceberg_compact__{table.catalog}__{table.namespace}__{table.table}"


def full_rewrite_dag_id(table: TableName) -> str:
    """``iceberg_full_rewrite__<catalog>__<namespace>__<table>``."""
    return f"iceberg_full_rewrite__{table.catalog}__{table.namespace}__{table.table}"


def _add(dag: DAG, tasks: Iterable[BaseOperator]) -> None:
    """Put tasks built outside any DAG into ``dag``: they keep no copy of its Params (see the module doc)."""
    dag.add_tasks(list(tasks))


def _spark_args(config: TableConfig) -> dict[str, Any]:
    spark = config.spark
    return {
        "conn_id": config.spark_conn_id,
        "jars": ",".join(spark.jars) or None,
        "packages": ",".join(spark.packages) or None,
        "conf": dict(spark.conf),
        "driver_memory": spark.driver_memory,
        "executor_memory": spark.executor_memory,
        "num_executors": spark.num_executors,
        "executor_cores": spark.executor_cores,
        "total_executor_cores": spark.total_executor_cores,
        "iceberg_version": spark.iceberg_version,
    }


def _gated_rewrites(
    dag: DAG,
    config: TableConfig,
    rewrites: list[tuple[str, dict[str, Any], str | None]],
    *,
    full: bool,
):
    """plan_compaction >> [close_gate >> wait_until_snapshot_idle, rewrite_files] >> open_gate.

    ``plan_compaction`` validates a manual run's Params and renders each rewrite's predicate, then reads the
    table's health and ends the run there (skipping everything after it, teardowns included) on a dry
    run or when nothing needs work. ``rewrite_files`` runs the rewrites the plan gives a predicate, each with
    that predicate, one after another in one Spark application.

    With ``prestart_spark``, the Spark application is pre-started (``core/gate_work.py``): ``rewrite_files`` starts
    beside ``close_gate``,
    which closes only once the application is up and ready, and its job begins its ``CALL`` statements at the go that
    ``wait_until_snapshot_idle`` gives, with no scheduler round trip and no Spark start-up inside the pause. With
    ``spark_slots`` it is not: the slots order who closes first, and applications waiting for a slot would hold the
    cluster the slots share out. Without it the rewrite starts after the idle wait, one task after another, as
    ``airflow dags test`` and ``dag.test()`` need: they run a run's tasks one at a time, and a pre-started rewrite
    would wait there for a go that no task could give.

    ``open_gate`` is the teardown of ``close_gate``: it runs whatever the rewrites did, and, being a teardown,
    does not decide the run's state, so a failed rewrite leaves the run failed and the gate open. ``record_run``,
    the teardown of ``plan_compaction``, completes the run's record after the gate is open.
    Returns the ``open_gate`` task and the rewrite, for work that must run after the gate is open again and
    only if the rewrites succeeded.
    """
    table, gate_conn = config.table, config.write_gate_conn_id
    prestart = config.prestart_spark and config.spark_slots is None
    wait_for_go = WORK_READY_SECONDS + config.gate_wait_seconds + config.max_pause_seconds
    health = None if full or not config.health.enabled else config.health.thresholds()
    without_health = (
        (Decision.FULL, "the daily full rewrite rewrites whatever the health")
        if full
        else (Decision.COMPACT, "health planning is off for this table")
    )
    plan = PlanCompactionOperator(
        task_id=PLAN_TASK_ID,
        table=table,
        iceberg_conn_id=config.catalog_conn_id,
        write_gate_conn_id=gate_conn,
        thresholds=health,
        options=rewrites[0][1],
        without_health=without_health,
        where={procedure: where for procedure, _, where in rewrites},
        iceberg_runtime=config.spark.iceberg_runtime(),
        doc_md=docs.plan_compaction(config, full),
        **RETRIES["check"],
        **PRIORITY["gate open"],
    )
    close_gate = CloseWriteGateOperator(
        task_id="close_gate",
        table=table,
        lease_seconds=config.lease_seconds,
        max_pause_seconds=config.max_pause_seconds,
        gate_wait_seconds=config.gate_wait_seconds,
        poke_interval=config.poke_interval,
        write_gate_conn_id=gate_conn,
        spark_conn_id=config.spark_conn_id,
        spark_slots=config.spark_slots,
        plan_task_id=plan.task_id,
        pause_writers=config.pause_writers,
        work_ready_seconds=WORK_READY_SECONDS if prestart else None,
        # With Spark slots, runs queue for them: waiting in workers, a burst would take every worker.
        deferrable=config.deferrable or config.spark_slots is not None,
        doc_md=docs.close_gate(config),
        **RETRIES["gate"],
        **PRIORITY["gate held"],
    )
    wait = SnapshotIdleSensor(
        task_id="wait_until_snapshot_idle",
        table=table,
        idle_seconds=config.idle_seconds,
        iceberg_conn_id=config.catalog_conn_id,
        write_gate_conn_id=gate_conn,
        deferrable=config.deferrable,
        mode="poke" if config.deferrable else "reschedule",
        poke_interval=config.poke_interval,
        timeout=config.max_pause_seconds // 2,
        prestarted_work=prestart,
        doc_md=docs.wait_until_snapshot_idle(config),
        **RETRIES["gate"],
        **PRIORITY["gate held"],
    )
    rewrite = IcebergRewriteOperator(
        task_id=REWRITE_TASK_ID,
        table=table,
        procedures=[procedure for procedure, _, _ in rewrites],
        options={procedure: options for procedure, options, _ in rewrites},
        iceberg_conn_id=config.catalog_conn_id,
        write_gate_conn_id=gate_conn,
        apply_run_params=True,
        plan_task_id=plan.task_id,  # the one source of each CALL's predicate: the table's, narrowed by the plan
        outlets=[table_asset(table)],
        wait_for_go_seconds=wait_for_go if prestart else None,
        execution_timeout=timedelta(seconds=config.max_pause_seconds + (wait_for_go if prestart else 0)),
        doc_md=docs.rewrite_files(config, full),
        **RETRIES["rewrite"],
        **PRIORITY["gate held"],
        **_spark_args(config),
    )
    open_gate = OpenWriteGateOperator(
        task_id="open_gate",
        table=table,
        write_gate_conn_id=gate_conn,
        prestarted_work=prestart,
        doc_md=docs.open_gate(config),
        **RETRIES["open"],
        **PRIORITY["gate held"],
    )
    record = RecordRunOperator(
        task_id="record_run",
        table=table,
        iceberg_conn_id=config.catalog_conn_id,
        write_gate_conn_id=gate_conn,
        plan_task_id=plan.task_id,
        rewrite_task_id=rewrite.task_id,
        doc_md=docs.record_run(config),
        **RETRIES["check"],
        **PRIORITY["gate open"],
    )
    _add(dag, [plan, close_gate, wait, rewrite, open_gate, record])
    if prestart:
        chain(plan, close_gate, wait)
        plan >> rewrite
        [wait, rewrite] >> open_gate.as_teardown(setups=close_gate)
    else:
        chain(plan, close_gate, wait, rewrite, open_gate.as_teardown(setups=close_gate))
    open_gate >> record.as_teardown(setups=plan)
    return open_gate, rewrite


def _dag(dag_id: str, config: TableConfig, **kwargs: Any) -> DAG:
    # Built without `with DAG(...)`, which would auto-register the DAG in whatever module imports this; the
    # DAG file that exports these DAGs puts them in its globals itself.
    dag = DAG(dag_id=dag_id, max_active_runs=1, tags=["iceberg", config.table.catalog], **kwargs)
    # The Params join after the DAG is built. Given to DAG(), Airflow resolves each against its JSON schema
    # whenever the DAG has a schedule, to catch a default its schema refuses: 11 schema checks per table at every
    # parse, 0.7 s of each parse at 1,000 watched tables. Ours are the same for every table, and a unit test
    # resolves each default (test_run_params); a run's own values are still checked when it is triggered.
    dag.params.update(run_params())
    return dag


def compaction_schedule(config: TableConfig) -> Any:
    """The compaction DAG's schedule: the table's health watch (an Asset), its cron, or both (either starts a run).

    Without a watch (``health.watch: false``, health planning off, or an Airflow older than 3.3) it is the table's
    ``schedule`` alone.
    """
    health = config.health
    if not health.watching:
        return dag_schedule(config.schedule)
    from airflow_iceberg.triggers.table_health import TableHealthTrigger, health_asset

    trigger = TableHealthTrigger(
        table=str(config.table),
        dag_id=compaction_dag_id(config.table),
        iceberg_conn_id=config.catalog_conn_id,
        write_gate_conn_id=config.write_gate_conn_id,
        poll_interval=health.poll_interval,
        cooldown_minutes=health.cooldown_minutes,
        rewrite_data_files_where=config.where_for("rewrite_data_files"),
        rewrite_position_delete_files_where=config.where_for("rewrite_position_delete_files"),
        target_file_size_bytes=config.rewrite_data_files.get("target-file-size-bytes"),
        **asdict(health.thresholds()),
    )
    asset = health_asset(trigger)
    if config.schedule is None:
        return [asset]
    # A custom timetable is one of Airflow's core Timetables, which the SDK's types do not name but take.
    return AssetOrTimeSchedule(timetable=cron_trigger(config.schedule), assets=asset)  # type: ignore[arg-type]


def dag_schedule(schedule: str | None) -> Any:
    """A DAG's ``schedule`` for a table list's schedule: the timetable Airflow would make of it, with its cron shared.

    A cron expression or preset becomes :class:`SharedCronTriggerTimetable` (Airflow's ``CronTriggerTimetable``,
    which Airflow makes of a cron string by default, decoded once per process); anything else, and every schedule
    where ``[scheduler] create_cron_data_intervals`` asks for Airflow's data-interval timetable, is passed on.
    """
    if schedule in (None, "@once", "@continuous") or conf.getboolean("scheduler", "create_cron_data_intervals"):
        return schedule
    return cron_trigger(schedule)


def build_compaction_dag(config: TableConfig) -> DAG:
    """Plan from health, then close_gate >> wait >> rewrite_files (data files, then position deletes) >> open_gate."""
    dag = _dag(
        compaction_dag_id(config.table),
        config,
        description=f"Gated compaction of {config.table}",
        schedule=compaction_schedule(config),
        start_date=START_DATE,
        catchup=False,
        doc_md=docs.compaction_dag(config),
    )
    rewrites = [(p, config.options_for(p), config.where_for(p)) for p in REWRITE_PROCEDURES]
    _gated_rewrites(dag, config, rewrites, full=False)
    return dag


def build_full_rewrite_dag(config: TableConfig) -> DAG:
    """The daily full rewrite: the run for logical date D rewrites every file of D's partitions.

    Data files with ``rewrite-all``, which applies their equality and position deletes, and
    ``remove-dangling-deletes``, which then removes the delete files that apply to nothing any more; then
    position-delete files with ``rewrite-all``; between closing and reopening the gate as in the compaction DAG.
    """
    full = config.full_rewrite
    where = full.partition.predicate_template() if full.partition else None
    everything = {"rewrite-all": True, "max-concurrent-file-group-rewrites": full.max_concurrent_file_group_rewrites}
    options = {"rewrite_data_files": config.provider_options("rewrite_data_files", {**everything, **FULL_FOLDING})}
    dag = _dag(
        full_rewrite_dag_id(config.table),
        config,
        description=f"Daily full rewrite of {config.table}",
        schedule=dag_schedule(full.schedule),
        start_date=pendulum.datetime(full.start_date.year, full.start_date.month, full.start_date.day, tz="UTC"),
        catchup=full.catchup,
        doc_md=docs.full_rewrite_dag(config, where),
    )
    rewrites = [(p, options.get(p, everything), where) for p in REWRITE_PROCEDURES]
    open_gate, rewrite = _gated_rewrites(dag, config, rewrites, full=True)
    maintenance = _maintenance_tasks(config)
    if maintenance:
        _add(dag, maintenance)
        # After the gate is open (never pausing writers), and only once the rewrites succeeded: a failed
        # rewrite then leaves the maintenance upstream_failed, so the run still ends failed.
        [open_gate, rewrite] >> maintenance[0]
        chain(*maintenance)
    return dag


def _maintenance_tasks(config: TableConfig) -> list[IcebergProcedureOperator]:
    maintenance = config.maintenance
    common = {
        "table": config.table,
        "iceberg_conn_id": config.catalog_conn_id,
        **RETRIES["maintenance"],
        **PRIORITY["gate open"],
        **_spark_args(config),
    }
    tasks: list[IcebergProcedureOperator] = []
    if maintenance.rewrite_manifests:
        tasks.append(
            IcebergProcedureOperator(
                task_id="rewrite_manifests", procedures=["rewrite_manifests"], doc_md=docs.REWRITE_MANIFESTS, **common
            )
        )
    if maintenance.expire_snapshots:
        tasks.append(
            ExpireSnapshotsOperator(
                task_id="expire_snapshots",
                older_than_hours=maintenance.expire_older_than_hours,
                retain_last=maintenance.retain_last,
                checkpoint_marker=maintenance.checkpoint_marker,
                doc_md=docs.expire_snapshots(config),
                **common,
            )
        )
    if maintenance.remove_orphan_files:
        tasks.append(
            RemoveOrphanFilesOperator(
                task_id="remove_orphan_files",
                older_than_hours=maintenance.orphan_older_than_hours,
                max_pause_seconds=config.max_pause_seconds,
                doc_md=docs.remove_orphan_files(config),
                **common,
            )
        )
    return tasks


#: Each table's DAGs: how its id is made, and how it is built.
_BUILDERS = ((compaction_dag_id, build_compaction_dag), (full_rewrite_dag_id, build_full_rewrite_dag))


def build_compaction_dags(
    table_list: TableList | None = None, *, dag_id: str | None = None, dag_file: Path | None = None
) -> tuple[dict[str, DAG], list[str]]:
    """Both DAGs by id for every valid table, and the messages of entries that could not become a DAG.

    With ``dag_id`` (a task's process passes Airflow's parsing context), only that DAG is built, whichever DAG file
    asks, and only its table's entry is read: other entries' errors are not reported then. With ``dag_file`` (and
    no ``dag_id``), only the tables of that compaction DAG file (:func:`~airflow_iceberg.fleet.dag_files.
    files_built_by`) are built, and only their entries' errors are reported.
    """
    if table_list is None:
        if dag_id is not None:
            select = lambda t: dag_id in (compaction_dag_id(t), full_rewrite_dag_id(t))  # noqa: E731
            table_list = load_table_list(select=select)
        else:
            document = read_table_list()
            files = dag_files_taken(document)
            built = None if dag_file is None else files_built_by(dag_file, files)
            table_list = document.validate(None if built is None else (lambda t: dag_file_of(str(t), files) in built))
    dags: dict[str, DAG] = {}
    errors = list(table_list.errors)
    for config in table_list.tables:
        for make_id, build in _BUILDERS:
            if dag_id is not None and make_id(config.table) != dag_id:
                continue
            try:
                dag = build(config)
            except Exception as error:  # a DAG Airflow refuses: report it, keep the other tables
                errors.append(f"table {config.table}: {make_id(config.table)}: {type(error).__name__}: {error}")
                continue
            dags[dag.dag_id] = dag
    return dags, errors


def compaction_dag_file(path: str) -> dict[str, DAG]:
    """The DAGs that the compaction DAG file at ``path`` (its ``__file__``) defines, by id; a warning for each
    entry of its tables that could not become a DAG.

    In a task's process, Airflow's parsing context names the one DAG it needs, and only that DAG is built.
    """
    dags, errors = build_compaction_dags(dag_id=get_parsing_context().dag_id, dag_file=Path(path))
    for error in errors:
        warnings.warn(f"no compaction DAG for {error}", stacklevel=2)
    return dags
