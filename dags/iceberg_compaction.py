"""One gated compaction DAG per Iceberg table in ``iceberg_tables.yaml`` (or ``$AIRFLOW_ICEBERG_CONFIG``).

Entries that fail validation get no DAG; ``iceberg_table_list_check.py`` beside this file turns them into an
import error that names each entry and field, so this file keeps loading every valid table's DAG.
"""

from __future__ import annotations

import warnings

from airflow_iceberg.dag_factory import build_compaction_dags

_dags, _errors = build_compaction_dags()
globals().update(_dags)
for _error in _errors:
    warnings.warn(f"no compaction DAG for {_error}", stacklevel=1)
