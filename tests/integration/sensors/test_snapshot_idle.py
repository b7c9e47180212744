"""The idle sensor on real Iceberg tables (written with pyiceberg) and the real gate, in both modes."""

from __future__ import annotations

import asyncio

import pyarrow as pa
import pytest
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_iceberg.core.gate_state import GateOwner
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.core.writer import WriteGateClient
from airflow_iceberg.exceptions import LeaseLostError
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.triggers.snapshot_idle import SnapshotIdleTrigger, check_snapshot_idle

OWNER = GateOwner("sensor_test", "manual__1")
NAMESPACE = "sensor"


@pytest.fixture
def table(unique_name: str):
    """A real Iceberg table in the suite's JDBC catalog, with one snapshot already committed."""
    catalog = IcebergHook("lake").catalog
    catalog.create_namespace_if_not_exists(NAMESPACE)
    iceberg_table = catalog.create_table(f"{NAMESPACE}.{unique_name}", schema=pa.schema([("id", pa.int64())]))
    commit(iceberg_table, [1, 2, 3])
    return iceberg_table


def commit(iceberg_table, ids: list[int]) -> int:
    """Append ``ids`` as one snapshot, as a writer's commit does; return the new snapshot id."""
    iceberg_table.append(pa.table({"id": pa.array(ids, pa.int64())}))
    return iceberg_table.current_snapshot().snapshot_id


def full_name(iceberg_table) -> str:
    return "lake." + ".".join(iceberg_table.name()[-2:])


def check(iceberg_table, idle_seconds: int, owner: GateOwner = OWNER):
    return check_snapshot_idle(
        table=TableName.parse(full_name(iceberg_table)),
        owner=owner,
        idle_seconds=idle_seconds,
        iceberg_conn_id="lake",
        write_gate_conn_id="write_gate_default",
    )


def test_idle_time_counts_from_a_snapshot_committed_after_the_gate_closed(table):
    gate = WriteGateHook().close_gate(full_name(table), OWNER, lease_seconds=600)
    late_snapshot = commit(table, [4])  # a commit already in flight when the gate closed
    result = check(table, idle_seconds=3600)
    assert result.newest_snapshot_id == late_snapshot
    assert result.newest_snapshot_at >= gate.closed_at.replace(microsecond=0)
    assert not result.done and result.idle_for_seconds < 60
    assert check(table, idle_seconds=0).done


def test_idle_time_counts_from_the_gate_close_when_the_table_was_idle_already(table):
    snapshot = table.current_snapshot()
    gate = WriteGateHook().close_gate(full_name(table), OWNER, lease_seconds=600)
    result = check(table, idle_seconds=3600)
    assert result.newest_snapshot_id == snapshot.snapshot_id
    assert result.gate_closed_at == gate.closed_at > result.newest_snapshot_at
    assert not result.done


def test_the_check_fails_when_the_run_does_not_hold_the_gate(table):
    WriteGateHook().close_gate(full_name(table), OWNER, lease_seconds=600)
    with pytest.raises(LeaseLostError, match="is not held by dag 'other'"):
        check(table, idle_seconds=0, owner=GateOwner("other", "run"))


def test_a_table_missing_from_the_catalog_is_a_clear_error(unique_name):
    WriteGateHook().close_gate(f"lake.{NAMESPACE}.{unique_name}", OWNER, lease_seconds=600)
    with pytest.raises(LookupError, match="connection id must equal the Spark catalog name 'lake'"):
        check_snapshot_idle(
            table=TableName("lake", NAMESPACE, unique_name),
            owner=OWNER,
            idle_seconds=0,
            iceberg_conn_id="lake",
            write_gate_conn_id="write_gate_default",
        )


def test_the_trigger_fires_once_the_table_has_been_idle_for_the_window(table):
    WriteGateHook().close_gate(full_name(table), OWNER, lease_seconds=600)
    trigger = SnapshotIdleTrigger(
        table=full_name(table),
        dag_id=OWNER.dag_id,
        run_id=OWNER.run_id,
        idle_seconds=2,
        iceberg_conn_id="lake",
        write_gate_conn_id="write_gate_default",
        poke_interval=0.5,
    )

    async def first_event():
        return await anext(trigger.run())

    event = asyncio.run(asyncio.wait_for(first_event(), timeout=60))
    assert event.payload["status"] == "success"
    assert event.payload["check"]["idle_for_seconds"] >= 2


def test_the_trigger_reports_a_gate_not_held_instead_of_crashing(table):
    trigger = SnapshotIdleTrigger(
        table=full_name(table),
        dag_id="nobody",
        run_id="r",
        idle_seconds=2,
        iceberg_conn_id="lake",
        write_gate_conn_id="write_gate_default",
        poke_interval=0.5,
    )
    event = asyncio.run(asyncio.wait_for(anext(trigger.run()), timeout=60))
    assert event.payload["status"] == "not_held"  # the sensor then fails without retries
    assert "LeaseLostError" in event.payload["message"]


@pytest.mark.parametrize("deferrable", [False, True], ids=["reschedule", "deferrable"])
def test_sensor_in_a_dag_run_waits_for_the_window_then_the_gate_reopens(table, compaction_dag, deferrable):
    # Health planning off: whatever the table holds, the run closes the gate and waits.
    dag = compaction_dag(full_name(table), idle_seconds=3, deferrable=deferrable, health={"enabled": False})
    # The rewrites are marked successful without running: this test is about the wait.
    run = dag.test(mark_success_pattern="rewrite_.*")
    assert run.state == "success"
    wait = run.get_task_instance("wait_until_snapshot_idle")
    assert wait.state == "success"
    result = wait.xcom_pull(task_ids="wait_until_snapshot_idle")
    assert result["idle_for_seconds"] >= 3
    assert WriteGateHook().get_state(full_name(table)).state == "open"


def acknowledge(iceberg_table, snapshot_id):
    """What the writer does when it finds the gate closed: acknowledge with its last committed snapshot."""
    settings = WriteGateHook("write_gate_writer").connection_settings()  # the writer user, with only its grants
    client = WriteGateClient.connect(full_name(iceberg_table), **settings)
    try:
        assert client.acknowledge_pause(snapshot_id)
    finally:
        client.close()


def test_an_acknowledging_writer_ends_the_wait_at_once_even_with_a_long_idle_window(table):
    WriteGateHook().close_gate(full_name(table), OWNER, lease_seconds=7200)
    acknowledge(table, table.current_snapshot().snapshot_id)
    result = check(table, idle_seconds=1800)
    assert result.done and result.acknowledged
    assert result.as_xcom()["done_by"] == "writer acknowledgement"


def test_a_snapshot_newer_than_the_acknowledged_one_falls_back_to_the_idle_window(table):
    WriteGateHook().close_gate(full_name(table), OWNER, lease_seconds=7200)
    acknowledge(table, table.current_snapshot().snapshot_id)
    commit(table, [99])  # something committed after the acknowledgement
    result = check(table, idle_seconds=1800)
    assert not result.done and not result.acknowledged
