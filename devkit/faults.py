"""``make faults``: gated compactions under injected faults, against real MariaDB, local Spark and a gated writer.

Each scenario runs the table's real compaction DAG (``dag.test()`` in this process, ``airflow dags test`` in a
process of its own where the scenario kills or freezes it, or, for a pre-started rewrite (``prestart_spark``), whose
tasks must run at once, a live ``airflow standalone`` started for those scenarios) while a gated writer appends
numbered rows to the same table through pyiceberg every half second, and injects one fault. The gate lives in a
MariaDB server of the suite's own (:class:`~devkit.private_mariadb.PrivateMariaDB`), so MySQL can be stopped
without touching the machine's server, which holds the Iceberg catalog.

One row per scenario: the gate after it, the seconds the writer stayed paused, the writer's commits that failed
(pyiceberg's compare-and-swap refuses any commit that races another, so a rewrite committing while the writer
does shows here), rows lost (the rows the writer committed that the table lacks, plus any it holds twice), and
the run's state. ``tests/integration/test_faults.py`` runs the same scenarios and asserts each row, but the two
of pre-started work: ``tests/integration/test_prestarted_rewrite.py`` asserts the same faults on the suite's one
live Airflow.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from airflow_iceberg.core.job_secrets import ORPHAN_AGE_SECONDS, remove_orphaned_job_secrets
from airflow_iceberg.core.writer import WriteGateClient
from airflow_iceberg.surface.dag_factory import REWRITE_TASK_ID, compaction_dag_id, full_rewrite_dag_id
from airflow_iceberg.table_list.loader import load_table_list
from airflow_iceberg.table_list.schema import TableConfig
from devkit.fault_bench import (
    LONG_REWRITE,
    ROOT,
    TABLE,
    FaultBench,
    GatedAppender,
    Outcome,
    alive,
    driver_started,
    rewrite_submit,
    spark_jobs,
    table_location,
    wait_for,
)
from devkit.tables import data_file_paths


def task_killed_mid_rewrite(bench: FaultBench) -> Outcome:
    """SIGKILL of the Airflow task's process while its rewrite runs: Spark must go with it, writers resume at the
    lease's end (nobody is left to open the gate), and the table keeps every row."""
    config = bench.configure(lease_seconds=20, rewrite_data_files=LONG_REWRITE)
    started, failed = bench.begin()
    with bench.run_elsewhere() as process:
        task = psutil.Process(process.pid)
        wait_for("the rewrite's driver", lambda: driver_started(task, "rewrite_data_files"), 300)
        spark = spark_jobs(task, "rewrite_data_files")
        process.send_signal(signal.SIGKILL)  # the process that runs the task, and only it
        killed = time.monotonic()
        wait_for("spark-submit and its driver to die", lambda: not any(alive(p) for p in spark), 120)
        spark_gone = time.monotonic() - killed
    # Its job secrets, if the job had not read them yet: the next rewrite removes them once an hour old.
    left = list(Path(tempfile.gettempdir()).glob(f"airflow-iceberg-job-{process.pid}-*"))
    remove_orphaned_job_secrets(now=time.time() + ORPHAN_AGE_SECONDS)  # as a rewrite an hour later would
    return bench.outcome(
        "task killed mid-rewrite",
        started,
        "killed",
        failed_before=failed,
        spark_gone_seconds=spark_gone,
        lease_seconds=config.lease_seconds,
        secrets_left_by_the_kill=len(left),
        secrets_left_after_an_hour=[str(d) for d in left if d.exists()],
    )


def spark_submit_killed(bench: FaultBench) -> Outcome:
    """SIGKILL of spark-submit while the rewrite runs: the task fails, retries once, and the run still succeeds."""
    bench.configure(rewrite_data_files=LONG_REWRITE)
    started, failed = bench.begin()
    killed: list[int] = []

    def kill_once() -> None:
        me = psutil.Process()
        wait_for("the rewrite's driver", lambda: driver_started(me, "rewrite_data_files"), 600)
        jvm = next(p for p in spark_jobs(me, "rewrite_data_files") if p.name() == "java")
        jvm.send_signal(signal.SIGKILL)
        killed.append(jvm.pid)

    run, tries = bench.run_here_beside(kill_once)
    return bench.outcome(
        "spark-submit killed",
        started,
        bench.run_state(run),
        failed_before=failed,
        killed=killed,
        rewrite_tries=tries,
    )


