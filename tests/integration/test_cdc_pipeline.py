"""The design's CDC writer, whole: Kafka -> Flink (``KafkaSource`` in ``GatedSource``) -> Flink's Iceberg sink, upsert.

A Kafka broker of the module's own (KRaft, ``devkit.kafka_broker``) carries changes to 10,000 keys; the Flink job
(``flink/src/test/.../CdcUpsertJob.java``, the README's template) reads them through the gate and upserts them into
an Iceberg table of the suite's JDBC catalog in MySQL, keyed by ``id``, checkpointing every 2 s. Every change's
value is unique (``v<seq>``), so the expected table follows from the produced messages alone: per key, its last
change, or no row if that was a delete. Spark reads the table back (pyiceberg cannot apply equality deletes).
"""

from __future__ import annotations

import random
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook
from airflow.sdk import BaseHook
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import LongType, NestedField, StringType

from airflow_iceberg.catalogs import pyiceberg_properties, spark_catalog_settings
from airflow_iceberg.hooks.write_gate import GateOwner
from devkit.flink_jobs import FlinkJob, wait_for_acknowledgements
from devkit.kafka_broker import KafkaBroker
from devkit.tables import TableStats, drop_table
from devkit.writers import run_statements

JOB_CLASS = "airflowiceberg.flink.testjob.CdcUpsertJob"
KEYS = 10_000
CHANGES = 40_000  # the first KEYS insert every key; then updates, deletes and re-inserts of random keys
DELETE_SHARE = 0.2
RATE = 2_000  # changes per second the producer sends
PARALLELISM = 2
POKE_SECONDS = 0.5
#: How long after the gate closes a subtask may still emit: its next look at the gate, plus scheduling on 2 cores.
EMIT_SLACK = POKE_SECONDS + 0.5


class ChangeStream:
    """Produces the changes, ``<seq>,<op>,<id>,v<seq>`` keyed by id, and keeps the state they should leave."""

    def __init__(self, kafka: KafkaBroker, topic: str, seed: int = 24) -> None:
        self.producer = kafka.producer()
        self.topic = topic
        self.rng = random.Random(seed)
        self.expected: dict[int, str] = {}
        self.produced = 0
        self.errors: list[str] = []

    def _delivered(self, error, message) -> None:
        if error is not None:
            self.errors.append(str(error))

    def produce(self, count: int, rate: float) -> None:
        started = time.monotonic()
        for _ in range(count):
            seq = self.produced
            key = seq if seq < KEYS else self.rng.randrange(KEYS)
            op = "d" if seq >= KEYS and self.rng.random() < DELETE_SHARE else "u"
            value = f"v{seq}"
            self.producer.produce(self.topic, key=str(key).encode(), value=f"{seq},{op},{key},{value}".encode(),
                                  on_delivery=self._delivered)  # fmt: skip
            if op == "d":
                self.expected.pop(key, None)
            else:
                self.expected[key] = value
            self.produced += 1
            if self.produced % 200 == 0:
                self.producer.poll(0)
                ahead = self.produced / rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)
        assert self.producer.flush(60) == 0, "messages still unsent after 60 s"
        assert self.errors == [], f"deliveries failed: {self.errors[:5]}"

    def digest(self) -> int:
        """What Spark's ``sum(crc32(concat(id, ':', v)))`` gives on a table holding exactly the expected rows."""
        return sum(zlib.crc32(f"{key}:{value}".encode()) for key, value in self.expected.items())


class CdcJob(FlinkJob):
    """``CdcUpsertJob`` on ``table`` (``lake.<namespace>.<name>``), reading ``topic``, checkpoints under workdir."""

    def __init__(self, workdir: Path, *, kafka: KafkaBroker, topic: str, table: str, writer_id: str) -> None:
        catalog, identifier = table.split(".", 1)
        settings = spark_catalog_settings(catalog, pyiceberg_properties(BaseHook.get_connection(catalog)))
        prefix = f"spark.sql.catalog.{catalog}"
        gate = BaseHook.get_connection("write_gate_writer")  # a writer's grants, nothing more
        self.checkpoints = workdir / "checkpoints"
        super().__init__(
            workdir,
            JOB_CLASS,
            [
                "--bootstrap",
                kafka.bootstrap,
                "--topic",
                topic,
                "--group",
                writer_id,
                "--catalog",
                catalog,
                "--catalog-uri",
                settings.conf[f"{prefix}.uri"],
                "--catalog-user",
                settings.conf.get(f"{prefix}.jdbc.user", ""),
                "--warehouse",
                settings.conf[f"{prefix}.warehouse"],
                "--table",
                identifier,
                "--gate-url",
                f"jdbc:mariadb://{gate.host}:{gate.port}/{gate.schema}",
                "--gate-user",
                gate.login,
                "--writer-id",
                writer_id,
                "--poke-ms",
                str(int(POKE_SECONDS * 1000)),
                "--parallelism",
                str(PARALLELISM),
                "--checkpoint-dir",
                self.checkpoints.as_uri(),
            ],  # fmt: skip
            writer_ids={f"{writer_id}#{subtask}" for subtask in range(PARALLELISM)},
            env={
                "AIRFLOW_ICEBERG_GATE_PASSWORD": gate.password or "",
                "AIRFLOW_ICEBERG_CATALOG_PASSWORD": settings.secret_conf.get(f"{prefix}.jdbc.password", ""),
            },
        )


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path_factory.mktemp("kafka")) as broker:
        yield broker


