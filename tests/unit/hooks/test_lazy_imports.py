"""The Kubernetes clients stay off the DAG-parsing path, and a task that submits to Kubernetes still gets them."""

from __future__ import annotations

import subprocess
import sys


def test_the_dag_file_imports_no_kubernetes_client_yet_a_task_that_needs_one_still_gets_it():
    script = """
import sys
import airflow_iceberg.surface.dag_factory
assert "kubernetes" not in sys.modules and "pyiceberg" not in sys.modules, sorted(
    m for m in sys.modules if m.startswith(("kubernetes", "pyiceberg")))
from airflow.providers.apache.spark.hooks import spark_submit
assert spark_submit.kube_client.get_kube_client  # first use: the real module is loaded now
assert "kubernetes" in sys.modules
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]
