"""The writer's side of the write-gate protocol: may this writer commit to its table now?

Depends on ``pymysql`` alone, so Spark and PyFlink jobs and plain scripts can use it without Airflow. It is
installed with the provider as ``airflow_iceberg.spark_jobs.write_gate``; a Spark job ships this one file with
``--py-files`` and imports it as ``write_gate``. The rule, also in ``docs/write-gate-protocol.md``: **a writer
pauses iff ``state = 'closed' AND lease_expires_at > NOW()``**, evaluated by MySQL's clock, so a gate whose
closing DAG crashed stops pausing writers when its lease ends.

Typical use, before every commit::

    gate = WriteGateClient.connect("lake.db.events", host="mysql", user="writer", password=..., database="gates",
                                   writer_id="events-ingest")
    gate.wait_until_open(last_snapshot_id=last_committed_snapshot_id)
    commit()
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

#: The environment variable a writer job reads the gate database's password from (never a command-line flag).
GATE_PASSWORD_ENV = "AIRFLOW_ICEBERG_GATE_PASSWORD"

#: The gate's tables, as ``airflow_iceberg/hooks/write_gate.sql`` defines them (a unit test holds the two together).
GATE_TABLE = "iceberg_write_gate"
AUDIT_TABLE = "iceberg_write_gate_audit"
WRITER_TABLE = "iceberg_write_gate_writer"

#: How often, at least, a writer says it is there; a compaction waits for every writer seen within
#: :data:`WRITER_SEEN_WINDOW_SECONDS` (or a lease, if longer) of its closing, so this must stay well below that.
REGISTER_EVERY_SECONDS = 10.0
#: The least time before a gate's closing within which a writer counts as present (see above).
WRITER_SEEN_WINDOW_SECONDS = 60.0

#: A writer says it is there (parameters: table, writer id) at its first look at the gate and then at least every
#: :data:`REGISTER_EVERY_SECONDS`, in a transaction of its own that commits before the look: a compaction waits
#: for the acknowledgement of every writer seen recently, so a writer must be visible before it may commit.
WRITER_REGISTER_SQL = f"""INSERT INTO {WRITER_TABLE} (table_name, writer_id, seen_at)
VALUES (%s, %s, NOW(6))
ON DUPLICATE KEY UPDATE seen_at = NOW(6)"""

#: The one query a writer runs before each commit. No row for the table means the gate was never closed.
#: ``lease_seconds_left`` lets a writer keep obeying a pause, by its own monotonic clock, while MySQL is away.
WRITER_CHECK_SQL = f"""SELECT state = 'closed' AND lease_expires_at > NOW(6) AS paused,
       lease_expires_at,
       TIMESTAMPDIFF(MICROSECOND, NOW(6), lease_expires_at) / 1000000 AS lease_seconds_left
FROM {GATE_TABLE}
WHERE table_name = %s"""

#: How a paused writer acknowledges (parameters: its last committed snapshot id, table, writer id): when it
#: paused (database clock) and its last committed snapshot. Only a gate that still pauses writers takes it.
WRITER_ACK_SQL = f"""UPDATE {WRITER_TABLE} w JOIN {GATE_TABLE} g ON g.table_name = w.table_name
SET w.ack_at = NOW(6), w.ack_snapshot_id = %s, w.seen_at = NOW(6)
WHERE w.table_name = %s AND w.writer_id = %s AND g.state = 'closed' AND g.lease_expires_at > NOW(6)"""

#: A writer that stops for good says so (parameters: table, writer id), so compactions stop waiting for it.
WRITER_LEAVE_SQL = f"""UPDATE {WRITER_TABLE} SET seen_at = NULL, ack_at = NULL
WHERE table_name = %s AND writer_id = %s"""

#: How the run holding a gate renews its lease (parameters: table, owner DAG id, owner run id): by the lease it
#: closed with, never past the pause's deadline, and only while it still holds the gate. Run by the holder's
#: tasks through WriteGateHook, and by the rewrite's Spark driver (:class:`LeaseKeeper`) while it works.
HOLDER_RENEW_SQL = f"""UPDATE {GATE_TABLE}
SET lease_expires_at = LEAST(NOW(6) + INTERVAL lease_seconds SECOND,
                             COALESCE(pause_deadline, NOW(6) + INTERVAL lease_seconds SECOND))
