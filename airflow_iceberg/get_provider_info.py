"""Provider metadata that Airflow reads through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from airflow_iceberg import __version__

#: How the Airflow UI shows the form of an ``iceberg_write_gate`` connection. Airflow 3's UI reads it from here,
#: without importing the hook (``WriteGateHook.get_ui_field_behaviour`` returns the same, for older readers).
WRITE_GATE_FORM: dict[str, Any] = {
    "hidden-fields": ["extra"],
    "relabeling": {"schema": "Database"},
    "placeholders": {
        "host": "127.0.0.1",
        "port": "3306",
        "schema": "airflow_iceberg",
        "login": "iceberg_gate",
        "password": "password of the MySQL user",
    },
}


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-iceberg",
        "name": "Iceberg gated compaction",
        "description": "Compacts streaming-written Apache Iceberg tables with Spark behind a MySQL write gate.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Iceberg write gate",
                "external-doc-url": "https://iceberg.apache.org/docs/latest/spark-procedures/",
                "tags": ["software"],
            }
        ],
        "hooks": [
            {
                "integration-name": "Iceberg write gate",
                "python-modules": ["airflow_iceberg.hooks.write_gate", "airflow_iceberg.hooks.spark_submit"],
            }
        ],
        "operators": [
            {
                "integration-name": "Iceberg write gate",
                "python-modules": [
                    "airflow_iceberg.operators.write_gate",
                    "airflow_iceberg.operators.procedure",
                    "airflow_iceberg.operators.rewrite",
                    "airflow_iceberg.operators.maintenance",
                    "airflow_iceberg.operators.run_params",
                ],
            }
        ],
        "sensors": [
            {"integration-name": "Iceberg write gate", "python-modules": ["airflow_iceberg.sensors.snapshot_idle"]}
        ],
        "triggers": [
            {"integration-name": "Iceberg write gate", "python-modules": ["airflow_iceberg.triggers.snapshot_idle"]}
        ],
        "connection-types": [
            {
                "connection-type": "iceberg_write_gate",
                "hook-class-name": "airflow_iceberg.hooks.write_gate.WriteGateHook",
                "hook-name": "Iceberg Write Gate (MySQL)",
                "ui-field-behaviour": WRITE_GATE_FORM,
            }
        ],
    }
