"""The design's CDC writer, whole: Kafka -> Flink (``KafkaSource`` in ``GatedSource``) -> Flink's Iceberg sink, upsert.

A Kafka broker of the module's own (KRaft, ``devkit.kafka_broker``) carries changes to 10,000 keys; the Flink job
(``flink/src/test/.../CdcUpsertJob.java``, the README's template) reads them through the gate and upserts them into
an Iceberg table of the suite's JDBC catalog in MySQL, keyed by ``id``, checkpointing every 2 s. Every change's
value is unique (``v<seq>``), so the expected table follows from the produced messages alone: per key, its last
change, or no row if that was a delete. Spark reads the table back (pyiceberg cannot apply equality deletes).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook
from pyiceberg.manifest import DataFileContent

from airflow_iceberg.core.gate_state import GateOwner
from airflow_iceberg.core.iceberg_runtime import IcebergVersion, missing_option
from airflow_iceberg.core.idle import committed_by
from airflow_iceberg.core.maintenance import FLINK_CHECKPOINT_MARKER
from airflow_iceberg.core.procedures import REWRITE_PROCEDURES
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.planning.health import referenced_data_file
from airflow_iceberg.planning.plan import plan_table
from airflow_iceberg.surface.dag_factory import FULL_FOLDING, compaction_dag_id, full_rewrite_dag_id
from devkit.cdc import MERGE_ON_READ, CdcJob, ChangeStream, SqlJob, TableChanges, create_cdc_table
from devkit.dag_runs import load_dag
from devkit.flink_jobs import sql_jar, wait_for_acknowledgements
from devkit.kafka_broker import KafkaBroker
from devkit.private_mariadb import PrivateMariaDB
from devkit.tables import TableStats, drop_table
from devkit.writers import BatchChangesJob, run_statements, ungated_rewrite
from scripts import stacks

#: The Flink SQL scripts of the tests, which the docs show.
SQL_SCRIPTS = Path(__file__).parent / "flink_sql"
KEYS = 10_000
CHANGES = 30_000  # the first KEYS insert every key; then updates, deletes and re-inserts of random keys
RATE = 600  # changes per second the producer sends: 50 s of changes
#: At most this many changes while the compactions go on: the producer keeps sending until the last one ends, so
#: that each compaction has a job writing beside it and the table needs work again, however fast they run.
MOST_CHANGES = 10 * CHANGES
PARALLELISM = 2
POKE_SECONDS = 0.5
JOB = {"parallelism": PARALLELISM, "poke_seconds": POKE_SECONDS}
#: How long after the gate closes a subtask may still emit: its next look at the gate, plus scheduling on 2 cores.
EMIT_SLACK = POKE_SECONDS + 0.5
#: The load of the gated compactions and of their ungated control: 10-s checkpoints at 1,000 changes a second,
#: into a table whose writers start a new data file every 1,000 rows (Iceberg's sink checks the size every 1,000
#: rows; a target of one byte always passes). So each Flink writer rolls its data file within a checkpoint, as a
#: production writer does once a checkpoint's rows for one partition pass the target size (512 MB by default),
#: and a key updated twice in one checkpoint gets a position delete naming a data file of that checkpoint.
ROLLING = {"checkpoint_ms": 10_000}
ROLLING_RATE = 1_000
ROLLING_TABLE = {"write.target-file-size-bytes": "1"}
#: The rewrites' own target then, Iceberg's 512 MB being the table's no longer (seed 000's value).
REWRITE_TARGET = {"target-file-size-bytes": 134_217_728}


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path_factory.mktemp("kafka")) as broker:
        yield broker


@pytest.fixture
def cdc_table(unique_name: str) -> Iterator[str]:
    """A format-v2 table keyed by ``id`` (its identifier field), in four buckets of it, as Flink's upsert needs."""
    table = f"lake.cdc.{unique_name}"
    create_cdc_table(TableName.parse(table))
    yield table
    drop_table("lake", table)


def load(table: str) -> Any:
    """``table`` (``lake.<namespace>.<name>``) through the Iceberg provider's hook, as pyiceberg loads it."""
    name = TableName.parse(table)
    return IcebergHook(name.catalog).load_table(name.in_catalog)


def flink_snapshots(table: str) -> list[Any]:
    """The snapshots of ``table`` that Flink's sink committed (they carry its checkpoint id), oldest first."""
    snapshots = load(table).snapshots()
    return [s for s in snapshots if FLINK_CHECKPOINT_MARKER in s.summary.additional_properties]


def committed_checkpoint(table: str) -> int:
    """The newest checkpoint whose data the Flink sink has committed to ``table`` (0 before its first commit).

    Read from the newest snapshot Flink committed, not the current one: a rewrite's snapshot carries no checkpoint.
    """
    ids = [int(s.summary.additional_properties[FLINK_CHECKPOINT_MARKER]) for s in flink_snapshots(table)]
    return max(ids, default=0)


def emitted_changes(*jobs: CdcJob) -> list[int]:
    """The sequence numbers of the changes ``jobs`` emitted, each as often as it was emitted."""
    return [int(value.split(",", 1)[0]) for job in jobs for e in job.events().values() for value, _ in e.emits]


