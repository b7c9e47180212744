"""What Airflow reads from the provider without running a task: the connection form, and light imports."""

from __future__ import annotations

import subprocess
import sys

from airflow_iceberg.config import SPARK_DEFAULT_CONN_ID
from airflow_iceberg.get_provider_info import WRITE_GATE_FORM, get_provider_info
from airflow_iceberg.hooks.write_gate import WriteGateHook


def test_the_write_gate_form_is_declared_where_airflow_3s_ui_reads_it():
    from airflow.providers_manager import ProvidersManager

    [connection_type] = get_provider_info()["connection-types"]
    assert connection_type["ui-field-behaviour"] is WRITE_GATE_FORM
    form = ProvidersManager().field_behaviours["iceberg_write_gate"]  # what the api-server serves the UI
    assert form["hidden_fields"] == ["extra"]
    assert form["relabeling"] == {"schema": "Database"}
    assert form["placeholders"]["schema"] == "airflow_iceberg" and form["placeholders"]["port"] == "3306"
    assert WriteGateHook.get_ui_field_behaviour()["relabeling"] == {"schema": "Database"}


def test_the_spark_connection_default_is_the_spark_providers():
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    assert SPARK_DEFAULT_CONN_ID == SparkSubmitHook.default_conn_name


def test_the_dag_file_imports_no_kubernetes_client_yet_a_task_that_needs_one_still_gets_it():
    script = """
import sys
import airflow_iceberg.dag_factory
assert "kubernetes" not in sys.modules and "pyiceberg" not in sys.modules, sorted(
    m for m in sys.modules if m.startswith(("kubernetes", "pyiceberg")))
from airflow.providers.apache.spark.hooks import spark_submit
assert spark_submit.kube_client.get_kube_client  # first use: the real module is loaded now
assert "kubernetes" in sys.modules
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]


def test_what_the_rewrite_task_does_before_spark_submit_imports_neither_pyiceberg_nor_sqlglot():
    # Writers are paused while the rewrite task runs: it reads its Iceberg connection and follows the plan,
    # whose predicates the plan task parsed before the gate closed, without loading either library (0.7 s).
    script = """
import sys
from unittest import mock
from airflow_iceberg.catalogs import spark_settings_for_connection
from airflow_iceberg.operators.rewrite import IcebergRewriteOperator
spark_settings_for_connection("lake", "lake")
op = IcebergRewriteOperator(task_id="rewrite_files", table="lake.db.events", plan_task_id="plan_compaction",
                            procedures=["rewrite_data_files"])
plan = {"predicates": {"rewrite_data_files": "ts >= TIMESTAMP '2026-11-22 00:00:00+00:00'"},
        "partitions": {"rewrite_data_files": ["ts_day=2026-11-22"]}, "decision": "compact", "reason": "r"}
ti = mock.Mock(xcom_pull=mock.Mock(return_value=plan))
[call] = op._calls({"ti": ti, "params": {}})
assert call.where == plan["predicates"]["rewrite_data_files"], call
loaded = sorted(m for m in sys.modules if m.startswith(("pyiceberg", "sqlglot")))
assert not loaded, loaded
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.splitlines()[-1] == "ok", result.stderr[-3000:]
