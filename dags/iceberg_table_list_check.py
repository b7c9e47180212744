"""Fails to import while the Iceberg table list has bad entries, so Airflow shows them as a DAG import error.

The compaction DAGs themselves come from ``iceberg_compaction.py``, which skips bad entries and keeps loading
the others. This file defines no DAG.
"""

from __future__ import annotations

from airflow_iceberg.config import IcebergConfigError, config_path
from airflow_iceberg.dag_factory import build_compaction_dags

_dags, _errors = build_compaction_dags()
if _errors:
    raise IcebergConfigError(
        f"{len(_errors)} bad entr{'y' if len(_errors) == 1 else 'ies'} in {config_path()}:\n" + "\n".join(_errors)
    )
