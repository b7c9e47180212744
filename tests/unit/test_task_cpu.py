"""devkit/task_cpu.py's attribution: a LocalExecutor worker's CPU growth goes to the task its title named before."""

from __future__ import annotations

from types import SimpleNamespace

from devkit.task_cpu import WORKER_TITLE, TaskCpu


class Worker:
    """A worker process whose title and CPU the test sets between samples."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.title = f"{WORKER_TITLE} <idle>"
        self.cpu = 0.0
        self.reaped = 0.0  # the children's CPU, once the worker has reaped them

    def cmdline(self) -> list[str]:
        return [self.title]

    def cpu_times(self):
        return SimpleNamespace(user=self.cpu, system=0.0, children_user=self.reaped, children_system=0.0)


class Airflow:
    def __init__(self, *workers: Worker) -> None:
        self.workers = list(workers)
        self.rows: list[tuple[str, str, str]] = []

    def components(self):
        return {"standalone": [], "scheduler": [SimpleNamespace(cmdline=lambda: ["airflow scheduler"]), *self.workers]}

    def query(self, sql, *params):
        assert "task_instance_history" in sql  # earlier tries are found too
        return [row for row in self.rows if row[0] in params[0]]


def test_a_workers_cpu_goes_to_the_task_its_title_named_and_idle_time_to_nobody():
    worker = Worker(7)
    airflow = Airflow(worker)
    airflow.rows = [("ti-1", "iceberg_compact__lake__db__t", "plan_compaction"), ("ti-2", "d", "wait")]
    cpu = TaskCpu(airflow)  # type: ignore[arg-type]
    worker.cpu = 5.0  # before sampling began: nobody's
    cpu._sample()
    cpu.by_title.clear()
    worker.cpu, worker.title = 5.5, f"{WORKER_TITLE} ti-1"
    cpu._sample()  # the half second while idle, then picking ti-1 up
    worker.cpu, worker.reaped, worker.title = 6.0, 3.0, f"{WORKER_TITLE} <idle>"
    cpu._sample()  # ti-1 ended: its process, reaped, lands in the worker's children's CPU
    worker.cpu, worker.title = 6.2, f"{WORKER_TITLE} ti-2"
    cpu._sample()
    worker.reaped = 4.0  # still running ti-2 (a child it waited for, reaped)
    cpu._sample()
    worker.reaped, worker.title = 5.0, f"{WORKER_TITLE} <idle>"
    cpu._sample()

    assert round(cpu.idle_workers_seconds, 3) == 0.7
    costs = {(c.dag_id, c.task_id): (round(c.cpu_seconds, 3), c.workloads) for c in cpu.by_task()}
    assert costs == {("iceberg_compact__lake__db__t", "plan_compaction"): (3.5, 1), ("d", "wait"): (2.0, 1)}
