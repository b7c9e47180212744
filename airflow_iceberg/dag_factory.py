"""Build one gated compaction DAG per table in the table list."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, chain

from airflow_iceberg.config import TableConfig, TableList, load_table_list
from airflow_iceberg.operators.rewrite import IcebergRewriteOperator, table_asset
from airflow_iceberg.operators.run_params import CheckRunParamsOperator, run_params
from airflow_iceberg.operators.table_care import ExpireSnapshotsOperator, RemoveOrphanFilesOperator
from airflow_iceberg.operators.write_gate import CloseWriteGateOperator, OpenWriteGateOperator
from airflow_iceberg.sensors.snapshot_idle import SnapshotIdleSensor
from airflow_iceberg.spark_jobs.iceberg_call import TableName

START_DATE = pendulum.datetime(2026, 1, 1, tz="UTC")
REWRITE_PROCEDURES = ("rewrite_data_files", "rewrite_position_delete_files")


def compaction_dag_id(table: TableName) -> str:
    """``iceberg_compact__<catalog>__<namespace>__<table>``."""
    return f"iceberg_compact__{table.catalog}__{table.namespace}__{table.table}"


def full_rewrite_dag_id(table: TableName) -> str:
    """``iceberg_full_rewrite__<catalog>__<namespace>__<table>``."""
    return f"iceberg_full_rewrite__{table.catalog}__{table.namespace}__{table.table}"


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
    }


def _gated_rewrites(
    dag: DAG,
    config: TableConfig,
    rewrites: list[tuple[str, dict[str, Any], str | None]],
    dry_run_filter: str | None,
):
    """check_run_params >> close_gate >> wait_until_snapshot_idle >> <rewrites, in order> >> open_gate, in ``dag``.

    ``check_run_params`` validates a manual run's Params before the gate closes, and ends a dry run there.

    ``open_gate`` is the teardown of ``close_gate``: it runs whatever the rewrites did, and, being a teardown,
    does not decide the run's state, so a failed rewrite leaves the run failed and the gate open.
    Returns the ``open_gate`` task and the last rewrite, for work that must run after the gate is open again
    and only if the rewrites succeeded.
    """
    check = CheckRunParamsOperator(
        task_id="check_run_params",
        dag=dag,
        table=config.table,
        iceberg_conn_id=config.catalog_conn_id,
        options=rewrites[0][1],
        dry_run_filter=dry_run_filter,
    )
    close_gate = CloseWriteGateOperator(
        task_id="close_gate",
        dag=dag,
        table=config.table,
        lease_seconds=config.lease_seconds,
        gate_wait_seconds=config.gate_wait_seconds,
        poke_interval=config.poke_interval,
        write_gate_conn_id=config.write_gate_conn_id,
    )
    wait = SnapshotIdleSensor(
        task_id="wait_until_snapshot_idle",
        dag=dag,
        table=config.table,
        idle_seconds=config.idle_seconds,
        iceberg_conn_id=config.catalog_conn_id,
        write_gate_conn_id=config.write_gate_conn_id,
        deferrable=config.deferrable,
        mode="poke" if config.deferrable else "reschedule",
        poke_interval=config.poke_interval,
        timeout=config.lease_seconds // 2,
    )
    tasks = [
        IcebergRewriteOperator(
            task_id=procedure,
            dag=dag,
            table=config.table,
            procedure=procedure,
            options=options,
            where=where,
            iceberg_conn_id=config.catalog_conn_id,
            write_gate_conn_id=config.write_gate_conn_id,
            apply_run_params=True,
            outlets=[table_asset(config.table)],
            execution_timeout=timedelta(seconds=config.lease_seconds),
            **_spark_args(config),
        )
        for procedure, options, where in rewrites
    ]
    open_gate = OpenWriteGateOperator(
        task_id="open_gate", dag=dag, table=config.table, write_gate_conn_id=config.write_gate_conn_id
    )
    chain(check, close_gate, wait, *tasks, open_gate.as_teardown(setups=close_gate))
    return open_gate, tasks[-1]


def _dag(dag_id: str, config: TableConfig, **kwargs: Any) -> DAG:
    # Built without `with DAG(...)`, which would auto-register the DAG in whatever module imports this; the
    # DAG file that exports these DAGs puts them in its globals itself.
    return DAG(dag_id=dag_id, max_active_runs=1, tags=["iceberg", config.table.catalog], params=run_params(), **kwargs)


def build_compaction_dag(config: TableConfig) -> DAG:
    """close_gate >> wait_until_snapshot_idle >> rewrite_data_files >> rewrite_position_delete_files >> open_gate."""
    dag = _dag(
        compaction_dag_id(config.table),
        config,
        description=f"Gated compaction of {config.table}",
        schedule=config.schedule,
        start_date=START_DATE,
        catchup=False,
        doc_md=(
            f"Closes the write gate of `{config.table}` (lease {config.lease_seconds} s), waits until its writer "
            f"has been quiet for {config.idle_seconds} s, rewrites small data files and position-delete files "
            "with Spark, and reopens the gate whatever happened."
        ),
    )
    rewrites = [(p, getattr(config, p), config.where) for p in REWRITE_PROCEDURES]
    _gated_rewrites(dag, config, rewrites, config.where)
    return dag


def build_full_rewrite_dag(config: TableConfig) -> DAG:
    """The daily full rewrite: the run for logical date D rewrites every file of D's partitions.

    Data files with ``rewrite-all`` (which also applies and drops their equality and position deletes), then
    position-delete files with ``rewrite-all``, between closing and reopening the gate as in the compaction DAG.
    """
    full = config.full_rewrite
    where = full.partition.predicate_template() if full.partition else None
    everything = {"rewrite-all": True, "max-concurrent-file-group-rewrites": full.max_concurrent_file_group_rewrites}
    dag = _dag(
        full_rewrite_dag_id(config.table),
        config,
        description=f"Daily full rewrite of {config.table}",
        schedule=full.schedule,
        start_date=pendulum.datetime(full.start_date.year, full.start_date.month, full.start_date.day, tz="UTC"),
        catchup=full.catchup,
        doc_md=(
            f"Rewrites all data and position-delete files of `{config.table}`"
            + (f" in the partitions `{where}` selects" if where else "")
            + " behind its write gate. Backfill past days with `airflow backfill create`."
        ),
    )
    dry_run_filter = full.partition.pyiceberg_filter_template() if full.partition else None
    open_gate, last_rewrite = _gated_rewrites(
        dag, config, [(p, everything, where) for p in REWRITE_PROCEDURES], dry_run_filter
    )
    care = _table_care(dag, config)
    if care:
        # After the gate is open (never pausing writers), and only once the rewrites succeeded: a failed
        # rewrite then leaves the table care upstream_failed, so the run still ends failed.
        [open_gate, last_rewrite] >> care[0]
        chain(*care)
    return dag


def _table_care(dag: DAG, config: TableConfig) -> list[IcebergRewriteOperator]:
    care = config.table_care
    common = {"dag": dag, "table": config.table, "iceberg_conn_id": config.catalog_conn_id, **_spark_args(config)}
    tasks: list[IcebergRewriteOperator] = []
    if care.rewrite_manifests:
        tasks.append(IcebergRewriteOperator(task_id="rewrite_manifests", procedure="rewrite_manifests", **common))
    if care.expire_snapshots:
        tasks.append(
            ExpireSnapshotsOperator(
                task_id="expire_snapshots",
                older_than_hours=care.expire_older_than_hours,
                retain_last=care.retain_last,
                checkpoint_marker=care.checkpoint_marker,
                **common,
            )
        )
    if care.remove_orphan_files:
        tasks.append(
            RemoveOrphanFilesOperator(
                task_id="remove_orphan_files",
                older_than_hours=care.orphan_older_than_hours,
                lease_seconds=config.lease_seconds,
                **common,
            )
        )
    return tasks


def build_compaction_dags(table_list: TableList | None = None) -> tuple[dict[str, DAG], list[str]]:
    """Both DAGs by id for every valid table, and the messages of entries that could not become a DAG."""
    table_list = table_list or load_table_list()
    dags: dict[str, DAG] = {}
    errors = list(table_list.errors)
    for config in table_list.tables:
        for build in (build_compaction_dag, build_full_rewrite_dag):
            try:
                dag = build(config)
            except Exception as error:  # e.g. a schedule Airflow rejects: report it, keep the other tables
                errors.append(f"table {config.table}: {type(error).__name__}: {error}")
                continue
            dags[dag.dag_id] = dag
    return dags, errors
