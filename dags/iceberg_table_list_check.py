"""Fails to import while the Iceberg table list has bad entries, so Airflow shows them as a DAG import error.

It only reads and validates the table list (every setting, schedules included, is checked there); it builds no
DAG. The compaction DAGs come from ``iceberg_compaction.py``, which skips bad entries and loads the others.

It fails too while a long table list lacks compaction DAG files beside it (``iceberg_compaction_1.py``, ...):
``iceberg_compaction.py`` then builds their tables' DAGs itself, in one parse that may pass Airflow's time-out.
"""

from __future__ import annotations

from pathlib import Path

from airflow_iceberg.fleet.dag_files import table_list_problems

table_list_problems(Path(__file__).parent)