def rewrite_five_times_the_lease(bench: FaultBench) -> Outcome:
    """A rewrite that lasts five leases and more: the work renews the lease, the writer stays paused throughout."""
    config = bench.configure(lease_seconds=6, rewrite_data_files=LONG_REWRITE)
    # 160 one-file groups took 27-39 s on 2 cores, 410 took 37-47 s: five 6 s leases need a margin.
    bench.add_seed_files(340)
    started, failed = bench.begin()
    run = bench.run_here()
    trail = [r for r in bench.gate.audit_trail(TABLE) if r["owner_run_id"] == run.run_id]
    closed = next(r["at"] for r in trail if r["action"] == "close").timestamp()
    opened = next(r["at"] for r in trail if r["action"] == "open").timestamp()
    rewrite = run.get_task_instance(REWRITE_TASK_ID)
    writer = bench.writer
    assert writer is not None
    return bench.outcome(
        "rewrite of 5x the lease",
        started,
        bench.run_state(run),
        failed_before=failed,
        rewrite_seconds=(rewrite.end_date - rewrite.start_date).total_seconds(),
        lease_seconds=config.lease_seconds,
        # A commit that passed the gate just before it closed may land just after: the idle wait covers those.
        # None may pass the gate while it is closed, and none may land while the rewrite runs.
        writer_commits_while_closed=sum(1 for cleared, _, _ in writer.commits if closed < cleared < opened),
        writer_commits_during_rewrite=sum(
            1 for _, landed, _ in writer.commits if rewrite.start_date.timestamp() < landed < opened
        ),
    )


def rewrite_past_max_pause(bench: FaultBench) -> Outcome:
    """A rewrite longer than ``max_pause_seconds``: stopped before the ceiling, gate reopened, rows intact."""
    config = bench.configure(lease_seconds=10, max_pause_seconds=30, rewrite_data_files=LONG_REWRITE)
    # 160 one-file groups were rewritten in under 30 s on a fast machine, and the run succeeded: with 800 the
    # rewrite alone takes minutes, so the ceiling, not the machine's speed, is what ends it.
    bench.add_seed_files(640)
    started, failed = bench.begin()
    run = bench.run_here()
    trail = [r for r in bench.gate.audit_trail(TABLE) if r["owner_run_id"] == run.run_id]
    closed = next(r["at"] for r in trail if r["action"] == "close")
    last = trail[-1]
    return bench.outcome(
        "rewrite past max_pause_seconds",
        started,
        bench.run_state(run),
        failed_before=failed,
        task_states=bench.task_states(run),
        max_pause_seconds=config.max_pause_seconds,
        gate_closed_seconds=(last["at"] - closed).total_seconds() if last["action"] == "open" else None,
    )


def mysql_down(moment: str) -> Callable[[FaultBench], Outcome]:
    """MySQL (the gate's) down at ``moment``: 'close', 'rewrite' or 'open'; back after a while."""

    def scenario(bench: FaultBench) -> Outcome:
        # While rewriting, the job renews every quarter of the lease and gives up a quarter (at most 15 s) before
        # its end: with 40 s, a renewal due just before the outage came too late after it, in some phases. With
        # 80 s a renewal falls after MySQL is back (15 s, and its start-up) and well before the lease's margin.
        lease = 80 if moment == "rewrite" else 40
        bench.configure(lease_seconds=lease, rewrite_data_files=LONG_REWRITE if moment == "rewrite" else {})
        started, failed = bench.begin()
        downtime: list[float] = []

        def go_down(back_after: float) -> None:
            """Stop MySQL now; start it again ``back_after`` seconds later, from another thread."""
            bench.gate_db.stop()
            down = time.monotonic()

            def come_back() -> None:
                time.sleep(back_after)
                bench.gate_db.start()
                downtime.append(time.monotonic() - down)

            threading.Thread(target=come_back, daemon=True).start()

        fired: list[bool] = []

        def down_once(context: Any) -> None:
            if not fired:
                fired.append(True)
                go_down(15.0)

        def prepare(dag: Any) -> None:
            task = {"close": "close_gate", "open": "open_gate"}.get(moment)
            if task is not None:  # down as that task first starts, back 15 s later: its retries must carry it
                dag.get_task(task).on_execute_callback = [down_once]

        if moment == "rewrite":  # down while the CALL runs, for less than the lease's margin
            me = psutil.Process()

            def when_rewriting() -> None:
                wait_for("the rewrite's driver", lambda: driver_started(me, "rewrite_data_files"), 600)
                time.sleep(10)  # the driver has renewed and started its CALL (a long one)
                go_down(15.0)

            threading.Thread(target=when_rewriting, daemon=True).start()
        run = bench.run_here(prepare=prepare)
        wait_for("MySQL to be back", lambda: bench.gate_db.running and downtime, 120)
        tries = {ti.task_id: ti.try_number for ti in run.get_task_instances()}
        return bench.outcome(
            f"MySQL down at {moment}",
            started,
            bench.run_state(run),
            failed_before=failed,
            tries=tries,
            downtime_seconds=downtime[0],
        )

    scenario.__name__ = f"mysql_down_at_{moment}"
    return scenario


