"""The close-gate trigger's serialization: what the triggerer stores is what rebuilds it."""

from __future__ import annotations

from airflow_iceberg.core.spark_slots import SparkSlotRequest
from airflow_iceberg.triggers.close_gate import CloseGateTrigger


def test_it_serializes_to_the_arguments_that_rebuild_it():
    trigger = CloseGateTrigger(
        table="lake.db.t",
        dag_id="iceberg_compact__lake__db__t",
        run_id="manual__1",
        write_gate_conn_id="write_gate_default",
        lease_seconds=300,
        max_pause_seconds=3600,
        poke_interval=10,
        deadline="2026-11-28T11:00:00+00:00",
        slot={"spark_conn_id": "spark_default", "slots": 4, "score": 12, "patience": 60},
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_iceberg.triggers.close_gate.CloseGateTrigger"
    again = CloseGateTrigger(**kwargs)
    assert again.serialize() == (classpath, kwargs)
    assert again.slot == SparkSlotRequest("spark_default", 4, 12, 60)
    assert CloseGateTrigger(**{**kwargs, "slot": None}).slot is None
