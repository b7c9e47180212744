"""Fails to import while the Iceberg table list has bad entries, so Airflow shows them as a DAG import error.

It only reads and validates the table list (every setting, schedules included, is checked there); it builds no
DAG. The compaction DAGs come from ``iceberg_compaction.py``, which skips bad entries and loads the others.
"""

from __future__ import annotations

from airflow_iceberg.exceptions import IcebergConfigError
from airflow_iceberg.table_list import config_path, load_table_list

_errors = load_table_list().errors
if _errors:
    raise IcebergConfigError(
        f"{len(_errors)} bad entr{'y' if len(_errors) == 1 else 'ies'} in {config_path()}:\n" + "\n".join(_errors)
    )
