"""What Airflow reads from the provider's metadata: the connection form, and the Spark connection's default."""

from __future__ import annotations

from airflow_iceberg.get_provider_info import WRITE_GATE_FORM, get_provider_info
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.table_list.schema import SPARK_DEFAULT_CONN_ID


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
