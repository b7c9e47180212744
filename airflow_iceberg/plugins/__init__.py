"""Airflow plugins shipped with the provider (registered through the ``airflow.plugins`` entry point)."""
