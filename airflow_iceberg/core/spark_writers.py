"""Spark writers that obey the write gate: a Structured Streaming ``foreachBatch``, and a batch statement.

Airflow-free like the rest of the core: a Spark job imports them from the installed wheel, or from the core zip it
ships with ``--py-files`` (:func:`airflow_iceberg.core.bundle.core_zip`). They need pymysql and the job's own
pyspark. Each write reads the gate before it starts, and a gated compaction never starts under it.

A streaming writer that MERGEs each micro-batch (a row-level change to existing files, so compactions pause it)::

    gate = WriteGateClient.connect("lake.db.events", host=..., user=..., password=..., database=...,
                                   writer_id="events-merge", commit_kind="row-level")

    def merge(batch, batch_id):
        batch.createOrReplaceTempView("changes")
        batch.sparkSession.sql("MERGE INTO lake.db.events t USING changes s ON t.id = s.id WHEN ...")

    changes.writeStream.foreachBatch(gated_foreach_batch(gate, "lake.db.events", merge)).start()

A batch job beside the stream, as a writer (compactions wait for it; the stream keeps committing)::

    with gated_write(spark, gate, "lake.db.events"):
        spark.sql("UPDATE lake.db.events SET tier = 'gold' WHERE spend > 1000")
    gate.leave()  # the job ends: compactions stop waiting for it

or holding the gate (the writers its statement conflicts with pause and acknowledge before the statement runs, and
resume after it; which ones, the table's isolation level and write mode for the statement decide)::

    holder = GateHolder("lake.db.events", connect, GateOwner("gdpr-deletes", run_id))
    with exclusive_write(spark, holder, "delete"):
        spark.sql("DELETE FROM lake.db.events WHERE country = 'XX' AND consent = false")

Each helper tells the gate what the writer's snapshots carry (``spark.app.id=<the application>``) and the Spark
job's Iceberg release, so that a writer whose commits cannot conflict with a compaction keeps committing through it;
what the writer commits (``commit_kind``) is the client's to say.

On a merge-on-read table a ``DELETE`` or ``MERGE`` that runs while the stream commits can fail when it commits
(``ValidationException``): Iceberg validates it against every file committed since it read the table. Hold the gate
for such a statement when it must not fail; take it as a writer when it may retry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from airflow_iceberg.core.conflicts import BatchStatement, Command, GuardedWork, Isolation, WriteMode
from airflow_iceberg.core.gate_holder import GateHolder
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.core.writer import WriteGateClient


def newest_snapshot_id(spark: Any, table: TableName | str) -> int | None:
    """The id of ``table``'s newest snapshot, read through Spark; None for a table without one."""
    name = TableName.of(table)
    rows = spark.sql(f"SELECT snapshot_id FROM {name.quoted}.snapshots ORDER BY committed_at DESC LIMIT 1").collect()
    return rows[0][0] if rows else None


def spark_iceberg_version(spark: Any) -> str | None:
    """The Iceberg release of the session's Spark runtime jar (``IcebergBuild.version()``), or None where the JVM
    cannot be reached (Spark Connect) or has no Iceberg."""
    try:
        return str(spark.sparkContext._jvm.org.apache.iceberg.IcebergBuild.version())
    except Exception:  # no JVM gateway, no Iceberg on it: the writer says no release
        return None


def declare_spark_writer(spark: Any, gate: WriteGateClient) -> None:
    """Tell the gate what ``gate``'s writer, a Spark application, commits as: its application id, which Iceberg's
    Spark writes into each snapshot's summary (``spark.app.id``), and the session's Iceberg release."""
    if gate.declaration.commits_as is None or gate.declaration.iceberg_version is None:
        gate.declare(
            commits_as=f"spark.app.id={spark.sparkContext.applicationId}", iceberg_version=spark_iceberg_version(spark)
        )