def wait_until_committed(job: CdcJob, table: str, produced: int, *, earlier: tuple[CdcJob, ...] = ()) -> None:
    """Wait until every produced change was emitted (by ``job``, or by the ``earlier`` jobs it restored from) and
    ``job`` committed a checkpoint that holds its last one.

    That is a checkpoint whose state every subtask took after its own last record (its ``snapshot`` event: the
    recorder is chained to the source, so the barrier follows every record before it). A checkpoint that merely
    completed after the last record may have taken its state before it.
    """
    job.wait_for(lambda: len(set(emitted_changes(job, *earlier))) >= produced, f"{produced} changes emitted", 180)
    assert set(emitted_changes(job, *earlier)) == set(range(produced))
    last_emits = {subtask: max(e.emit_times(), default=0.0) for subtask, e in job.events().items()}
    holding: list[int] = []

    def checkpoint_holding_every_change() -> bool:
        events = job.events()
        after = [{cp for cp, t in events[i].snapshots.items() if t > last} for i, last in last_emits.items()]
        holding[:] = sorted(set.intersection(*after)) if after else []
        return bool(holding)

    job.wait_for(checkpoint_holding_every_change, "a checkpoint taken after the last change", timeout=60)
    job.wait_for(lambda: committed_checkpoint(table) >= holding[0], f"checkpoint {holding[0]} committed", 60)


def latest_checkpoint(directory: Path) -> Path:
    """The newest completed checkpoint of a job under its checkpoint directory (one whose metadata is written)."""
    completed = [metadata.parent for metadata in directory.glob("*/chk-*/_metadata")]
    assert completed, f"no completed checkpoint under {directory}"
    return max(completed, key=lambda path: int(path.name.split("-")[1]))


def read_back(table_config, table: str) -> dict:
    (result,) = run_statements(
        table_config(table),
        [
            f"SELECT count(*) AS row_count, count(DISTINCT id) AS keys, "
            f"sum(crc32(concat(CAST(id AS STRING), ':', v))) AS digest FROM {table}",
        ],
    )
    return result


def as_of(table: str, snapshot_id: int) -> Any:
    """``table`` (pyiceberg) as it was at ``snapshot_id``: its metadata with that snapshot as the current one."""
    from pyiceberg.table import Table

    current = load(table)
    metadata = current.metadata.model_copy(update={"current_snapshot_id": snapshot_id})
    return Table(current.name(), metadata, current.metadata_location, current.io, current.catalog)


def position_deletes_naming_several_files(table: str) -> str:
    """``"<several> of <all>"`` position-delete files ever added to ``table`` that name more than one data file:
    Iceberg keeps ``file_path`` bounds only for a delete file naming one (since 1.4), and a rewrite's validation
    takes a delete file without them to apply to every data file of its partition (since 1.5)."""
    files = load(table).inspect.all_delete_files().to_pylist()
    deletes = {f["file_path"]: f for f in files if f["content"] == 1}  # each file once, from every snapshot
    several = 0
    for delete in deletes.values():
        bounds = {side: dict(delete[side] or []) for side in ("lower_bounds", "upper_bounds")}
        several += referenced_data_file(SimpleNamespace(content=DataFileContent.POSITION_DELETES, **bounds)) is None
    return f"{several} of {len(deletes)}"


def rewrites_between(table: str, start: datetime, end: datetime) -> list[Any]:
    """The rewrite (``replace``) snapshots committed to ``table`` between ``start`` and ``end``, oldest first."""
    snapshots = load(table).snapshots()
    window = (start.timestamp() * 1000, end.timestamp() * 1000)
    return sorted(
        (s for s in snapshots if s.summary.operation.value == "replace" and window[0] <= s.timestamp_ms <= window[1]),
        key=lambda s: s.sequence_number,
    )


def flink_sink_pauses() -> bool:
    """Whether a compaction pauses this stack's Flink upsert sink: its position deletes are partition-scoped before
    Iceberg 1.6 (the rule: ``core/conflicts.py``), so on ``original`` it pauses, and from 1.6 on it keeps committing."""
    return IcebergVersion.parse(stacks.current().iceberg_flink) < IcebergVersion(1, 6)


def flink_commits_between(table: str, start: datetime, end: datetime) -> int:
    """How many snapshots Flink's sink committed to ``table`` between ``start`` and ``end``."""
    window = (start.timestamp() * 1000, end.timestamp() * 1000)
    return sum(1 for s in flink_snapshots(table) if window[0] <= s.timestamp_ms <= window[1])


def flink_deletes_between(table: str, start: datetime, end_ms: int) -> dict[str, int]:
    """The equality- and position-delete files Flink's sink added to ``table`` from ``start`` to ``end_ms``."""
    added = {"equality": 0, "position": 0}
    for snapshot in flink_snapshots(table):
        if start.timestamp() * 1000 <= snapshot.timestamp_ms <= end_ms:
            summary = snapshot.summary.additional_properties
            added["equality"] += int(summary.get("added-equality-delete-files", 0))
            added["position"] += int(summary.get("added-position-delete-files", 0))
    return added