WHERE table_name = %s AND owner_dag_id = %s AND owner_run_id = %s
  AND state = 'closed' AND lease_expires_at > NOW(6)"""

#: What the holder's lease has left after a renewal (same parameters); no row: the run no longer holds the gate.
HOLDER_LEASE_SQL = f"""SELECT TIMESTAMPDIFF(MICROSECOND, NOW(6), lease_expires_at) / 1000000 AS lease_seconds_left,
       lease_expires_at >= pause_deadline AS at_pause_deadline
FROM {GATE_TABLE}
WHERE table_name = %s AND owner_dag_id = %s AND owner_run_id = %s
  AND state = 'closed' AND lease_expires_at > NOW(6)"""

#: The session of every connection that may lock a gate row: closing, renewing, opening, forcing open. A holder
#: that freezes inside such a transaction (a stopped process, a paused VM, a lost network) keeps its row lock
#: until the server drops its connection: after ``wait_timeout`` seconds, here, instead of MySQL's default of
#: eight hours, so it never blocks the next run or a force-open for long. Its transactions take milliseconds.
#: Whoever waits for that lock waits longer than that (``innodb_lock_wait_timeout``), and less than the
#: client's read timeout, so it gets the gate instead of an error.
HOLDER_SESSION_SETTINGS = "SET SESSION time_zone = '+00:00', wait_timeout = 20, innodb_lock_wait_timeout = 25"
#: Seconds a holder's client waits for one answer: longer than any lock wait above.
HOLDER_READ_TIMEOUT = 30


def holder_connection(host: str, port: int, user: str, password: str, database: str, **kwargs: Any) -> Any:
    """A new pymysql connection for the run that closes, renews or opens gates, in :data:`HOLDER_SESSION_SETTINGS`."""
    import pymysql

    return pymysql.connect(
        host=host, port=int(port), user=user, password=password, database=database, autocommit=False,
        init_command=HOLDER_SESSION_SETTINGS, connect_timeout=10, read_timeout=HOLDER_READ_TIMEOUT,
        write_timeout=HOLDER_READ_TIMEOUT, **kwargs,
    )  # fmt: skip


_NO_SUCH_TABLE = 1146  # MySQL error: the gate tables do not exist yet, so no gate was ever closed
#: MySQL errors that mean the writer's user may not do what the protocol needs: database, login, table and column
#: access denied. pymysql raises them as OperationalError, like an outage; they are a misconfiguration, and a
#: writer that took them for an outage would commit through a closed gate.
_ACCESS_DENIED = frozenset({1044, 1045, 1142, 1143})


class WriteGateAccessError(RuntimeError):
    """The writer's MySQL user may not read the gate or report to it: fix its grants, don't write ungated."""


def _raise_if_denied(error: Exception, table: str) -> None:
    if error.args and error.args[0] in _ACCESS_DENIED:
        raise WriteGateAccessError(
            f"the write gate of {table} refused this writer's MySQL user ({error.args[-1]}): a writer needs SELECT on "
            f"{GATE_TABLE} and SELECT, INSERT, UPDATE on {WRITER_TABLE} (docs/write-gate-protocol.md)"
        ) from error


@dataclass(frozen=True)
class WriterVerdict:
    """What the gate told a writer: whether to pause, and until when at the latest."""

    paused: bool
    lease_expires_at: datetime | None
    #: True when MySQL could not be reached and this is the last verdict read, still in force.
    from_cache: bool = False


def check_gate(connection: Any, table: str) -> WriterVerdict:
    """Run :data:`WRITER_CHECK_SQL` for ``table`` (``catalog.namespace.table``) on a pymysql connection."""
    return _read_gate(connection, table)[0]


def default_writer_id() -> str:
    """``<host>:<pid>``: unique among running writers, but new at every restart."""
    return f"{socket.gethostname()}:{os.getpid()}"[:200]


def _register(connection: Any, table: str, writer_id: str) -> None:
    """Run :data:`WRITER_REGISTER_SQL` and commit it, so the registration is visible before the writer looks."""
    import pymysql

    try:
        with connection.cursor() as cursor:
            cursor.execute(WRITER_REGISTER_SQL, (table, writer_id))
    except pymysql.err.ProgrammingError as error:
        if error.args[0] != _NO_SUCH_TABLE:
            raise
        connection.rollback()  # no gate tables yet: nothing is gated, nobody waits for this writer
        return
    connection.commit()


def _read_gate(connection: Any, table: str) -> tuple[WriterVerdict, float]:
    """The verdict, and the seconds left on a pausing lease (0 when not paused)."""
    import pymysql

    try:
        with connection.cursor(pymysql.cursors.DictCursor) as cursor:
            cursor.execute(WRITER_CHECK_SQL, (table,))
            row = cursor.fetchone()
    except pymysql.err.ProgrammingError as error:
        if error.args[0] != _NO_SUCH_TABLE:
            raise
        connection.rollback()
        return WriterVerdict(paused=False, lease_expires_at=None), 0.0
    connection.commit()  # end the read so the next check sees fresh data under REPEATABLE READ
    if row is None:
        return WriterVerdict(paused=False, lease_expires_at=None), 0.0
    paused = bool(row["paused"])
    seconds_left = float(row["lease_seconds_left"] or 0) if paused else 0.0
    return WriterVerdict(paused=paused, lease_expires_at=row["lease_expires_at"]), seconds_left


class WriteGateClient:
    """A streaming writer's handle on its table's write gate.

    ``verdict()`` answers "may I commit now?" by the protocol's rule. If MySQL cannot be reached it keeps
    obeying the last verdict it read, until that verdict's lease ends by the writer's own monotonic clock: a
    closed gate never pauses the writer past its lease, and an outage never pauses it longer than that.

    It registers as ``writer_id`` (:data:`WRITER_REGISTER_SQL`) at its first look and then every
    :data:`REGISTER_EVERY_SECONDS`, and it acknowledges a pause under that id, so several writers of one table
    are each waited for. A MySQL user without the protocol's
    grants is an error (:class:`WriteGateAccessError`), never taken for an outage.

    :param table: The table, ``catalog.namespace.table``.
    :param connect: Returns a new pymysql connection to the gate's database; called again after a failure.
    :param writer_id: This writer's name at the gate, at most 200 characters; keep it across restarts (the job's
        name, say). Default: host name and process id.
    :param poke_interval: Seconds between checks while the gate is closed.
    :param clock: Monotonic clock, in seconds.
    :param sleep: Waits the given seconds; with ``clock``, replaceable to run the outage rule on a fake clock.
    :param log: Where pause and outage messages go.
    """

    def __init__(
        self,
        table: str,
        connect: Callable[[], Any],
        *,
        writer_id: str | None = None,
        poke_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        log: Callable[[str], None] = print,
    ) -> None:
        self.table = table
        self.writer_id = writer_id or default_writer_id()
        self._connect = connect
        self._connection: Any = None
        self.poke_interval = poke_interval
        self._clock = clock
        self._sleep = sleep
        self._log = log
        self._last = WriterVerdict(paused=False, lease_expires_at=None)
        self._pause_ends_at = 0.0  # by self._clock, for the last verdict read
        self._register_due = float("-inf")  # by self._clock: the first look always registers

    @classmethod
    def connect(
        cls,
        table: str,
        *,
        host: str = "127.0.0.1",
        port: int = 3306,
        user: str = "root",
        password: str = "",
        database: str,
        **kwargs: Any,
    ) -> WriteGateClient:
        """A client whose connections go to the gate database ``database`` on ``host``."""
        import pymysql

        def new_connection() -> Any:
            return pymysql.connect(
                host=host,
                port=port,
                user=user,
                password=password,
                database=database,
                connect_timeout=5,
                read_timeout=10,
                write_timeout=10,
            )

        return cls(table, new_connection, **kwargs)

    def _db(self) -> Any:
        if self._connection is None:
            self._connection = self._connect()
        return self._connection

    def _drop_connection(self) -> None:
        if self._connection is not None:
            try:
                self._connection.close()
            except Exception:  # already broken; nothing to release
                pass
        self._connection = None

    def verdict(self) -> WriterVerdict:
        """Register (when due), then read the gate; if MySQL is away, the last verdict read while its lease lasts."""
        import pymysql

        try:
            if self._clock() >= self._register_due:
                _register(self._db(), self.table, self.writer_id)
                self._register_due = self._clock() + REGISTER_EVERY_SECONDS
            verdict, seconds_left = _read_gate(self._db(), self.table)
        except (pymysql.err.OperationalError, pymysql.err.InterfaceError, OSError) as error:
            _raise_if_denied(error, self.table)
            self._drop_connection()
            still_paused = self._last.paused and self._clock() < self._pause_ends_at
            self._log(
                f"write gate of {self.table} unreachable ({error}); "
                + ("obeying the last closed verdict until its lease ends" if still_paused else "committing")
            )
            return WriterVerdict(paused=still_paused, lease_expires_at=self._last.lease_expires_at, from_cache=True)
        self._last = verdict
        self._pause_ends_at = self._clock() + seconds_left
        return verdict

    def may_commit(self) -> bool:
        """The protocol's answer for this moment."""
        return not self.verdict().paused

    def acknowledge_pause(self, last_snapshot_id: int | None) -> bool:
        """Tell the gate this writer has paused, with the id of its last committed snapshot.

        Returns whether the gate took it: False if the gate no longer pauses writers or MySQL is away.
        """
        import pymysql

        try:
            db = self._db()
            _register(db, self.table, self.writer_id)  # the acknowledgement updates this writer's own row
            with db.cursor() as cursor:
                cursor.execute(WRITER_ACK_SQL, (last_snapshot_id, self.table, self.writer_id))
                taken = cursor.rowcount >= 1
            db.commit()
        except (pymysql.err.OperationalError, pymysql.err.InterfaceError, OSError) as error:
            _raise_if_denied(error, self.table)
            self._drop_connection()
            self._log(f"could not acknowledge the pause of {self.table}: {error}")
            return False
        return taken

    def wait_until_open(self, last_snapshot_id: int | None = None) -> float:
        """Block while the gate pauses this writer; acknowledge the pause once; return the seconds waited.

        ``last_snapshot_id`` is the id of the writer's last committed snapshot, sent with the acknowledgement
        so the compaction knows nothing newer from this writer is coming.
        """
        started = self._clock()
        verdict = self.verdict()
        if not verdict.paused:
            return 0.0
        self._log(f"write gate of {self.table} closed until {verdict.lease_expires_at}; pausing commits")
        acknowledged = False
        while verdict.paused:
            if not acknowledged and not verdict.from_cache:
                acknowledged = self.acknowledge_pause(last_snapshot_id)
            self._sleep(self.poke_interval)
            verdict = self.verdict()
        waited = self._clock() - started
        self._log(f"write gate of {self.table} open after {waited:.1f} s; resuming commits")
        return waited

    def leave(self) -> None:
        """Tell the gate this writer has stopped, so compactions no longer wait for its acknowledgement.

        A writer that starts again registers again at its next look. Best effort: if MySQL is away, the
        compaction stops counting this writer once it has not been seen for a lease. A writer that only
        restarts need not leave.
        """
        import pymysql

        try:
            db = self._db()
            with db.cursor() as cursor:
                cursor.execute(WRITER_LEAVE_SQL, (self.table, self.writer_id))
            db.commit()
        except (pymysql.err.OperationalError, pymysql.err.InterfaceError, pymysql.err.ProgrammingError, OSError):
            self._drop_connection()

    def close(self) -> None:
        """Drop the connection; the writer stays registered (call :meth:`leave` first when it stops for good)."""
        self._drop_connection()


