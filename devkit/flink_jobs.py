"""The integration tests' Flink jobs (``flink/src/test/.../testjob``), each on a local mini-cluster in a JVM of its own.

``make setup`` builds them into ``build/flink/`` with the class path they run with (``classpath``). A job's
``EventRecorder``, chained to its gated source, writes per subtask when each record was emitted and when each
checkpoint's state was taken and completed (``emit <value> <t>``, ``snapshot <id> <t>``, ``complete <id> <t>``,
``t`` in microseconds of the system clock, the one MySQL's ``NOW(6)`` reads for the gate's times).
:meth:`FlinkJob.events` reads them back.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from airflow_iceberg.core.gate_state import WriterState
from airflow_iceberg.hooks.write_gate import WriteGateHook
from devkit import extra_jvm_options

FLINK_BUILD = Path(os.environ.get("AIRFLOW_ICEBERG_FLINK_BUILD", Path(__file__).parents[1] / "build" / "flink"))


#: What Flink's own launcher gives a JVM on Java 17 (its env.java.opts.all), and a job run with `java -cp` must
#: give it too: Kryo serializes through these packages, as Flink 1.18's Iceberg sink (FlinkSink) does on every
#: checkpoint.
JVM_OPENS = [
    f"--add-opens=java.base/{package}=ALL-UNNAMED"
    for package in (
        "java.lang",
        "java.lang.reflect",
        "java.io",
        "java.net",
        "java.nio",
        "sun.nio.ch",
        "java.text",
        "java.time",
        "java.util",
        "java.util.concurrent",
        "java.util.concurrent.atomic",
        "java.util.concurrent.locks",
    )
]


def subtask_writer_ids(writer_id: str, parallelism: int) -> set[str]:
    """The writer ids a gated source's subtasks report as at the gate: ``<writer id>#<subtask index>``."""
    return {f"{writer_id}#{subtask}" for subtask in range(parallelism)}


def gate_jar() -> Path:
    """The gated source's jar of the stack's Flink line, ``airflow-iceberg-flink-<line>.jar``, as users get it."""
    (jar,) = (p for p in FLINK_BUILD.glob("airflow-iceberg-flink-*.jar") if not p.name.endswith("-tests.jar"))
    return jar


def sql_jar(artifact: str) -> Path:
    """A jar the stack's SQL jobs add (``sql-jars/``: Flink CDC's MySQL connector, MySQL's driver), by artifact."""
    found = sorted((FLINK_BUILD / "sql-jars").glob(f"{artifact}-*.jar"))
    if len(found) != 1:
        raise FlinkJobError(f"the stack has {len(found)} {artifact} jars under {FLINK_BUILD / 'sql-jars'}, not one")
    return found[0]


class FlinkJobError(AssertionError):
    """The job exited, or did not get where the caller waited for in time; the message holds its log's tail."""


@dataclass
class SubtaskEvents:
    """What one subtask's recorder wrote: (value, time) per record; time per checkpoint id. Times: epoch s."""

    emits: list[tuple[str, float]] = field(default_factory=list)
    snapshots: dict[int, float] = field(default_factory=dict)
    completions: dict[int, float] = field(default_factory=dict)

    def emit_times(self, start: float = float("-inf"), end: float = float("inf")) -> list[float]:
        return [t for _, t in self.emits if start <= t < end]

    def completions_between(self, start: float, end: float) -> list[int]:
        return sorted(cp for cp, t in self.completions.items() if start < t < end)


