"""``make bench-peers``: airflow-iceberg beside what its users run instead, on one Kafka CDC stream.

One stream of changes (the same seed, keys, rate and duration) goes through Kafka into ``CdcUpsertJob`` (Flink's
Iceberg sink in upsert mode, behind ``GatedSource``) four times, once per arm, each into a table of its own:

1. ``airflow-iceberg``: a live ``airflow standalone`` watches the table's health and starts the real compaction
   DAG, which closes the gate, waits for the writer's acknowledgement, rewrites with Spark and reopens it;
2. ``flink-maintenance``: Iceberg's own ``TableMaintenance`` in the writing job (``RewriteDataFiles`` and
   ``ExpireSnapshots``, a ``JdbcLockFactory`` lock in the same MySQL), scheduled with the equivalents of our health
   defaults; it pauses nothing;
3. ``ungated-retry``: Spark's ``rewrite_data_files`` every ``--interval`` seconds, never pausing the writer,
   retried on a failed commit as AWS's optimizers do;
4. ``none``: no maintenance, the baseline.

In arms 2 to 4 the gate stays open: the writer's source asks MySQL every 0.5 s as in arm 1, and never waits.

Then arms 1 to 3 again with batch writers beside the stream (``devkit/writer_jobs/batch_changes.py``): a Spark
``DELETE`` by a non-key condition and a ``MERGE`` in turns. In arm 1 the batch job holds the gate for each statement
(``GateHolder``), so the stream pauses and acknowledges before it runs; the peers' batch jobs retry a failed one.

Every ``--sample-every`` seconds a Spark application of the bench's own (``devkit/peer_sampler.py``) counts the
table's data, position-delete and equality-delete files and its snapshots, and times a full scan. For each arm as
a whole: the freshness of each change (from its hand-over to the producer to the commit of the Iceberg snapshot that
holds it, found from the writer's record of when it emitted the change and when it took each checkpoint), the
writer's throughput, failed commits, the CPU of the writer's JVM and of the arm's maintenance (over each process
tree, exited children included; arm 1's split by task and by Airflow component, ``devkit/task_cpu.py``, and the
share an idle Airflow would have used anyway, measured on the same Airflow with nothing to run before arm 1), and
the rows at the end against the state the changes should leave.

Figures are printed and written (``--out``: ``peers.json`` and one PNG per measure, every arm on the same axes);
none is asserted. The run fails only when an arm did not do what the measurement assumes.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import itertools
import json
import logging
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook

from airflow_iceberg.core.iceberg_runtime import IcebergVersion
from airflow_iceberg.core.procedures import build_call
from airflow_iceberg.core.spark_job import parse_result_line
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.core.writer import WriteGateClient
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.surface.dag_factory import REWRITE_TASK_ID, compaction_dag_id
from airflow_iceberg.table_list.loader import load_table_list
from airflow_iceberg.table_list.schema import DELETE_FOLDING_OPTIONS, HealthConfig, TableConfig
from devkit.bench_health import CATALOG_CONN, bench_settings
from devkit.cdc import MERGE_ON_READ, CdcJob, ChangeStream, create_cdc_table
from devkit.kafka_broker import KafkaBroker
from devkit.live_airflow import process_cpu
from devkit.tables import drop_table
from devkit.task_cpu import TaskCpu
from devkit.writers import BatchChangesJob, run_statements, spark_job_hook
from scripts import stacks

ARMS = ("airflow-iceberg", "flink-maintenance", "ungated-retry", "none")
#: The mixed runs' table: merge-on-read, its batch DELETEs under snapshot isolation (a GDPR delete that a concurrent
#: append or upsert need not fail), its MERGEs under Iceberg's default, serializable.
MIXED_TABLE = {**MERGE_ON_READ, "write.delete.isolation-level": "snapshot"}
NAMESPACE = "bench_peers"
SAMPLER_JOB = Path(__file__).resolve().with_name("peer_sampler.py")
#: How a failed Iceberg commit shows in the writer's log.
ICEBERG_COMMIT_FAILURE = re.compile(r"org\.apache\.iceberg\.exceptions\.(?:CommitFailedException|ValidationException)")
#: The snapshot-summary key under which Flink's Iceberg committer records the checkpoint it committed.
CHECKPOINT_KEY = "flink.max-committed-checkpoint-id"
SEED = 37
PARALLELISM = 2
#: The first Iceberg whose Flink runtime ships ``TableMaintenance`` (arm 2).
TABLE_MAINTENANCE = IcebergVersion(1, 10)
#: What the sampler's figures are called in the report and the charts.
MEASURES = {
    "data_files": "data files",
    "equality_delete_files": "equality-delete files",
    "position_delete_files": "position-delete files",
    "scan_s": "full scan, s",
    "snapshots": "snapshots",
}


@dataclass(frozen=True)
class Load:
    keys: int
    rate: int  # changes a second
    seconds: int  # of changes
    buckets: int
    checkpoint_ms: int
    sample_every: float
    interval: float  # arm 3's, and the least time between two maintenance runs in arms 1 and 2
    batch_keys: int  # the mixed runs' batch writer: its own keys, above the stream's
    batch_every: float  # seconds between its statements
    burst: int  # changes sent at once halfway through: the writer's throughput under backpressure

    @property
    def changes(self) -> int:
        return self.rate * self.seconds


QUICK = Load(
    keys=5_000,
    rate=300,
    seconds=40,
    buckets=4,
    checkpoint_ms=5_000,
    sample_every=15,
    interval=30,
    batch_keys=1_000,
    batch_every=10,
    burst=3_000,
)
FULL = Load(
    keys=20_000,
    rate=500,
    seconds=300,
    buckets=4,
    checkpoint_ms=10_000,
    sample_every=30,
    interval=60,
    batch_keys=4_000,
    batch_every=45,
    burst=7_500,
)


@dataclass
class ArmResult:
    arm: str
    mixed: bool = False
    batch: dict[str, Any] = field(default_factory=dict)
    samples: list[dict[str, Any]] = field(default_factory=list)
    freshness_s: dict[str, float] = field(default_factory=dict)
    throughput: dict[str, float] = field(default_factory=dict)
    commits: dict[str, int] = field(default_factory=dict)
    cpu_s: dict[str, float] = field(default_factory=dict)
    rows: dict[str, Any] = field(default_factory=dict)
    #: The stream's changes that no committed snapshot holds, and those its writer emitted more than once.
    stream: dict[str, int] = field(default_factory=dict)
    pauses_s: list[float] = field(default_factory=list)
    #: Arm 1: how long each gated compaction paused the stream (0: it let the stream keep committing).
    stream_paused_s: list[float] = field(default_factory=list)
    #: Arm 1 with batch writers: each statement's hold of the gate, whether it paused the stream, and for how long.
    holds: list[dict[str, Any]] = field(default_factory=list)
    compactions_t: list[float] = field(default_factory=list)  # arm 1: when each run ended, s from the start
    pause_split_s: dict[str, float] = field(default_factory=dict)  # arm 1: where the pauses went, medians
    #: Arm 1: where its maintenance CPU went, CPU seconds by task of the compaction DAG (summed over its runs) and
    #: by Airflow's own components (devkit/task_cpu.py), and how many runs and worker slots.
    cpu_split_s: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


# --- each arm's maintenance ------------------------------------------------------------------------------------


def flink_maintenance_schedule(load: Load) -> dict[str, object]:
    """``TableMaintenance``'s schedule, from our health defaults where an equivalent exists.

    Ours rewrites a partition once it holds ``min_small_files`` small files plus equality-delete files; Flink's
    triggers count new files table-wide, so the same count is taken once per bucket. The commit count (10) is
    Iceberg's own default. Both rewrite every file that carries a delete file (``delete-file-threshold`` 1), and
    commit as they go (partial progress). Snapshots: ``retain_last`` and ``expire_older_than_hours`` of our
    maintenance defaults.
    """
    from airflow_iceberg.table_list.schema import MaintenanceConfig

    health, maintenance = HealthConfig(), MaintenanceConfig()
    per_table = health.min_small_files * load.buckets
    return {
        "rewrite-data-files": per_table,
        "rewrite-eq-delete-files": per_table,
        "rewrite-commits": 10,
        "rewrite-delete-file-threshold": DELETE_FOLDING_OPTIONS["delete-file-threshold"],
        "rate-limit-ms": int(load.interval * 1000),
        "expire-commits": 10,
        "retain-last": maintenance.retain_last,
        "max-snapshot-age-ms": int(maintenance.expire_older_than_hours * 3600 * 1000),
    }


class UngatedCompactor(threading.Thread):
    """Arm 3: ``rewrite_data_files`` with our options (delete folding) every ``interval`` s, retried at once on
    failure, up to ``retries`` times; it never touches the gate. Its CPU: its spark-submits' process trees."""

    def __init__(self, config: TableConfig, interval: float, work: Path, retries: int = 3) -> None:
        super().__init__(daemon=True)
        self.config, self.interval, self.work, self.retries = config, interval, work, retries
        self.stopping = threading.Event()
        self.attempts = 0
        self.failures: list[str] = []
        self.succeeded = 0
        self.cpu_s = 0.0
        # Our delete folding, as far as the stack's Iceberg takes it (no remove-dangling-deletes before 1.7).
        options = config.provider_options("rewrite_data_files", DELETE_FOLDING_OPTIONS)
        self.call = build_call("rewrite_data_files", config.table, options)
        self.log_file = work / "ungated-rewrites.log"

    def run(self) -> None:
        while not self.stopping.wait(self.interval):
            for _ in range(1 + self.retries):
                self.attempts += 1
                before = _children_cpu()
                logged = self.log_file.stat().st_size if self.log_file.exists() else 0
                try:
                    run_statements(self.config, [self.call], log_file=self.log_file)
                except Exception as failure:  # noqa: BLE001 - a failed commit is what this arm retries
                    with self.log_file.open(errors="replace") as log:
                        log.seek(logged)
                        self.failures.append(_exception_name(log.read()) or type(failure).__name__)
                    continue
                finally:
                    self.cpu_s += _children_cpu() - before
                self.succeeded += 1
                break


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _exception_name(text: str) -> str | None:
    found = re.search(r"org\.apache\.iceberg\.exceptions\.(\w+)", text) or re.search(
        r"pyspark\.errors\.exceptions\.captured\.(\w+: .{0,120})", text
    )
    return found.group(1) if found else None