def add_gate_arguments(parser: Any, *, ungated_help: str = "omit to write ungated") -> None:
    """Add ``--gate-host``, ``--gate-port``, ``--gate-user``, ``--gate-database`` and ``--gate-writer-id``."""
    parser.add_argument("--gate-host", default="127.0.0.1")
    parser.add_argument("--gate-port", type=int, default=3306)
    parser.add_argument("--gate-user", default="root")
    parser.add_argument("--gate-database", default=None, help=f"the gate's database; {ungated_help}")
    parser.add_argument("--gate-writer-id", default=None, help="this writer's name at the gate (default: host:pid)")


def client_from_arguments(args: Any, table: str, environ: Mapping[str, str], **kwargs: Any) -> WriteGateClient | None:
    """The gate client that :func:`add_gate_arguments`' options describe, or None if no database was given."""
    if not args.gate_database:
        return None
    return WriteGateClient.connect(
        table,
        host=args.gate_host,
        port=args.gate_port,
        user=args.gate_user,
        password=environ.get(GATE_PASSWORD_ENV, ""),
        database=args.gate_database,
        writer_id=args.gate_writer_id,
        **kwargs,
    )


#: How a lease is lost, as each reason says it (:func:`lease_loss`): taken from the run, at the pause's ceiling, or
#: not renewed in time because the gate's MySQL did not answer (the run still held the gate).
_NO_LONGER_HELD = "is no longer held by"
_AT_CEILING = "reached the pause's ceiling"
_NOT_RENEWED = "could not be renewed"


