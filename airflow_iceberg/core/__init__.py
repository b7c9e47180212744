"""The Airflow-free core: table names, Iceberg procedure calls, the write gate's protocol, lease and writer client.

Nothing here imports Airflow or PySpark (``pymysql`` is imported where a connection is made), so the same code
runs in Airflow's tasks, inside the Spark job (shipped as one zip, :func:`bundle.core_zip`) and in writers.
``tests/unit/core/test_bundle.py`` keeps it so.
"""
