"""The DAG folder as Airflow's DagBag loads it: no import errors, and a bad entry named without hiding the rest."""

from __future__ import annotations

import textwrap
from pathlib import Path

from airflow.dag_processing.dagbag import DagBag

DAGS = Path(__file__).resolve().parents[2] / "dags"


def load_dag_folder() -> DagBag:
    return DagBag(dag_folder=str(DAGS))


def use_table_list(tmp_path: Path, monkeypatch, text: str) -> None:
    """Write ``text`` as the table list in use (``AIRFLOW_ICEBERG_CONFIG``) for this test."""
    config = tmp_path / "tables.yaml"
    config.write_text(textwrap.dedent(text))
    monkeypatch.setenv("AIRFLOW_ICEBERG_CONFIG", str(config))


def test_shipped_dag_folder_loads_without_import_errors(monkeypatch):
    monkeypatch.delenv("AIRFLOW_ICEBERG_CONFIG", raising=False)
    bag = load_dag_folder()
    assert bag.import_errors == {}
    assert {"iceberg_compact__lake__demo__events", "iceberg_full_rewrite__lake__demo__events"} <= set(bag.dag_ids)
    dag = bag.get_dag("iceberg_compact__lake__demo__events")
    assert [t.task_id for t in dag.topological_sort()][:3] == [
        "plan_compaction",
        "close_gate",
        "wait_until_snapshot_idle",
    ]


#: Three tables, the second with a lease that is not a number.
REFUNDS_ENTRY_IS_BAD = """
tables:
  - table: lake.sales.orders
  - table: lake.sales.refunds
    lease_seconds: many
  - table: lake.sales.payments
"""


def test_bad_entry_is_an_import_error_naming_entry_and_field_and_good_tables_still_load(tmp_path, monkeypatch):
    use_table_list(
        tmp_path,
        monkeypatch,
        REFUNDS_ENTRY_IS_BAD,
    )
    bag = load_dag_folder()
    assert {"iceberg_compact__lake__sales__orders", "iceberg_compact__lake__sales__payments"} <= set(bag.dag_ids)
    assert "iceberg_compact__lake__sales__refunds" not in bag.dag_ids
    [(path, message)] = bag.import_errors.items()
    assert path.endswith("iceberg_table_list_check.py")
    assert "tables[1] (lake.sales.refunds)" in message
    assert "field 'lease_seconds'" in message
    assert "'many'" in message


#: Two tables on the original design's Iceberg (1.5.2, from their Spark packages and from a setting); the first
#: asks for an option that Iceberg 1.5 lacks.
AN_OPTION_ICEBERG_1_5_LACKS = """
defaults:
  spark:
    packages: [org.apache.iceberg:iceberg-spark-runtime-3.4_2.12:1.5.2]
tables:
  - table: lake.cdc.orders
    rewrite_data_files: {remove-dangling-deletes: true}
  - table: lake.cdc.refunds
  - table: lake.cdc.payments
    spark: {packages: [], iceberg_version: 1.5.2}
"""


def test_an_option_the_tables_iceberg_lacks_fails_that_table_naming_option_and_version_and_the_rest_load(
    tmp_path, monkeypatch
):
    use_table_list(tmp_path, monkeypatch, AN_OPTION_ICEBERG_1_5_LACKS)
    bag = load_dag_folder()
    [(path, message)] = bag.import_errors.items()
    assert "tables[0] (lake.cdc.orders)" in message
    assert (
        "rewrite_data_files option 'remove-dangling-deletes' needs Iceberg 1.7 or newer; this table's Spark jobs run "
        "Iceberg 1.5.2 (iceberg-spark-runtime-3.4_2.12:1.5.2)"
    ) in message
    assert "iceberg_compact__lake__cdc__orders" not in bag.dag_ids
    # The others get their DAGs, and never send the option their Iceberg lacks, not even the provider's own.
    for table in ("refunds", "payments"):
        compaction = bag.get_dag(f"iceberg_compact__lake__cdc__{table}").get_task("rewrite_files")
        full = bag.get_dag(f"iceberg_full_rewrite__lake__cdc__{table}").get_task("rewrite_files")
        for task in (compaction, full):
            assert str(task.iceberg_runtime.version) == "1.5.2"
            assert "remove-dangling-deletes" not in task.options["rewrite_data_files"]
        assert compaction.options["rewrite_data_files"] == {"delete-file-threshold": 1}


def test_unreadable_table_list_is_an_import_error_naming_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_ICEBERG_CONFIG", str(tmp_path / "missing.yaml"))
    bag = load_dag_folder()
    assert bag.import_errors
    assert all("missing.yaml" in message for message in bag.import_errors.values())


def test_a_schedule_airflow_rejects_is_named_with_entry_table_field_and_value_and_the_others_load(
    tmp_path, monkeypatch
):
    use_table_list(
        tmp_path,
        monkeypatch,
        """
        tables:
          - table: lake.sales.orders
            schedule: "*/30 * * * *"
          - table: lake.sales.refunds
            schedule: every day
          - table: lake.sales.payments
            full_rewrite: {schedule: "61 * * * *"}
        """,
    )
    bag = load_dag_folder()
    assert {"iceberg_compact__lake__sales__orders", "iceberg_full_rewrite__lake__sales__orders"} <= set(bag.dag_ids)
    assert not {d for d in bag.dag_ids if "refunds" in d or "payments" in d}
    [(path, message)] = bag.import_errors.items()
    assert path.endswith("iceberg_table_list_check.py")
    [refunds] = [line for line in message.splitlines() if "tables[1]" in line]
    [payments] = [line for line in message.splitlines() if "tables[2]" in line]
    assert "tables[1] (lake.sales.refunds)" in refunds
    assert "field 'schedule'" in refunds and "'every day'" in refunds
    assert "tables[2] (lake.sales.payments)" in payments
    assert "field 'full_rewrite.schedule'" in payments and "'61 * * * *'" in payments


def test_a_tasks_process_builds_only_its_own_dag_and_reads_only_its_own_entry(tmp_path, monkeypatch):
    from airflow.sdk.definitions.context import _AIRFLOW_PARSING_CONTEXT_DAG_ID, _AIRFLOW_PARSING_CONTEXT_TASK_ID

    use_table_list(
        tmp_path,
        monkeypatch,
        REFUNDS_ENTRY_IS_BAD,
    )
    # What the task runner sets while it parses the DAG file of the task it is about to run. Set through
    # monkeypatch: Airflow's own context manager leaves the variables set when they were unset before, and
    # every later DagBag in the session would then build that one DAG only.
    monkeypatch.setenv(_AIRFLOW_PARSING_CONTEXT_DAG_ID, "iceberg_full_rewrite__lake__sales__payments")
    monkeypatch.setenv(_AIRFLOW_PARSING_CONTEXT_TASK_ID, "open_gate")
    bag = DagBag(dag_folder=str(DAGS / "iceberg_compaction.py"))
    assert bag.dag_ids == ["iceberg_full_rewrite__lake__sales__payments"]
    assert bag.import_errors == {}
    assert not bag.captured_warnings, "another entry's error was read"
