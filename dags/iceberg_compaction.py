"""One gated compaction DAG per Iceberg table in ``iceberg_tables.yaml`` (or ``$AIRFLOW_ICEBERG_CONFIG``).

Entries that fail validation get no DAG; ``iceberg_table_list_check.py`` beside this file turns them into an
import error that names each entry and field, so this file keeps loading every valid table's DAG.

A list of more than ``tables_per_dag_file`` tables (1,000 by default) is split across this file and
``iceberg_compaction_1.py``, ``iceberg_compaction_2.py``, ..., which ``airflow-iceberg dags`` writes beside it (and
the fleet setting's DAG bundle, when the list grows): no parse then nears Airflow's import time-out. A hash of each
table's name picks its file; until a file exists, this one builds its tables' DAGs.

A task's process parses this file too, before it runs: Airflow's parsing context then names the one DAG it
needs, and only that DAG is built.
"""

from __future__ import annotations

from airflow_iceberg.surface.dag_factory import compaction_dag_file

globals().update(compaction_dag_file(__file__))