def two_runs_at_once(bench: FaultBench) -> Outcome:
    """The compaction and the full rewrite of one table started together: one waits for the other's gate."""
    bench.configure()
    started, failed = bench.begin()
    with bench.run_elsewhere(full_rewrite_dag_id(TABLE)) as other:
        run = bench.run_here()
        other_status = other.wait(900)
    trail = [r for r in bench.gate.audit_trail(TABLE) if r["at"].timestamp() >= started]
    owners = [r["owner_dag_id"] for r in trail if r["action"] == "close"]
    return bench.outcome(
        "two runs at once",
        started,
        f"{bench.run_state(run)} + {'success' if other_status == 0 else 'failed'}",
        failed_before=failed,
        closes=owners,
    )


def stale_opener_after_takeover(bench: FaultBench) -> Outcome:
    """Run A is frozen with the gate closed until its lease ends; run B takes the gate over; A wakes up. A's
    work stops, A's open_gate leaves B's gate closed, and B compacts."""
    bench.configure(lease_seconds=10)
    started, failed = bench.begin()
    with bench.run_elsewhere(full_rewrite_dag_id(TABLE)) as frozen:
        a_dag = full_rewrite_dag_id(TABLE)
        wait_for("run A to close the gate", lambda: _holder(bench) == a_dag, 300, every=0.05)
        os.killpg(frozen.pid, signal.SIGSTOP)
        try:
            wait_for("run A's lease to end", lambda: not bench.gate.get_state(TABLE).pauses_writers, 120)
            b_states: dict[str, str] = {}

            def wake_a_once_b_holds(dag: Any) -> None:
                def wake(context: Any) -> None:
                    os.killpg(frozen.pid, signal.SIGCONT)  # A wakes while B holds the gate

                dag.get_task("wait_until_snapshot_idle").on_execute_callback = [wake]

            run_b = bench.run_here(prepare=wake_a_once_b_holds)
            b_states = bench.task_states(run_b)
        finally:
            os.killpg(frozen.pid, signal.SIGCONT)
        a_status = frozen.wait(900)
    trail = [r for r in bench.gate.audit_trail(TABLE) if r["at"].timestamp() >= started]
    a_opens = [r for r in trail if r["owner_dag_id"] == a_dag and r["action"].startswith("open")]
    return bench.outcome(
        "stale opener after takeover",
        started,
        f"A {'failed' if a_status else 'success'}, B {bench.run_state(run_b)}",
        failed_before=failed,
        a_open_actions=[r["action"] for r in a_opens],
        b_states=b_states,
    )


def _holder(bench: FaultBench) -> str | None:
    state = bench.gate.get_state(TABLE)
    return state.owner.dag_id if state.pauses_writers and state.owner else None


def sensor_times_out_with_a_busy_writer(bench: FaultBench) -> Outcome:
    """A second writer that never reads the gate keeps committing while it is closed: the idle wait times out,
    nothing is rewritten, and the gate opens. It writes only while the gate is closed, so the gated writer never
    races it (two pyiceberg writers committing at once would fail each other's commits, gate or no gate)."""
    bench.configure(idle_seconds=10, max_pause_seconds=30, lease_seconds=10)
    started, failed = bench.begin()
    busy = GatedAppender(TABLE, TABLE.catalog, None, first_id=10**9, interval=0.5)

    def start_busy(context: Any) -> None:  # before the wait's first look, with the gate closed
        busy.start()
        wait_for("the busy writer to commit", lambda: len(busy.commits) >= 2, 120)

    def stop_busy(context: Any) -> None:  # before the gate opens
        busy.stop()

    def prepare(dag: Any) -> None:
        dag.get_task("wait_until_snapshot_idle").on_execute_callback = [start_busy]
        dag.get_task("open_gate").on_execute_callback = [stop_busy]

    try:
        run = bench.run_here(prepare=prepare)
    finally:
        busy.stop()
    records = [r for r in bench.gate.records.run_records(str(TABLE)) if r["run_id"] == run.run_id]
    outcome = bench.outcome(
        "sensor time-out, busy writer",
        started,
        bench.run_state(run),
        failed_before=failed,
        task_states=bench.task_states(run),
        busy_commits=len(busy.commits),
        record_detail=records[0]["detail"] if records else None,
    )
    outcome.failed_commits += len(busy.failed_commits)
    return outcome


