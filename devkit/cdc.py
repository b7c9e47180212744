"""The design's CDC writer, for the tests and ``make bench``: changes through Kafka into Flink's Iceberg upsert sink.

:class:`ChangeStream` produces inserts, updates and deletes of a fixed set of keys to a Kafka topic and keeps the
state they should leave; :class:`CdcJob` runs ``CdcUpsertJob`` (``flink/src/test/.../testjob``, the README's
template: ``KafkaSource`` in ``GatedSource``, then Flink's ``IcebergSink`` in upsert mode keyed by ``id``,
checkpointing every 2 s unless told otherwise) on a table of the JDBC catalog. :func:`create_cdc_table` makes
such a table.
"""

from __future__ import annotations

import random
import threading
import time
import zlib
from collections.abc import Mapping
from pathlib import Path

from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook
from airflow.sdk import BaseHook
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import LongType, NestedField, StringType

from airflow_iceberg.catalogs import pyiceberg_properties, spark_catalog_settings
from airflow_iceberg.core.tables import TableName
from devkit.flink_jobs import FlinkJob
from devkit.kafka_broker import KafkaBroker

JOB_CLASS = "airflowiceberg.flink.testjob.CdcUpsertJob"


#: Spark's row-level writes to a table with these delete by delete files (merge-on-read), as a CDC table's batch
#: jobs do: each such commit adds delete files that a rewrite committing meanwhile conflicts with.
MERGE_ON_READ = {f"write.{kind}.mode": "merge-on-read" for kind in ("delete", "update", "merge")}


def create_cdc_table(
    table: TableName, buckets: int = 4, format_version: int = 2, properties: dict[str, str] | None = None
) -> None:
    """A table keyed by ``id`` (its identifier field, as Flink's upsert needs), in ``buckets`` buckets of it, with
    columns ``v`` (the change's value) and ``seq``, and ``properties``."""
    catalog = IcebergHook(table.catalog).get_conn()
    catalog.create_namespace_if_not_exists(table.namespace)
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "v", StringType()),
        NestedField(3, "seq", LongType()),
        identifier_field_ids=[1],
    )
    spec = PartitionSpec(
        PartitionField(source_id=1, field_id=1000, transform=BucketTransform(buckets), name="id_bucket")
    )
    catalog.create_table(
        table.in_catalog,
        schema,
        partition_spec=spec,
        properties={"format-version": str(format_version), **(properties or {})},
    )


class ChangeStream:
    """Produces the changes, ``<seq>,<op>,<id>,v<seq>`` keyed by id, and keeps the state they should leave."""

    def __init__(self, kafka: KafkaBroker, topic: str, keys: int, *, delete_share: float = 0.2, seed: int = 24) -> None:
        self.producer = kafka.producer()
        self.keys = keys
        self.delete_share = delete_share
        self.topic = topic
        self.rng = random.Random(seed)
        self.expected: dict[int, str] = {}
        self.produced = 0
        #: When each change was handed to the producer, by its seq (epoch s): where its freshness starts.
        self.produced_at: list[float] = []
        self.errors: list[str] = []

    def _delivered(self, error, message) -> None:
        if error is not None:
            self.errors.append(str(error))

    def produce(self, count: int, rate: float, until: threading.Event | None = None) -> None:
        """Send ``count`` changes at ``rate`` a second, or fewer if ``until`` is set first; then flush them all."""
        started = time.monotonic()
        for sent in range(1, count + 1):
            if until is not None and until.is_set():
                break
            seq = self.produced
            key = seq if seq < self.keys else self.rng.randrange(self.keys)
            op = "d" if seq >= self.keys and self.rng.random() < self.delete_share else "u"
            value = f"v{seq}"
            self.producer.produce(
                self.topic,
                key=str(key).encode(),
                value=f"{seq},{op},{key},{value}".encode(),
                on_delivery=self._delivered,
            )
            self.produced_at.append(time.time())
            if op == "d":
                self.expected.pop(key, None)
            else:
                self.expected[key] = value
            self.produced += 1
            if sent % 200 == 0:  # paced by this call's own count: an earlier call's changes are not ahead
                self.producer.poll(0)
                ahead = sent / rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
        assert self.producer.flush(60) == 0, "messages still unsent after 60 s"
        assert self.errors == [], f"deliveries failed: {self.errors[:5]}"

    def digest(self) -> int:
        """What Spark's ``sum(crc32(concat(id, ':', v)))`` gives on a table holding exactly the expected rows."""
        return sum(zlib.crc32(f"{key}:{value}".encode()) for key, value in self.expected.items())


class CdcJob(FlinkJob):
    """``CdcUpsertJob`` on ``table`` (``lake.<namespace>.<name>``), reading ``topic``, checkpoints under workdir.

    With ``maintenance`` (the job's schedule arguments, e.g. ``{"rewrite-commits": 10}``), Iceberg's own Flink
    ``TableMaintenance`` runs in the same job (``Maintenance.java``; Flink 1.20 and 2.x), locked in the gate's MySQL.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        kafka: KafkaBroker,
        topic: str,
        table: str,
        writer_id: str,
        parallelism: int = 2,
        poke_seconds: float = 0.5,
        gate_conn_id: str = "write_gate_writer",
        checkpoints: Path | None = None,
        restore_from: Path | None = None,
        checkpoint_ms: int = 2000,
        maintenance: Mapping[str, object] | None = None,
    ) -> None:
        catalog, identifier = table.split(".", 1)
        settings = spark_catalog_settings(catalog, pyiceberg_properties(BaseHook.get_connection(catalog)))
        prefix = f"spark.sql.catalog.{catalog}"
        gate = BaseHook.get_connection(gate_conn_id)  # the tests': a writer's grants, nothing more
        self.checkpoints = checkpoints or workdir / "checkpoints"
        options = {
            "bootstrap": kafka.bootstrap,
            "topic": topic,
            "group": writer_id,
            "catalog": catalog,
            "catalog-uri": settings.conf[f"{prefix}.uri"],
            "catalog-user": settings.conf.get(f"{prefix}.jdbc.user", ""),
            "warehouse": settings.conf[f"{prefix}.warehouse"],
            "table": identifier,
            "gate-url": f"jdbc:mariadb://{gate.host}:{gate.port}/{gate.schema}",
            "gate-user": gate.login,
            "writer-id": writer_id,
            "poke-ms": int(poke_seconds * 1000),
            "parallelism": parallelism,
            "checkpoint-dir": self.checkpoints.as_uri(),
            "checkpoint-ms": checkpoint_ms,
        }
        if restore_from is not None:
            options["restore-from"] = restore_from.as_uri()
        env = {
            "AIRFLOW_ICEBERG_GATE_PASSWORD": gate.password or "",
            "AIRFLOW_ICEBERG_CATALOG_PASSWORD": settings.secret_conf.get(f"{prefix}.jdbc.password", ""),
        }
        if maintenance is not None:  # Iceberg's own TableMaintenance in the job, its lock in the gate's MySQL
            options.update({"maintenance": "true", "lock-url": options["gate-url"], "lock-user": gate.login})
            options.update(maintenance)
            env["AIRFLOW_ICEBERG_LOCK_PASSWORD"] = gate.password or ""
        super().__init__(
            workdir,
            JOB_CLASS,
            options,
            writer_ids={f"{writer_id}#{subtask}" for subtask in range(parallelism)},
            env=env,
        )
