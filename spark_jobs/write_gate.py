"""The writer's side of the write-gate protocol: may this writer commit to its table now?

Depends on ``pymysql`` alone, so Spark and PyFlink jobs and plain scripts can use it without Airflow. It is
installed with the provider as ``airflow_iceberg.spark_jobs.write_gate``; a Spark job ships this one file with
``--py-files`` and imports it as ``write_gate``. The rule, also in ``docs/write-gate-protocol.md``: **a writer
pauses iff ``state = 'closed' AND lease_expires_at > NOW()``**, evaluated by MySQL's clock, so a gate whose
closing DAG crashed stops pausing writers when its lease ends.

Typical use, before every commit::

    gate = WriteGateClient.connect("lake.db.events", host="mysql", user="writer", password=..., database="gates")
    gate.wait_until_open(last_snapshot_id=last_committed_snapshot_id)
    commit()
"""

from __future__ import annotations

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

#: The one query a writer runs before each commit. No row for the table means the gate was never closed.
#: ``lease_seconds_left`` lets a writer keep obeying a pause, by its own monotonic clock, while MySQL is away.
WRITER_CHECK_SQL = f"""SELECT state = 'closed' AND lease_expires_at > NOW(6) AS paused,
       lease_expires_at,
       TIMESTAMPDIFF(MICROSECOND, NOW(6), lease_expires_at) / 1000000 AS lease_seconds_left
FROM {GATE_TABLE}
WHERE table_name = %s"""

#: How a paused writer acknowledges: when it paused (database clock) and its last committed snapshot. Only a
#: gate that still pauses writers takes the acknowledgement.
WRITER_ACK_SQL = f"""UPDATE {GATE_TABLE}
SET writer_ack_at = NOW(6), writer_ack_snapshot_id = %s
WHERE table_name = %s AND state = 'closed' AND lease_expires_at > NOW(6)"""

_NO_SUCH_TABLE = 1146  # MySQL error: the gate tables do not exist yet, so no gate was ever closed


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

    :param table: The table, ``catalog.namespace.table``.
    :param connect: Returns a new pymysql connection to the gate's database; called again after a failure.
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
        poke_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        log: Callable[[str], None] = print,
    ) -> None:
        self.table = table
        self._connect = connect
        self._connection: Any = None
        self.poke_interval = poke_interval
        self._clock = clock
        self._sleep = sleep
        self._log = log
        self._last = WriterVerdict(paused=False, lease_expires_at=None)
        self._pause_ends_at = 0.0  # by self._clock, for the last verdict read

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
        """Read the gate; if MySQL cannot be reached, the last verdict read while its lease lasts."""
        import pymysql

        try:
            verdict, seconds_left = _read_gate(self._db(), self.table)
        except (pymysql.err.OperationalError, pymysql.err.InterfaceError, OSError) as error:
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
            with db.cursor() as cursor:
                cursor.execute(WRITER_ACK_SQL, (last_snapshot_id, self.table))
                taken = cursor.rowcount == 1
            db.commit()
        except (pymysql.err.OperationalError, pymysql.err.InterfaceError, OSError) as error:
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

    def close(self) -> None:
        self._drop_connection()


def add_gate_arguments(parser: Any, *, ungated_help: str = "omit to write ungated") -> None:
    """Add ``--gate-host``, ``--gate-port``, ``--gate-user`` and ``--gate-database`` to an argparse parser."""
    parser.add_argument("--gate-host", default="127.0.0.1")
    parser.add_argument("--gate-port", type=int, default=3306)
    parser.add_argument("--gate-user", default="root")
    parser.add_argument("--gate-database", default=None, help=f"the gate's database; {ungated_help}")


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
        **kwargs,
    )
