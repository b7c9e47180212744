"""The design's CDC writer, for the tests and ``make bench``: changes through Kafka into Flink's Iceberg upsert sink.

:class:`ChangeStream` produces inserts, updates and deletes of a fixed set of keys to a Kafka topic and keeps the
state they should leave; :class:`CdcJob` runs ``CdcUpsertJob`` (``flink/src/test/.../testjob``, the README's
template: ``KafkaSource`` in ``GatedSource``, then Flink's ``IcebergSink`` in upsert mode keyed by ``id``,
checkpointing every 2 s unless told otherwise) on a table of the JDBC catalog. :func:`create_cdc_table` makes
such a table.
"""

from __future__ import annotations

import json
import random
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook
from airflow.sdk import BaseHook
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform, TruncateTransform
from pyiceberg.types import LongType, NestedField, StringType

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.hooks.catalogs import pyiceberg_properties, spark_catalog_settings
from devkit.flink_jobs import FlinkJob, gate_jar, subtask_writer_ids
from devkit.kafka_broker import KafkaBroker

JOB_CLASS = "airflowiceberg.flink.testjob.CdcUpsertJob"
SQL_JOB_CLASS = "airflowiceberg.flink.testjob.GatedSqlJob"


#: Spark's row-level writes to a table with these delete by delete files (merge-on-read), as a CDC table's batch
#: jobs do: each such commit adds delete files that a rewrite committing meanwhile conflicts with.
MERGE_ON_READ = {f"write.{kind}.mode": "merge-on-read" for kind in ("delete", "update", "merge")}


def create_cdc_table(
    table: TableName,
    buckets: int = 4,
    format_version: int = 2,
    properties: dict[str, str] | None = None,
    key_ranges: int | None = None,
) -> None:
    """A table keyed by ``id`` (its identifier field, as Flink's upsert needs), in ``buckets`` buckets of it, with
    columns ``v`` (the change's value) and ``seq``, and ``properties``. With ``key_ranges``, partitioned instead by
    ranges of that many keys (``truncate(key_ranges, id)``): writers of keys apart write partitions apart."""
    catalog = IcebergHook(table.catalog).get_conn()
    catalog.create_namespace_if_not_exists(table.namespace)
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "v", StringType()),
        NestedField(3, "seq", LongType()),
        identifier_field_ids=[1],
    )
    transform = BucketTransform(buckets) if key_ranges is None else TruncateTransform(key_ranges)
    name = "id_bucket" if key_ranges is None else "id_range"
    spec = PartitionSpec(PartitionField(source_id=1, field_id=1000, transform=transform, name=name))
    catalog.create_table(
        table.in_catalog,
        schema,
        partition_spec=spec,
        properties={"format-version": str(format_version), **(properties or {})},
    )


class ChangeStream:
    """Produces the changes, keyed by id, and keeps the state they should leave.

    A change's value is ``<seq>,<op>,<id>,v<seq>`` (``csv``, what ``CdcUpsertJob`` reads), or a Debezium change
    event (``debezium-json``, what Flink SQL's ``debezium-json`` format reads): ``c``, ``u`` or ``d`` with the
    row ``{id, v, seq}`` before and after. Each event's rows carry the change's own ``seq``, a delete's ``before``
    too, so that every change is seen by its ``seq`` downstream; a delete of a key that has no row has ``v`` null.
    """

    def __init__(
        self,
        kafka: KafkaBroker,
        topic: str,
        keys: int,
        *,
        delete_share: float = 0.2,
        seed: int = 24,
        value_format: Literal["csv", "debezium-json"] = "csv",
    ) -> None:
        self.producer = kafka.producer()
        self.value_format = value_format
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
                value=self._message(seq, op, key, value),
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

    def _message(self, seq: int, op: str, key: int, value: str) -> bytes:
        if self.value_format == "csv":
            return f"{seq},{op},{key},{value}".encode()
        old = self.expected.get(key)
        before = None if old is None and op == "u" else {"id": key, "v": old, "seq": seq}
        after = None if op == "d" else {"id": key, "v": value, "seq": seq}
        kind = "d" if op == "d" else ("c" if old is None else "u")
        return json.dumps({"before": before, "after": after, "op": kind}).encode()

    def digest(self) -> int:
        """What Spark's ``sum(crc32(concat(id, ':', v)))`` gives on a table holding exactly the expected rows."""
        return sum(zlib.crc32(f"{key}:{value}".encode()) for key, value in self.expected.items())


