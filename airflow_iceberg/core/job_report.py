"""The Spark job's report through the gate's MySQL: its answers reach Airflow in every deploy mode.

In local and client deploy modes the job's driver prints its result rows and markers on spark-submit's output. In
cluster deploy mode (YARN, Kubernetes) the driver runs on the cluster and its output stays there, so a run would
have no counts, and a partial failure (commit groups that failed) could not be seen. So a gated job also writes
each line it says to Airflow (its result rows, a lost lease, no go, a commit conflict) into the gate's MySQL, which
it already reaches to renew its run's lease, under a report id the rewrite task gives it in its secrets file. The
task reads the report once spark-submit has ended, and takes the job's answers from it first, from the output
only what the report lacks (``JobAnswers.before``): one path in every mode.

No Airflow here: the Spark job writes the report, the hook reads it.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

REPORT_TABLE = "iceberg_gate_job_report"

REPORT_LINE_SQL = f"""INSERT INTO {REPORT_TABLE} (report_id, seq, line)
    SELECT %(report_id)s, COALESCE(MAX(seq), 0) + 1, %(line)s FROM {REPORT_TABLE} WHERE report_id = %(report_id)s"""
REPORT_READ_SQL = f"SELECT line FROM {REPORT_TABLE} WHERE report_id = %(report_id)s ORDER BY seq"
#: A read report is done with; so is any left by a task killed before it read its own, after a week.
REPORT_DONE_SQL = f"""DELETE FROM {REPORT_TABLE}
    WHERE report_id = %(report_id)s OR written_at < NOW(6) - INTERVAL 7 DAY"""

#: A report line is cut to this many characters (a Java stack trace in a commit conflict's message).
LINE_LIMIT = 4000


def new_report_id() -> str:
    """A report id for one submit: random, so that a retry or a second run of the table never reads another's."""
    return uuid.uuid4().hex


class JobReport:
    """The job's side: :meth:`say` prints a line for spark-submit's output and writes it into the report.

    Each line opens a connection of its own: a job says a handful of lines, minutes apart, and a connection held
    through a long ``CALL`` could be closed by the server meanwhile. A line that cannot be written is printed with
    the reason and the job goes on; its run's lease, renewed through the same MySQL, decides whether the work may.
    """

    def __init__(self, connect: Callable[[], Any] | None, report_id: str | None, out: Callable[[str], None] = print):
        self._connect = connect if report_id else None
        self._report_id = report_id
        self._out = out
        self._lock = threading.Lock()  # the lease keeper's thread says a lost lease beside the main thread
        self.unwritten = 0

    def say(self, line: str) -> None:
        self._out(line)
        if self._connect is None:
            return
        with self._lock:
            self._write(line)

    def _write(self, line: str) -> None:
        assert self._connect is not None
        try:
            connection = self._connect()
            try:
                with connection.cursor() as cursor:
                    cursor.execute(REPORT_LINE_SQL, {"report_id": self._report_id, "line": line[:LINE_LIMIT]})
                connection.commit()
            finally:
                connection.close()
        except Exception as error:  # the report is how Airflow hears; the output still has the line
            self.unwritten += 1
            self._out(f"Could not write that line to the job's report in the gate's MySQL: {error}")


def read_report(connection: Any, report_id: str) -> list[str]:
    """The lines of report ``report_id``, in the order the job said them; the report is removed."""
    with connection.cursor() as cursor:
        cursor.execute(REPORT_READ_SQL, {"report_id": report_id})
        lines = [row[0] if isinstance(row, (tuple, list)) else row["line"] for row in cursor.fetchall()]
        cursor.execute(REPORT_DONE_SQL, {"report_id": report_id})
    connection.commit()
    return lines