class LeaseLostError(RuntimeError):
    """The run's lease cannot be kept (it was taken over or forced open, it reached the pause's ceiling, or it could
    not be renewed in time): stop the work before writers resume."""


def lease_loss(reason: str) -> str:
    """Which way the lease in ``reason`` (a :class:`LeaseLostError`'s message) was lost: ``"taken"``,
    ``"ceiling"``, ``"not renewed"``, or ``"unknown"``."""
    for phrase, kind in ((_AT_CEILING, "ceiling"), (_NOT_RENEWED, "not renewed"), (_NO_LONGER_HELD, "taken")):
        if phrase in reason:
            return kind
    return "unknown"


@dataclass(frozen=True)
class Lease:
    """A renewed lease: seconds left by the database clock, and whether it now ends at the pause's deadline."""

    seconds_left: float
    at_pause_deadline: bool


class GateLease:
    """The holder's side of a gate: renew the lease of a gate one DAG run holds.

    :param table: The table, ``catalog.namespace.table``.
    :param dag_id: DAG id of the run that holds the gate.
    :param run_id: Run id of the run that holds the gate.
    :param connect: Returns a new pymysql connection to the gate's database.
    """

    def __init__(self, table: str, dag_id: str, run_id: str, connect: Callable[[], Any]) -> None:
        self.table = table
        self.owner = (dag_id, run_id)
        self._connect = connect

    def renew(self) -> Lease:
        """Renew the lease; raise :class:`LeaseLostError` if the run no longer holds the gate.

        MySQL errors propagate: an unreachable database is not a lost lease, but the caller must stop working
        before the last lease it got runs out.
        """
        import pymysql

        connection = self._connect()
        try:
            with connection.cursor(pymysql.cursors.DictCursor) as cursor:
                cursor.execute(HOLDER_RENEW_SQL, (self.table, *self.owner))
                cursor.execute(HOLDER_LEASE_SQL, (self.table, *self.owner))
                row = cursor.fetchone()
            connection.commit()
        finally:
            connection.close()
        if row is None:
            raise LeaseLostError(
                f"the write gate of {self.table} {_NO_LONGER_HELD} dag {self.owner[0]!r} run {self.owner[1]!r}: "
                "its lease ended, another run took it over, or someone forced it open"
            )
        return Lease(float(row["lease_seconds_left"]), bool(row["at_pause_deadline"]))


