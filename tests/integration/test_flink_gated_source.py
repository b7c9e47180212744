"""The gated Flink source on a local mini-cluster, against a real gate that ``WriteGateHook`` closes and opens.

The job (``flink/src/test/.../GatedSequenceJob.java``, run by ``devkit.flink_jobs``) runs in a JVM of its own:
the numbers ``0 .. COUNT-1`` from a rate-limited bounded sequence source wrapped in ``GatedSource``, two
subtasks (two writers at the gate), checkpointing every second, into Flink's ``FileSink`` (exactly once). Its
``EventRecorder``, chained to the source, writes per subtask when each record was emitted and when each
checkpoint's state was taken and when it completed. Those times come from the system clock, the one MySQL's
``NOW(6)`` reads for the gate's times, so the two are compared directly.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from airflow_iceberg.core.gate_state import GateOwner
from airflow_iceberg.hooks.write_gate import WriteGateHook
from devkit.flink_jobs import FlinkJob, subtask_writer_ids, wait_for_acknowledgements
from devkit.private_mariadb import PrivateMariaDB

JOB_CLASS = "airflowiceberg.flink.testjob.GatedSequenceJob"
OWNER = GateOwner("iceberg_compact__lake__flink__numbers", "manual__flink_gated_source")

COUNT = 600
RATE = 60  # records per second, both subtasks together: 10 s of emitting without a pause
PARALLELISM = 2
SNAPSHOT_ID = 4242  # what the job's SnapshotIdSupplier reports as the table's current snapshot
POKE_SECONDS = 0.25  # how often each subtask reads the gate
#: How long after the gate closes a subtask may still emit, and how soon after it opens (or its lease ends) it
#: must emit again: its next look at the gate, one poke interval, plus 0.5 s for the gate thread and the task
#: thread to be scheduled on a busy 2-core machine.
EMIT_SLACK = POKE_SECONDS + 0.5
#: The source's own clock (monotonic) and the system clock may drift apart a little over the lease.
CLOCK_TOLERANCE = 0.02
OUTAGE_LEASE_SECONDS = 20


class SequenceJob(FlinkJob):
    """``GatedSequenceJob``: the numbers ``0 .. COUNT-1`` through the gate into a ``FileSink`` under ``workdir/out``."""

    def __init__(
        self, workdir: Path, *, gate_url: str, table: str, writer_id: str, user: str = "root", password: str = ""
    ) -> None:
        self.out = workdir / "out"
        options = {
            "gate-url": gate_url,
            "gate-user": user,
            "table": table,
            "writer-id": writer_id,
            "count": COUNT,
            "rate": RATE,
            "parallelism": PARALLELISM,
            "poke-ms": int(POKE_SECONDS * 1000),
            "snapshot-id": SNAPSHOT_ID,
            "out": self.out,
        }
        super().__init__(
            workdir,
            JOB_CLASS,
            options,
            writer_ids=subtask_writer_ids(writer_id, PARALLELISM),
            env={"AIRFLOW_ICEBERG_GATE_PASSWORD": password},
        )
        self.writer_id = writer_id

    def start(self) -> None:
        self.out.mkdir(parents=True)
        super().start()

    def output(self) -> list[int]:
        """Every number in the sink's finished files (in-progress and pending files are hidden, ``.part-*``)."""
        return [int(line) for path in self.out.glob("part-*") for line in path.read_text().split()]


@pytest.fixture
def flink_job(tmp_path: Path, unique_name: str) -> Iterator[Callable[..., SequenceJob]]:
    """Make the test's Flink job (not started); any still running at the end of the test is stopped."""
    jobs: list[SequenceJob] = []

    def make(*, gate_url: str, table: str, user: str = "root", password: str = "") -> SequenceJob:
        job = SequenceJob(
            tmp_path / f"job{len(jobs)}",
            gate_url=gate_url,
            table=table,
            writer_id=unique_name,
            user=user,
            password=password,
        )
        jobs.append(job)
        return job

    yield make
    for job in jobs:
        job.stop()