@dataclass(frozen=True)
class JobConnections:
    """Where a Flink job finds the catalog of ``table`` and its write gate, from the suite's Airflow connections;
    the passwords apart, for the job's environment."""

    catalog: str
    identifier: str
    catalog_uri: str
    catalog_user: str
    catalog_password: str
    warehouse: str
    gate_url: str
    gate_user: str
    gate_password: str

    @classmethod
    def of(cls, table: str, gate_conn_id: str) -> JobConnections:
        catalog, identifier = table.split(".", 1)
        settings = spark_catalog_settings(catalog, pyiceberg_properties(BaseHook.get_connection(catalog)))
        prefix = f"spark.sql.catalog.{catalog}"
        gate = BaseHook.get_connection(gate_conn_id)  # the tests': a writer's grants, nothing more
        return cls(
            catalog=catalog,
            identifier=identifier,
            catalog_uri=settings.conf[f"{prefix}.uri"],
            catalog_user=settings.conf.get(f"{prefix}.jdbc.user", ""),
            catalog_password=settings.secret_conf.get(f"{prefix}.jdbc.password", ""),
            warehouse=settings.conf[f"{prefix}.warehouse"],
            gate_url=f"jdbc:mariadb://{gate.host}:{gate.port}/{gate.schema}",
            gate_user=gate.login,
            gate_password=gate.password or "",
        )


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
        where = JobConnections.of(table, gate_conn_id)
        self.checkpoints = checkpoints or workdir / "checkpoints"
        options = {
            "bootstrap": kafka.bootstrap,
            "topic": topic,
            "group": writer_id,
            "catalog": where.catalog,
            "catalog-uri": where.catalog_uri,
            "catalog-user": where.catalog_user,
            "warehouse": where.warehouse,
            "table": where.identifier,
            "gate-url": where.gate_url,
            "gate-user": where.gate_user,
            "writer-id": writer_id,
            "poke-ms": int(poke_seconds * 1000),
            "parallelism": parallelism,
            "checkpoint-dir": self.checkpoints.as_uri(),
            "checkpoint-ms": checkpoint_ms,
        }
        if restore_from is not None:
            options["restore-from"] = restore_from.as_uri()
        env = {
            "AIRFLOW_ICEBERG_GATE_PASSWORD": where.gate_password,
            "AIRFLOW_ICEBERG_CATALOG_PASSWORD": where.catalog_password,
        }
        if maintenance is not None:  # Iceberg's own TableMaintenance in the job, its lock in the gate's MySQL
            options.update({"maintenance": "true", "lock-url": where.gate_url, "lock-user": where.gate_user})
            options.update(maintenance)
            env["AIRFLOW_ICEBERG_LOCK_PASSWORD"] = where.gate_password
        super().__init__(
            workdir,
            JOB_CLASS,
            options,
            writer_ids=subtask_writer_ids(writer_id, parallelism),
            env=env,
        )


class SqlJob(FlinkJob):
    """A Flink SQL script (``GatedSqlJob``: statement by statement, as the SQL client runs it) on a local
    mini-cluster, with ``${NAME}`` in it set from ``variables`` and the connections of ``table``.

    The variables it is given: ``CATALOG``, ``CATALOG_URI``, ``CATALOG_USER``, ``CATALOG_PASSWORD``,
    ``WAREHOUSE``, ``NAMESPACE``, ``TABLE_NAME`` (``table``'s parts), ``GATE_TABLE`` (``table``), ``GATE_URL``,
    ``GATE_USER``, ``GATE_PASSWORD``, ``WRITER_ID``, ``GATED_JAR`` (the gated connector's jar, which the
    script adds: it is not on the job's class path), and ``variables``.
    """

    def __init__(
        self,
        workdir: Path,
        script: Path,
        *,
        table: str,
        writer_id: str,
        variables: Mapping[str, object] | None = None,
        parallelism: int = 2,
        gate_conn_id: str = "write_gate_writer",
        checkpoint_ms: int = 2000,
    ) -> None:
        where = JobConnections.of(table, gate_conn_id)
        namespace, name = where.identifier.rsplit(".", 1)
        env = {
            "CATALOG": where.catalog,
            "CATALOG_URI": where.catalog_uri,
            "CATALOG_USER": where.catalog_user,
            "CATALOG_PASSWORD": where.catalog_password,
            "WAREHOUSE": where.warehouse,
            "NAMESPACE": namespace,
            "TABLE_NAME": name,
            "GATE_TABLE": table,
            "GATE_URL": where.gate_url,
            "GATE_USER": where.gate_user,
            "GATE_PASSWORD": where.gate_password,
            "WRITER_ID": writer_id,
            "GATED_JAR": str(gate_jar()),
            **{key: str(value) for key, value in (variables or {}).items()},
        }
        options = {
            "script": script,
            "parallelism": parallelism,
            "checkpoint-ms": checkpoint_ms,
            "checkpoint-dir": (workdir / "checkpoints").as_uri(),
        }
        super().__init__(
            workdir,
            SQL_JOB_CLASS,
            options,
            writer_ids=subtask_writer_ids(writer_id, parallelism),
            env=env,
            without_gate_jar=True,
        )