def compaction_when_needed(
    job, table: str, settings: dict, compaction_dag, table_config, gate_hook, options: dict, timeout: float, number: int
) -> tuple[Any, datetime, datetime]:
    """Once the table's health asks for a compaction (the upserts made it need work), the compaction DAG's run of
    it, which must succeed, and when it closed and opened the gate (database clock)."""
    thresholds = table_config(table, **settings).health.thresholds()
    where = {procedure: None for procedure in REWRITE_PROCEDURES}
    job.wait_for(
        lambda: plan_table(load(table), table, thresholds, where, options)[1].decision == "compact",
        "the table's health asking for a compaction",
        timeout=timeout,
    )
    run = compaction_dag(table, **settings).test()
    assert run.state == "success", f"compaction {number} ended {run.state}"
    trail = [r for r in gate_hook.audit_trail(table) if r["owner_run_id"] == run.run_id]
    return (
        run,
        min(r["at"] for r in trail if r["action"] == "close"),
        max(r["at"] for r in trail if r["action"] == "open"),
    )


def rolling_changes(
    kafka, cdc_table: str, unique_name: str, tmp_path, until: threading.Event
) -> tuple[CdcJob, ChangeStream, threading.Thread]:
    """The Flink upsert job started on ``cdc_table`` as a rolling table, and a stream of changes into it through a
    topic of its own until ``until`` is set, started: the job, the stream and the thread producing it."""
    topic = f"changes_{unique_name}"
    kafka.create_topic(topic, partitions=PARALLELISM)
    with load(cdc_table).transaction() as transaction:
        transaction.set_properties(ROLLING_TABLE)
    job = CdcJob(tmp_path / "job", kafka=kafka, topic=topic, table=cdc_table, writer_id=unique_name, **JOB, **ROLLING)
    stream = ChangeStream(kafka, topic, KEYS)
    job.start()
    producing = threading.Thread(target=stream.produce, args=(MOST_CHANGES, ROLLING_RATE, until), daemon=True)
    producing.start()
    return job, stream, producing


@pytest.mark.stack_check("Flink CDC upsert, gated")
@pytest.mark.stack_smoke
def test_three_gated_compactions_beside_the_running_cdc_job_fold_every_equality_delete_and_lose_no_change(
    kafka, cdc_table, unique_name, gate_hook, compaction_dag, table_config, tmp_path, stack_check
):
    """A delete file a compaction folded may stay in the table, dangling: it applies to nothing, and health does
    not count it. The job pauses for each compaction only where its sink's position deletes are partition-scoped
    (Iceberg before 1.6); elsewhere it keeps committing through it."""
    pauses = flink_sink_pauses()
    # The table's real health thresholds (the suite's are for tiny tables), and a wait that only the writer's
    # acknowledgement ends: no rewrite starts beside a checkpoint still in flight.
    thresholds = {"min_small_files": 12, "max_delete_ratio": 0.1, "max_delete_age_minutes": 60}
    settings = {"idle_seconds": 600, "health": {"watch": False, **thresholds}, "rewrite_data_files": REWRITE_TARGET}
    config = table_config(cdc_table, **settings)
    rewrite_options = config.options_for("rewrite_data_files")
    where = {procedure: None for procedure in REWRITE_PROCEDURES}
    compacted = threading.Event()
    job, stream, producing = rolling_changes(kafka, cdc_table, unique_name, tmp_path, until=compacted)
    compactions = []
    try:
        for number in range(1, stack_check.compactions(3) + 1):
            # Runs that the table's own health would start: the upserts made it need work again.
            run, closed, opened = compaction_when_needed(
                job, cdc_table, settings, compaction_dag, table_config, gate_hook, rewrite_options, 120, number
            )
            results = run.get_task_instance("rewrite_files").xcom_pull(task_ids="rewrite_files")
            compactions.append((closed, opened, results, rewrites_between(cdc_table, closed, opened)))
            decided = stack_check.record_pauses(run, (opened - closed).total_seconds(), lambda writer: "Flink")
            assert set(decided) == job.writer_ids and set(decided.values()) == {pauses}, decided
            stack_check.record(
                compactions=len(compactions),
                gate_closed_seconds=[round((o - c).total_seconds(), 1) for c, o, _, _ in compactions],
                rewrite_failed_commits=0,
            )
        compacted.set()
        producing.join(timeout=300)
        assert not producing.is_alive(), "the producer did not finish"
        wait_until_committed(job, cdc_table, stream.produced)
        assert job.running, f"the Flink job ended:\n{job.log()[-5000:]}"  # it never restarts: a failure ends it
        stack_check.record(writer_failed_commits=0)  # a failed commit would have ended the job
        assert len(emitted_changes(job)) == stream.produced, "a change was emitted twice"
    finally:
        compacted.set()
        job.stop()
    runtime = config.spark.iceberg_runtime()
    removes_dangling = missing_option("rewrite_data_files", "remove-dangling-deletes", "true", runtime) is None

    events = job.events()
    assert sorted(events) == list(range(PARALLELISM))
    # A writer that commits through a closed gate is named from its snapshot's summary: what each engine writes there.
    assert committed_by(flink_snapshots(cdc_table)[-1].summary.additional_properties).startswith("Flink job ")
    rewrite_by = committed_by(compactions[-1][3][-1].summary.additional_properties)
    if runtime is None or runtime.version >= IcebergVersion(1, 6):
        assert "spark" in str(rewrite_by).lower()
    else:  # Iceberg 1.5 writes no engine into a procedure's summary (1.6, apache/iceberg#9273, began to)
        assert rewrite_by is None
    # Each subtask acknowledged the pauses with a snapshot of the table (IcebergSnapshotIds), where it paused.
    history = {entry.snapshot_id for entry in load(cdc_table).history()}
    writers = gate_hook.get_state(cdc_table).writers
    assert {w.writer_id for w in writers} == job.writer_ids
    assert {(w.commit_kind, w.iceberg_version) for w in writers} == {("upserts", stacks.current().iceberg_flink)}
    if pauses:
        assert {w.ack_snapshot_id for w in writers} <= history
    for number, (closed, opened, results, rewrites) in enumerate(compactions, 1):
        data = results["rewrite_data_files"]
        assert rewrites, f"compaction {number} committed no rewrite while the gate was closed"
        before = TableStats.read_at(as_of(cdc_table, rewrites[0].parent_snapshot_id))
        folded = as_of(cdc_table, rewrites[-1].snapshot_id)
        after = TableStats.read_at(folded)
        health, plan = plan_table(folded, cdc_table, config.health.thresholds(), where, rewrite_options)
        removed = data.get("removed_delete_files_count", "(not reported by this Iceberg)")
        print(
            f"compaction {number}: gate closed {(opened - closed).total_seconds():.1f} s; "
            f"{before.equality_delete_files} equality-delete and {before.position_delete_files} position-delete "
            f"files before; {data['rewritten_data_files_count']} data files -> {data['added_data_files_count']}, "
            f"{removed} delete files removed; then {after.data_files} data files, "
            f"{after.equality_delete_files} equality-delete and {after.position_delete_files} position-delete "
            f"files ({health.dangling_delete_files} of them dangling); its health: {plan.decision}"
        )
        if pauses:  # nothing emitted while the gate was closed
            for subtask, e in events.items():
                late = e.emit_times(closed.timestamp() + EMIT_SLACK, opened.timestamp())
                assert late == [], f"subtask {subtask} emitted {len(late)} records during compaction {number}"
        else:  # it kept committing through the compaction: a checkpoint's commit within it, when it was long enough
            committed = flink_commits_between(cdc_table, closed, opened)
            print(f"compaction {number}: Flink committed {committed} snapshots while the gate was closed")
            if (opened - closed).total_seconds() > 2 * ROLLING["checkpoint_ms"] / 1000:
                assert committed > 0, f"the sink committed nothing during compaction {number}"
        # Every partition it compacted (bucket partitions: the whole table) holds no delete file that still applies
        # but those the writer committed while it kept committing through the compaction (they apply to the files
        # the rewrite wrote, which keep its starting sequence number, and the next compaction folds them), and no
        # other equality-delete file at all where Iceberg removes dangling deletes (1.7 and later); the health check
        # of a table whose writer paused skips. What may stay is dangling: the last checkpoint's position deletes,
        # which name files the rewrite replaced and carry its starting sequence number. Before 1.6, Flink's
        # position deletes are partition-scoped and may name no single data file: health proves them dangling
        # because every live data file was added by a later commit than theirs.
        assert data["failed_data_files_count"] == 0
        during = flink_deletes_between(cdc_table, closed, rewrites[-1].timestamp_ms)
        applying = {kind: sum(getattr(p, f"{kind}_delete_files") for p in health.partitions) for kind in during}
        print(f"compaction {number}: delete files applying after it {applying}, committed during it {during}")
        assert all(applying[kind] <= during[kind] for kind in during), (applying, during)
        if removes_dangling:
            assert after.equality_delete_files <= during["equality"]
        if pauses:
            assert applying == {"equality": 0, "position": 0} and plan.decision == "skip", plan.reason
    # No change lost or applied twice: the table holds exactly the expected row per key.
    stats = TableStats.read("lake", cdc_table)
    print(f"{stream.produced} changes to {KEYS} keys, {len(stream.expected)} live; table now: {stats}")
    exact = {"row_count": len(stream.expected), "keys": len(stream.expected), "digest": stream.digest()}
    stack_check.record(rows_exact=read_back(table_config, cdc_table) == exact)
    assert read_back(table_config, cdc_table) == exact


