"""Build one gated compaction DAG per table in the table list."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.sdk import DAG

from airflow_iceberg.config import TableConfig, TableList, load_table_list
from airflow_iceberg.operators.rewrite import IcebergRewriteOperator
from airflow_iceberg.operators.write_gate import CloseWriteGateOperator, OpenWriteGateOperator
from airflow_iceberg.sensors.snapshot_idle import SnapshotIdleSensor
from spark_jobs.iceberg_call import TableName

DAGS_FOLDER = Path(__file__).resolve().parent.parent / "dags"
START_DATE = pendulum.datetime(2026, 1, 1, tz="UTC")
REWRITE_PROCEDURES = ("rewrite_data_files", "rewrite_position_delete_files")


def compaction_dag_id(table: str) -> str:
    """``iceberg_compact__<catalog>__<namespace>__<table>`` for ``table`` = ``catalog.namespace.table``."""
    name = TableName.parse(table)
    return f"iceberg_compact__{name.catalog}__{name.namespace}__{name.table}"


def load_compaction_dag(table: str, dag_folder: Path = DAGS_FOLDER) -> DAG:
    """The compaction DAG of ``table`` as Airflow parses it from ``dag_folder`` with the table list in use.

    ``dag.test()`` runs only DAGs it can find in a DAG bundle, so tests and benchmarks take them from here.
    """
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(dag_folder))
    if bag.import_errors:
        raise RuntimeError(f"the DAG folder has import errors: {bag.import_errors}")
    dag = bag.get_dag(compaction_dag_id(table))
    if dag is None:
        raise LookupError(f"no compaction DAG for {table} in {dag_folder}")
    return dag


def build_compaction_dag(config: TableConfig) -> DAG:
    """close_gate >> wait_until_writer_idle >> rewrite_data_files >> rewrite_position_delete_files >> open_gate.

    ``open_gate`` is the teardown of ``close_gate``: it runs whatever the rewrites did, and, being a teardown,
    does not decide the run's state, so a failed rewrite leaves the run failed and the gate open.
    """
    spark = config.spark
    spark_args = {
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
    # Built without `with DAG(...)`, which would auto-register the DAG in whatever module imports this; the
    # DAG file that exports these DAGs puts them in its globals itself.
    dag = DAG(
        dag_id=compaction_dag_id(config.table),
        description=f"Gated compaction of {config.table}",
        schedule=config.schedule,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        tags=["iceberg", "compaction", config.name.catalog],
        doc_md=(
            f"Closes the write gate of `{config.table}` (lease {config.lease_seconds} s), waits until its writer "
            f"has been quiet for {config.idle_seconds} s, rewrites small data files and position-delete files "
            "with Spark, and reopens the gate whatever happened."
        ),
    )
    close_gate = CloseWriteGateOperator(
        task_id="close_gate",
        dag=dag,
        table=config.table,
        lease_seconds=config.lease_seconds,
        write_gate_conn_id=config.write_gate_conn_id,
    )
    wait = SnapshotIdleSensor(
        task_id="wait_until_writer_idle",
        dag=dag,
        table=config.table,
        idle_seconds=config.idle_seconds,
        iceberg_conn_id=config.catalog_conn_id,
        write_gate_conn_id=config.write_gate_conn_id,
        deferrable=config.deferrable,
        mode="poke" if config.deferrable else "reschedule",
        poke_interval=config.poke_seconds,
        timeout=config.lease_seconds // 2,
    )
    rewrites = [
        IcebergRewriteOperator(
            task_id=procedure,
            dag=dag,
            table=config.table,
            procedure=procedure,
            options=getattr(config, procedure),
            where=config.where,
            iceberg_conn_id=config.catalog_conn_id,
            write_gate_conn_id=config.write_gate_conn_id,
            execution_timeout=timedelta(seconds=config.lease_seconds),
            **spark_args,
        )
        for procedure in REWRITE_PROCEDURES
    ]
    open_gate = OpenWriteGateOperator(
        task_id="open_gate", dag=dag, table=config.table, write_gate_conn_id=config.write_gate_conn_id
    )
    close_gate >> wait >> rewrites[0] >> rewrites[1] >> open_gate.as_teardown(setups=close_gate)
    return dag


def build_compaction_dags(table_list: TableList | None = None) -> tuple[dict[str, DAG], list[str]]:
    """DAGs by id for every valid table, and the messages of entries that could not become a DAG."""
    table_list = table_list or load_table_list()
    dags: dict[str, DAG] = {}
    errors = list(table_list.errors)
    for config in table_list.tables:
        try:
            dag = build_compaction_dag(config)
        except Exception as error:  # e.g. a schedule Airflow rejects: report it, keep the other tables
            errors.append(f"table {config.table}: {type(error).__name__}: {error}")
            continue
        dags[dag.dag_id] = dag
    return dags, errors
