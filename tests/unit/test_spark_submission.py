"""Where the rewrite runs is set by the Spark connection and the table's spark settings, never by code."""

from __future__ import annotations

import json

from airflow_iceberg.config import TableConfig
from airflow_iceberg.dag_factory import build_compaction_dag


def spark_submit_command(monkeypatch, connection: dict, spark: dict) -> list[str]:
    """The spark-submit command the rewrite task's own hook builds for this connection and these settings."""
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CLUSTER", json.dumps({"conn_type": "spark", **connection}))
    config = TableConfig.model_validate(
        {"table": "dl_test.ods.order_base_stream_v2", "spark_conn_id": "spark_cluster", "spark": spark}
    )
    task = build_compaction_dag(config).get_task("rewrite_data_files")
    return task._get_hook()._build_spark_submit_command(str(task.application))


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_source_designs_yarn_submission_maps_onto_connection_and_table_settings(monkeypatch):
    # The source design: --master yarn --deploy-mode client --driver-memory 4G --num-executors 4
    # --executor-memory 8G --executor-cores 4 --queue root.default, and four --conf settings.
    command = spark_submit_command(
        monkeypatch,
        {"host": "yarn", "extra": {"deploy-mode": "client", "queue": "root.default"}},
        {
            "packages": ["org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2"],
            "driver_memory": "4G",
            "num_executors": 4,
            "executor_memory": "8G",
            "executor_cores": 4,
            "conf": {
                "spark.sql.debug.maxToStringFields": "1000",
                "spark.rpc.message.maxSize": "1024",
                "spark.sql.legacy.timeParserPolicy": "LEGACY",
                "spark.sql.storeAssignmentPolicy": "ANSI",
            },
        },
    )
    assert flag(command, "--master") == "yarn"
    assert flag(command, "--deploy-mode") == "client"
    assert flag(command, "--queue") == "root.default"
    assert flag(command, "--driver-memory") == "4G"
    assert flag(command, "--num-executors") == "4"
    assert flag(command, "--executor-memory") == "8G"
    assert flag(command, "--executor-cores") == "4"
    assert flag(command, "--packages") == "org.apache.iceberg:iceberg-spark-runtime-3.5_2.12:1.10.2"
    confs = {command[i + 1] for i, part in enumerate(command) if part == "--conf"}
    assert {
        "spark.sql.debug.maxToStringFields=1000",
        "spark.rpc.message.maxSize=1024",
        "spark.sql.legacy.timeParserPolicy=LEGACY",
        "spark.sql.storeAssignmentPolicy=ANSI",
    } <= confs


def test_kubernetes_submission_comes_from_the_connection_too(monkeypatch):
    command = spark_submit_command(
        monkeypatch,
        {
            "host": "k8s://https://kubernetes.default.svc",
            "port": 443,
            "extra": {"deploy-mode": "cluster", "namespace": "spark"},
        },
        {
            "jars": ["local:///opt/iceberg/iceberg-spark-runtime-3.5_2.12-1.10.2.jar"],
            "conf": {"spark.kubernetes.container.image": "registry.example.com/airflow-iceberg-spark:0.1.0"},
        },
    )
    assert flag(command, "--master") == "k8s://https://kubernetes.default.svc:443"
    assert flag(command, "--deploy-mode") == "cluster"
    assert "spark.kubernetes.namespace=spark" in command
    assert flag(command, "--jars") == "local:///opt/iceberg/iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