#: The SQL jobs' compactions: the table's real health thresholds (the suite's are for tiny tables), and an idle
#: window of ten minutes, so that only the writers' acknowledgement ends a wait in time.
SQL_COMPACTION = {
    "idle_seconds": 600,
    "health": {"watch": False, "min_small_files": 12, "max_delete_ratio": 0.1, "max_delete_age_minutes": 60},
    "rewrite_data_files": REWRITE_TARGET,
}


def acknowledged_compactions(job, table, compaction_dag, table_config, gate_hook, stack_check, count=3) -> list:
    """``count`` compactions of ``table`` beside ``job``, each once the table's health asks for one; each must
    succeed, its wait ended by every subtask's acknowledgement where the compaction pauses the job (before Iceberg
    1.6), at once where it lets it keep committing. (closed, opened, rewrite_data_files' result) each."""
    pauses = flink_sink_pauses()
    compactions: list = []
    for number in range(1, count + 1):
        run, closed, opened = compaction_when_needed(
            job, table, SQL_COMPACTION, compaction_dag, table_config, gate_hook, {}, 180, number
        )
        wait = run.get_task_instance("wait_until_snapshot_idle").xcom_pull(task_ids="wait_until_snapshot_idle")
        if pauses:
            assert wait["done_by"] == "writer acknowledgement", wait
            assert set(wait["writers_acknowledged"]) == job.writer_ids, wait
        else:
            assert set(wait["writers_keeping_on"]) == job.writer_ids and wait["writers"] == [], wait
        rewritten = run.get_task_instance("rewrite_files").xcom_pull(task_ids="rewrite_files")
        compactions.append((closed, opened, rewritten["rewrite_data_files"]))
        decided = stack_check.record_pauses(run, (opened - closed).total_seconds(), lambda writer: "Flink")
        assert set(decided.values()) == {pauses}, decided
        stack_check.record(
            compactions=len(compactions),
            gate_closed_seconds=[round((o - c).total_seconds(), 1) for c, o, _ in compactions],
            rewrite_failed_commits=0,
        )
    return compactions