class FlinkJob:
    """A test job's JVM (its own process group), with its recorder's events and its log under ``workdir``.

    :param job_class: The job's main class.
    :param options: Its arguments, ``--name value`` each; ``--events`` is added.
    :param writer_ids: The gate writer ids its source subtasks report as.
    :param env: Added to this process's environment (the passwords the job reads from it).
    :param without_gate_jar: Leave the gated source's own jar (:func:`gate_jar`) off the class path.
    """

    def __init__(
        self,
        workdir: Path,
        job_class: str,
        options: Mapping[str, object],
        *,
        writer_ids: set[str],
        env: dict[str, str] | None = None,
        heap: str = "1g",
        without_gate_jar: bool = False,
    ) -> None:
        classpath = FLINK_BUILD / "classpath"
        if not classpath.is_file():
            raise FlinkJobError(f"the Flink test jobs are not built ({classpath} is missing): run `make setup`")
        entries = classpath.read_text().strip().split(":")
        if without_gate_jar:  # the job adds it itself, as a SQL script does with ADD JAR
            entries.remove(str(gate_jar()))
        self.workdir = workdir
        self.events_dir = workdir / "events"
        self.log_file = workdir / "job.log"
        self.writer_ids = writer_ids
        options = {**options, "events": self.events_dir}
        args = [arg for name, value in options.items() for arg in (f"--{name}", str(value))]
        self.command = [
            "java",
            f"-Xmx{heap}",
            *JVM_OPENS,
            *extra_jvm_options(),
            "-cp",
            ":".join(entries),
            job_class,
            *args,
        ]
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.events_dir.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("a") as log:
            self.process = subprocess.Popen(
                self.command, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def events(self) -> dict[int, SubtaskEvents]:
        """Every subtask's events so far."""
        found = {}
        for path in sorted(self.events_dir.glob("subtask-*.events")):
            events = SubtaskEvents()
            text = path.read_text()
            for line in text[: text.rfind("\n") + 1].splitlines():  # not a line still being written
                kind, value, micros = line.split()
                if kind == "emit":
                    events.emits.append((value, int(micros) / 1e6))
                elif kind == "snapshot":
                    events.snapshots[int(value)] = int(micros) / 1e6
                else:
                    events.completions[int(value)] = int(micros) / 1e6
            found[int(path.stem.split("-")[1])] = events
        return found

    def log(self) -> str:
        return self.log_file.read_text(errors="replace")

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_for(self, condition: Callable[[], bool], what: str, timeout: float) -> None:
        """Wait until ``condition()`` holds; fail, with the job's log, if the JVM exits or ``timeout`` passes."""
        deadline = time.monotonic() + timeout
        while not condition():
            assert self.process is not None
            if self.process.poll() is not None:
                code = self.process.returncode
                raise FlinkJobError(f"the Flink job exited ({code}) before {what}:\n{self.log()[-5000:]}")
            if time.monotonic() > deadline:
                raise FlinkJobError(f"no {what} within {timeout} s; the Flink job's log:\n{self.log()[-5000:]}")
            time.sleep(0.1)

    def emitted(self) -> int:
        return sum(len(events.emits) for events in self.events().values())

    def wait_for_exit(self, timeout: float) -> int:
        """The JVM's exit code, once it has exited."""
        assert self.process is not None
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise FlinkJobError(f"the Flink job did not finish within {timeout} s:\n{self.log()[-5000:]}") from None

    def wait_until_finished(self, timeout: float) -> None:
        code = self.wait_for_exit(timeout)
        assert code == 0, f"the Flink job failed ({code}):\n{self.log()[-5000:]}"

    def kill(self) -> None:
        """SIGKILL the JVM: no clean shutdown, no last checkpoint."""
        if self.running:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.running:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


def wait_for_acknowledgements(hook: WriteGateHook, table: str, job: FlinkJob) -> dict[str, WriterState]:
    """Every subtask's acknowledgement of the gate's current closing, by writer id, once all are there."""
    acknowledged: dict[str, WriterState] = {}

    def all_there() -> bool:
        state = hook.get_state(table)
        acknowledged.clear()
        acknowledged.update({w.writer_id: w for w in state.writers if state.acknowledged_by(w)})
        return set(acknowledged) == job.writer_ids

    job.wait_for(all_there, f"acknowledgement from each of {sorted(job.writer_ids)}", timeout=60)
    return acknowledged
