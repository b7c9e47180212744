"""The write gate's protocol: its tables, the statements writers and the gate's owner run, and their session.

The rule, also in ``docs/write-gate-protocol.md``: **a writer pauses iff ``state = 'closed' AND lease_expires_at >
NOW()``**, evaluated by MySQL's clock, so a gate whose closing DAG crashed stops pausing writers when its lease
ends, **unless the closing let that writer keep committing**: the writers that say they commit only what cannot
conflict with the closing's work (``conflicts.py`` decides, at the closing). A writer of the protocol before schema
version 9 declares nothing and reads the gate row alone, so it pauses at every closing, as it always did. The docs
show these statements as generated from here (``make docs``), and the Flink source's copy in
``flink/.../WriteGate.java`` is checked against them word for word. The owner's statements (close, renew, open)
are the gate store's, ``gate_store.py``.
"""

from __future__ import annotations

import functools
from typing import Any

#: The gate's tables, as ``airflow_iceberg/hooks/write_gate.sql`` defines them (a unit test holds the two together).
#: The id of the gate's Airflow connection when none is named (``WriteGateHook.default_conn_name``).
WRITE_GATE_DEFAULT_CONN_ID = "write_gate_default"
GATE_TABLE = "iceberg_write_gate"


AUDIT_TABLE = "iceberg_write_gate_audit"


WRITER_TABLE = "iceberg_write_gate_writer"


#: How often, at least, a writer says it is there; a compaction waits for every writer seen within
#: :data:`WRITER_SEEN_WINDOW_SECONDS` (or a lease, if longer) of its closing, so this must stay well below that.
REGISTER_EVERY_SECONDS = 10.0


#: A writer not seen for this long, three of a running writer's registrations, has stopped without leaving (a
#: killed job): a job that holds the gate without reading the table's snapshots no longer waits for it.
WRITER_GONE_SECONDS = 3 * REGISTER_EVERY_SECONDS


#: The least time before a gate's closing within which a writer counts as present (see above).
WRITER_SEEN_WINDOW_SECONDS = 60.0


#: A writer says it is there (parameters: table, writer id, its commit kind, its Iceberg release, what its snapshots'
#: summaries name it by) at its first look at the gate and then at least every :data:`REGISTER_EVERY_SECONDS`, in a
#: transaction of its own that commits before the look: a compaction waits for the acknowledgement of every writer
#: seen recently that must pause, so a writer must be visible before it may commit. The kind is one of
#: ``appends``, ``upserts`` or ``row-level`` (:class:`~airflow_iceberg.core.conflicts.CommitKind`), or NULL: a
#: writer that declares nothing pauses at every closing. A writer whose declaration changes loses the closing's
#: leave to keep committing (``exempt_closed_at``, set when a gate closes): it pauses until the next closing decides.
WRITER_REGISTER_SQL = f"""INSERT INTO {WRITER_TABLE}
    (table_name, writer_id, seen_at, commit_kind, iceberg_version, commits_as)
VALUES (%s, %s, NOW(6), %s, %s, %s)
ON DUPLICATE KEY UPDATE
    exempt_closed_at = IF(commit_kind <=> VALUES(commit_kind) AND iceberg_version <=> VALUES(iceberg_version)
                          AND commits_as <=> VALUES(commits_as), exempt_closed_at, NULL),
    seen_at = NOW(6), commit_kind = VALUES(commit_kind), iceberg_version = VALUES(iceberg_version),
    commits_as = VALUES(commits_as)"""


#: The one query a writer runs before each commit (parameters: writer id, table). No row for the table means the gate
#: was never closed. A closed gate pauses every writer but those its closing let keep committing, because they cannot
#: conflict with its work (``exempt_closed_at`` is that closing's time). ``lease_seconds_left`` lets a writer keep
#: obeying a pause, by its own monotonic clock, while MySQL is away.
WRITER_CHECK_SQL = f"""SELECT g.state = 'closed' AND g.lease_expires_at > NOW(6)
           AND NOT (w.exempt_closed_at <=> g.closed_at) AS paused,
       g.lease_expires_at,
       TIMESTAMPDIFF(MICROSECOND, NOW(6), g.lease_expires_at) / 1000000 AS lease_seconds_left
FROM {GATE_TABLE} g
LEFT JOIN {WRITER_TABLE} w ON w.table_name = g.table_name AND w.writer_id = %s
WHERE g.table_name = %s"""


#: How a paused writer acknowledges (parameters: its last committed snapshot id, table, writer id): when it
#: paused (database clock) and its last committed snapshot. Only a gate that still pauses writers takes it.
WRITER_ACK_SQL = f"""UPDATE {WRITER_TABLE} w JOIN {GATE_TABLE} g ON g.table_name = w.table_name
SET w.ack_at = NOW(6), w.ack_snapshot_id = %s, w.seen_at = NOW(6)
WHERE w.table_name = %s AND w.writer_id = %s AND g.state = 'closed' AND g.lease_expires_at > NOW(6)"""


#: How long a writer's mark that it is writing lasts unless renewed: three renewals, so a writer that died
#: mid-write holds no compaction back for longer than this.
BUSY_SECONDS = 3 * REGISTER_EVERY_SECONDS