def pause_until_committed(gate_hook, table: str, job, run_name: str) -> None:
    """Close the gate and open it again once every subtask has acknowledged: whatever ``job`` emitted before is
    committed then."""
    owner = GateOwner(compaction_dag_id(TableName.parse(table)), f"manual__{run_name}")
    gate_hook.close_gate(table, owner, lease_seconds=300)
    wait_for_acknowledgements(gate_hook, table, job)
    gate_hook.open_gate(table, owner)


def assert_nothing_emitted_while_closed(job, compactions: list, label: str) -> None:
    """Where the compactions paused the job (its sink before Iceberg 1.6), it emitted nothing while the gate was
    closed; elsewhere it was let keep committing, and no emission is held against it."""
    for number, (closed, opened, data) in enumerate(compactions, 1):
        print(
            f"{label}, compaction {number}: gate closed {(opened - closed).total_seconds():.1f} s; "
            f"{data['rewritten_data_files_count']} data files -> {data['added_data_files_count']}"
        )
        assert data["failed_data_files_count"] == 0
        if not flink_sink_pauses():
            continue
        for subtask, e in job.events().items():
            late = e.emit_times(closed.timestamp() + EMIT_SLACK, opened.timestamp())
            assert late == [], f"subtask {subtask} emitted {len(late)} changes during compaction {number}"


@pytest.mark.stack_check("Flink SQL CDC upsert, gated")
def test_a_flink_sql_upsert_from_a_gated_kafka_table_pauses_for_three_compactions_and_loses_no_change(
    kafka, cdc_table, unique_name, gate_hook, compaction_dag, table_config, tmp_path, stack_check
):
    """The same pipeline, written in Flink SQL alone (``flink_sql/gated_kafka_cdc.sql``, the docs' DDL): Debezium
    change events in Kafka, a ``'connector' = 'gated'`` table over Kafka's connector, ``INSERT INTO`` the Iceberg
    table in upsert mode. The script adds the gated connector's jar itself (``ADD JAR``)."""
    topic = f"changes_{unique_name}"
    kafka.create_topic(topic, partitions=PARALLELISM)
    job = SqlJob(
        tmp_path / "job",
        SQL_SCRIPTS / "gated_kafka_cdc.sql",
        table=cdc_table,
        writer_id=unique_name,
        variables={"TOPIC": topic, "BOOTSTRAP": kafka.bootstrap},
        parallelism=PARALLELISM,
    )
    stream = ChangeStream(kafka, topic, KEYS, value_format="debezium-json")
    job.start()
    compacted = threading.Event()
    producing = threading.Thread(target=stream.produce, args=(MOST_CHANGES, RATE, compacted), daemon=True)
    producing.start()
    try:
        compactions = acknowledged_compactions(job, cdc_table, compaction_dag, table_config, gate_hook, stack_check)
        compacted.set()
        producing.join(timeout=300)
        assert not producing.is_alive(), "the producer did not finish"
        job.wait_for(
            lambda: set(range(stream.produced)) <= set(emitted_changes(job)),
            f"all {stream.produced} changes emitted",
            timeout=180,
        )
        pause_until_committed(gate_hook, cdc_table, job, unique_name)
        assert job.running, f"the Flink job ended:\n{job.log()[-5000:]}"  # it never restarts: a failure ends it
        stack_check.record(writer_failed_commits=0)  # a failed commit would have ended the job
    finally:
        compacted.set()
        job.stop()

    assert sorted(job.events()) == list(range(PARALLELISM))
    assert_nothing_emitted_while_closed(job, compactions, "SQL job")
    history = {entry.snapshot_id for entry in load(cdc_table).history()}
    assert {w.ack_snapshot_id for w in gate_hook.get_state(cdc_table).writers} <= history
    exact = {"row_count": len(stream.expected), "keys": len(stream.expected), "digest": stream.digest()}
    found = read_back(table_config, cdc_table)
    print(f"SQL job: {stream.produced} changes to {KEYS} keys, {len(stream.expected)} live; table: {found}")
    stack_check.record(rows_exact=found == exact)
    assert found == exact


