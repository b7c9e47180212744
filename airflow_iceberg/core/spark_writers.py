"""Spark writers that obey the write gate: a Structured Streaming ``foreachBatch``, and a batch statement.

Airflow-free like the rest of the core: a Spark job imports them from the installed wheel, or from the core zip it
ships with ``--py-files`` (:func:`airflow_iceberg.core.bundle.core_zip`). They need pymysql and the job's own
pyspark. Each write reads the gate before it starts, and a gated compaction never starts under it.

A streaming writer that MERGEs each micro-batch::

    gate = WriteGateClient.connect("lake.db.events", host=..., user=..., password=..., database=...,
                                   writer_id="events-merge")

    def merge(batch, batch_id):
        batch.createOrReplaceTempView("changes")
        batch.sparkSession.sql("MERGE INTO lake.db.events t USING changes s ON t.id = s.id WHEN ...")

    changes.writeStream.foreachBatch(gated_foreach_batch(gate, "lake.db.events", merge)).start()

A batch job beside the stream, as a writer (compactions wait for it; the stream keeps committing)::

    with gated_write(spark, gate, "lake.db.events"):
        spark.sql("UPDATE lake.db.events SET tier = 'gold' WHERE spend > 1000")
    gate.leave()  # the job ends: compactions stop waiting for it

or holding the gate (the stream pauses and acknowledges before the statement runs, and resumes after it)::

    with exclusive_write(spark, GateHolder("lake.db.events", connect, GateOwner("gdpr-deletes", run_id))):
        spark.sql("DELETE FROM lake.db.events WHERE country = 'XX' AND consent = false")

On a merge-on-read table a ``DELETE`` or ``MERGE`` that runs while the stream commits can fail when it commits
(``ValidationException``): Iceberg validates it against every file committed since it read the table. Hold the gate
for such a statement when it must not fail; take it as a writer when it may retry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from airflow_iceberg.core.gate_holder import GateHolder
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.core.writer import WriteGateClient


def newest_snapshot_id(spark: Any, table: TableName | str) -> int | None:
    """The id of ``table``'s newest snapshot, read through Spark; None for a table without one."""
    name = TableName.of(table)
    rows = spark.sql(f"SELECT snapshot_id FROM {name.quoted}.snapshots ORDER BY committed_at DESC LIMIT 1").collect()
    return rows[0][0] if rows else None


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


@contextmanager
def exclusive_write(spark: Any, holder: GateHolder, **hold: Any) -> Iterator[Any]:
    """Run the block while ``holder`` holds its table's gate (:meth:`GateHolder.hold`, whose keyword arguments
    ``hold`` passes on): every writer has paused and acknowledged, and no compaction runs. If the hold is lost
    mid-block, the session's Spark jobs are cancelled before the writers resume. Yields the gate as held."""
    with holder.hold(on_lost=lambda reason: spark.sparkContext.cancelAllJobs(), **hold) as state:
        spark.sql(f"REFRESH TABLE {TableName.of(holder.table).quoted}")
        yield state
