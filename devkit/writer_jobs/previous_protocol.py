"""A writer of the protocol before gate schema version 9, for the tests that show such a writer still pauses.

Writers deployed before version 9 register without saying what they commit and read the gate row alone: these are
their statements, word for word. :func:`use_previous_protocol` makes the writer client of this process
(``airflow_iceberg.core.writer``) run them instead of its own, so that a reference writer job run with
``--gate-protocol previous`` is such a writer.
"""

from __future__ import annotations

from typing import Any

REGISTER_SQL = """INSERT INTO iceberg_write_gate_writer (table_name, writer_id, seen_at)
VALUES (%s, %s, NOW(6))
ON DUPLICATE KEY UPDATE seen_at = NOW(6)"""

CHECK_SQL = """SELECT state = 'closed' AND lease_expires_at > NOW(6) AS paused,
       lease_expires_at,
       TIMESTAMPDIFF(MICROSECOND, NOW(6), lease_expires_at) / 1000000 AS lease_seconds_left
FROM iceberg_write_gate
WHERE table_name = %s"""


def previous_check(connection: Any, table: str) -> bool:
    """The previous protocol's look at the gate: whether it pauses a writer (no row: it never closed)."""
    import pymysql

    with connection.cursor(pymysql.cursors.DictCursor) as cursor:
        cursor.execute(CHECK_SQL, (table,))
        row = cursor.fetchone()
    connection.commit()
    return bool(row and row["paused"])


def use_previous_protocol() -> None:
    """Make this process's writer clients register and look at the gate as a writer of the previous protocol does."""
    from airflow_iceberg.core import writer

    def register(connection: Any, table: str, writer_id: str, said: Any) -> None:
        writer._run(connection, table, REGISTER_SQL, (table, writer_id))

    def read_gate(connection: Any, table: str, writer_id: str | None) -> tuple[Any, float]:
        import pymysql

        with connection.cursor(pymysql.cursors.DictCursor) as cursor:
            cursor.execute(CHECK_SQL, (table,))
            row = cursor.fetchone()
        connection.commit()
        if row is None or not row["paused"]:
            return writer.WriterVerdict(paused=False, lease_expires_at=None), 0.0
        verdict = writer.WriterVerdict(paused=True, lease_expires_at=row["lease_expires_at"])
        return verdict, float(row["lease_seconds_left"] or 0)

    writer._register = register  # type: ignore[assignment]
    writer._read_gate = read_gate  # type: ignore[assignment]