@contextmanager
def gated_write(spark: Any, gate: WriteGateClient, table: TableName | str) -> Iterator[float]:
    """Run the block as one write of ``gate``'s writer to ``table``: after the gate opens, and with compactions held
    off until the block ends (:meth:`WriteGateClient.writing`). Yields the seconds waited for the gate.

    After a pause the table is reloaded (``REFRESH TABLE``): the compaction replaced the data files that a statement
    planned on the old list would write deletes against. Give the catalog ``cache-enabled=false`` as well.
    """
    name = TableName.of(table)
    if str(name) != gate.table:
        raise ValueError(f"the gate client is {gate.table!r}'s, not {str(name)!r}'s")
    declare_spark_writer(spark, gate)
    with gate.writing(lambda: newest_snapshot_id(spark, name)) as waited:
        if waited:
            spark.sql(f"REFRESH TABLE {name.quoted}")
        yield waited


class GatedBatches:
    """A ``foreachBatch`` function that runs ``write(batch, batch_id)`` as one :func:`gated_write` of ``table``.

    While the gate is closed the batch waits: nothing is committed, no record is dropped and the stream's offsets do
    not advance, so the source's backlog grows until the gate opens (or its lease ends). Make ``write`` idempotent
    (a MERGE that applies each key's latest change is): a restart from the checkpoint may replay the last batch.
    """

    def __init__(self, gate: WriteGateClient, table: TableName | str, write: Callable[[Any, int], None]) -> None:
        self.gate = gate
        self.table = TableName.of(table)
        self.write = write
        #: The seconds the batch under way (or the last one) waited for the gate before its write began.
        self.waited = 0.0

    def __call__(self, batch: Any, batch_id: int) -> None:
        with gated_write(batch.sparkSession, self.gate, self.table) as waited:
            self.waited = waited
            self.write(batch, batch_id)


def gated_foreach_batch(
    gate: WriteGateClient, table: TableName | str, write: Callable[[Any, int], None]
) -> GatedBatches:
    """``writeStream.foreachBatch(gated_foreach_batch(gate, table, write))``: see :class:`GatedBatches`."""
    return GatedBatches(gate, table, write)


def batch_statement(spark: Any, table: TableName | str, command: Command | str) -> GuardedWork:
    """What a batch ``command`` (``delete``, ``update`` or ``merge``) on ``table`` does while it holds the gate, for
    the conflict rule: the table's isolation level and write mode for it (``write.<command>.isolation-level``,
    ``write.<command>.mode``; Iceberg's defaults, serializable and copy-on-write, where unset) and its format."""
    name = TableName.of(table)
    properties = {row[0]: row[1] for row in spark.sql(f"SHOW TBLPROPERTIES {name.quoted}").collect()}
    command = Command(command)
    statement = BatchStatement(
        command,
        properties.get(f"write.{command}.isolation-level", Isolation.SERIALIZABLE),
        properties.get(f"write.{command}.mode", WriteMode.COPY_ON_WRITE),
    )
    version = properties.get("format-version")
    return GuardedWork(statement=statement, format_version=int(version) if version else None)


@contextmanager
def exclusive_write(spark: Any, holder: GateHolder, command: Command | str | None = None, **hold: Any) -> Iterator[Any]:
    """Run the block while ``holder`` holds its table's gate (:meth:`GateHolder.hold`, whose keyword arguments
    ``hold`` passes on): every writer its statement can conflict with has paused and acknowledged, and no compaction
    runs. If the hold is lost mid-block, the session's Spark jobs are cancelled before the writers resume. Yields the
    gate as held.

    :param command: The block's statement, ``delete``, ``update`` or ``merge``: the writers that pause are those its
        validation would fail on (:func:`batch_statement`). None: the holder's own ``work``, or every writer.
    """
    if command is not None:
        holder.work = batch_statement(spark, holder.table, command)
    with holder.hold(on_lost=lambda reason: spark.sparkContext.cancelAllJobs(), **hold) as state:
        spark.sql(f"REFRESH TABLE {TableName.of(holder.table).quoted}")
        yield state
