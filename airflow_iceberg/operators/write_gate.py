"""Close and open a table's write gate from a DAG run."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from airflow.sdk import BaseOperator, Context, TriggerRule
from airflow.sdk.exceptions import AirflowFailException

from airflow_iceberg.core.conflicts import UNDESCRIBED, GuardedWork
from airflow_iceberg.core.gate_state import check_lease_seconds
from airflow_iceberg.core.gate_store import Closing
from airflow_iceberg.core.gate_work import NoGo, WorkHandshake, await_ready
from airflow_iceberg.core.spark_slots import SparkSlotRequest
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.exceptions import GateBusyError, SparkSlotsBusyError
from airflow_iceberg.hooks.write_gate import WriteGateHook, run_attempt, run_owner, telling_the_work

#: ``pause_writers``'s values: the writers that can conflict with the run's work, or every writer.
PAUSE_WRITERS = ("conflicting", "all")


class CloseWriteGateOperator(BaseOperator):
    """Close the write gate of an Iceberg table for this DAG run, with a lease.

    The writers that can conflict with what the run does pause while the gate is closed and its lease has not
    ended; the others keep committing (the rule is ``core/conflicts.py``). Closing succeeds if the gate is open,
    its lease has expired, or this run already holds it (a retry renews the lease). If another run holds it,
    the task waits up to ``gate_wait_seconds`` for it, then fails having changed nothing. Pushes the
    close time and lease end (database clock) to XCom, and each writer with whether it pauses and why.

    :param table: The table: a :class:`TableName`, or its text ``catalog.namespace.table``.
    :param lease_seconds: How long the gate stays closed if this run stops renewing it: the tasks that follow
        renew the lease while they work, and writers resume when it ends, even if the run crashed. Make it
        longer than the gaps between those tasks' renewals (their scheduling, a poke interval).
    :param max_pause_seconds: The hard ceiling on how long this run keeps writers paused: no renewal extends the
        lease past this many seconds after the gate closed.
    :param gate_wait_seconds: How long to wait for a gate another run holds (the daily full rewrite and
        the frequent compaction of a table, or overlapping backfill runs, meet there) before failing; 0 fails
        at once. While waiting, the gate is only read, so the audit trail records real attempts only.
    :param poke_interval: Seconds between looks at a held gate.
    :param write_gate_conn_id: Connection of the gate's MySQL database.
    :param spark_conn_id: With ``spark_slots``, the Spark connection whose slots the run's rewrites take.
    :param spark_slots: At most this many tables of ``spark_conn_id`` have their gate closed at once. The
        gate closes only when the run gets a slot, and waiting runs get the free slots worst table first (the
        health score of ``plan_task_id``'s plan), so writers are never paused while their rewrite waits for
        the cluster. The wait counts against ``gate_wait_seconds``. None: no limit.
    :param plan_task_id: The task whose ``plan`` XCom holds the health score (without one the score is 0) and what
        the run does while it holds the gate (its ``work``): the closing pauses only the writers that can conflict
        with it (``core/conflicts.py``), and without it every writer.
    :param pause_writers: ``conflicting`` (the default): pause only the writers that can conflict with the run's
        work; ``all``: every writer, as before the gate knew what writers commit.
    :param work_ready_seconds: The run's rewrite is pre-started (``IcebergRewriteOperator`` with
        ``wait_for_go_seconds``): close only once its Spark application is up, ready and alive, waiting at most this
        long for it (``core/gate_work.py``), so that writers never pause while Spark starts. A failure of this task
        that is not retried tells that work to end without working. None: nothing is pre-started.
    :param deferrable: Wait for a held gate or a Spark slot in the triggerer (``CloseGateTrigger``), holding no
        worker meanwhile: with ``spark_slots``, a burst of runs waiting in their workers could take every worker,
        and the runs that got a slot could then not go on. A gate closed at the first look closes in the worker.
    """

    template_fields: Sequence[str] = ()
    ui_color = "#f6c8c8"

    def __init__(
        self,
        *,
        table: TableName | str,
        lease_seconds: int,
        max_pause_seconds: int,
        gate_wait_seconds: int,
        poke_interval: float,
        write_gate_conn_id: str = WriteGateHook.default_conn_name,
        spark_conn_id: str | None = None,
        spark_slots: int | None = None,
        plan_task_id: str | None = None,
        pause_writers: str = "conflicting",
        work_ready_seconds: int | None = None,
        deferrable: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if work_ready_seconds is not None and work_ready_seconds <= 0:
            raise ValueError(f"work_ready_seconds must be positive, got {work_ready_seconds!r}")
        if pause_writers not in PAUSE_WRITERS:
            raise ValueError(f"pause_writers must be one of {', '.join(PAUSE_WRITERS)}, got {pause_writers!r}")
        check_lease_seconds(lease_seconds)
        if spark_slots is not None:
            check_lease_seconds(spark_slots, "spark_slots")
            if not spark_conn_id:
                raise ValueError(f"spark_slots ({spark_slots}) needs the spark_conn_id whose slots they are")
        if check_lease_seconds(max_pause_seconds, "max_pause_seconds") < lease_seconds:
            raise ValueError(f"max_pause_seconds ({max_pause_seconds}) must be at least the lease ({lease_seconds})")
        if gate_wait_seconds < 0:
            raise ValueError(f"gate_wait_seconds must not be negative, got {gate_wait_seconds!r}")
        if poke_interval <= 0:
            raise ValueError(f"poke_interval must be positive, got {poke_interval!r}")
        self.table = TableName.of(table)
        self.lease_seconds = lease_seconds
        self.max_pause_seconds = max_pause_seconds
        self.gate_wait_seconds = gate_wait_seconds
        self.poke_interval = poke_interval
        self.write_gate_conn_id = write_gate_conn_id
        self.spark_conn_id = spark_conn_id
        self.spark_slots = spark_slots
        self.plan_task_id = plan_task_id
        self.pause_writers = pause_writers
        self.work_ready_seconds = work_ready_seconds
        self.deferrable = deferrable

    def _plan(self, context: Context) -> dict[str, Any]:
        plan = context["ti"].xcom_pull(task_ids=self.plan_task_id, key="plan") if self.plan_task_id else None
        return plan or {}

    def _work(self, plan: Mapping[str, Any]) -> GuardedWork:
        """What the run does while it holds the gate, from its plan; undescribed (every writer pauses) without."""
        if "work" not in plan:
            return UNDESCRIBED
        work = GuardedWork.from_xcom(plan["work"])
        return replace(work, pause_all=True) if self.pause_writers == "all" else work

    def _slot_request(self, plan: Mapping[str, Any]) -> SparkSlotRequest | None:
        if self.spark_slots is None:
            return None
        score = int(plan.get("score") or 0)
        # Asked again every poke_interval: a run that stops asking (killed) frees its place after three misses.
        patience = max(60, math.ceil(3 * self.poke_interval))
        return SparkSlotRequest(self.spark_conn_id, self.spark_slots, score, patience)  # type: ignore[arg-type]

    def _handshake(self, context: Context | Mapping[str, Any]) -> WorkHandshake | None:
        if self.work_ready_seconds is None:
            return None
        return WriteGateHook(self.write_gate_conn_id).handshake(self.table, run_owner(context), run_attempt(context))

    def execute(self, context: Context) -> dict[str, str]:
        handshake = self._handshake(context)
        with telling_the_work(handshake, context, self.retries, self.task_id):
            if handshake is not None:
                try:
                    ready = await_ready(handshake, self.work_ready_seconds)  # type: ignore[arg-type]  # set
                except NoGo as no_go:
                    raise AirflowFailException(f"{no_go}; the gate of {self.table} was not closed") from None
                self.log.info("The rewrite's Spark application is ready (since %s): closing", ready.ready_at)
            return self._close(context)

    def _close(self, context: Context) -> dict[str, str]:
        hook = WriteGateHook(self.write_gate_conn_id)
        owner = run_owner(context)
        plan = self._plan(context)
        closing = Closing(self.lease_seconds, self.max_pause_seconds, self._slot_request(plan), self._work(plan))
        if not self.deferrable or self.gate_wait_seconds == 0:
            attempt = hook.close_gate_waiting(
                self.table, owner, closing, timeout=self.gate_wait_seconds, poke_interval=self.poke_interval
            )
            return {"table": str(self.table), **attempt.as_xcom()}
        # One look in the worker; if the run must wait, the waiting in the triggerer.
        attempt = hook.store.close(str(self.table), owner, closing, only_if_free=True)
        if attempt.closed:
            hook.log_closed(attempt)
            return {"table": str(self.table), **attempt.as_xcom()}
        self.log.info("%s; waiting in the triggerer, the gate open meanwhile", attempt.detail)
        from datetime import datetime, timedelta, timezone

        from airflow_iceberg.triggers.close_gate import CloseGateTrigger

        deadline = datetime.now(timezone.utc) + timedelta(seconds=self.gate_wait_seconds)
        self.defer(
            trigger=CloseGateTrigger(
                table=str(self.table),
                dag_id=owner.dag_id,
                run_id=owner.run_id,
                write_gate_conn_id=self.write_gate_conn_id,
                lease_seconds=self.lease_seconds,
                max_pause_seconds=self.max_pause_seconds,
                poke_interval=self.poke_interval,
                deadline=deadline.isoformat(),
                slot=None if closing.slot is None else vars(closing.slot).copy(),
                work=closing.work.as_xcom(),
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.gate_wait_seconds + 60 + 2 * self.poke_interval),
        )

    def execute_complete(self, context: Context | Mapping[str, Any], event: dict[str, Any]) -> dict[str, str]:
        """The gate closed (in the triggerer, or at the first look), or why the wait gave up."""
        with telling_the_work(self._handshake(context), context, self.retries, self.task_id):
            return self._closed(event)

    def _closed(self, event: dict[str, Any]) -> dict[str, str]:
        if not event.get("closed"):
            error = {"SparkSlotsBusyError": SparkSlotsBusyError, "WriteGateHeldError": GateBusyError}.get(
                event.get("error", ""), RuntimeError
            )
            raise error(f"gave up after {self.gate_wait_seconds} s: {event.get('message')}")
        return {"table": str(self.table), **{k: v for k, v in event.items() if k != "closed"}}


class OpenWriteGateOperator(BaseOperator):
    """Open the write gate of an Iceberg table if this DAG run holds it.

    Runs whatever happened upstream (trigger rule ``all_done``; as a teardown, ``all_done_setup_success``).
    Opening a gate this run does not hold, or one already open, changes nothing and logs why: a run can never
    reopen a gate that another run closed. Pushes whether it opened the gate to XCom.

    :param table: The table: a :class:`TableName`, or its text ``catalog.namespace.table``.
    :param write_gate_conn_id: Connection of the gate's MySQL database.
    :param prestarted_work: The run pre-started its rewrite (``core/gate_work.py``): remove the run's handshake rows
        once the gate is open.
    """

    template_fields: Sequence[str] = ()
    ui_color = "#c8f6c8"

    def __init__(
        self,
        *,
        table: TableName | str,
        write_gate_conn_id: str = WriteGateHook.default_conn_name,
        trigger_rule: str = TriggerRule.ALL_DONE,
        prestarted_work: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(trigger_rule=trigger_rule, **kwargs)
        self.table = TableName.of(table)
        self.write_gate_conn_id = write_gate_conn_id
        self.prestarted_work = prestarted_work

    def execute(self, context: Context) -> dict[str, Any]:
        hook = WriteGateHook(self.write_gate_conn_id)
        owner = run_owner(context)
        opened, state = hook.open_gate(self.table, owner)
        if self.prestarted_work:
            handshake = hook.handshake(self.table, owner, run_attempt(context))
            try:
                handshake.done()
            except Exception as error:  # the gate is open: a leftover row misleads nobody
                self.log.warning("could not remove the handshake rows of %s: %s", owner, error)
            finally:
                handshake.close()
        return {"table": str(self.table), "opened": opened, "state": state.state}
