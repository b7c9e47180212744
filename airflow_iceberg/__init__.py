"""Airflow provider that compacts streaming-written Iceberg tables with Spark behind a MySQL write gate."""

__version__ = "0.1.0"
