"""Sensor that waits until a gated table's streaming writer has gone idle."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue, conf, timezone
from airflow.sdk.exceptions import AirflowFailException, AirflowSensorTimeout

from airflow_iceberg.core.idle import IdleCheck, why_not_idle
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.exceptions import LeaseLostError, WorkGoneError
from airflow_iceberg.hooks.run_records import FAILURE_XCOM_KEY
from airflow_iceberg.hooks.write_gate import WriteGateHook, run_attempt, run_owner, telling_the_work
from airflow_iceberg.triggers.snapshot_idle import SnapshotIdleTrigger, check_snapshot_idle

#: The least time a look gets, even when the sensor's timeout has (all but) run out: in reschedule mode each poke is
#: a new try, and the try that meets the timeout must still look, or its message could only guess why the wait ended.
LOOK_FLOOR_SECONDS = 10.0


class WritersNotIdle(AirflowSensorTimeout):
    """The idle wait ran out of time; the message says why the writers had not gone idle, and what to do."""


class SnapshotIdleSensor(BaseSensorOperator):
    """Wait until the table's writer is idle while this run holds its gate.

    Idle: the writer acknowledged the pause and nothing newer was committed, or no snapshot has been committed
    for ``idle_seconds``, counted from the later of the gate's close time and the table's newest snapshot, both
    against the database clock (the rule is ``decide_idle`` in ``airflow_iceberg.triggers.snapshot_idle``).
    Snapshots are read with the Iceberg provider's ``IcebergHook`` (pyiceberg, no Spark). It works in ``poke``
    and ``reschedule`` mode and, with ``deferrable=True``, in the triggerer; ``poke_interval`` paces both. Each
    look renews the run's lease on the gate, so the lease can be short; the look fails at once if this run no
    longer holds the gate, since the writer may then be committing, without retries (a retry would not get the gate
    back). No look outlasts the sensor's ``timeout`` by more than ``LOOK_FLOOR_SECONDS``, the least time each look
    gets, so that the wait's last try, which meets the timeout, still sees why the writers were not idle.

    :param table: The table: a :class:`TableName`, or its text ``catalog.namespace.table``.
    :param idle_seconds: How long the table must have been idle.
    :param iceberg_conn_id: Iceberg connection for the table's catalog; defaults to the catalog's name.
    :param write_gate_conn_id: Connection of the gate's MySQL database.
    :param deferrable: Wait in the triggerer instead of a worker slot (default: Airflow's
        ``[operators] default_deferrable``).
    :param prestarted_work: The run's rewrite is pre-started and waits for this sensor (``core/gate_work.py``): give
        it the go once the writers are done; a failure that is not retried tells it to end without working.
    """

    template_fields: Sequence[str] = ()

    def __init__(
        self,
        *,
        table: TableName | str,
        idle_seconds: int,
        iceberg_conn_id: str | None = None,
        write_gate_conn_id: str = WriteGateHook.default_conn_name,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        prestarted_work: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        name = TableName.of(table)
        if isinstance(idle_seconds, bool) or not isinstance(idle_seconds, int) or idle_seconds < 0:
            raise ValueError(f"idle_seconds must be a non-negative integer, got {idle_seconds!r}")
        self.table = name
        self.idle_seconds = idle_seconds
        self.iceberg_conn_id = iceberg_conn_id or name.catalog
        self.write_gate_conn_id = write_gate_conn_id
        self.deferrable = deferrable
        self.prestarted_work = prestarted_work
        self._ends_at: float | None = None  # when this wait's timeout runs out (monotonic), set by execute
        self._last_check: IdleCheck | None = None  # the last look that finished, for a timeout's message

    def _check(self, context: Context) -> IdleCheck:
        return check_snapshot_idle(
            table=self.table,
            owner=run_owner(context),
            idle_seconds=self.idle_seconds,
            iceberg_conn_id=self.iceberg_conn_id,
            write_gate_conn_id=self.write_gate_conn_id,
            attempt=run_attempt(context) if self.prestarted_work else None,
        )

    def poke(self, context: Context) -> PokeReturnValue:
        check = self._last_check = self._bounded_check(context)
        self.log.info(
            "%s idle for %.1f s of %d s; writers acknowledged: %s of %s; writing: %s",
            self.table,
            check.idle_for_seconds,
            self.idle_seconds,
            list(check.writers_acknowledged),
            list(check.writers),
            list(check.writers_busy),
        )
        return PokeReturnValue(is_done=check.done, xcom_value=check.as_xcom())

    def _bounded_check(self, context: Context) -> IdleCheck:
        """One look, which may not outlast what is left of the sensor's timeout (a stuck catalog read, say), nor
        ``LOOK_FLOOR_SECONDS`` when less is left."""
        ends_at = self._ends_at if self._ends_at is not None else time.monotonic() + self.timeout
        budget = max(ends_at - time.monotonic(), LOOK_FLOOR_SECONDS)
        outcome: dict[str, Any] = {}

        def look() -> None:
            try:
                outcome["check"] = self._check(context)
            except BaseException as error:  # handed to the task's thread below
                outcome["error"] = error

        # A daemon thread: one that never returns is abandoned, and ends with the task's process.
        worker = threading.Thread(target=look, name="snapshot-idle-look", daemon=True)
        worker.start()
        worker.join(budget)
        if worker.is_alive():
            raise self._timed_out(look_seconds=budget)
        if isinstance(outcome.get("error"), LeaseLostError | WorkGoneError):  # a retry would not change it
            raise AirflowFailException(str(outcome["error"])) from None
        if "error" in outcome:
            raise outcome["error"]
        return outcome["check"]

    def _timed_out(self, why: str | None = None, look_seconds: float | None = None) -> WritersNotIdle:
        """The timeout, with its cause (``why``; else as the last finished look saw it, or as the look still running
        after ``look_seconds`` says it), and what to do."""
        running = f", with a look still running after {look_seconds:.0f} s" if look_seconds is not None else ""
        why = why or why_not_idle(self._last_check, self.table, self.write_gate_conn_id)
        return WritersNotIdle(
            f"the writers of {self.table} had not gone idle when the sensor's timeout of {self.timeout:g} s ran "
            f"out{running}: {why}"
        )

    def _started_at(self, context: Context) -> float:
        """When this wait began, on the monotonic clock: reschedule mode counts from its first try."""
        if not self.reschedule:
            return time.monotonic()
        first = context["ti"].get_first_reschedule_date(context)
        waited = (timezone.utcnow() - first).total_seconds() if first else 0.0
        return time.monotonic() - max(waited, 0.0)

    def execute(self, context: Context) -> Any:
        with self._telling_the_work(context), self._telling_the_record(context):
            return self._wait(context)

    @contextmanager
    def _telling_the_work(self, context: Context) -> Iterator[None]:
        """Pre-started work hears the outcome: the go once the wait is done, a stop when it failed for good. A
        reschedule or a deferral is neither."""
        if not self.prestarted_work:
            yield
            return
        handshake = WriteGateHook(self.write_gate_conn_id).handshake(
            self.table, run_owner(context), run_attempt(context)
        )
        with telling_the_work(handshake, context, self.retries, self.task_id):
            yield
        try:
            handshake.go()
            self.log.info("%s: gave the rewrite the go", self.table)
        finally:
            handshake.close()

    @contextmanager
    def _telling_the_record(self, context: Context) -> Iterator[None]:
        """A wait that timed out leaves its reason where the run's record (``record_run``) reads it, as XCom
        ``failure``: the record then says why the run ended, not only that the rewrites did not run."""
        try:
            yield
        except WritersNotIdle as timed_out:
            context["ti"].xcom_push(key=FAILURE_XCOM_KEY, value=str(timed_out))
            raise

    def _wait(self, context: Context) -> Any:
        self._ends_at = self._started_at(context) + self.timeout
        if not self.deferrable:
            try:
                return super().execute(context)
            except WritersNotIdle:
                raise
            except AirflowSensorTimeout:  # Airflow's own, which says only how long it waited
                raise self._timed_out() from None
        check = self._bounded_check(context)  # done already, or a clear error, without a trip to the triggerer
        if check.done:
            return check.as_xcom()
        owner = run_owner(context)
        left = max(0.0, self._ends_at - time.monotonic())
        self.defer(
            trigger=SnapshotIdleTrigger(
                table=str(self.table),
                dag_id=owner.dag_id,
                run_id=owner.run_id,
                idle_seconds=self.idle_seconds,
                iceberg_conn_id=self.iceberg_conn_id,
                write_gate_conn_id=self.write_gate_conn_id,
                poke_interval=self.poke_interval,
                ends_at=(timezone.utcnow() + timedelta(seconds=left)).isoformat(),
                attempt=run_attempt(context) if self.prestarted_work else None,
            ),
            method_name="execute_complete",
            # The trigger ends the wait itself, saying why; Airflow's timeout is the backstop of a stuck look.
            timeout=timedelta(seconds=left + 2 * self.poke_interval + 60),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        with self._telling_the_work(context):
            return self._completed(context, event)

    def _completed(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("status") in ("not_held", "work_gone"):
            raise AirflowFailException(event.get("message"))
        if event.get("status") == "timeout":  # the trigger's last look said why
            with self._telling_the_record(context):
                raise self._timed_out(event.get("message"))
        if event.get("status") != "success":
            raise RuntimeError(f"waiting for the writer of {self.table} to go idle failed: {event.get('message')}")
        self.log.info("%s idle: %s", self.table, event["check"])
        return event["check"]
