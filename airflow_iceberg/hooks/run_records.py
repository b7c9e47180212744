"""The gate database's records of the runs and of the health watch's checks: a store beside the gates
(:attr:`WriteGateHook.records <airflow_iceberg.hooks.write_gate.WriteGateHook>`), in the same database.

A record of every compaction run (``iceberg_compaction_run``: the plan writes it, the run's last task completes it)
and each table's last health check (``iceberg_health_check``: one upsert per sweep for all tables).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from enum import StrEnum
from typing import Any

import pymysql

from airflow_iceberg.core.gate_protocol import GATE_TABLE
from airflow_iceberg.core.gate_state import database_time
from airflow_iceberg.core.spark_slots import SLOT_QUEUE_TABLE
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.planning.plan import Decision


def the_row(cursor: Any) -> dict[str, Any]:
    """The one row the statement just run always returns (a row this transaction created or locked)."""
    row = cursor.fetchone()
    if row is None:
        raise LookupError("the statement returned no row where one must be")
    return row


RUN_TABLE = "iceberg_compaction_run"


class Outcome(StrEnum):
    """How a run ended, as its record says (``iceberg_compaction_run.outcome``)."""

    RUNNING = "running"  # planned to rewrite; its last task completes the record
    SUCCESS = "success"  # its rewrites completed
    SKIPPED = "skipped"  # nothing needed work: no gate closed
    FAILED = "failed"  # a task failed before the rewrites completed
    DRY_RUN = "dry_run"  # planned only, as its Params asked


#: The XCom key under which a task that ends its run leaves the reason (the idle wait does), for the run's record.
FAILURE_XCOM_KEY = "failure"

#: The columns of a run record a task may set; the rest are the database's (id, started_at).
RUN_COLUMNS = (
    "table_name", "dag_id", "run_id", "decision", "reason", "partitions", "data_files_before",
    "delete_files_before", "bytes_before", "data_files_after", "delete_files_after", "bytes_after", "health_score",
    "gate_closed_seconds", "rewrite_seconds", "outcome", "detail", "writers",
)  # fmt: skip

# One row per DAG run: the plan writes it, the run's last task completes it (a retry overwrites its own row).
# Column names come from RUN_COLUMNS only; every value is a parameter.
_RUN_INSERT = f"""INSERT INTO {RUN_TABLE} ({", ".join(RUN_COLUMNS)}, finished_at)
    VALUES ({", ".join(f"%({c})s" for c in RUN_COLUMNS)}, IF(%(finished)s, NOW(6), NULL))"""

_RUN_SELECT = f"""SELECT id, {", ".join(RUN_COLUMNS)}, started_at, finished_at FROM {RUN_TABLE}
    WHERE table_name = %s ORDER BY id"""

_RUN_SELECT_ONE = f"""SELECT {", ".join(RUN_COLUMNS)} FROM {RUN_TABLE}
    WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s"""

# The health watch's last check of each table (triggers/health_sweep.py): one upsert per sweep for all of them.
HEALTH_TABLE = "iceberg_health_check"


class HealthDecision(StrEnum):
    """What a sweep decided for a table: the ``decision`` of its ``iceberg_health_check`` row."""

    HEALTHY = "healthy"
    NEEDS_WORK = "needs_work"  # by its thresholds; the hold-back turns it into one of the next two
    STARTED = "started"  # the watch started a run: its watcher fires
    WAITING = "waiting"  # needs work, but a run is pending, cooling down or not yet created
    UNREACHABLE = "unreachable"  # the catalog did not answer
    ERROR = "error"  # the table could not be read


#: The decisions of a table that needs work, whether a run starts now or one is under way.
NEEDING_WORK = (HealthDecision.NEEDS_WORK, HealthDecision.STARTED, HealthDecision.WAITING)


HEALTH_COLUMNS = ("table_name", "snapshot_id", "decision", "reason", "reading", "score", "data_files", "delete_files")

_HEALTH_UPSERT = f"""INSERT INTO {HEALTH_TABLE} ({", ".join(HEALTH_COLUMNS)}, checked_at, started_at)
    VALUES ({", ".join(["%s"] * len(HEALTH_COLUMNS))}, NOW(6), IF(%s, NOW(6), NULL))
    ON DUPLICATE KEY UPDATE {", ".join(f"{c} = VALUES({c})" for c in HEALTH_COLUMNS[1:])}, checked_at = NOW(6),
    started_at = IF(VALUES(decision) = '{HealthDecision.STARTED.value}', NOW(6), started_at)"""

_HEALTH_SELECT = f"SELECT {', '.join(HEALTH_COLUMNS)}, checked_at, started_at FROM {HEALTH_TABLE}"

# The newest run record of each table, how long ago it ended (or began, if it never ended), by the database clock,
# and whether its run shows it is alive: it holds the table's gate on a lease that has not ended, or keeps its place
# in its Spark connection's slot queue by asking. The IN list holds one placeholder per table.
_LAST_RUNS = f"""SELECT r.table_name, r.dag_id, r.run_id, r.decision, r.outcome, r.started_at, r.finished_at,
    TIMESTAMPDIFF(MICROSECOND, COALESCE(r.finished_at, r.started_at), NOW(6)) / 1e6 AS seconds_ago,
    COALESCE(g.state = 'closed' AND g.lease_expires_at > NOW(6), FALSE) AS holds_gate,
    COALESCE(q.expires_at > NOW(6), FALSE) AS asks_for_slot
    FROM {RUN_TABLE} r JOIN (SELECT MAX(id) AS id FROM {RUN_TABLE} WHERE table_name IN ({{}}) GROUP BY table_name) n
    ON r.id = n.id
    LEFT JOIN {GATE_TABLE} g ON g.table_name = r.table_name AND g.owner_dag_id = r.dag_id AND g.owner_run_id = r.run_id
    LEFT JOIN {SLOT_QUEUE_TABLE} q
    ON q.table_name = r.table_name AND q.owner_dag_id = r.dag_id AND q.owner_run_id = r.run_id"""

# How many runs of each table failed in the last %s seconds, by the database clock.
_FAILED_RUNS = f"""SELECT table_name, COUNT(*) AS failed FROM {RUN_TABLE}
    WHERE outcome = '{Outcome.FAILED.value}' AND started_at >= NOW(6) - INTERVAL %s SECOND GROUP BY table_name"""


class RunRecords:
    """The run records and health checks of one gate connection; :class:`WriteGateHook` gives the transaction."""

    def __init__(
        self,
        transaction: Callable[[], AbstractContextManager[pymysql.cursors.DictCursor]],
        log: Any,  # the hook's logger
    ) -> None:
        self._transaction = transaction
        self.log = log

    def record_run(self, record: Mapping[str, Any], *, finished: bool) -> None:
        """Write or complete the run record of ``record['dag_id']``/``record['run_id']``.

        Columns ``record`` leaves out (or sets to None) keep what an earlier write of the same run put there. A
        ``finished`` record is sent, whole, to Airflow's metrics (:mod:`airflow_iceberg.hooks.metrics`).
        """
        unknown = set(record) - set(RUN_COLUMNS)
        if unknown:
            raise ValueError(f"unknown run record columns {sorted(unknown)}")
        values = {column: record.get(column) for column in RUN_COLUMNS}
        values["table_name"] = str(TableName.of(record["table_name"]))  # required
        values["finished"] = finished
        given = [c for c in RUN_COLUMNS if values[c] is not None and c not in ("dag_id", "run_id")]
        update = f"""UPDATE {RUN_TABLE} SET {", ".join(f"{c} = %({c})s" for c in given)},
            finished_at = IF(%(finished)s, NOW(6), NULL) WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s"""
        with self._transaction() as cursor:
            cursor.execute(
                f"SELECT id FROM {RUN_TABLE} WHERE dag_id = %(dag_id)s AND run_id = %(run_id)s FOR UPDATE", values
            )
            cursor.execute(update if cursor.fetchone() else _RUN_INSERT, values)
            if finished:
                cursor.execute(_RUN_SELECT_ONE, values)
                complete = the_row(cursor)
        if finished:  # the whole record, as written, goes to Airflow's metrics (airflow_iceberg.hooks.metrics)
            from airflow_iceberg.hooks import metrics

            metrics.emit_run(complete)

    def record_failed_run(
        self, table: TableName | str, dag_id: str, run_id: str, task_id: str, error: BaseException
    ) -> None:
        """Record a run that failed before it planned (``task_id`` raised ``error``), so no run goes unrecorded.

        The record names the error's type only: its text stays in the task's log, since it may quote a catalog URI.
        A record that cannot be written is logged, never raised over ``error``.
        """
        record = {
            "table_name": table,
            "dag_id": dag_id,
            "run_id": run_id,
            "decision": Decision.NONE,
            "outcome": Outcome.FAILED,
            "reason": f"{task_id} failed ({type(error).__name__}); see its log",
        }
        try:
            self.record_run(record, finished=True)
        except Exception:
            self.log.exception("Could not record the failed run %s of %s", run_id, table)

    def run_records(self, table: TableName | str) -> list[dict[str, Any]]:
        """Every recorded run of ``table``, oldest first, times in UTC."""
        with self._transaction() as cursor:
            cursor.execute(_RUN_SELECT, (str(TableName.of(table)),))
            rows = list(cursor.fetchall())
        for row in rows:
            row["started_at"], row["finished_at"] = database_time(row["started_at"]), database_time(row["finished_at"])
        return rows

    def record_health_checks(self, checks: list[Mapping[str, Any]]) -> None:
        """Write each table's latest health check (``HEALTH_COLUMNS``), stamped with the database clock.

        A check whose decision is ``started`` also stamps ``started_at``: the watch started a run for it.
        """
        if not checks:
            return
        rows = [
            (
                *(str(c[k]) if k == "table_name" else c.get(k) for k in HEALTH_COLUMNS),
                c["decision"] == HealthDecision.STARTED,
            )
            for c in checks
        ]
        with self._transaction() as cursor:
            cursor.executemany(_HEALTH_UPSERT, rows)

    def health_checks(self, table: TableName | str | None = None) -> dict[str, dict[str, Any]]:
        """Every table's latest health check (or only ``table``'s), by table name, times in UTC."""
        with self._transaction() as cursor:
            if table is None:
                cursor.execute(_HEALTH_SELECT)
            else:
                cursor.execute(f"{_HEALTH_SELECT} WHERE table_name = %s", (str(TableName.of(table)),))
            rows = list(cursor.fetchall())
        for row in rows:
            row["checked_at"], row["started_at"] = database_time(row["checked_at"]), database_time(row["started_at"])
        return {row["table_name"]: row for row in rows}

    def failed_runs(self, seconds: int) -> dict[str, int]:
        """How many runs of each table that has any failed among those that began in the last ``seconds``."""
        with self._transaction() as cursor:
            cursor.execute(_FAILED_RUNS, (int(seconds),))
            return {row["table_name"]: int(row["failed"]) for row in cursor.fetchall()}

    def last_runs(self, tables: Sequence[TableName | str]) -> dict[str, dict[str, Any]]:
        """The newest run record of each of ``tables`` that has one, in one query, with ``seconds_ago``: since it
        ended, or since it began if it never ended; and ``alive``: its run holds the table's gate on a lease that
        has not ended, or keeps its place in the Spark slot queue by asking."""
        names = sorted({str(TableName.of(t)) for t in tables})
        if not names:
            return {}
        with self._transaction() as cursor:
            cursor.execute(_LAST_RUNS.format(", ".join(["%s"] * len(names))), names)
            rows = list(cursor.fetchall())
        for row in rows:
            row["started_at"], row["finished_at"] = database_time(row["started_at"]), database_time(row["finished_at"])
            row["seconds_ago"] = float(row["seconds_ago"])
            row["alive"] = bool(row.pop("holds_gate")) or bool(row.pop("asks_for_slot"))
        return {row["table_name"]: row for row in rows}