def _tree_cpu(pid: int) -> float:
    """CPU seconds of a process and all its descendants, exited ones included (in their parents' children times)."""
    try:
        root = psutil.Process(pid)
        return sum(process_cpu(p) for p in [root, *root.children(recursive=True)])
    except psutil.NoSuchProcess:
        return 0.0


# --- what is measured -------------------------------------------------------------------------------------------


class Sampler:
    """``peer_sampler.py`` on the arm's table, in a Spark application of its own, until :meth:`stop`."""

    def __init__(self, config: TableConfig, every: float, work: Path) -> None:
        self.stop_file = work / "sampler.stop"
        self.now_file = work / "sampler.now"
        self.samples: list[dict[str, Any]] = []

        def keep(line: str) -> None:
            row = parse_result_line(line)
            if row is not None:
                self.samples.append(row)

        args = ["--every", str(every), "--stop-file", str(self.stop_file), "--now-file", str(self.now_file)]
        hook = spark_job_hook(
            config, args, name=f"sampler-{config.table}", gated=False, log_file=work / "sampler.log", on_line=keep
        )
        self.error: BaseException | None = None

        def run() -> None:
            try:
                hook.submit(str(SAMPLER_JOB))
            except BaseException as error:  # noqa: BLE001 - reported by stop()
                self.error = error

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def sample_now(self, timeout: float = 120) -> dict[str, Any]:
        """A sample taken after this call."""
        taken = len(self.samples)
        self.now_file.touch()
        deadline = time.monotonic() + timeout
        while len(self.samples) <= taken:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the sampler took no sample in {timeout} s: {self.error}")
            time.sleep(0.2)
        return self.samples[-1]

    def stop(self) -> list[dict[str, Any]]:
        self.stop_file.touch()
        self.thread.join(timeout=300)
        if self.error is not None:
            raise RuntimeError(f"the sampler failed: {self.error}")
        return self.samples


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def commit_times(job: CdcJob, table: TableName) -> dict[int, float]:
    """When each change the writer emitted was committed (epoch s), by its seq.

    The writer's recorder gives when each subtask emitted each change and when it took each checkpoint's state; a
    change emitted before checkpoint ``c``'s state was taken is in ``c``, and the first snapshot whose summary
    says it committed ``c`` or later holds it.
    """
    iceberg_table = IcebergHook(CATALOG_CONN).load_table(table.in_catalog)
    summaries = [
        (s.summary.additional_properties if s.summary else {}, s.timestamp_ms) for s in iceberg_table.snapshots()
    ]
    commits = sorted((int(p[CHECKPOINT_KEY]), at / 1000) for p, at in summaries if CHECKPOINT_KEY in p)
    if not commits:
        raise RuntimeError(f"{table} has no snapshot of a Flink commit")
    checkpoints = [c for c, _ in commits]
    committed: dict[int, float] = {}
    for events in job.events().values():
        taken = sorted((t, cp) for cp, t in events.snapshots.items())
        taken_at = [t for t, _ in taken]
        for value, emitted in events.emits:
            after = bisect.bisect_right(taken_at, emitted)
            if after == len(taken):
                continue  # emitted after the last checkpoint: committed by none
            first = bisect.bisect_left(checkpoints, taken[after][1])
            if first < len(commits):
                committed[int(value.split(",", 1)[0])] = commits[first][1]
    return committed


