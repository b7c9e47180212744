"""One gated compaction DAG per Iceberg table in ``iceberg_tables.yaml`` (or ``$AIRFLOW_ICEBERG_CONFIG``).

Entries that fail validation get no DAG; ``iceberg_table_list_check.py`` beside this file turns them into an
import error that names each entry and field, so this file keeps loading every valid table's DAG.

A task's process parses this file too, before it runs: Airflow's parsing context then names the one DAG it
needs, and only that DAG is built.
"""

from __future__ import annotations

import warnings

from airflow.sdk import get_parsing_context

from airflow_iceberg.surface.dag_factory import build_compaction_dags

_dags, _errors = build_compaction_dags(dag_id=get_parsing_context().dag_id)
globals().update(_dags)
for _error in _errors:
    warnings.warn(f"no compaction DAG for {_error}", stacklevel=1)