@pytest.fixture
def cdc_table(unique_name: str) -> Iterator[str]:
    """A format-v2 table keyed by ``id`` (its identifier field), in four buckets of it, as Flink's upsert needs."""
    table = f"lake.cdc.{unique_name}"
    catalog = IcebergHook("lake").get_conn()
    catalog.create_namespace_if_not_exists("cdc")
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "v", StringType()),
        NestedField(3, "seq", LongType()),
        identifier_field_ids=[1],
    )
    spec = PartitionSpec(PartitionField(source_id=1, field_id=1000, transform=BucketTransform(4), name="id_bucket"))
    catalog.create_table(f"cdc.{unique_name}", schema, partition_spec=spec, properties={"format-version": "2"})
    yield table
    drop_table("lake", table)


def committed_checkpoint(table: str) -> int:
    """The newest checkpoint whose data the Flink sink has committed to ``table`` (0 before its first commit)."""
    snapshot = IcebergHook("lake").load_table(table.split(".", 1)[1]).current_snapshot()
    return int(snapshot.summary.additional_properties.get("flink.max-committed-checkpoint-id", 0)) if snapshot else 0


def wait_until_committed(job: CdcJob, table: str, produced: int) -> None:
    """Wait until the job has emitted every produced change and committed the checkpoint after the last one."""
    job.wait_for(lambda: job.emitted() >= produced, f"{produced} changes emitted", timeout=180)
    assert job.emitted() == produced, f"{job.emitted()} records emitted for {produced} changes: some twice"
    last_emit = max(max(e.emit_times()) for e in job.events().values() if e.emits)
    after: list[int] = []

    def checkpoint_after_last_emit() -> bool:
        after[:] = [cp for e in job.events().values() for cp in e.completions_between(last_emit, float("inf"))]
        return bool(after)

    job.wait_for(checkpoint_after_last_emit, "a checkpoint completed after the last change", timeout=60)
    job.wait_for(lambda: committed_checkpoint(table) >= min(after), f"checkpoint {min(after)} committed", timeout=60)


def read_back(table_config, table: str) -> dict:
    (result,) = run_statements(table_config(table), [
        f"SELECT count(*) AS row_count, count(DISTINCT id) AS keys, "
        f"sum(crc32(concat(CAST(id AS STRING), ':', v))) AS digest FROM {table}",
    ])  # fmt: skip
    return result


def test_kafka_changes_reach_the_table_through_the_gate_as_upserts_with_equality_deletes(
    kafka, cdc_table, unique_name, gate_hook, table_config, tmp_path
):
    topic = f"changes_{unique_name}"
    kafka.create_topic(topic, partitions=PARALLELISM)
    job = CdcJob(tmp_path / "job", kafka=kafka, topic=topic, table=cdc_table, writer_id=unique_name)
    stream = ChangeStream(kafka, topic)
    job.start()
    producing = threading.Thread(target=stream.produce, args=(CHANGES, RATE), daemon=True)
    producing.start()
    try:
        job.wait_for(lambda: job.emitted() >= KEYS // 2, "the first changes emitted", timeout=180)
        owner = GateOwner(f"iceberg_compact__{cdc_table.replace('.', '__')}", f"manual__{unique_name}")
        closed_at = gate_hook.close_gate(cdc_table, owner, lease_seconds=300).closed_at.timestamp()
        acks = wait_for_acknowledgements(gate_hook, cdc_table, job)
        last_ack = max(ack.ack_at.timestamp() for ack in acks.values())
        job.wait_for(
            lambda: all(len(e.completions_between(last_ack, float("inf"))) >= 2 for e in job.events().values()),
            "two more completed checkpoints per subtask after the acknowledgements",
            timeout=60,
        )
        opened_at = gate_hook.open_gate(cdc_table, owner)[1].opened_at.timestamp()
        producing.join(timeout=120)
        assert not producing.is_alive(), "the producer did not finish"
        wait_until_committed(job, cdc_table, stream.produced)
        assert job.running, f"the Flink job ended:\n{job.log()[-5000:]}"
    finally:
        job.stop()

    # The gate held the writer: nothing emitted while it was closed, and Kafka kept the changes until it opened.
    events = job.events()
    assert sorted(events) == list(range(PARALLELISM))
    for subtask, e in events.items():
        assert e.emit_times(closed_at + EMIT_SLACK, opened_at) == [], f"subtask {subtask} emitted while closed"
        assert e.emit_times(start=opened_at), f"subtask {subtask} emitted nothing after the opening"
    history = {entry.snapshot_id for entry in IcebergHook("lake").load_table(cdc_table.split(".", 1)[1]).history()}
    assert {ack.ack_snapshot_id for ack in acks.values()} <= history, "an acknowledgement named no table snapshot"
    # Flink's upsert sink wrote equality deletes, and the table holds exactly the expected row per key.
    stats = TableStats.read("lake", cdc_table)
    print(
        f"{stream.produced} changes to {KEYS} keys, {len(stream.expected)} live; gate closed "
        f"{opened_at - closed_at:.1f} s; table: {stats.data_files} data files, {stats.equality_delete_files} "
        f"equality-delete files, {stats.position_delete_files} position-delete files"
    )
    assert stats.equality_delete_files > 0
    assert read_back(table_config, cdc_table) == {
        "row_count": len(stream.expected),
        "keys": len(stream.expected),
        "digest": stream.digest(),
    }
