"""The writer's side of the write gate: may this writer commit to its table now?

Depends on ``pymysql`` alone, so Spark and PyFlink jobs and plain scripts can use it without Airflow: a Spark
job ships the core with ``--py-files`` (:func:`airflow_iceberg.core.bundle.core_zip`) and imports
``airflow_iceberg.core.writer``.

Typical use, before every commit::

    gate = WriteGateClient.connect("lake.db.events", host="mysql", user="writer", password=..., database="gates",
                                   writer_id="events-ingest")
    gate.wait_until_open(last_snapshot_id=last_committed_snapshot_id)
    commit()
"""

from __future__ import annotations

import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from airflow_iceberg.core.conflicts import CommitKind, parse_commit_kind
from airflow_iceberg.core.gate_protocol import (
    BUSY_SECONDS,
    NO_SUCH_TABLE,
    REGISTER_EVERY_SECONDS,
    UNKNOWN_COLUMN,
    WRITER_ACK_SQL,
    WRITER_BUSY_SQL,
    WRITER_CHECK_SQL,
    WRITER_DONE_SQL,
    WRITER_LEAVE_SQL,
    WRITER_REGISTER_SQL,
    mysql_connect,
    raise_if_denied,
)
from airflow_iceberg.core.tables import shown

#: The environment variable a writer job reads the gate database's password from (never a command-line flag).
GATE_PASSWORD_ENV = "AIRFLOW_ICEBERG_GATE_PASSWORD"


@dataclass(frozen=True)
class WriterVerdict:
    """What the gate told a writer: whether to pause, and until when at the latest."""

    paused: bool
    lease_expires_at: datetime | None
    #: True when MySQL could not be reached and this is the last verdict read, still in force.
    from_cache: bool = False


def check_gate(connection: Any, table: str, writer_id: str | None = None) -> WriterVerdict:
    """Run :data:`WRITER_CHECK_SQL` for ``table`` (``catalog.namespace.table``) on a pymysql connection, as
    ``writer_id`` (None: a writer the closing did not decide for, as one of the previous protocol: any closing
    pauses it)."""
    return _read_gate(connection, table, writer_id)[0]


def default_writer_id() -> str:
    """``<host>:<pid>``: unique among running writers, but new at every restart."""
    return f"{socket.gethostname()}:{os.getpid()}"[:200]


def _run(connection: Any, table: str, statement: str, parameters: tuple[Any, ...]) -> None:
    """Run one of the writer's own statements and commit it at once; nothing when there are no gate tables yet (nothing
    is gated, nobody waits for this writer). Gate tables older than the statement are an error that says what to do."""
    import pymysql

    try:
        with connection.cursor() as cursor:
            cursor.execute(statement, parameters)
    except (pymysql.err.ProgrammingError, pymysql.err.OperationalError) as error:
        if error.args and error.args[0] == UNKNOWN_COLUMN:
            raise RuntimeError(
                f"the write gate tables of {table} are older than this writer: run `airflow-iceberg migrate` on the "
                f"gate's Airflow connection first ({error.args[-1]})"
            ) from error
        if not error.args or error.args[0] != NO_SUCH_TABLE:
            raise
        connection.rollback()
        return
    connection.commit()


@dataclass(frozen=True)
class Declaration:
    """What a writer says of its commits when it registers: their kind, its Iceberg release, and what its snapshots'
    summaries name it by (``key=value``). A writer that says nothing pauses at every closing."""

    commit_kind: CommitKind | None = None
    iceberg_version: str | None = None
    commits_as: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "commit_kind", parse_commit_kind(self.commit_kind, where="commit_kind"))
        if self.commits_as is not None and not re.fullmatch(r"[\w.\-]+=\S.*", self.commits_as):
            raise ValueError(
                f"commits_as must be key=value, the summary entry its snapshots carry (flink.job-id=..., "
                f"spark.app.id=...), got {shown(self.commits_as)}"
            )


def _register(connection: Any, table: str, writer_id: str, said: Declaration) -> None:
    """Run :data:`WRITER_REGISTER_SQL` and commit it, so the registration is visible before the writer looks."""
    parameters = (table, writer_id, said.commit_kind, said.iceberg_version, said.commits_as)
    _run(connection, table, WRITER_REGISTER_SQL, parameters)


