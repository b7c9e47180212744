"""The writer's side of the write-gate protocol: may this writer commit to its table now?

Depends on ``pymysql`` alone, so Spark and PyFlink jobs and plain scripts can use it without Airflow. The rule,
also in ``docs/write-gate-protocol.md``: **a writer pauses iff ``state = 'closed' AND lease_expires_at > NOW()``**,
evaluated by MySQL's clock, so a gate whose closing DAG crashed stops pausing writers when its lease ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

GATE_TABLE = "iceberg_write_gate"
AUDIT_TABLE = "iceberg_write_gate_audit"

#: The one query a writer runs before each commit. No row for the table means the gate was never closed.
WRITER_CHECK_SQL = (
    f"SELECT state = 'closed' AND lease_expires_at > NOW(6) AS paused, lease_expires_at"
    f" FROM {GATE_TABLE} WHERE table_name = %s"
)


@dataclass(frozen=True)
class WriterVerdict:
    """What the gate told a writer: whether to pause, and until when at the latest."""

    paused: bool
    lease_expires_at: datetime | None


_NO_SUCH_TABLE = 1146  # MySQL error: the gate tables do not exist yet, so no gate was ever closed


def check_gate(connection, table: str) -> WriterVerdict:
    """Run :data:`WRITER_CHECK_SQL` for ``table`` (``catalog.namespace.table``) on a pymysql connection."""
    import pymysql

    try:
        with connection.cursor() as cursor:
            cursor.execute(WRITER_CHECK_SQL, (table,))
            row = cursor.fetchone()
    except pymysql.err.ProgrammingError as error:
        if error.args[0] != _NO_SUCH_TABLE:
            raise
        connection.rollback()
        return WriterVerdict(paused=False, lease_expires_at=None)
    connection.commit()  # end the read so the next check sees fresh data under REPEATABLE READ
    if row is None:
        return WriterVerdict(paused=False, lease_expires_at=None)
    return WriterVerdict(paused=bool(row[0]), lease_expires_at=row[1])


def wait_until_open(
    connection,
    table: str,
    *,
    poll_seconds: float = 1.0,
    on_pause: Callable[[WriterVerdict], None] | None = None,
) -> float:
    """Block while the gate pauses writers of ``table``; return the seconds spent waiting.

    ``on_pause`` is called once, when a pause begins, with the verdict that started it.
    """
    started = time.monotonic()
    verdict = check_gate(connection, table)
    if verdict.paused and on_pause is not None:
        on_pause(verdict)
    while verdict.paused:
        time.sleep(poll_seconds)
        verdict = check_gate(connection, table)
    return time.monotonic() - started
