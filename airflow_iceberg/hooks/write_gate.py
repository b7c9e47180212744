"""The write gate: one MySQL row per Iceberg table that tells its streaming writer to pause committing.

A DAG run closes the gate with a lease, compacts, and opens it again, through the gate's one store
(``core/gate_store.py``, :attr:`WriteGateHook.store`), which a batch job holding a gate and the rewrite's Spark driver
use too: each change locks the table's row, decides by the gate's rules from the row as locked, and writes the change
and its audit row in the same transaction. Kept beside the gates, in the same database and transactions: the run
records and health checks (``hooks/run_records.py``, :attr:`WriteGateHook.records`) and the Spark-slot queue
(``core/spark_slots.py``, :attr:`WriteGateHook.spark_slots`). Every time comes from the database clock, the one
writers compare against. Writers pause iff ``state = 'closed' AND lease_expires_at > NOW()``
(see ``docs/write-gate-protocol.md``), so a crashed run cannot pause them past its lease.

The tables are defined in ``write_gate.sql`` and created or upgraded by ``airflow-iceberg migrate``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pymysql
from airflow.sdk import BaseHook

from airflow_iceberg.core.conflicts import UNDESCRIBED, GuardedWork, summary
from airflow_iceberg.core.gate_protocol import WRITE_GATE_DEFAULT_CONN_ID, owner_connection
from airflow_iceberg.core.gate_state import GateOwner, GateState
from airflow_iceberg.core.gate_store import CloseAttempt, Closing, GateLease, GateStore
from airflow_iceberg.core.gate_work import WorkHandshake
from airflow_iceberg.core.job_report import read_report
from airflow_iceberg.core.job_secrets import GateOwnerSecrets
from airflow_iceberg.core.spark_slots import SparkSlotQueue, SparkSlotRequest
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.exceptions import WriteGateSchemaError, WriteGateUnreachableError
from airflow_iceberg.hooks import write_gate_schema
from airflow_iceberg.hooks.run_records import RunRecords

#: pymysql's codes for a MySQL that cannot be reached (2003, 2005, 2006, 2013) or refuses the login (1044, 1045).
_UNREACHABLE = {2003, 2005, 2006, 2013}
_LOGIN_REFUSED = {1044, 1045}

log = logging.getLogger(__name__)


def run_owner(context: Mapping[str, Any]) -> GateOwner:
    """The gate owner for the DAG run that ``context`` belongs to."""
    return GateOwner(dag_id=context["dag"].dag_id, run_id=context["run_id"])


def run_attempt(context: Mapping[str, Any]) -> int:
    """The attempt of the DAG run that ``context`` belongs to: its clear number (a cleared run starts anew)."""
    return int(getattr(context.get("dag_run"), "clear_number", 0) or 0)


@contextmanager
def telling_the_work(
    handshake: WorkHandshake | None, context: Mapping[str, Any], retries: int | None, who: str
) -> Iterator[None]:
    """Around a task of a run with pre-started work (``core/gate_work.py``): if the task fails and no try of it
    follows (a failure that is not retried, or its last try), tell the work to end without working, naming ``who``
    and why. A reschedule or a skip is no failure, nor a deferral (which is no ``Exception``). Best effort: the
    work ends anyway when the gate's lease runs out, or at its own deadline. The handshake's connection is closed
    after."""
    from airflow.sdk.exceptions import (
        AirflowFailException,
        AirflowRescheduleException,
        AirflowSensorTimeout,
        AirflowSkipException,
    )

    try:
        yield
    except (AirflowRescheduleException, AirflowSkipException):
        raise
    except Exception as error:
        final = isinstance(error, AirflowFailException | AirflowSensorTimeout)
        if handshake is not None and (final or int(context["ti"].try_number or 1) > int(retries or 0)):
            try:
                handshake.stop(f"{who} failed: {error}")
            except Exception as unsaid:  # MySQL away: the work's own deadlines end it
                log.warning("could not tell the work on %s to stop: %s", handshake.table, unsaid)
        raise
    finally:
        if handshake is not None:
            handshake.close()


class WriteGateHook(BaseHook):
    """Close and open Iceberg write gates kept in MySQL, and read their state and audit trail.

    The connection is of type ``iceberg_write_gate``: host, port, login, password and, as *schema*, the MySQL
    database that holds the gate tables. :meth:`migrate` creates or upgrades them; run it once per database
    (``airflow-iceberg migrate``), not per task.

    :param write_gate_conn_id: Airflow connection id of the gate's MySQL database.
    """

    conn_name_attr = "write_gate_conn_id"
    default_conn_name = WRITE_GATE_DEFAULT_CONN_ID
    conn_type = "iceberg_write_gate"
    hook_name = "Iceberg Write Gate (MySQL)"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        from airflow_iceberg.get_provider_info import WRITE_GATE_FORM

        return {key.replace("-", "_"): value for key, value in WRITE_GATE_FORM.items()}

    def __init__(self, write_gate_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.write_gate_conn_id = write_gate_conn_id

    @functools.cached_property
    def store(self) -> GateStore:
        """The gates of this connection's database: every change and read of a gate goes through it."""
        return GateStore(self.get_conn, schema_error=self._schema_error)

    @functools.cached_property
    def records(self) -> RunRecords:
        """The run records and health checks kept beside this connection's gates."""
        return RunRecords(self.store.transaction, self.log)

    @property
    def spark_slots(self) -> SparkSlotQueue:
        """The queue of runs for each Spark connection's slots, kept beside this connection's gates."""
        return self.store.spark_slots

    def _schema_error(self, error: Exception) -> WriteGateSchemaError:
        return WriteGateSchemaError(
            f"the write gate tables of connection {self.write_gate_conn_id!r} are missing or older than this "
            f"provider's schema version {write_gate_schema.gate_schema().latest}: run "
            f"`airflow-iceberg migrate --conn-id {self.write_gate_conn_id}` ({error.args[-1]})"
        )

    def connection_settings(self) -> dict[str, Any]:
        """Host, port, user, password and database of the gate's MySQL, from the connection.

        A connection without a database or without a login is an error naming the connection: it never falls
        back to ``root``.
        """
        conn = self.get_connection(self.write_gate_conn_id)
        if not conn.schema:
            raise ValueError(
                f"connection {self.write_gate_conn_id!r} names no database: set its schema to the gate database"
            )
        if not conn.login:
            raise ValueError(
                f"connection {self.write_gate_conn_id!r} has no login: set the MySQL user Airflow uses for the gate"
            )
        return {
            "host": conn.host or "127.0.0.1",
            "port": int(conn.port or 3306),
            "user": conn.login,
            "password": conn.password or "",
            "database": conn.schema,
        }

    def get_conn(self) -> pymysql.connections.Connection:
        """A new connection in UTC, returning rows as dicts, with autocommit off, in a gate owner's session (a
        frozen owner's row lock is dropped within seconds: see ``OWNER_SESSION_SETTINGS``)."""
        settings = self.connection_settings()
        try:
            return owner_connection(**settings, cursorclass=pymysql.cursors.DictCursor)
        except pymysql.err.OperationalError as error:
            code = error.args[0] if error.args else None
            where = f"{settings['host']}:{settings['port']}, database {settings['database']!r}"
            if code in _LOGIN_REFUSED:
                raise WriteGateUnreachableError(
                    code,
                    (
                        f"the write gate's MySQL ({where}) refused user {settings['user']!r} of connection "
                        f"{self.write_gate_conn_id!r}: {error.args[-1]}. Nothing in the gate changed. Check the "
                        f"connection's login and password, and that the user has the grants the README gives it."
                    ),
                ) from error
            if code in _UNREACHABLE:
                raise WriteGateUnreachableError(
                    code,
                    (
                        f"the write gate's MySQL ({where}) of connection {self.write_gate_conn_id!r} did not answer: "
                        f"{error.args[-1]}. Nothing in the gate changed. Check that MySQL runs and that the connection "
                        f"points at it (`airflow connections get {self.write_gate_conn_id}`); once it answers, clear "
                        f"the task to run it again."
                    ),
                ) from error
            raise

    def lease(self, table: TableName | str, owner: GateOwner) -> GateLease:
        """``owner``'s lease on the gate of ``table``, for a :class:`LeaseKeeper` that renews it while work runs."""
        settings = self.connection_settings()
        return GateLease(str(TableName.of(table)), owner.dag_id, owner.run_id, lambda: owner_connection(**settings))

    def handshake(self, table: TableName | str, owner: GateOwner, attempt: int) -> WorkHandshake:
        """The handshake of ``owner``'s attempt with the work it pre-started on ``table`` (``core/gate_work.py``)."""
        settings = self.connection_settings()
        return WorkHandshake(lambda: owner_connection(**settings), str(TableName.of(table)), owner, attempt)

    def owner_settings(self, table: TableName | str, owner: GateOwner, lease_seconds: int) -> GateOwnerSecrets:
        """What a Spark job needs to renew ``owner``'s lease of ``lease_seconds`` itself (``LeaseKeeper``): the
        connection and the owner.

        Holds the gate's password: it belongs in a job's secrets file, never on a command line.
        """
        connection = self.connection_settings()
        return GateOwnerSecrets(
            host=connection["host"],
            port=connection["port"],
            user=connection["user"],
            password=connection["password"],
            database=connection["database"],
            table=str(TableName.of(table)),
            dag_id=owner.dag_id,
            run_id=owner.run_id,
            lease_seconds=lease_seconds,
        )

    def job_report(self, report_id: str) -> list[str]:
        """The lines a Spark job wrote into its report ``report_id`` (``core/job_report.py``); the report is removed."""
        try:
            with self.get_conn() as db:
                return read_report(db, report_id)
        except pymysql.err.ProgrammingError as error:
            raise self._schema_error(error) from error

    def migrate(self) -> tuple[int, int]:
        """Create or upgrade the gate tables to this provider's schema; return the versions before and after."""
        with self.get_conn() as db:
            return write_gate_schema.migrate(db)

    def schema_version(self) -> int:
        """The schema version of the connection's database (0 if it has no gate tables yet)."""
        with self.get_conn() as db, db.cursor() as cursor:
            return write_gate_schema.recorded_version(cursor)

    def get_state(self, table: TableName | str) -> GateState:
        """The gate row of ``table`` and its writers, read together; a table never gated reads as open."""
        return self.store.state(str(TableName.of(table)))

    def gate_states(self) -> dict[str, GateState]:
        """Every gate row of the connection's database, by table name, without its writers: every table at a glance."""
        return self.store.states()

    def close_gate(
        self,
        table: TableName | str,
        owner: GateOwner,
        lease_seconds: int,
        max_pause_seconds: int | None = None,
        slot: SparkSlotRequest | None = None,
        work: GuardedWork = UNDESCRIBED,
    ) -> GateState:
        """Close the gate of ``table`` for ``owner`` with a lease of ``lease_seconds``, at once or not at all
        (:meth:`GateStore.close`), pausing the writers that can conflict with ``work`` (without it, every writer):
        :class:`WriteGateHeldError` if another run holds it, :class:`SparkSlotsBusyError` while ``slot`` is not the
        run's yet; either changes nothing but the audit trail or the slot queue.
        """
        closing = Closing(lease_seconds, max_pause_seconds, slot, work)
        attempt = self.store.close(str(TableName.of(table)), owner, closing)
        if not attempt.closed:
            raise attempt.refusal()
        self.log_closed(attempt)
        return attempt.state

    def close_gate_waiting(
        self, table: TableName | str, owner: GateOwner, closing: Closing, *, timeout: float, poke_interval: float
    ) -> CloseAttempt:
        """Close the gate as ``closing`` asks, waiting up to ``timeout`` seconds while another run holds it or the
        slots are taken (:meth:`GateStore.close_waiting`); the closing, with what it decided per writer."""
        name = str(TableName.of(table))
        attempt = self.store.close_waiting(
            name, owner, closing, timeout=timeout, poke_interval=poke_interval, log=self.log.info
        )
        self.log_closed(attempt)
        return attempt

    def log_closed(self, attempt: CloseAttempt) -> None:
        """Log a closing: until when, and for each writer whether it pauses and why."""
        state = attempt.state
        self.log.info(
            "Write gate of %s closed by %s until %s (database time): %s",
            state.table,
            state.owner,
            state.lease_expires_at,
            summary(attempt.pauses),
        )
        for decision in attempt.pauses:
            self.log.info(
                "Writer %s %s: %s",
                decision.writer_id,
                "pauses" if decision.pause else "keeps committing",
                decision.reason,
            )

    def renew_lease(self, table: TableName | str, owner: GateOwner) -> GateState:
        """Extend the lease of a gate ``owner`` holds by the lease it closed with, never past the pause's deadline.

        Raises :class:`LeaseLostError` if ``owner`` no longer holds the gate (its lease ended, another
        run took it over, or it was forced open): whatever the owner was doing must stop.
        """
        return self.store.renew(str(TableName.of(table)), owner)

    def open_gate(self, table: TableName | str, owner: GateOwner) -> tuple[bool, GateState]:
        """Open the gate of ``table`` if ``owner`` holds it; return whether it did and the state after.

        A gate held by another owner, or already open, is left as it is and the log says why.
        """
        name = str(TableName.of(table))
        change, after = self.store.open(name, owner)
        if change.allowed:
            self.log.info("Write gate of %s opened by %s", name, owner)
        else:
            self.log.warning("Write gate of %s left as it is: %s", name, change.detail)
        return change.allowed, after

    def force_open(self, table: TableName | str, reason: str) -> bool:
        """Open the gate of ``table`` whoever holds it, recording ``reason``; return whether it was closed.

        For people, not DAGs: releasing writers at once after a run died, instead of waiting out its lease.
        The audit row names the run that held the gate and the lease it had.
        """
        name = str(TableName.of(table))
        was_closed, owner = self.store.force_open(name, reason)
        if was_closed:
            self.log.warning("Write gate of %s, held by %s, forced open: %s", name, owner, reason)
        else:
            self.log.info("Write gate of %s was already open: %s", name, reason)
        return was_closed

    def audit_trail(self, table: TableName | str) -> list[dict[str, Any]]:
        """Every recorded close, open and refusal for ``table``, oldest first, times in UTC."""
        return self.store.audit_trail(str(TableName.of(table)))