def jdbc_url(hook: WriteGateHook) -> str:
    connection = hook.get_connection(hook.write_gate_conn_id)
    return f"jdbc:mariadb://{connection.host}:{connection.port}/{connection.schema}"


def test_gated_source_pauses_keeps_checkpointing_acknowledges_and_writes_every_number_once(
    gate_hook, gate_table, flink_job
):
    writer = WriteGateHook("write_gate_writer").connection_settings()  # a writer's grants, nothing more
    job = flink_job(gate_url=jdbc_url(gate_hook), table=gate_table, user=writer["user"], password=writer["password"])
    job.start()
    job.wait_for(lambda: job.emitted() >= 40, "records emitted", timeout=120)
    closed_at = gate_hook.close_gate(gate_table, OWNER, lease_seconds=300).closed_at.timestamp()
    acks = wait_for_acknowledgements(gate_hook, gate_table, job)
    last_ack = max(ack.ack_at.timestamp() for ack in acks.values())
    job.wait_for(
        lambda: all(len(e.completions_between(last_ack, float("inf"))) >= 3 for e in job.events().values()),
        "three more completed checkpoints per subtask after the acknowledgements",
        timeout=60,
    )
    _, after = gate_hook.open_gate(gate_table, OWNER)
    opened_at = after.opened_at.timestamp()
    job.wait_until_finished(timeout=120)

    events = job.events()
    assert sorted(events) == list(range(PARALLELISM))
    print(f"gate closed for {opened_at - closed_at:.2f} s; times below are seconds after the closing")
    for subtask, e in events.items():
        # The pause's checkpoints: those taken after the subtask's last record before the opening.
        last_emit = max(e.emit_times(end=opened_at))
        pause = sorted(cp for cp, t in e.snapshots.items() if last_emit < t < opened_at)
        ack = acks[f"{job.writer_id}#{subtask}"]
        resumed = min(e.emit_times(start=opened_at))
        completed = [round(e.completions[cp] - closed_at, 3) for cp in pause if cp in e.completions]
        print(
            f"subtask {subtask}: last record {last_emit - closed_at:.3f}, next {resumed - closed_at:.3f}; pause "
            f"checkpoints {pause} completed at {completed}; acknowledged at {ack.ack_at.timestamp() - closed_at:.3f} "
            f"with snapshot {ack.ack_snapshot_id}"
        )
        # No record while the gate is closed; records before it closed and after it opened.
        assert e.emit_times(closed_at + EMIT_SLACK, opened_at) == [], f"subtask {subtask} emitted while closed"
        assert e.emit_times(end=closed_at) and e.emit_times(start=opened_at), "the pause was not mid-job"
        assert min(e.emit_times(start=opened_at)) - opened_at <= EMIT_SLACK, "slow to resume after the opening"
        # Checkpoints go on: every checkpoint of the pause completed, none was declined or skipped.
        assert len(pause) >= 4 and pause == list(range(pause[0], pause[-1] + 1))
        assert all(cp in e.completions for cp in pause), f"subtask {subtask}: a pause checkpoint did not complete"
        # The acknowledgement follows the second one's completion. The source counts from the first checkpoint
        # it takes while it knows the gate is closed, which can be the next one if the gate closed between a
        # checkpoint and the task thread's next look at the cached verdict: so it comes before the fourth's.
        assert ack.ack_snapshot_id == SNAPSHOT_ID
        assert e.completions[pause[1]] <= ack.ack_at.timestamp() < e.completions[pause[3]], (
            f"subtask {subtask} acknowledged at {ack.ack_at.timestamp()}; pause checkpoints {pause} completed at "
            f"{[e.completions.get(cp) for cp in pause]}"
        )
    output = job.output()
    assert sorted(output) == list(range(COUNT)), f"{len(output)} records, {len(set(output))} distinct"
    # Their input ended: the writers left, and compactions no longer wait for them.
    writers = {w.writer_id: w for w in gate_hook.get_state(gate_table).writers}
    assert set(writers) == job.writer_ids and all(w.seen_at is None for w in writers.values())