class LeaseKeeper:
    """Keep renewing a gate's lease from a daemon thread while work runs, and stop the work before it ends.

    :meth:`start` renews once, at once (so the work never starts on a lost lease), then two daemon threads run:
    one renews every ``every`` seconds, the other watches the deadline. ``on_lost`` is called once, with the
    reason, when a renewal finds the run no longer holds the gate, or when the lease is within ``margin`` seconds
    of its end (MySQL unreachable, a renewal hanging, or the lease capped at the pause's deadline). The watch does
    not wait for a renewal to return: one that hangs on a dead network or a row lock cannot hold the work past
    the lease. Writers resume when the lease ends, so the work must be stopped by then: ``margin`` is the time
    ``on_lost`` has for that. The lease's end is counted from before each renewal was sent, so it is never
    later than the database's own.

    :param lease: The gate's lease, as its holder renews it.
    :param on_lost: Stops the work; called once, from one of the keeper's threads.
    :param every: Seconds between renewals.
    :param margin: Seconds before the lease ends at which the work is stopped if the lease cannot be extended.
    :param clock: Monotonic clock, in seconds.
    :param wait: Waits up to the given seconds and returns whether the keeper was stopped meanwhile; with
        ``clock``, replaceable to run the keeper on a fake clock.
    :param log: Where renewal messages go.
    """

    def __init__(
        self,
        lease: GateLease,
        on_lost: Callable[[str], None],
        *,
        every: float,
        margin: float,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[float], bool] | None = None,
        log: Callable[[str], None] = print,
    ) -> None:
        self.lease = lease
        self.on_lost = on_lost
        self.every = every
        self.margin = margin
        self._clock = clock
        self._log = log
        self._ends_at = 0.0  # by self._clock: when the last lease renewed ends
        self._at_pause_deadline = False  # whether that lease ends at the pause's ceiling
        self._stopped = threading.Event()
        self._wait = wait or self._stopped.wait
        self._threads: list[threading.Thread] = []
        self._lost_once = threading.Lock()
        self.lost: str | None = None

    @classmethod
    def for_lease(cls, lease: GateLease, lease_seconds: float, on_lost: Callable[[str], None], **kwargs: Any):
        """A keeper that renews a quarter of the lease at a time and stops the work a quarter early (2-15 s)."""
        return cls(lease, on_lost, every=max(1.0, lease_seconds / 4), margin=max(2.0, min(15.0, lease_seconds / 4)),
                   **kwargs)  # fmt: skip

    def renew_now(self) -> Lease:
        """Renew at once; raise :class:`LeaseLostError` if the run no longer holds the gate or too little is left."""
        sent = self._clock()
        renewed = self.lease.renew()
        self._ends_at = max(self._ends_at, sent + renewed.seconds_left)
        self._at_pause_deadline = renewed.at_pause_deadline
        if renewed.seconds_left <= self.margin:
            raise LeaseLostError(self._ceiling_reached(renewed.seconds_left))
        return renewed

    def renew_before_work(self) -> None:
        """Before the next piece of work starts: renew, or, with MySQL away, go on only while the last lease has
        more than ``margin`` left. Raise :class:`LeaseLostError` otherwise, or if the lease was lost already."""
        import pymysql

        if self.lost is not None:
            raise LeaseLostError(self.lost)
        try:
            self.renew_now()
        except (pymysql.err.MySQLError, OSError) as error:
            if self._clock() >= self._ends_at - self.margin:
                raise LeaseLostError(
                    f"the lease of the write gate of {self.lease.table} ends in under {self.margin:.0f} s and "
                    f"{_NOT_RENEWED} ({error}): no work may start"
                ) from error
            self._log(f"could not renew the lease of {self.lease.table} ({error}); its last lease still holds")

    def start(self) -> Lease:
        """Renew once (raising :class:`LeaseLostError` if lost), then keep renewing and watching in daemon threads."""
        renewed = self.renew_now()
        for name, target in (("gate-lease-keeper", self._run), ("gate-lease-watch", self._watch)):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return renewed

    def stop(self) -> None:
        self._stopped.set()
        for thread in self._threads:
            thread.join(timeout=5)

    def _ceiling_reached(self, seconds_left: float) -> str:
        return (
            f"the write gate of {self.lease.table} has {seconds_left:.1f} s of lease left and {_AT_CEILING} "
            "(max_pause_seconds): no work may start or go on"
        )

    def _lose(self, reason: str) -> None:
        with self._lost_once:
            if self.lost is not None:
                return
            self.lost = reason
        self._log(f"lease lost: {reason}")
        self.on_lost(reason)

    def _run(self) -> None:
        """Renew every ``every`` seconds, and once more just before the watch would give up."""
        import pymysql

        while self.lost is None:
            stop_at = self._ends_at - self.margin
            if self._wait(max(0.0, min(self.every, stop_at - self._clock()))) or self.lost is not None:
                return
            try:
                self.renew_now()
            except LeaseLostError as error:
                self._lose(str(error))
                return
            except (pymysql.err.MySQLError, OSError) as error:
                self._log(f"could not renew the lease of {self.lease.table} ({error}); trying again")
                if self._wait(min(self.every, 1.0)):  # no busy loop while MySQL is away
                    return

    def _watch(self) -> None:
        """Stop the work ``margin`` seconds before the lease ends, whatever the renewals are doing."""
        while self.lost is None:
            left = self._ends_at - self.margin - self._clock()
            if left <= 0:
                seconds = max(0.0, self._ends_at - self._clock())
                self._lose(
                    self._ceiling_reached(seconds)
                    if self._at_pause_deadline
                    else f"the lease of the write gate of {self.lease.table} ends in under {self.margin:.0f} s and "
                    f"{_NOT_RENEWED}: writers resume when it ends"
                )
                return
            if self._wait(left):
                return