@pytest.mark.stack_check("Flink SQL, MySQL CDC, gated")
@pytest.mark.mysql_cdc
def test_changes_to_a_mariadb_table_flow_through_its_binlog_flink_sql_and_the_gate_into_iceberg_exactly(
    cdc_table, unique_name, gate_hook, compaction_dag, table_config, tmp_path, stack_check
):
    """CDC straight from a binlog (``flink_sql/gated_mysql_cdc.sql``, the docs' DDL): Flink CDC's MySQL connector
    reads a MariaDB table, a snapshot of its 10,000 rows and then its binlog, through the gate, and Flink SQL
    upserts it into Iceberg, while the table is changed and three gated compactions run. At the end the Iceberg
    table equals the MariaDB table: its row count, its keys and a checksum of every row."""
    with PrivateMariaDB(tmp_path / "source-db", binlog=True) as source:
        source.create_database("shop")
        changes = TableChanges(lambda: source.connect("shop"), KEYS)
        changes.create()
        job = SqlJob(
            tmp_path / "job",
            SQL_SCRIPTS / "gated_mysql_cdc.sql",
            table=cdc_table,
            writer_id=unique_name,
            parallelism=PARALLELISM,
            variables={
                "MYSQL_CDC_JAR": sql_jar("flink-sql-connector-mysql-cdc"),
                "MYSQL_JDBC_JAR": sql_jar("mysql-connector-j"),
                "MYSQL_HOST": source.host,
                "MYSQL_PORT": source.port,
                "MYSQL_USER": source.user,
                "MYSQL_PASSWORD": source.password,
                "MYSQL_DATABASE": "shop",
            },
        )
        job.start()
        compacted = threading.Event()
        changing = threading.Thread(target=changes.run, args=(RATE / 2, compacted, MOST_CHANGES), daemon=True)
        try:
            # The snapshot first: every key the table began with has left the source.
            job.wait_for(lambda: set(range(KEYS)) <= set(emitted_changes(job)), "the snapshot's rows", timeout=180)
            changing.start()
            compactions = acknowledged_compactions(job, cdc_table, compaction_dag, table_config, gate_hook, stack_check)
            compacted.set()
            changing.join(timeout=120)
            assert not changing.is_alive(), "the changes did not stop"
            # The binlog is read in order: once the marker's change has left the source, every earlier one has.
            marker = changes.mark()
            job.wait_for(lambda: marker in emitted_changes(job), "the marker change", timeout=180)
            pause_until_committed(gate_hook, cdc_table, job, unique_name)
            assert job.running, f"the Flink job ended:\n{job.log()[-5000:]}"  # it never restarts: a failure ends it
            stack_check.record(writer_failed_commits=0)
        finally:
            compacted.set()
            job.stop()
        expected = changes.digest()

    assert_nothing_emitted_while_closed(job, compactions, "MySQL CDC job")
    (found,) = run_statements(
        table_config(cdc_table),
        [
            "SELECT count(*) AS row_count, count(DISTINCT id) AS keys, coalesce(sum(crc32(concat(CAST(id AS STRING), "
            f"':', v, ':', CAST(seq AS STRING)))), 0) AS digest FROM {cdc_table}"
        ],
    )
    print(f"MySQL CDC job: {changes.changes} changes after a snapshot of {KEYS}; MariaDB {expected}, Iceberg {found}")
    stack_check.record(rows_exact=found == expected)
    assert found == expected