def freshness(committed: dict[int, float], stream: ChangeStream) -> tuple[dict[str, float], int]:
    """Each change's freshness, from its hand-over to the producer to its commit: percentiles, and how many."""
    delays = [at - stream.produced_at[seq] for seq, at in committed.items()]
    if not delays:
        raise RuntimeError("no change could be placed in a committed snapshot")
    figures = {"p50": statistics.median(delays), "p95": percentile(delays, 0.95), "max": max(delays)}
    return figures, len(delays)


# --- one arm ------------------------------------------------------------------------------------------------------


def run_arm(
    arm: str,
    load: Load,
    kafka: KafkaBroker,
    config: TableConfig,
    work: Path,
    airflow: Any | None,
    mixed: bool,
    idle_rates: dict[str, float] | None = None,
) -> ArmResult:
    """One arm's run: the stream (and, ``mixed``, the batch writer) into a new table, its maintenance, the figures.
    ``idle_rates``: the live Airflow's CPU per second by component while it had nothing to run (:func:`idle_cpu`)."""
    table = config.table
    result = ArmResult(arm, mixed=mixed)
    drop_table(CATALOG_CONN, table)
    gate = WriteGateHook(config.write_gate_conn_id)
    gate.force_open(table, "make bench-peers recreates the table")
    create_cdc_table(table, buckets=load.buckets, properties=MIXED_TABLE if mixed else None)
    topic = f"peers_{arm.replace('-', '_')}{'_mixed' if mixed else ''}"
    kafka.create_topic(topic, partitions=PARALLELISM)
    job = CdcJob(
        work / "flink",
        kafka=kafka,
        topic=topic,
        table=str(table),
        writer_id=topic,
        parallelism=PARALLELISM,
        gate_conn_id=WriteGateHook.default_conn_name,
        checkpoint_ms=load.checkpoint_ms,
        maintenance=flink_maintenance_schedule(load) if arm == "flink-maintenance" else None,
    )
    stream = ChangeStream(kafka, topic, load.keys, seed=SEED)
    compactor = UngatedCompactor(config, load.interval, work) if arm == "ungated-retry" else None
    airflow_cpu0 = airflow.cpu_by_component() if airflow is not None else {}
    measured_from = time.monotonic()
    task_cpu = TaskCpu(airflow).start() if airflow is not None else None
    batch = (
        BatchChangesJob(
            config,
            work / "batch",
            first_key=load.keys,
            keys=load.batch_keys,
            interval_seconds=load.batch_every,
            # Ours hold the gate for each statement, pausing the stream (GateHolder); the peers have no gate.
            gated=arm == "airflow-iceberg",
            exclusive=arm == "airflow-iceberg",
            writer_id=f"{topic}_batch",
        )
        if mixed
        else None
    )
    job.start()
    if batch is not None:
        batch.start()
    sampler = Sampler(config, load.sample_every, work)
    began = time.time()
    if airflow is not None:
        airflow.api("PATCH", f"dags/{compaction_dag_id(table)}", json={"is_paused": False}).raise_for_status()
    if compactor is not None:
        compactor.start()
    try:
        stream.produce(load.changes // 2, load.rate)
        burst = (time.time(), stream.produced)
        stream.produce(load.burst, rate=1e9)  # as fast as the producer goes: a backlog for the writer
        burst += (stream.produced,)
        stream.produce(load.changes - load.changes // 2, load.rate)
        produced_s = time.time() - began
        wait_for_emitted(job, stream.produced, timeout=600)
        drained_s = time.time() - began
    finally:  # the batch writer and the maintenance stop first: what follows reads the table as it is
        if batch is not None:
            result.batch = batch.stop(timeout=900)
        if compactor is not None:
            compactor.stopping.set()
            compactor.join(timeout=900)
        if airflow is not None:
            pause_when_no_run_pending(airflow, table)
            airflow_cpu = airflow.cpu_by_component()
            measured_s = time.monotonic() - measured_from
        if task_cpu is not None:
            task_cpu.stop()
    try:
        batch_rows = (result.batch.get("rows", 0), result.batch.get("digest", 0))
        result.rows = wait_for_rows(job, sampler, stream, batch_rows, timeout=300)
        writer_cpu = _tree_cpu(job.process.pid)
        writer_ran_through = job.running
    finally:
        samples = sampler.stop()
        job.stop()
        leave_the_gate(gate, table, job.writer_ids)
    result.samples = [{**s, "t": s["at"] - began} for s in samples]
    committed = commit_times(job, table)
    result.freshness_s, placed = freshness(committed, stream)
    emits = [seq for events in job.events().values() for seq, _ in events.emits]
    result.stream = {"lost": stream.produced - placed, "repeated": len(emits) - len(set(emits))}
    result.throughput = {
        "changes": stream.produced,
        "produced_per_s": stream.produced / produced_s,
        "emitted_per_s": stream.produced / drained_s,
        "under_backpressure_per_s": load.burst / (max(committed[seq] for seq in range(*burst[1:])) - burst[0]),
        "placed": placed,
    }
    result.cpu_s = {"writer_jvm": writer_cpu}
    if compactor is not None:
        result.cpu_s["maintenance"] = compactor.cpu_s
        result.commits = {
            "rewrite_attempts": compactor.attempts,
            "rewrite_failed": len(compactor.failures),
            "rewrites_done": compactor.succeeded,
        }
        result.notes += [f"rewrite failed: {name}" for name in sorted(set(compactor.failures))]
    if airflow is not None:
        result.cpu_s["maintenance"] = sum(airflow_cpu.values()) - sum(airflow_cpu0.values())
        result.cpu_s.update({f"airflow_{k}": airflow_cpu[k] - airflow_cpu0.get(k, 0.0) for k in airflow_cpu})
        records = [r for r in gate.records.run_records(str(table)) if r["started_at"].timestamp() >= began - 60]
        result.commits = {
            "rewrite_runs": len(records),
            "rewrite_failed": sum(1 for r in records if r["outcome"] not in ("success", "skipped")),
        }
        result.pauses_s = pauses(gate, table, since=began - 60)
        result.stream_paused_s = stream_pauses(records, set(job.writer_ids))
        if batch is not None:
            result.holds = holds(gate, table, batch.writer_id, since=began - 60)
        result.pause_split_s = pause_split(airflow, table, since=began - 60)
        assert task_cpu is not None
        result.cpu_split_s = cpu_split(task_cpu, airflow_cpu0, airflow_cpu, len(records))
        result.cpu_split_s["idle_airflow"] = idle_airflow_share(idle_rates or {}, measured_s)
        result.compactions_t = sorted(
            r["finished_at"].timestamp() - began for r in records if r["outcome"] == "success" and r["finished_at"]
        )
    # With no restarts, a commit the writer could not make ends its job; Iceberg's failures in a job that ran
    # through are its maintenance tasks' (arm 2).
    failures = ICEBERG_COMMIT_FAILURE.findall(job.log())
    result.commits["writer_failed"] = 0 if writer_ran_through else max(1, len(failures))
    if not writer_ran_through:
        result.notes.append(f"the writer's job ended early: {sorted(set(failures)) or 'see its log'}")
    elif arm == "flink-maintenance":
        result.commits["rewrite_failed"] = len(failures)
        result.notes += [f"maintenance task failed: {name.rsplit('.', 1)[-1]}" for name in sorted(set(failures))]
    result.commits.update(commit_counts(table))
    return result


def leave_the_gate(gate: WriteGateHook, table: TableName, writer_ids: set[str]) -> None:
    """The stopped job's writers leave the gate, as a job that ends cleanly does: the next run's closings (its
    batch job's holds) need not wait for them to be gone."""
    for writer_id in writer_ids:
        client = WriteGateClient.connect(str(table), writer_id=writer_id, **gate.connection_settings())
        try:
            client.leave()
        finally:
            client.close()


def wait_for_emitted(job: CdcJob, produced: int, timeout: float) -> None:
    """Until the writer's source has emitted every change (it waits while a gate is closed)."""
    deadline = time.monotonic() + timeout
    while job.emitted() < produced:
        if not job.running:
            raise RuntimeError(f"the writer's job ended:\n{job.log()[-3000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the writer emitted {job.emitted()} of {produced} changes in {timeout} s")
        time.sleep(2)


def wait_for_rows(
    job: CdcJob, sampler: Sampler, stream: ChangeStream, batch: tuple[int, int], timeout: float
) -> dict[str, Any]:
    """The rows at the end against the expected state (the stream's, and ``batch``'s rows and digest), once they
    match or ``timeout`` has passed (the writer's last checkpoint may still be committing)."""
    expected = {"row_count": len(stream.expected) + batch[0], "digest": stream.digest() + batch[1]}
    deadline = time.monotonic() + timeout
    while True:
        sample = sampler.sample_now()
        found = {"row_count": sample["row_count"], "digest": sample["digest"] or 0}
        if found == expected or not job.running or time.monotonic() > deadline:
            return {"expected": expected, "found": found, "exact": found == expected}
        time.sleep(2)


def commit_counts(table: TableName) -> dict[str, int]:
    """The table's snapshots by operation: the writer's commits and the rewrites'."""
    iceberg_table = IcebergHook(CATALOG_CONN).load_table(table.in_catalog)
    counts: dict[str, int] = {}
    for snapshot in iceberg_table.snapshots():
        operation = snapshot.summary.operation.value if snapshot.summary is not None else "unknown"
        counts[f"snapshots_{operation}"] = counts.get(f"snapshots_{operation}", 0) + 1
    return counts


def pauses(gate: WriteGateHook, table: TableName, since: float) -> list[float]:
    """How long each gated compaction since ``since`` kept the gate closed, from its audit rows."""
    closed: float | None = None
    found = []
    for row in gate.audit_trail(str(table)):
        at = row["at"].timestamp()
        if at < since:
            continue
        if row["action"] == "close":
            closed = at
        elif row["action"] in ("open", "force_open") and closed is not None:
            found.append(at - closed)
            closed = None
    return found


def stream_pauses(records: list[dict[str, Any]], stream: set[str]) -> list[float]:
    """How long each gated compaction paused the stream: its gate's closed seconds where its closing paused one of
    the stream's writers (its run record's ``writers``), 0 where the closing let them keep committing."""
    paused = []
    for record in records:
        if record["outcome"] != "success" or not record.get("writers"):
            continue
        decided = {w["writer"]: w["pause"] for w in json.loads(record["writers"])}
        seconds = record["gate_closed_seconds"] or 0.0
        paused.append(seconds if any(decided.get(w) for w in stream) else 0.0)
    return paused


def holds(gate: WriteGateHook, table: TableName, holder: str, since: float) -> list[dict[str, Any]]:
    """Each hold of the gate by the batch job ``holder`` (its ``GateHolder``) since ``since``: how long it held it,
    and whether its closing paused the stream (the close's audit row sums up who paused)."""
    found, closing = [], None
    for row in gate.audit_trail(str(table)):
        if row["owner_dag_id"] != holder or row["at"].timestamp() < since:
            continue
        if row["action"] == "close":
            closing = row
        elif row["action"] == "open" and closing is not None:
            paused = not (closing["detail"] or "").startswith("no writer must pause")
            found.append({"seconds": (row["at"] - closing["at"]).total_seconds(), "paused_stream": paused})
            closing = None
    return found


PAUSE_TASKS = ("close_gate", "wait_until_snapshot_idle", REWRITE_TASK_ID, "open_gate")


def pause_split(airflow: Any, table: TableName, since: float) -> dict[str, float]:
    """Where the pauses went, from Airflow's task instances of each run that rewrote: the median seconds the
    writers took to go idle (the sensor), the Spark application took (``rewrite_files``, spark-submit's JVM
    start-up included), and Airflow took between the gate's tasks (scheduling and each task's start-up)."""
    rows = airflow.query(
        "SELECT run_id, task_id, start_date, end_date FROM task_instance WHERE dag_id = %s AND task_id = ANY(%s) "
        "AND start_date >= to_timestamp(%s)",
        compaction_dag_id(table),
        list(PAUSE_TASKS),
        since,
    )
    runs: dict[str, dict[str, tuple[float, float]]] = {}
    for run_id, task_id, start, end in rows:
        if start is not None and end is not None:
            runs.setdefault(run_id, {})[task_id] = (start.timestamp(), end.timestamp())
    split: dict[str, list[float]] = {"idle": [], "spark": [], "between_tasks": [], "gate_tasks": []}
    for tasks in runs.values():
        if set(tasks) != set(PAUSE_TASKS):
            continue  # a run that planned nothing, or did not get as far
        spans = [tasks[t] for t in PAUSE_TASKS]
        split["idle"].append(spans[1][1] - spans[1][0])
        split["spark"].append(spans[2][1] - spans[2][0])
        split["gate_tasks"].append((spans[0][1] - spans[0][0]) + (spans[3][1] - spans[3][0]))
        split["between_tasks"].append(sum(later[0] - earlier[1] for earlier, later in itertools.pairwise(spans)))
    return {k: statistics.median(v) for k, v in split.items() if v} | {"runs": len(split["idle"])}


def cpu_split(task_cpu: TaskCpu, before: dict[str, float], after: dict[str, float], runs: int) -> dict[str, Any]:
    """Arm 1's maintenance CPU, split: each task of the compaction DAG (and any other DAG's task) over every run and
    try, the LocalExecutor's workers while idle, and each of Airflow's components beyond its workers."""
    used = {name: after[name] - before.get(name, 0.0) for name in after}
    tasks = task_cpu.by_task()
    workers = sum(t.cpu_seconds for t in tasks) + task_cpu.idle_workers_seconds
    # The workers are the scheduler's children: what is left of its CPU is its own loop's.
    airflow_own = {name: cpu for name, cpu in used.items() if name != "scheduler"}
    airflow_own["scheduler (beyond its workers)"] = used.get("scheduler", 0.0) - workers
    return {
        "runs": runs,
        "tasks": {
            (t.task_id if t.dag_id.startswith("iceberg_compact__") else f"{t.dag_id}.{t.task_id}"): {
                "cpu_s": t.cpu_seconds,
                "workloads": t.workloads,
            }
            for t in tasks
        },
        "idle_workers": round(task_cpu.idle_workers_seconds, 2),
        "airflow": {name: round(cpu, 2) for name, cpu in airflow_own.items()},
        "total": round(sum(used.values()), 2),
    }


#: How long the bench watches its live Airflow with nothing to run (every DAG paused), before arm 1.
IDLE_WINDOW_SECONDS = 60.0
#: The components an Airflow pays for whether or not it runs our DAGs: its scheduler's loop (with its idle
#: workers), its API server and ``standalone`` itself. The dag-processor (it parses our DAG files) and the
#: triggerer (it runs our health watch) are not among them: they stay ours in full.
IDLE_COMPONENTS = ("scheduler", "api-server", "standalone")


def idle_cpu(airflow: Any, seconds: float = IDLE_WINDOW_SECONDS) -> dict[str, float]:
    """CPU seconds per second of each of ``IDLE_COMPONENTS`` while ``airflow`` has nothing to run, over ``seconds``."""
    before, started = airflow.cpu_by_component(), time.monotonic()
    time.sleep(seconds)  # a measurement window, not a wait for a condition
    after, took = airflow.cpu_by_component(), time.monotonic() - started
    return {name: (after.get(name, 0.0) - before.get(name, 0.0)) / took for name in IDLE_COMPONENTS}


def idle_airflow_share(rates: dict[str, float], seconds: float) -> dict[str, float]:
    """What an idle Airflow's ``IDLE_COMPONENTS`` would have used over an arm of ``seconds``: the part of our
    maintenance CPU that users of an Airflow they already run pay anyway."""
    return {name: round(rate * seconds, 2) for name, rate in rates.items()}


def pause_when_no_run_pending(airflow: Any, table: TableName, timeout: float = 600) -> None:
    """Pause the table's compaction DAG once no run of it is queued or running. The scheduler schedules no task of
    a paused DAG, so a run the watch started just before the pause would wait for ever: the DAG is unpaused again
    until that run has ended."""
    dag_id = compaction_dag_id(table)

    def pending() -> bool:
        sql = "SELECT 1 FROM dag_run WHERE dag_id = %s AND state IN ('queued', 'running')"
        return bool(airflow.query(sql, dag_id))

    deadline = time.monotonic() + timeout
    while True:
        airflow.wait_for(f"no run of {dag_id} pending", lambda: not pending(), max(1.0, deadline - time.monotonic()))
        airflow.api("PATCH", f"dags/{dag_id}", json={"is_paused": True}).raise_for_status()
        if not pending():
            return
        airflow.api("PATCH", f"dags/{dag_id}", json={"is_paused": False}).raise_for_status()


# --- the report ---------------------------------------------------------------------------------------------------


def report(results: list[ArmResult], load: Load) -> None:
    cdc_only = [r for r in results if not r.mixed]
    if cdc_only:
        report_runs(cdc_only, load)
    mixed = [r for r in results if r.mixed]
    if mixed:
        print()
        print(
            f"with batch writers: a DELETE by a non-key condition and a MERGE in turns, every {load.batch_every:g} s, "
            f"on {load.batch_keys} keys of their own; ours hold the gate per statement, the peers' retry a failed one"
        )
        print(
            "| arm | statements | failed attempts (retried) | lost statements | failed rewrites | writer's failed "
            "commits | stream changes lost / repeated | rows exact |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---|")
        for r in mixed:
            b = r.batch
            print(
                f"| {r.arm} | {b.get('statements')} | {b.get('failed_attempts')} | {b.get('lost')} | "
                f"{r.commits.get('rewrite_failed', 0)} | {r.commits.get('writer_failed', 0)} | "
                f"{r.stream.get('lost')} / {r.stream.get('repeated')} | "
                f"{'yes' if r.rows.get('exact') else 'NO: ' + json.dumps(r.rows)} |"
            )
        for r in mixed:
            for failure in sorted({f[:160] for f in r.batch.get("failures", [])}):
                print(f"- {r.arm}, batch writer retried: {failure}")
        for r in mixed:
            if not r.holds:
                continue
            pausing = [h["seconds"] for h in r.holds if h["paused_stream"]]
            free = [h["seconds"] for h in r.holds if not h["paused_stream"]]
            print(
                f"- {r.arm}: its batch job held the gate {len(r.holds)} times: {len(pausing)} paused the stream "
                f"(its INSERT and each MERGE, serializable; median {statistics.median(pausing) if pausing else 0:.1f}"
                f" s), {len(free)} let it keep committing (each merge-on-read DELETE under snapshot isolation; median "
                f"{statistics.median(free) if free else 0:.1f} s)"
            )
        report_runs(mixed, load)


def report_runs(results: list[ArmResult], load: Load) -> None:
    print()
    print(
        f"one CDC stream per arm: {load.changes} changes to {load.keys} keys at {load.rate}/s for {load.seconds} s "
        f"and a burst of {load.burst} halfway, {load.buckets} buckets, a Flink checkpoint every "
        f"{load.checkpoint_ms / 1000:g} s, {PARALLELISM} writer subtasks; samples every {load.sample_every:g} s"
    )
    print(
        "| arm | freshness p50 / p95 / max, s | gate closed, s | stream paused, s | changes/s: sustained, under "
        "backpressure | failed commits w / r | CPU s: writer, maintenance | rows exact |"
    )
    print("|---|---|---|---|---|---|---|---|")
    baseline = next((r for r in results if r.arm == "none"), None)
    for r in results:
        f = r.freshness_s
        paused = ", ".join(f"{p:.1f}" for p in r.pauses_s) or "-"
        stream_paused = ", ".join(f"{p:.1f}" for p in r.stream_paused_s) or "-"
        maintenance_cpu = r.cpu_s.get("maintenance")
        if r.arm == "flink-maintenance" and baseline is not None:  # in the writer's JVM: what it costs beyond none's
            maintenance_cpu = r.cpu_s["maintenance"] = r.cpu_s["writer_jvm"] - baseline.cpu_s["writer_jvm"]
        print(
            f"| {r.arm} | {f['p50']:.1f} / {f['p95']:.1f} / {f['max']:.1f} | {paused} | {stream_paused} | "
            f"{r.throughput['emitted_per_s']:.0f}, {r.throughput['under_backpressure_per_s']:.0f} | "
            f"{r.commits.get('writer_failed', 0)} / "
            f"{r.commits.get('rewrite_failed', 0)} | {r.cpu_s['writer_jvm']:.0f}, "
            f"{'-' if maintenance_cpu is None else f'{maintenance_cpu:.0f}'} | "
            f"{'yes' if r.rows.get('exact') else 'NO: ' + json.dumps(r.rows)} |"
        )
    print()
    print("sampled at the same offsets from each arm's start (files: data / equality-delete / position-delete; scan s)")
    offsets = sorted({round(s["t"] / load.sample_every) for r in results for s in r.samples})
    print("| t, s | " + " | ".join(r.arm for r in results) + " |")
    print("|---:|" + "---|" * len(results))
    for slot in offsets:
        cells = []
        for r in results:
            near = [s for s in r.samples if round(s["t"] / load.sample_every) == slot]
            s = near[0] if near else None
            files = "-" if s is None else f"{s['data_files']} / {s['equality_delete_files']} / "
            cells.append("-" if s is None else f"{files}{s['position_delete_files']}; {s['scan_s']:.2f}")
        print(f"| {slot * load.sample_every:.0f} | " + " | ".join(cells) + " |")
    for r in results:
        for note in r.notes:
            print(f"- {r.arm}: {note}")
    compare_from_second_compaction(results, load)
    ours = next((r for r in results if r.arm == "airflow-iceberg"), None)
    if ours is not None and baseline is not None:
        gap = ours.freshness_s["p95"] - baseline.freshness_s["p95"]
        print(
            f"- freshness p95 against none's: airflow-iceberg {ours.freshness_s['p95']:.1f} s, none "
            f"{baseline.freshness_s['p95']:.1f} s: {gap:+.1f} s, {'within' if gap <= 1.0 else 'OVER'} 1 s"
        )
        pause = max(ours.pauses_s, default=0.0)
        bound = baseline.freshness_s["p95"] + load.checkpoint_ms / 1000 + pause
        print(
            f"- freshness p95: airflow-iceberg {ours.freshness_s['p95']:.1f} s; "
            f"none's {baseline.freshness_s['p95']:.1f} s + one commit interval {load.checkpoint_ms / 1000:g} s "
            f"+ the longest pause {pause:.1f} s = "
            f"{bound:.1f} s: {'within' if ours.freshness_s['p95'] <= bound else 'OVER'}"
        )
    if ours is not None and ours.cpu_split_s:
        report_cpu_split(ours, next((r for r in results if r.arm == "ungated-retry"), None))
    if ours is not None and ours.pause_split_s.get("runs"):
        split = ours.pause_split_s
        print(
            f"- airflow-iceberg's pauses, medians of {split['runs']:.0f} rewriting runs: writers idle "
            f"{split['idle']:.1f} s, Spark application {split['spark']:.1f} s, close_gate and open_gate "
            f"{split['gate_tasks']:.1f} s, Airflow between those tasks {split['between_tasks']:.1f} s"
        )


def report_cpu_split(ours: ArmResult, ungated: ArmResult | None) -> None:
    """Where airflow-iceberg's maintenance CPU went, beside ungated-retry's total."""
    split = ours.cpu_split_s
    runs = max(int(split["runs"]), 1)
    print(f"- airflow-iceberg's maintenance CPU, {split['total']:.1f} s over {split['runs']} runs, by where it went:")
    print("| where | CPU s | per run | worker slots |")
    print("|---|---:|---:|---:|")
    for task_id, cost in split["tasks"].items():
        print(f"| task {task_id} | {cost['cpu_s']:.1f} | {cost['cpu_s'] / runs:.1f} | {cost['workloads']} |")
    print(f"| LocalExecutor workers, idle | {split['idle_workers']:.1f} | | |")
    for name, cpu in split["airflow"].items():
        print(f"| Airflow: {name} | {cpu:.1f} | | |")
    idle = split.get("idle_airflow") or {}
    beyond = split["total"] - sum(idle.values())
    if idle:
        print(
            f"- of it, an idle Airflow's own ({', '.join(f'{k} {v:.1f}' for k, v in idle.items())}, measured with "
            f"nothing to run for {IDLE_WINDOW_SECONDS:.0f} s before the arm): {sum(idle.values()):.1f} s; beyond "
            f"the Airflow users already run: {beyond:.1f} s"
        )
    if ungated is not None and "maintenance" in ungated.cpu_s:
        theirs = ungated.cpu_s["maintenance"]
        verdict = "at most" if split["total"] <= theirs else "OVER"
        print(
            f"- maintenance CPU: airflow-iceberg {split['total']:.1f} s, ungated-retry {theirs:.1f} s in the same "
            f"run ({ungated.commits.get('rewrites_done', 0)} rewrites): {verdict} ungated-retry's"
        )
        if idle:
            verdict = "at most" if beyond <= theirs else "OVER"
            print(f"- beyond an idle Airflow: airflow-iceberg {beyond:.1f} s, {verdict} ungated-retry's {theirs:.1f} s")
        spark = split["tasks"].get(REWRITE_TASK_ID, {}).get("cpu_s")
        if spark is not None:
            print(
                f"- the rewrites' Spark applications alone: airflow-iceberg {spark:.1f} s, ungated-retry {theirs:.1f} s"
            )


def compare_from_second_compaction(results: list[ArmResult], load: Load) -> None:
    """Whether ours has at most every other arm's files and full-scan time at each sample after its second
    compaction, and where not, by how much."""
    ours = next((r for r in results if r.arm == "airflow-iceberg"), None)
    if ours is None or len(ours.compactions_t) < 2:
        print(f"- airflow-iceberg: {len(ours.compactions_t) if ours else 0} compactions; no comparison from a second")
        return
    since = ours.compactions_t[1]

    def slot(sample: dict[str, Any]) -> int:
        return round(sample["t"] / load.sample_every)

    def files(sample: dict[str, Any]) -> int:
        return sample["data_files"] + sample["equality_delete_files"] + sample["position_delete_files"]

    compared, worse = 0, []
    first_in_slot = {slot(s): s for s in reversed(ours.samples)}  # one sample per slot, as the table shows
    for mine in sorted((s for s in first_in_slot.values() if s["t"] >= since), key=lambda s: s["t"]):
        for other in (r for r in results if r is not ours):
            theirs = next((s for s in other.samples if slot(s) == slot(mine)), None)
            if theirs is None:
                continue
            compared += 1
            if files(mine) > files(theirs) or mine["scan_s"] > theirs["scan_s"]:
                worse.append(
                    f"t={slot(mine) * load.sample_every:.0f} s against {other.arm}: files {files(mine)} vs "
                    f"{files(theirs)}, scan {mine['scan_s']:.2f} vs {theirs['scan_s']:.2f} s"
                )
    print(
        f"- from airflow-iceberg's second compaction (t={since:.0f} s): at most the files and the scan time of the "
        f"other arm in {compared - len(worse)} of {compared} samples"
    )
    for line in worse:
        print(f"    more: {line}")


def charts(results: list[ArmResult], out: Path, prefix: str) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    written = []
    for measure, label in MEASURES.items():
        figure, axes = pyplot.subplots(figsize=(8, 4))
        for r in results:
            axes.plot([s["t"] for s in r.samples], [s[measure] for s in r.samples], marker="o", label=r.arm)
        axes.set_xlabel("seconds since the arm's stream started")
        axes.set_ylabel(label)
        axes.legend()
        axes.grid(alpha=0.3)
        path = out / f"{prefix}-{measure.replace('_', '-')}.png"
        figure.savefig(path, dpi=100, bbox_inches="tight")
        pyplot.close(figure)
        written.append(path)
    return written


# --- main ---------------------------------------------------------------------------------------------------------


def table_configs(work: Path) -> dict[str, TableConfig]:
    """Each arm's table, with the shipped demo's Spark settings (on a stack besides the default, that stack's
    jars); arm 1's watched by health with our defaults, but a cool-down of one minute and a sweep every 15 s, so
    that a run of minutes sees several compactions."""
    settings = bench_settings()
    stack = stacks.current()
    if stack.name != stacks.load().default:
        jars = [str(Path(os.environ["AIRFLOW_ICEBERG_JARS"]) / name) for name in stack.spark_jar_files]
        settings["spark"] = {**settings["spark"], "packages": [], "jars": jars}
    entries = []
    for arm in ARMS:
        entry = {**settings, "table": f"lake.{NAMESPACE}.{arm.replace('-', '_')}"}
        if arm == "airflow-iceberg":
            entry["health"] = {**settings["health"], "watch": True, "poll_interval": 15, "cooldown_minutes": 1}
        entries.append(entry)
    path = work / "iceberg_tables.yaml"
    path.write_text(yaml.safe_dump({"tables": entries}))
    os.environ["AIRFLOW_ICEBERG_CONFIG"] = str(path)
    configs = {c.table: c for c in load_table_list(path).tables}
    return {arm: configs[TableName.parse(f"lake.{NAMESPACE}.{arm.replace('-', '_')}")] for arm in ARMS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short streams: under 15 minutes in all")
    parser.add_argument("--arms", default=",".join(ARMS), help=f"which of {', '.join(ARMS)}")
    parser.add_argument("--no-mixed", action="store_true", help="without the mixed-writer runs")
    parser.add_argument("--out", type=Path, default=Path("build/bench-peers"), help="peers.json and the charts")
    parser.add_argument("--stack", help="the stack of requirements/stacks.toml to run on (default: the environment's)")
    args = parser.parse_args(argv)
    if args.stack and args.stack != stacks.current().name:
        return on_stack(stacks.load()[args.stack].name, argv if argv is not None else sys.argv[1:])
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        parser.error(f"unknown arm {unknown[0]!r}; the arms are {', '.join(ARMS)}")
    stack = stacks.current()
    if "flink-maintenance" in arms and IcebergVersion.parse(stack.iceberg_flink) < TABLE_MAINTENANCE:
        print(
            f"==> stack {stack.name}: Iceberg {stack.iceberg_flink} in Flink has no TableMaintenance (Iceberg "
            f"{TABLE_MAINTENANCE} and later): no flink-maintenance arm"
        )
        arms.remove("flink-maintenance")
    print(f"==> stack {stack.name}: {stack.summary}", flush=True)
    load = QUICK if args.quick else FULL
    # Arm 1's two runs first, one after the other, on one live Airflow, stopped before the other arms run.
    runs = [(arm, mixed) for arm in ARMS if arm in arms for mixed in (False, True) if not mixed or arm != "none"]
    runs = [(arm, mixed) for arm, mixed in runs if not (mixed and args.no_mixed)]
    logging.getLogger("pyiceberg.catalog.sql").setLevel(logging.ERROR)
    work = Path(tempfile.mkdtemp(prefix="airflow-iceberg-bench-peers-"))
    configs = table_configs(work)
    IcebergHook(CATALOG_CONN).catalog.create_namespace_if_not_exists(NAMESPACE)
    results = []
    with KafkaBroker(work / "kafka") as kafka, contextlib.ExitStack() as airflow_running:
        airflow, idle_rates = None, None
        for arm, mixed in runs:
            label = f"{arm}{' with batch writers' if mixed else ''}"
            print(f"==> {label}: {load.changes} changes at {load.rate}/s for {load.seconds} s", flush=True)
            run_work = work / f"{arm}{'-mixed' if mixed else ''}"
            run_work.mkdir()
            if arm == "airflow-iceberg" and airflow is None:
                airflow = airflow_running.enter_context(live_airflow(work, configs[arm]))
                idle_rates = idle_cpu(airflow)
            elif arm != "airflow-iceberg" and airflow is not None:
                airflow_running.close()
                airflow = None
            started = time.monotonic()
            results.append(run_arm(arm, load, kafka, configs[arm], run_work, airflow, mixed, idle_rates))
            print(f"    done in {time.monotonic() - started:.0f} s", flush=True)
    report(results, load)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "peers.json").write_text(
        json.dumps({"load": asdict(load), "runs": [asdict(r) for r in results]}, indent=1, default=str)
    )
    for mixed in (False, True):
        shown = [r for r in results if r.mixed == mixed]
        for path in charts(shown, args.out, "peers-mixed" if mixed else "peers") if shown else []:
            print(f"chart: {path}")
    print(f"(work files, Flink, Spark and Airflow logs: {work})")
    return 0


def on_stack(name: str, argv: list[str]) -> int:
    """This bench again, with ``argv``, in the environments of stack ``name`` (``scripts/env.sh`` reads it)."""
    command = ["bash", "-c", 'source scripts/env.sh && exec "$@"', "--", sys.executable, "-m", "devkit.bench_peers"]
    env = {**os.environ, stacks.STACK_ENV: name}
    return subprocess.run([*command, *argv], cwd=Path(__file__).resolve().parents[1], env=env, check=False).returncode


@contextlib.contextmanager
def live_airflow(work: Path, config: TableConfig) -> Iterator[Any]:
    """``airflow standalone`` for arm 1 on the bench's table list; every DAG starts paused, each run unpauses its
    table's compaction DAG while it streams."""
    from devkit.live_airflow import dags_parsed, running

    dag_id = compaction_dag_id(config.table)
    with running(
        work / "airflow",
        Path(os.environ["AIRFLOW_ICEBERG_CONFIG"]),
        ready=(f"{dag_id} parsed", dags_parsed(dag_id), 600),
        meta_db="airflow_iceberg_bench_peers",
        settings={"AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True"},
    ) as airflow:
        yield airflow


if __name__ == "__main__":
    sys.exit(main())