def warehouse_unwritable(bench: FaultBench) -> Outcome:
    """The table's data directory turns unwritable while the rewrite runs: it fails, commits nothing, and its
    retry (the directory writable again) compacts. (With partial progress, Iceberg reports the failed file groups
    instead of failing; the rewrite task then fails on them.)"""
    bench.configure()
    data = table_location() / "data"
    started, failed = bench.begin()
    me = psutil.Process()
    frozen: list[float] = []

    def freeze_while_rewriting() -> None:
        wait_for("the rewrite's driver", lambda: driver_started(me, "rewrite_data_files"), 600)
        subprocess.run(["chattr", "+i", str(data)], check=True)  # even root cannot add files now
        frozen.append(time.monotonic())
        try:
            wait_for("the rewrite to fail", lambda: not spark_jobs(me, "rewrite_data_files"), 600)
        finally:
            subprocess.run(["chattr", "-i", str(data)], check=True)

    run, tries = bench.run_here_beside(freeze_while_rewriting)
    return bench.outcome(
        "warehouse unwritable",
        started,
        bench.run_state(run),
        failed_before=failed,
        rewrite_tries=tries,
        froze=bool(frozen),
    )


# --- a pre-started rewrite (prestart_spark), on the live Airflow ------------------------------------------------


@dataclass
class HeldRun:
    """A pre-started run of the table's compaction DAG on the live Airflow, and what its row needs."""

    bench: FaultBench
    config: TableConfig
    dag_id: str
    before: set[str]  # the table's data files before the run
    started: float
    failed: int
    run_id: str = ""

    def outcome(self, scenario: str, run: dict[str, Any], **checks: Any) -> Outcome:
        return self.bench.outcome(
            scenario,
            self.started,
            str(run["state"]),
            failed_before=self.failed,
            lease_seconds=self.config.lease_seconds,
            task_states=self.bench.live().task_states(self.dag_id, self.run_id),
            files_replaced=len(self.before - data_file_paths(TABLE)),  # a CALL replaces; the writer only adds
            **checks,
        )


@contextmanager
def _held_prestarted_run(bench: FaultBench, **settings: Any) -> Iterator[HeldRun]:
    """Trigger a pre-started run (``prestart_spark`` with ``settings``) while a second writer is mid-write (a batch
    DELETE, say) for as long as the block lasts: the idle wait cannot give the go meanwhile."""
    config = bench.configure_live(prestart_spark=True, **settings)
    held = HeldRun(bench, config, compaction_dag_id(TABLE), data_file_paths(TABLE), *bench.begin())
    holder = WriteGateClient.connect(
        str(TABLE), **bench.gate.connection_settings(), writer_id="mid-write", poke_interval=0.2, log=lambda m: None
    )
    try:
        with holder.writing(lambda: None):
            held.run_id = bench.live().trigger(held.dag_id, {})
            yield held
    finally:
        holder.close()


def prestarted_rewrite_killed_before_the_go(bench: FaultBench) -> Outcome:
    """SIGKILL of the pre-started rewrite task's process while its application waits for the go, the gate closed:
    its application ends with it, no CALL runs, and the idle wait, seeing the work fall silent, ends the run, so
    that writers resume within one lease."""
    settings = {"lease_seconds": 30, "max_pause_seconds": 300, "deferrable": True, "poke_interval": 1}
    with _held_prestarted_run(bench, **settings) as held:
        wait_for("the gate to close", lambda: bench.gate.get_state(TABLE).state == "closed", 600)
        spark_submit = wait_for("the rewrite's spark-submit", lambda: rewrite_submit(TABLE), 60)
        application = [spark_submit, *spark_submit.children(recursive=True)]
        spark_submit.parent().kill()  # the task's process, and only it: it tells nobody anything
        killed = time.monotonic()
        wait_for("its Spark application to end", lambda: not any(map(alive, application)), 120)
        spark_gone = time.monotonic() - killed
        wait_for("the writers to be let go", bench._released, held.config.lease_seconds + 60)
        let_go = time.monotonic() - killed
        run = bench.live().wait_for_run(held.dag_id, held.run_id, timeout=600)
    return held.outcome(
        "pre-started rewrite killed before go",
        run,
        spark_gone_seconds=round(spark_gone, 1),
        let_go_seconds=round(let_go, 1),
        wait_log=bench.live().task_log(held.dag_id, held.run_id, "wait_until_snapshot_idle")[-2000:],
    )