def test_the_cdc_job_killed_in_a_pause_restores_after_the_daily_rewrite_and_maintenance_losing_and_repeating_nothing(
    kafka, cdc_table, unique_name, gate_hook, compaction_dag, table_config, tmp_path
):
    """Killed in a pause; while it is down, the daily full rewrite runs with maintenance that would expire every
    snapshot but the current one (``retain_last: 1``, no age) and removes orphans; then it restores from its
    last checkpoint in a second pause. The marker rule must keep the snapshot that holds its last committed
    checkpoint, or the restored sink could commit that checkpoint's files again (apache/iceberg#6066, #5846)."""
    topic = f"changes_{unique_name}"
    kafka.create_topic(topic, partitions=PARALLELISM)
    compaction_dag(
        cdc_table, maintenance={"expire_older_than_hours": 0, "retain_last": 1, "orphan_older_than_hours": 24}
    )
    common = {"kafka": kafka, "topic": topic, "table": cdc_table, "writer_id": unique_name, **JOB}
    job = CdcJob(tmp_path / "job", **common)
    stream = ChangeStream(kafka, topic, KEYS)
    job.start()
    producing = threading.Thread(target=stream.produce, args=(CHANGES // 2, RATE), daemon=True)
    producing.start()
    restored = None
    dag_id = compaction_dag_id(TableName.parse(cdc_table))
    try:
        # Two checkpoints committed at least, so that expiry has a marked snapshot older than the last to expire.
        job.wait_for(
            lambda: job.emitted() >= KEYS // 2 and len(flink_snapshots(cdc_table)) >= 2,
            "the first changes emitted, in two commits or more",
            timeout=180,
        )
        owner = GateOwner(dag_id, f"manual__{unique_name}")
        closed_at = gate_hook.close_gate(cdc_table, owner, lease_seconds=300).closed_at.timestamp()
        wait_for_acknowledgements(gate_hook, cdc_table, job)
        job.kill()  # SIGKILL in the pause: no clean shutdown, no last checkpoint
        killed_at = time.time()
        gate_hook.open_gate(cdc_table, owner)

        # While the job is down: the daily full rewrite, with manifests, expiry and orphan removal after it.
        marked_before = flink_snapshots(cdc_table)
        daily = load_dag(full_rewrite_dag_id(TableName.parse(cdc_table))).test()
        assert daily.state == "success", {ti.task_id: ti.state for ti in daily.get_task_instances()}
        after_maintenance = load(cdc_table)
        surviving = {snapshot.snapshot_id for snapshot in after_maintenance.snapshots()}
        assert marked_before[-1].snapshot_id in surviving, "expiry took the snapshot of the last checkpoint"
        assert marked_before[0].snapshot_id not in surviving, "expiry expired nothing: it proved nothing"
        assert TableStats.read_at(after_maintenance).equality_delete_files == 0

        reowner = GateOwner(dag_id, f"manual__{unique_name}_restore")
        gate_hook.close_gate(cdc_table, reowner, lease_seconds=300)
        restored = CdcJob(
            tmp_path / "restored",
            **common,
            checkpoints=job.checkpoints,
            restore_from=latest_checkpoint(job.checkpoints),
        )
        restored.start()
        restored.wait_for(
            lambda: len(restored.events()) == PARALLELISM
            and all(len(e.completions) >= 2 for e in restored.events().values()),
            "two completed checkpoints per subtask of the restored job, the gate still closed",
            timeout=120,
        )
        opened_at = gate_hook.open_gate(cdc_table, reowner)[1].opened_at.timestamp()
        producing.join(timeout=180)
        assert not producing.is_alive(), "the producer did not finish"
        wait_until_committed(restored, cdc_table, stream.produced, earlier=(job,))
        assert restored.running, f"the restored Flink job ended:\n{restored.log()[-5000:]}"
    finally:
        job.stop()
        if restored is not None:
            restored.stop()

    # Nothing emitted while the gate was closed: not by the killed job after it paused, not by the restored one
    # before the gate opened. Kafka kept the changes, and the restored job read them from its checkpoint's offsets.
    for subtask, e in job.events().items():
        assert e.emit_times(closed_at + EMIT_SLACK, killed_at) == [], f"subtask {subtask} emitted while closed"
    for subtask, e in restored.events().items():
        assert e.emit_times(end=opened_at) == [], f"restored subtask {subtask} emitted while closed"
        assert e.emit_times(start=opened_at), f"restored subtask {subtask} emitted nothing after the opening"
    # No key lost, none duplicated: exactly the expected row per key.
    print(
        f"{stream.produced} changes; killed {killed_at - closed_at:.1f} s into the pause; the daily run and its "
        f"maintenance kept {len(surviving)} snapshots; restored, opened {opened_at - closed_at:.1f} s after the first "
        f"closing; {len(stream.expected)} keys live"
    )
    assert read_back(table_config, cdc_table) == {
        "row_count": len(stream.expected),
        "keys": len(stream.expected),
        "digest": stream.digest(),
    }


@pytest.mark.stack_check("Flink CDC upsert, ungated")
def test_without_the_gate_rewrites_beside_the_flink_upsert_job_show_what_conflicts(
    kafka, cdc_table, unique_name, table_config, tmp_path, stack_check
):
    """The control: the same load with rewrites that never close the gate. It prints what conflicted, on each side,
    and whether the table still holds the expected rows; it fails only if no Flink commit landed during a rewrite
    (then it measured nothing)."""
    rewritten = threading.Event()  # the gated test's load, until the last rewrite has ended
    job, stream, producing = rolling_changes(kafka, cdc_table, unique_name, tmp_path, until=rewritten)
    # The options the compaction DAG gives this table's Iceberg (no remove-dangling-deletes before 1.7).
    options = table_config(cdc_table).provider_options(
        "rewrite_data_files", {"rewrite-all": True, **REWRITE_TARGET, **FULL_FOLDING}
    )
    calls = [{"procedure": "rewrite_data_files", "options": options}]
    rewrite_failures: list[str] = []
    failed_rewrites = overlapped = 0
    try:
        for number in range(3):
            since = committed_checkpoint(cdc_table)
            job.wait_for(lambda since=since: committed_checkpoint(cdc_table) >= since + 2, "two Flink commits", 120)
            # Start half a checkpoint after Flink's last commit, so that its next commit falls due while the rewrite
            # runs. Started at once, a rewrite shorter than a checkpoint (Spark up in 2 s, the rewrite done in 6)
            # could end before Flink's next commit each time, and the control then measured nothing.
            last_commit_ms = flink_snapshots(cdc_table)[-1].timestamp_ms
            time.sleep(max(0.0, (last_commit_ms + ROLLING["checkpoint_ms"] / 2) / 1000 - time.time()))
            started_ms = time.time() * 1000
            failed = ungated_rewrite(table_config(cdc_table), calls, name=f"ungated-rewrite-{number}")
            if failed is not None:
                failed_rewrites += 1
                rewrite_failures += [line for line in failed if "Exception" in line][:2] or ["(no exception line)"]
            ended_ms = time.time() * 1000
            # Flink committed while the rewrite ran: between its start and its end
            overlapped += any(started_ms < s.timestamp_ms < ended_ms for s in flink_snapshots(cdc_table))
            if not job.running:
                break
        rewritten.set()
        producing.join(timeout=180)
        writer_ran_through = job.running
        if writer_ran_through:
            wait_until_committed(job, cdc_table, stream.produced)
    finally:
        rewritten.set()
        job.stop()
    writer_failures = [line for line in job.log().splitlines() if "Exception" in line][:3]
    state = read_back(table_config, cdc_table) if writer_ran_through else None
    matches = state == {"row_count": len(stream.expected), "keys": len(stream.expected), "digest": stream.digest()}
    stack_check.record(
        position_delete_files_naming_several_data_files=position_deletes_naming_several_files(cdc_table),
        rewrites=number + 1,
        rewrites_overlapping_a_flink_commit=overlapped,
        rewrite_failed_commits=failed_rewrites,
        rewrite_failures=rewrite_failures,
        writer_failed_commits=0 if writer_ran_through else 1,  # the job has no restarts: one failure ends it
        writer_failures=writer_failures if not writer_ran_through else [],
        rows_exact=matches,
    )
    print(
        f"ungated, Flink upsert: 3 rewrites, {overlapped} with a Flink commit during them; rewrite failures: "
        f"{rewrite_failures or 'none'}; Flink job {'ran through' if writer_ran_through else 'failed'}: "
        f"{writer_failures if not writer_ran_through else 'no failure'}; table equals the expected state: {matches}"
    )
    assert overlapped > 0, "no Flink commit landed during an ungated rewrite: the control measured nothing"


@pytest.mark.stack_check("Flink CDC upsert and a Spark MERGE writer, gated")
def test_beside_a_flink_upsert_stream_and_a_spark_merge_writer_compactions_pause_only_the_merge_writer(
    kafka, unique_name, gate_hook, compaction_dag, table_config, tmp_path, stack_check
):
    """One merge-on-read table, two registered writers: the CDC stream (Flink's upsert sink, keys 0 to 9,999) and a
    Spark job that runs a ``DELETE`` by a non-key condition and a ``MERGE`` in turns on keys of its own (from 10,000;
    ``row-level``). The table is partitioned by ranges of 10,000 keys, so the two never conflict with each other
    (each ``MERGE`` is scoped to its keys, each ``DELETE`` is a merge-on-read one under snapshot isolation). Each
    compaction pauses the Spark job, and the stream only where its position deletes are partition-scoped (Iceberg
    before 1.6). No commit fails on either side; every row is as written."""
    table = f"lake.cdc.{unique_name}"
    properties = {**MERGE_ON_READ, "write.delete.isolation-level": "snapshot", **ROLLING_TABLE}
    create_cdc_table(TableName.parse(table), properties=properties, key_ranges=KEYS)
    pauses = flink_sink_pauses()
    thresholds = {"min_small_files": 12, "max_delete_ratio": 0.1, "max_delete_age_minutes": 60}
    settings = {"idle_seconds": 600, "health": {"watch": False, **thresholds}, "rewrite_data_files": REWRITE_TARGET}
    config = table_config(table, **settings)
    topic = f"changes_{unique_name}"
    kafka.create_topic(topic, partitions=PARALLELISM)
    job = CdcJob(tmp_path / "job", kafka=kafka, topic=topic, table=table, writer_id=unique_name, **JOB, **ROLLING)
    stream = ChangeStream(kafka, topic, KEYS)
    merge = BatchChangesJob(
        config, tmp_path / "merge", first_key=KEYS, keys=500, interval_seconds=3.0, writer_id=f"{unique_name}_merge"
    )
    compacted = threading.Event()
    producing = threading.Thread(target=stream.produce, args=(MOST_CHANGES, ROLLING_RATE, compacted), daemon=True)
    compactions: list[tuple[datetime, datetime]] = []
    final: dict[str, Any] = {}
    try:
        job.start()
        producing.start()
        merge.start().wait_for_batches(3)
        for number in range(1, stack_check.compactions(3) + 1):
            run, closed, opened = compaction_when_needed(
                job, table, settings, compaction_dag, table_config, gate_hook, {}, 180, number
            )
            compactions.append((closed, opened))

            def label(writer: str) -> str:
                return "Spark MERGE" if writer == merge.writer_id else "Flink"

            decided = stack_check.record_pauses(run, (opened - closed).total_seconds(), label)
            assert decided == {merge.writer_id: True, **{w: pauses for w in job.writer_ids}}, decided
            wait = run.get_task_instance("wait_until_snapshot_idle").xcom_pull(task_ids="wait_until_snapshot_idle")
            assert merge.writer_id in wait["writers_acknowledged"], wait
            stack_check.record(
                compactions=len(compactions),
                gate_closed_seconds=[round((o - c).total_seconds(), 1) for c, o in compactions],
                rewrite_failed_commits=0,
            )
            merge.wait_for_batches(len(merge.batches()) + 1)
        compacted.set()
        producing.join(timeout=300)
        assert not producing.is_alive(), "the producer did not finish"
    finally:
        compacted.set()
        final = merge.stop(timeout=300)
    try:
        wait_until_committed(job, table, stream.produced)
        assert job.running, f"the Flink job ended:\n{job.log()[-5000:]}"  # a failed commit would have ended it
        found = read_back(table_config, table)
    finally:
        job.stop()
    failed = final.get("failed_attempts", 0)
    stack_check.record(writer_failed_commits=failed, writer_failures=final.get("failures", [])[:3])
    assert failed == 0 and final["lost"] == 0, final["failures"]
    if not pauses:  # the stream committed through every compaction that lasted two of its checkpoints
        for number, (closed, opened) in enumerate(compactions, 1):
            committed = flink_commits_between(table, closed, opened)
            print(f"compaction {number}: {(opened - closed).total_seconds():.1f} s, {committed} Flink commits")
            if (opened - closed).total_seconds() > 2 * ROLLING["checkpoint_ms"] / 1000:
                assert committed > 0, f"the sink committed nothing during compaction {number}"
    exact = {
        "row_count": len(stream.expected) + final["rows"],
        "keys": len(stream.expected) + final["rows"],
        "digest": stream.digest() + final["digest"],
    }
    stack_check.record(rows_exact=found == exact)
    assert found == exact
    drop_table("lake", table)
