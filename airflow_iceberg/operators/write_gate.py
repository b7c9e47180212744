"""Close and open a table's write gate from a DAG run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context, TriggerRule

from airflow_iceberg.hooks.write_gate import GateOwner, WriteGateHook, check_lease_seconds
from spark_jobs.iceberg_call import TableName


def run_owner(context: Context) -> GateOwner:
    """The gate owner for the DAG run that ``context`` belongs to."""
    return GateOwner(dag_id=context["dag"].dag_id, run_id=context["run_id"])


class CloseWriteGateOperator(BaseOperator):
    """Close the write gate of an Iceberg table for this DAG run, with a lease.

    Writers pause while the gate is closed and its lease has not ended. Closing succeeds if the gate is open,
    its lease has expired, or this run already holds it (a retry renews the lease). If another run holds it,
    the task fails and changes nothing. Pushes the close time and lease end (database clock) to XCom.

    :param table: The table, ``catalog.namespace.table``.
    :param lease_seconds: How long the gate may stay closed if this run never opens it: writers resume when
        the lease ends even if the run crashed. Make it longer than the writer's idle wait plus the rewrites.
    :param write_gate_conn_id: Connection of the gate's MySQL database.
    """

    template_fields: Sequence[str] = ()
    ui_color = "#f6c8c8"

    def __init__(
        self,
        *,
        table: str,
        lease_seconds: int = 3600,
        write_gate_conn_id: str = WriteGateHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        TableName.parse(table)
        check_lease_seconds(lease_seconds)
        self.table = table
        self.lease_seconds = lease_seconds
        self.write_gate_conn_id = write_gate_conn_id

    def execute(self, context: Context) -> dict[str, str]:
        state = WriteGateHook(self.write_gate_conn_id).close_gate(self.table, run_owner(context), self.lease_seconds)
        return {
            "table": self.table,
            "closed_at": state.closed_at.isoformat(),  # type: ignore[union-attr]
            "lease_expires_at": state.lease_expires_at.isoformat(),  # type: ignore[union-attr]
        }


class OpenWriteGateOperator(BaseOperator):
    """Open the write gate of an Iceberg table if this DAG run holds it.

    Runs whatever happened upstream (trigger rule ``all_done``; as a teardown, ``all_done_setup_success``).
    Opening a gate this run does not hold, or one already open, changes nothing and logs why: a run can never
    reopen a gate that another run closed. Pushes whether it opened the gate to XCom.

    :param table: The table, ``catalog.namespace.table``.
    :param write_gate_conn_id: Connection of the gate's MySQL database.
    """

    template_fields: Sequence[str] = ()
    ui_color = "#c8f6c8"

    def __init__(
        self,
        *,
        table: str,
        write_gate_conn_id: str = WriteGateHook.default_conn_name,
        trigger_rule: str = TriggerRule.ALL_DONE,
        **kwargs: Any,
    ) -> None:
        super().__init__(trigger_rule=trigger_rule, **kwargs)
        TableName.parse(table)
        self.table = table
        self.write_gate_conn_id = write_gate_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        opened, state = WriteGateHook(self.write_gate_conn_id).open_gate(self.table, run_owner(context))
        return {"table": self.table, "opened": opened, "state": state.state}