class TableChanges:
    """Inserts, updates and deletes of ``keys`` keys in a MySQL table ``orders (id, v, seq)``, as an application
    would make them, for change data capture from its binlog.

    Every change sets ``seq`` to the next number and ``v`` to ``v<seq>``; :meth:`mark` writes one more, to the
    marker row (id -1), whose ``seq`` arriving downstream says that every change before it did (a binlog is read in
    order). The table's state is the database's own: :meth:`digest` reads it.
    """

    MARKER_ID = -1

    def __init__(self, connect: Callable[[], Any], keys: int, *, delete_share: float = 0.2, seed: int = 25) -> None:
        self.connect = connect
        self.keys = keys
        self.delete_share = delete_share
        self.rng = random.Random(seed)
        self.seq = 0
        self.changes = 0

    def create(self) -> None:
        """The table, with every key inserted (what the connector's snapshot reads)."""
        with self.connect() as db, db.cursor() as cursor:
            cursor.execute("CREATE TABLE orders (id BIGINT PRIMARY KEY, v VARCHAR(64), seq BIGINT NOT NULL)")
            rows = [(key, f"v{key}", key) for key in range(self.keys)]
            cursor.executemany("INSERT INTO orders (id, v, seq) VALUES (%s, %s, %s)", rows)
        self.seq = self.keys

    def run(self, rate: float, until: threading.Event, most: int) -> None:
        """Change random keys at ``rate`` a second, each change its own transaction, until ``until`` is set or
        ``most`` changes are made."""
        started = time.monotonic()
        with self.connect() as db, db.cursor() as cursor:
            while not until.is_set() and self.changes < most:
                key = self.rng.randrange(self.keys)
                if self.rng.random() < self.delete_share:
                    cursor.execute("DELETE FROM orders WHERE id = %s", (key,))
                else:
                    self._upsert(cursor, key, self.seq)
                self.seq += 1
                self.changes += 1
                ahead = self.changes / rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)

    def mark(self) -> int:
        """Write the marker row with the next seq; that seq."""
        marker = self.seq
        with self.connect() as db, db.cursor() as cursor:
            self._upsert(cursor, self.MARKER_ID, marker)
        self.seq += 1
        return marker

    @staticmethod
    def _upsert(cursor: Any, key: int, seq: int) -> None:
        """Insert ``key``'s row, or update it, with ``seq`` and ``v<seq>``."""
        cursor.execute(
            "INSERT INTO orders (id, v, seq) VALUES (%s, %s, %s) "
            "ON DUPLICATE KEY UPDATE v = VALUES(v), seq = VALUES(seq)",
            (key, f"v{seq}", seq),
        )

    def digest(self) -> dict[str, int]:
        """The table's rows, keys and the sum of CRC-32s of ``<id>:<v>:<seq>`` over every row (Spark's crc32 too)."""
        with self.connect() as db, db.cursor() as cursor:
            cursor.execute(
                "SELECT COUNT(*), COUNT(DISTINCT id), COALESCE(SUM(CRC32(CONCAT(id, ':', v, ':', seq))), 0) FROM orders"
            )
            rows, keys, digest = cursor.fetchone()
        return {"row_count": int(rows), "keys": int(keys), "digest": int(digest)}
