"""Every exception the provider raises, in one place: catch them from here.

Eight belong to the Airflow-free core, which runs in Spark and in writers and so cannot import this module (it
imports Airflow and pymysql): they are defined beside their code in ``airflow_iceberg.core`` and exported here.
Each message names the bad value, the table or the connection, and what to do.
"""

from __future__ import annotations

import pymysql
from airflow.sdk.exceptions import AirflowFailException

from airflow_iceberg.core.gate_holder import WritersNotAcknowledgedError
from airflow_iceberg.core.gate_protocol import WriteGateAccessError
from airflow_iceberg.core.gate_store import GateBusyError, SparkSlotsBusyError, WriteGateHeldError
from airflow_iceberg.core.gate_work import WorkGoneError
from airflow_iceberg.core.lease import LeaseLostError
from airflow_iceberg.core.tables import InvalidCallError

__all__ = [
    "TablesQueryError",
    "GateBusyError",
    "IcebergConfigError",
    "InvalidCallError",
    "LeaseLostError",
    "PredicateError",
    "PredicateTypeError",
    "RunParamsError",
    "SparkSlotsBusyError",
    "WriteGateAccessError",
    "WriteGateHeldError",
    "WriteGateSchemaError",
    "WriteGateUnreachableError",
    "WorkGoneError",
    "WritersNotAcknowledgedError",
]


# --- the table list and a run's input: refused before any gate closes -------------------------------------------


class IcebergConfigError(ValueError):
    """The table list, or entries in it, cannot be used; the message names each entry and field."""


class PredicateError(ValueError):
    """A ``where`` predicate that must not reach Spark, or cannot be applied; the message names it."""


class PredicateTypeError(PredicateError):
    """A predicate that compares a column with a value of another type (a number for a string column, say):
    Spark would cast the column, and Iceberg cannot select files by a cast column."""


class RunParamsError(AirflowFailException):
    """A run's Params or the table's predicate cannot be used for this run; retrying would not change that."""


# --- the write gate -------------------------------------------------------------------------------------------


class WriteGateSchemaError(RuntimeError):
    """The gate's tables are missing or older than this provider: run ``airflow-iceberg migrate``."""


class WriteGateUnreachableError(pymysql.err.OperationalError):
    """The gate's MySQL did not answer, or refused the login: the message names the connection and what to do.

    An ``OperationalError`` still, with pymysql's code, so what retries on MySQL errors retries on this one."""

    def __str__(self) -> str:
        return str(self.args[-1])


# --- the UI -----------------------------------------------------------------------------------------------------


class TablesQueryError(ValueError):
    """A list query with a value the page does not know; its message names the value and what is allowed."""
