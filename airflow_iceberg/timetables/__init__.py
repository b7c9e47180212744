"""Airflow timetables of the provider's DAGs (registered by :mod:`airflow_iceberg.plugins.timetables`)."""
