"""Where a live Airflow's CPU goes, task by task: the CPU of each task its LocalExecutor ran, and of Airflow itself.

A LocalExecutor worker runs one task at a time: it supervises the task (its log, its heartbeats) and forks the task's
own process, which it reaps when the task ends; while it does, its title names the task instance
(``airflow worker -- LocalExecutor: <task instance id>``). So a worker's CPU, its own and its reaped children's, grows
by the task's whole cost: the task process's start-up, its parse of the DAG file, its work, and every process it
waited for (spark-submit's JVM and its Python driver). :class:`TaskCpu` samples the workers every ``every`` seconds
and gives each sample's growth to the task the worker's title named at the sample before, then names each task
instance from Airflow's metadata database. What the workers spend idle, and what the scheduler, the dag-processor,
the triggerer and the api-server spend, is Airflow's own, whatever it runs.

A task still running when sampling stops is not counted (its process is reaped later); the benches stop once their
runs have ended.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from devkit.live_airflow import LiveAirflow, process_cpu

WORKER_TITLE = "airflow worker -- LocalExecutor:"
IDLE = "<idle>"


@dataclass(frozen=True)
class TaskCost:
    """One task of one DAG, over every run and try sampled: CPU seconds, and how many worker slots ran it (a sensor
    in reschedule mode takes one per look)."""

    dag_id: str
    task_id: str
    cpu_seconds: float
    workloads: int


class TaskCpu:
    """Samples ``airflow``'s LocalExecutor workers from :meth:`start` to :meth:`stop` (see the module's doc)."""

    def __init__(self, airflow: LiveAirflow, every: float = 0.2) -> None:
        self.airflow = airflow
        self.every = every
        self.by_title: dict[str, float] = defaultdict(float)
        self.workloads: dict[str, int] = defaultdict(int)
        self._last: dict[int, tuple[str, float]] = {}  # worker pid -> (title, its CPU), at the last sample
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="task-cpu", daemon=True)

    def start(self) -> TaskCpu:
        self._sample()  # what the workers spent before is nobody's here
        self.by_title.clear()
        self.workloads.clear()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(30)
        self._sample()

    def _run(self) -> None:
        while not self._stopped.wait(self.every):
            self._sample()

    def _workers(self) -> list[Any]:
        return [
            process
            for processes in self.airflow.components().values()
            for process in processes
            if _title(process).startswith(WORKER_TITLE)
        ]

    def _sample(self) -> None:
        for worker in self._workers():
            title, cpu = _title(worker)[len(WORKER_TITLE) :].strip(), process_cpu(worker)
            if not title:
                continue  # exited meanwhile
            before = self._last.get(worker.pid)
            if before is not None:
                self.by_title[before[0]] += cpu - before[1]
                if title != before[0] and title != IDLE:
                    self.workloads[title] += 1
            elif title != IDLE:
                self.workloads[title] += 1
            self._last[worker.pid] = (title, cpu)

    @property
    def idle_workers_seconds(self) -> float:
        return self.by_title.get(IDLE, 0.0)

    def by_task(self) -> list[TaskCost]:
        """Each task's cost, summed over the runs and tries sampled, named from Airflow's metadata database (a
        task instance's id is its try's: earlier tries are in ``task_instance_history``)."""
        ids = [title for title in self.by_title if title != IDLE]
        names: dict[str, tuple[str, str]] = {}
        if ids:
            rows = self.airflow.query(
                "SELECT id::text, dag_id, task_id FROM task_instance WHERE id::text = ANY(%s) "
                "UNION SELECT task_instance_id::text, dag_id, task_id FROM task_instance_history "
                "WHERE task_instance_id::text = ANY(%s)",
                ids,
                ids,
            )
            names = {row[0]: (row[1], row[2]) for row in rows}
        costs: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0])
        for title in ids:
            cost = costs[names.get(title, ("?", f"unknown task instance {title}"))]
            cost[0] += self.by_title[title]
            cost[1] += self.workloads.get(title, 0)
        return sorted(
            (TaskCost(dag_id, task_id, round(cpu, 2), int(n)) for (dag_id, task_id), (cpu, n) in costs.items()),
            key=lambda c: -c.cpu_seconds,
        )


def _title(process: Any) -> str:
    import psutil

    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""