def test_during_a_mysql_outage_the_gated_source_resumes_when_the_lease_ends_not_before(
    tmp_path, unique_name, flink_job
):
    with PrivateMariaDB(tmp_path / "mariadb") as mysql:
        hook = WriteGateHook(mysql.gate_connection("gate"))
        table = f"lake.flink.{unique_name}"
        job = flink_job(gate_url=mysql.jdbc_url("gate"), table=table, password=mysql.password)
        job.start()
        job.wait_for(lambda: job.emitted() >= 40, "records emitted", timeout=120)
        closed = hook.close_gate(table, OWNER, lease_seconds=OUTAGE_LEASE_SECONDS)
        closed_at, lease_ends = closed.closed_at.timestamp(), closed.lease_expires_at.timestamp()
        wait_for_acknowledgements(hook, table, job)  # both subtasks have read the closed gate
        mysql.stop()
        down_at = time.time()
        assert down_at < lease_ends - 5, "MySQL went down too late in the lease for the outage to show anything"
        job.wait_for(
            lambda: all(e.emit_times(start=lease_ends) for e in job.events().values()),
            "records from each subtask after the lease ended, MySQL still down",
            timeout=lease_ends - time.time() + 30,
        )
        job.wait_until_finished(timeout=120)
        assert not mysql.running

    events = job.events()
    assert sorted(events) == list(range(PARALLELISM))
    print(f"lease of {OUTAGE_LEASE_SECONDS} s; MySQL down {down_at - closed_at:.2f} s after the closing")
    for subtask, e in events.items():
        resumed = min(e.emit_times(start=closed_at + EMIT_SLACK))
        last = max(e.emit_times(end=closed_at + EMIT_SLACK))
        print(
            f"subtask {subtask}: last record {last - closed_at:.3f} s after the closing, next "
            f"{resumed - lease_ends:+.4f} s from the lease's end; checkpoints completed while MySQL was down and the "
            f"lease ran: "
            f"{len(e.completions_between(down_at, lease_ends))}"
        )
        # Paused from the closing to the lease's end, MySQL down for most of it; then on again, at once.
        assert e.emit_times(closed_at + EMIT_SLACK, lease_ends) == [], f"subtask {subtask} emitted inside the lease"
        assert lease_ends - CLOCK_TOLERANCE <= resumed <= lease_ends + EMIT_SLACK, (
            f"subtask {subtask} resumed {resumed - lease_ends:+.3f} s from the lease's end"
        )
        assert len(e.completions_between(down_at, lease_ends)) >= 3, "checkpoints stopped during the outage"
    assert "is unreachable" in job.log() and "obeying its last verdict, closed" in job.log()
    output = job.output()
    assert sorted(output) == list(range(COUNT)), f"{len(output)} records, {len(set(output))} distinct"


def test_a_gate_that_refuses_the_writers_user_fails_the_job_before_any_record(tmp_path, unique_name, flink_job):
    with PrivateMariaDB(tmp_path / "mariadb") as mysql:
        mysql.gate_connection("gate")
        with mysql.connect() as db, db.cursor() as cursor:
            # It may read the gate, but not report to it (no INSERT, UPDATE on iceberg_write_gate_writer).
            cursor.execute("CREATE USER 'reader'@'%' IDENTIFIED BY 'reader-password'")
            cursor.execute("GRANT SELECT ON gate.iceberg_write_gate TO 'reader'@'%'")
        job = flink_job(
            gate_url=mysql.jdbc_url("gate"),
            table=f"lake.flink.{unique_name}",
            user="reader",
            password="reader-password",
        )
        job.start()
        code = job.wait_for_exit(timeout=120)

    assert code != 0, "the job went on although the gate refused its user"
    assert "WriteGateAccessException" in job.log() and "refused user 'reader'" in job.log()
    assert job.emitted() == 0 and job.output() == []
