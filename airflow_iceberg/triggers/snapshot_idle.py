"""Trigger that waits, in the triggerer, until a gated table's writer has gone quiet."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_iceberg.hooks.write_gate import GateOwner
from airflow_iceberg.writer_idle import check_writer_idle


class SnapshotIdleTrigger(BaseTrigger):
    """Fire once no snapshot has been committed to ``table`` for ``idle_seconds`` while ``owner`` holds its gate.

    pyiceberg and pymysql are synchronous, so each check runs in a thread, off the event loop. The event is
    ``{"status": "success", "check": {...}}`` or ``{"status": "error", "message": ...}``.

    :param table: The table, ``catalog.namespace.table``.
    :param dag_id: DAG id of the run that holds the gate.
    :param run_id: Run id of the run that holds the gate.
    :param idle_seconds: How long the table must have been quiet.
    :param iceberg_conn_id: Iceberg connection that reads the table's snapshots.
    :param write_gate_conn_id: Connection of the gate's MySQL database.
    :param poll_interval: Longest pause between checks, in seconds.
    """

    def __init__(
        self,
        *,
        table: str,
        dag_id: str,
        run_id: str,
        idle_seconds: int,
        iceberg_conn_id: str,
        write_gate_conn_id: str,
        poll_interval: float = 30.0,
    ) -> None:
        super().__init__()
        self.table = table
        self.dag_id = dag_id
        self.run_id = run_id
        self.idle_seconds = idle_seconds
        self.iceberg_conn_id = iceberg_conn_id
        self.write_gate_conn_id = write_gate_conn_id
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table": self.table,
                "dag_id": self.dag_id,
                "run_id": self.run_id,
                "idle_seconds": self.idle_seconds,
                "iceberg_conn_id": self.iceberg_conn_id,
                "write_gate_conn_id": self.write_gate_conn_id,
                "poll_interval": self.poll_interval,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        owner = GateOwner(self.dag_id, self.run_id)
        while True:
            try:
                check = await asyncio.to_thread(
                    check_writer_idle,
                    table=self.table,
                    owner=owner,
                    idle_seconds=self.idle_seconds,
                    iceberg_conn_id=self.iceberg_conn_id,
                    write_gate_conn_id=self.write_gate_conn_id,
                )
            except Exception as error:  # report, don't crash: the task fails with the message in its log
                yield TriggerEvent({"status": "error", "message": f"{type(error).__name__}: {error}"})
                return
            if check.done:
                yield TriggerEvent({"status": "success", "check": check.as_xcom()})
                return
            self.log.info("%s quiet for %.1f s of %d s", self.table, check.quiet_seconds, check.idle_seconds)
            # Wake at the moment the window would end, unless a poll is due sooner.
            await asyncio.sleep(max(0.5, min(self.poll_interval, check.idle_seconds - check.quiet_seconds)))