def _mark(connection: Any, table: str, writer_id: str, busy: bool) -> None:
    """Run :data:`WRITER_BUSY_SQL` (``busy``) or :data:`WRITER_DONE_SQL` and commit it."""
    if busy:
        _run(connection, table, WRITER_BUSY_SQL, (table, writer_id, BUSY_SECONDS, BUSY_SECONDS))
    else:
        _run(connection, table, WRITER_DONE_SQL, (table, writer_id))


def _read_gate(connection: Any, table: str, writer_id: str | None) -> tuple[WriterVerdict, float]:
    """The verdict for ``writer_id``, and the seconds left on a pausing lease (0 when not paused)."""
    import pymysql

    try:
        with connection.cursor(pymysql.cursors.DictCursor) as cursor:
            cursor.execute(WRITER_CHECK_SQL, (writer_id, table))
            row = cursor.fetchone()
    except pymysql.err.ProgrammingError as error:
        if error.args[0] != NO_SUCH_TABLE:
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
    :data:`REGISTER_EVERY_SECONDS`, saying what it commits, and it acknowledges a pause under that id, so several
    writers of one table are each waited for. A closing pauses only the writers that can conflict with its work
    (``core/conflicts.py``): one that declares nothing pauses at every closing. A MySQL user without the protocol's
    grants is an error (:class:`WriteGateAccessError`), never taken for an outage.

    :param table: The table, ``catalog.namespace.table``.
    :param connect: Returns a new pymysql connection to the gate's database; called again after a failure.
    :param writer_id: This writer's name at the gate, at most 200 characters; keep it across restarts (the job's
        name, say). Default: host name and process id.
    :param commit_kind: What its commits do (:class:`~airflow_iceberg.core.conflicts.CommitKind`: ``appends``,
        ``upserts`` or ``row-level``); None: not said, so every closing pauses it. An unknown kind is refused here,
        before anything reaches the gate.
    :param iceberg_version: The Iceberg release it commits with (the conflict rule reads it for upserts).
    :param commits_as: The ``key=value`` its snapshots' summaries carry (``spark.app.id=...``), by which a
        compaction tells its commits from an unknown writer's; a writer that keeps committing through a closing
        needs one.
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
        commit_kind: CommitKind | str | None = None,
        iceberg_version: str | None = None,
        commits_as: str | None = None,
        poke_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        log: Callable[[str], None] = print,
    ) -> None:
        self.table = table
        self.writer_id = writer_id or default_writer_id()
        self.declaration = Declaration(commit_kind, iceberg_version, commits_as)  # type: ignore[arg-type]
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

        def new_connection() -> Any:
            return mysql_connect(
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
        _close(self._connection)
        self._connection = None

    def verdict(self) -> WriterVerdict:
        """Register (when due), then read the gate; if MySQL is away, the last verdict read while its lease lasts."""
        import pymysql

        try:
            if self._clock() >= self._register_due:
                _register(self._db(), self.table, self.writer_id, self.declaration)
                self._register_due = self._clock() + REGISTER_EVERY_SECONDS
            verdict, seconds_left = _read_gate(self._db(), self.table, self.writer_id)
        except (pymysql.err.OperationalError, pymysql.err.InterfaceError, OSError) as error:
            raise_if_denied(error, self.table)
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

    def declare(self, **changes: Any) -> None:
        """Say more of what this writer commits (``commit_kind``, ``iceberg_version``, ``commits_as``): what it had
        not said yet stays as it was, and the next look registers anew. A change of what it declared makes it pause
        at a closing that let it keep committing, until the next closing decides."""
        fields = {name: value for name, value in changes.items() if value is not None}
        self.declaration = replace(self.declaration, **fields)
        self._register_due = float("-inf")

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
            _register(db, self.table, self.writer_id, self.declaration)  # the acknowledgement updates its own row
            with db.cursor() as cursor:
                cursor.execute(WRITER_ACK_SQL, (last_snapshot_id, self.table, self.writer_id))
                taken = cursor.rowcount >= 1
            db.commit()
        except (pymysql.err.OperationalError, pymysql.err.InterfaceError, OSError) as error:
            raise_if_denied(error, self.table)
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

    @contextmanager
    def writing(self, last_snapshot_id: Callable[[], int | None]) -> Iterator[float]:
        """Hold compactions off while one write runs, a write that takes longer than a look at the gate (a batch
        ``DELETE``, a ``MERGE``); yield the seconds waited for the gate first.

        This writer says it is writing (:data:`WRITER_BUSY_SQL`), then waits while the gate is closed (as
        :meth:`wait_until_open`, acknowledging with ``last_snapshot_id()``), then runs the block, renewing its mark
        every :data:`REGISTER_EVERY_SECONDS` from a thread and connection of its own. A compaction whose gate closes
        meanwhile waits for this writer's acknowledgement, however idle the table looks. When the block ends,
        committed or failed, the mark ends, and if the gate has closed meanwhile the pause is acknowledged at once
        with ``last_snapshot_id()``, the write's own commit; the next write waits for the gate to open.

        A writer that dies mid-write holds no compaction back for more than :data:`BUSY_SECONDS`. While MySQL is
        away the mark cannot be set, and the write goes ahead by :meth:`verdict`'s rule; the renewals set it once
        MySQL is back.

        :param last_snapshot_id: Returns the id of this writer's last committed snapshot (the table's newest, read
            after the write); called only when a pause is acknowledged.
        """
        import pymysql

        def mark(connection: Any) -> None:
            try:
                _mark(connection, self.table, self.writer_id, busy=True)
            except (pymysql.err.OperationalError, pymysql.err.InterfaceError, OSError) as error:
                raise_if_denied(error, self.table)
                raise

        def mark_here() -> None:
            try:
                mark(self._db())
            except (pymysql.err.OperationalError, pymysql.err.InterfaceError, OSError) as error:
                self._drop_connection()
                self._log(f"could not tell the write gate of {self.table} that {self.writer_id} is writing: {error}")

        mark_here()
        waited = 0.0
        if self.verdict().paused:
            waited = self.wait_until_open(last_snapshot_id())
            mark_here()  # the mark set before the pause may have run out meanwhile
        stop = threading.Event()

        def renew() -> None:
            connection = None
            while not stop.wait(REGISTER_EVERY_SECONDS):
                try:
                    connection = connection or self._connect()
                    mark(connection)
                except Exception as error:  # MySQL away: the next renewal tries again on a new connection
                    self._log(f"could not renew the writing mark of {self.writer_id} on {self.table}: {error}")
                    _close(connection)
                    connection = None
            _close(connection)

        renewer = threading.Thread(target=renew, name=f"write-gate-busy-{self.table}", daemon=True)
        renewer.start()
        try:
            yield waited
        finally:
            stop.set()
            renewer.join()
            self._end_write(last_snapshot_id)

    def _end_write(self, last_snapshot_id: Callable[[], int | None]) -> None:
        """End the writing mark; acknowledge a gate that closed during the write."""
        import pymysql

        try:
            _mark(self._db(), self.table, self.writer_id, busy=False)
        except (pymysql.err.OperationalError, pymysql.err.InterfaceError, OSError) as error:
            raise_if_denied(error, self.table)
            self._drop_connection()
            self._log(
                f"could not end the writing mark of {self.writer_id} on {self.table} (it ends by itself): {error}"
            )
        verdict = self.verdict()
        if verdict.paused and not verdict.from_cache:
            self.acknowledge_pause(last_snapshot_id())

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


def _close(connection: Any) -> None:
    """Close ``connection`` if there is one, ignoring a connection already broken."""
    if connection is not None:
        try:
            connection.close()
        except Exception:  # already broken; nothing to release
            pass


def add_gate_arguments(parser: Any, *, ungated_help: str = "omit to write ungated") -> None:
    """Add ``--gate-host``, ``--gate-port``, ``--gate-user``, ``--gate-database``, ``--gate-writer-id`` and
    ``--gate-commit-kind``."""
    parser.add_argument("--gate-host", default="127.0.0.1")
    parser.add_argument("--gate-port", type=int, default=3306)
    parser.add_argument("--gate-user", default="root")
    parser.add_argument("--gate-database", default=None, help=f"the gate's database; {ungated_help}")
    parser.add_argument("--gate-writer-id", default=None, help="this writer's name at the gate (default: host:pid)")
    parser.add_argument(
        "--gate-commit-kind",
        default=None,
        choices=[kind.value for kind in CommitKind],
        help="what its commits do; omit to say nothing, and pause at every closing",
    )


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
        **{"commit_kind": getattr(args, "gate_commit_kind", None), **kwargs},
    )
