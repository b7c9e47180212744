"""Registers the provider's timetables with Airflow, which decodes a custom timetable only if a plugin names it."""

from airflow.plugins_manager import AirflowPlugin

from airflow_iceberg.timetables.cron import SharedCronTriggerTimetable


class IcebergTimetablesPlugin(AirflowPlugin):
    """The timetables of the provider's DAGs."""

    name = "iceberg_timetables"
    timetables = [SharedCronTriggerTimetable]