#: A writer whose write runs longer than a look at the gate (a batch ``DELETE``, a ``MERGE`` in ``foreachBatch``)
#: says so before it starts, and every :data:`REGISTER_EVERY_SECONDS` while the write lasts (parameters: table,
#: writer id, seconds, seconds). A compaction whose gate closes meanwhile waits for that writer's acknowledgement,
#: which comes after the write commits, and not only for a table with no new commit: a write under way commits
#: nothing yet.
WRITER_BUSY_SQL = f"""INSERT INTO {WRITER_TABLE} (table_name, writer_id, seen_at, busy_until)
VALUES (%s, %s, NOW(6), NOW(6) + INTERVAL %s SECOND)
ON DUPLICATE KEY UPDATE seen_at = NOW(6), busy_until = NOW(6) + INTERVAL %s SECOND"""


#: The write has ended, committed or not (parameters: table, writer id).
WRITER_DONE_SQL = f"""UPDATE {WRITER_TABLE} SET busy_until = NULL, seen_at = NOW(6)
WHERE table_name = %s AND writer_id = %s"""


#: A writer that stops for good says so (parameters: table, writer id), so compactions stop waiting for it.
WRITER_LEAVE_SQL = f"""UPDATE {WRITER_TABLE} SET seen_at = NULL, ack_at = NULL
WHERE table_name = %s AND writer_id = %s"""


#: The session of every connection that may lock a gate row: closing, renewing, opening, forcing open. An owner
#: that freezes inside such a transaction (a stopped process, a paused VM, a lost network) keeps its row lock
#: until the server drops its connection: after ``wait_timeout`` seconds, here, instead of MySQL's default of
#: eight hours, so it never blocks the next run or a force-open for long. Its transactions take milliseconds.
#: Whoever waits for that lock waits longer than that (``innodb_lock_wait_timeout``), and less than the
#: client's read timeout, so it gets the gate instead of an error.
OWNER_SESSION_SETTINGS = "SET SESSION time_zone = '+00:00', wait_timeout = 20, innodb_lock_wait_timeout = 25"


#: Seconds an owner's client waits for one answer: longer than any lock wait above.
OWNER_READ_TIMEOUT = 30


def mysql_connect(**settings: Any) -> Any:
    """A new pymysql connection (``pymysql.connect``'s arguments) whose default TLS context is built once per process.

    pymysql made TLS *preferred* by default in 2026 (PyMySQL#1234; 1.2.4 here): a connection given no TLS settings tries
    TLS, without checking the server's certificate, and goes on in plain text if the server offers none. For that it
    builds a new ``ssl.create_default_context()`` at every connection, loading the system's CA certificates: 16 ms of
    CPU per connection here against 0.3 ms with the shared context, far more than the gate statements the connection is
    made for, paid at every look of every run waiting for its gate and at every health sweep's write. That context is
    the same for every connection given no TLS settings, so each process builds it once and shares it (an ``SSLContext``
    is safe to share between threads and connections): the same connections, without the cost. A connection given TLS
    settings gets its own context, as pymysql builds it."""
    return _connection_class()(**settings)


@functools.cache
def _connection_class() -> type:
    from pymysql.connections import Connection

    class SharedDefaultTlsConnection(Connection):
        _default_tls: Any = None

        def _create_ssl_ctx(self, sslp: Any) -> Any:
            if sslp:  # TLS settings given: pymysql's context for them
                return super()._create_ssl_ctx(sslp)  # type: ignore[misc]
            cls = type(self)
            if cls._default_tls is None:  # two threads may both build it first: either one is kept, both are equal
                cls._default_tls = super()._create_ssl_ctx(sslp)  # type: ignore[misc]
            return cls._default_tls

    return SharedDefaultTlsConnection


def owner_connection(host: str, port: int, user: str, password: str, database: str, **kwargs: Any) -> Any:
    """A new pymysql connection for the run that closes, renews or opens gates, in :data:`OWNER_SESSION_SETTINGS`."""
    return mysql_connect(
        host=host,
        port=int(port),
        user=user,
        password=password,
        database=database,
        autocommit=False,
        init_command=OWNER_SESSION_SETTINGS,
        connect_timeout=10,
        read_timeout=OWNER_READ_TIMEOUT,
        write_timeout=OWNER_READ_TIMEOUT,
        **kwargs,
    )


NO_SUCH_TABLE = 1146  # MySQL error: the gate tables do not exist yet, so no gate was ever closed
UNKNOWN_COLUMN = 1054  # MySQL error: the gate tables are older than the statement (commit_kind: schema version 9)


#: MySQL errors that mean the writer's user may not do what the protocol needs: database, login, table and column
#: access denied. pymysql raises them as OperationalError, like an outage; they are a misconfiguration, and a
#: writer that took them for an outage would commit through a closed gate.
ACCESS_DENIED = frozenset({1044, 1045, 1142, 1143})


class WriteGateAccessError(RuntimeError):
    """The writer's MySQL user may not read the gate or report to it: fix its grants, don't write ungated."""


def raise_if_denied(error: Exception, table: str) -> None:
    if error.args and error.args[0] in ACCESS_DENIED:
        raise WriteGateAccessError(
            f"the write gate of {table} refused this writer's MySQL user ({error.args[-1]}): a writer needs SELECT on "
            f"{GATE_TABLE} and SELECT, INSERT, UPDATE on {WRITER_TABLE} (docs/write-gate-protocol.md)"
        ) from error
