"""DAGs as Airflow's DagBag parses them, for ``dag.test()`` in the tests and the benchmark."""

from __future__ import annotations

from pathlib import Path

from airflow.sdk import DAG

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.surface.dag_factory import compaction_dag_id
from airflow_iceberg.table_list.loader import dags_folder


def load_dag(dag_id: str, dag_folder: Path | None = None) -> DAG:
    """DAG ``dag_id`` as Airflow parses it from ``dag_folder`` with the table list in use.

    The default folder is Airflow's ``[core] dags_folder``, which ``make`` points at this repository's ``dags/``.

    ``dag.test()`` runs only DAGs it can find in a DAG bundle, so tests and benchmarks take them from here.
    """
    from airflow.dag_processing.dagbag import DagBag

    folder = dag_folder or dags_folder()
    bag = DagBag(dag_folder=str(folder))
    if bag.import_errors:
        raise RuntimeError(f"the DAG folder has import errors: {bag.import_errors}")
    dag = bag.get_dag(dag_id)
    if dag is None:
        raise LookupError(f"no DAG {dag_id} in {folder}")
    return dag


def load_compaction_dag(table: TableName, dag_folder: Path | None = None) -> DAG:
    """The compaction DAG of ``table``, as :func:`load_dag` finds it."""
    return load_dag(compaction_dag_id(table), dag_folder)
