"""The DAG folder as Airflow's DagBag loads it: no import errors, and a bad entry named without hiding the rest."""

from __future__ import annotations

import textwrap
from pathlib import Path

from airflow.dag_processing.dagbag import DagBag

DAGS = Path(__file__).resolve().parents[2] / "dags"


def load_dag_folder() -> DagBag:
    return DagBag(dag_folder=str(DAGS))


def test_shipped_dag_folder_loads_without_import_errors(monkeypatch):
    monkeypatch.delenv("AIRFLOW_ICEBERG_CONFIG", raising=False)
    bag = load_dag_folder()
    assert bag.import_errors == {}
    assert {"iceberg_compact__lake__demo__events", "iceberg_full_rewrite__lake__demo__events"} <= set(bag.dag_ids)
    dag = bag.get_dag("iceberg_compact__lake__demo__events")
    assert [t.task_id for t in dag.topological_sort()][:2] == ["check_run_params", "close_gate"]


def test_bad_entry_is_an_import_error_naming_entry_and_field_and_good_tables_still_load(tmp_path, monkeypatch):
    config = tmp_path / "tables.yaml"
    config.write_text(
        textwrap.dedent(
            """
            tables:
              - table: lake.sales.orders
              - table: lake.sales.refunds
                lease_seconds: many
              - table: lake.sales.payments
            """
        )
    )
    monkeypatch.setenv("AIRFLOW_ICEBERG_CONFIG", str(config))
    bag = load_dag_folder()
    assert {"iceberg_compact__lake__sales__orders", "iceberg_compact__lake__sales__payments"} <= set(bag.dag_ids)
    assert "iceberg_compact__lake__sales__refunds" not in bag.dag_ids
    [(path, message)] = bag.import_errors.items()
    assert path.endswith("iceberg_table_list_check.py")
    assert "tables[1] (lake.sales.refunds)" in message
    assert "field 'lease_seconds'" in message
    assert "'many'" in message


def test_unreadable_table_list_is_an_import_error_naming_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_ICEBERG_CONFIG", str(tmp_path / "missing.yaml"))
    bag = load_dag_folder()
    assert bag.import_errors
    assert all("missing.yaml" in message for message in bag.import_errors.values())