def prestarted_wait_fails_before_the_go(bench: FaultBench) -> Outcome:
    """The idle wait of a pre-started rewrite times out (a writer stays mid-write): it tells the waiting application
    to stop, which ends without a CALL, and the gate opens."""
    with _held_prestarted_run(bench, lease_seconds=10, max_pause_seconds=20) as held:
        run = bench.live().wait_for_run(held.dag_id, held.run_id, timeout=900)
    return held.outcome(
        "pre-started, idle wait fails",
        run,
        rewrite_log=bench.live().task_log(held.dag_id, held.run_id, REWRITE_TASK_ID)[-2000:],
    )


SCENARIOS: list[Callable[[FaultBench], Outcome]] = [
    task_killed_mid_rewrite,
    spark_submit_killed,
    rewrite_five_times_the_lease,
    rewrite_past_max_pause,
    mysql_down("close"),
    mysql_down("rewrite"),
    mysql_down("open"),
    two_runs_at_once,
    stale_opener_after_takeover,
    sensor_times_out_with_a_busy_writer,
    warehouse_unwritable,
    # Last: they start a live Airflow, which then stays up until the bench ends.
    prestarted_rewrite_killed_before_the_go,
    prestarted_wait_fails_before_the_go,
]


_CONSOLE: list[int] = []


@contextmanager
def _output_to(path: Path) -> Iterator[None]:
    """Send this process's stdout and stderr (Airflow's and Spark's logs) to ``path``; :func:`_console` still prints."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    _CONSOLE.append(saved[0])
    with path.open("a") as log_file:
        os.dup2(log_file.fileno(), 1)
        os.dup2(log_file.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            _CONSOLE.pop()
            os.close(saved[0])
            os.close(saved[1])


def _console(line: str) -> None:
    os.write(_CONSOLE[-1] if _CONSOLE else 1, (line + "\n").encode())


def bench_defaults() -> dict[str, Any]:
    """The table list's defaults: the shipped demo table's Spark settings, and short waits."""
    demo = next(t for t in load_table_list(ROOT / "dags" / "iceberg_tables.yaml").tables if t.table.table == "events")
    return {
        "spark": demo.spark.model_dump(mode="json", exclude_none=True),
        "idle_seconds": 2,
        "poke_interval": 1,
        # Every run under a writer compacts; runs start on demand only (no health watch).
        "health": {"min_small_files": 2, "max_delete_age_minutes": 0, "watch": False},
    }


def main(argv: list[str] | None = None) -> int:
    import argparse

    names = [scenario.__name__ for scenario in SCENARIOS]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help=f"any of: {', '.join(names)} (default: all)")
    chosen = parser.parse_args(argv).scenarios or names
    if unknown := sorted(set(chosen) - set(names)):
        parser.error(f"unknown scenario {', '.join(unknown)}")
    logging.getLogger("pyiceberg.catalog.sql").setLevel(logging.ERROR)
    workdir = Path(tempfile.mkdtemp(prefix="airflow-iceberg-faults-"))
    print(f"==> fault injection on {TABLE}: the gate in a MariaDB of its own, a gated writer every 0.5 s")
    outcomes = []
    log_file = workdir / "faults.log"
    print(f"==> the runs' own output goes to {log_file}", flush=True)
    with _output_to(log_file), FaultBench(workdir, bench_defaults()) as bench:
        for scenario in (s for s in SCENARIOS if s.__name__ in chosen):
            started = time.monotonic()
            outcomes.append(scenario(bench))
            _console(f"==> {scenario.__name__}: {time.monotonic() - started:.0f} s")
    print()
    print(Outcome.header())
    for outcome in outcomes:
        print(outcome.row())
    print(json.dumps([{**o.__dict__, "checks": {k: str(v) for k, v in o.checks.items()}} for o in outcomes]))
    clean = all(o.rows_lost == 0 and o.failed_commits == 0 for o in outcomes)
    print("every scenario: 0 rows lost, 0 failed commits" if clean else "NOT every scenario kept every row")
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
