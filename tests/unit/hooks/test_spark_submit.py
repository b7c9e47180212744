"""The Spark hook subclass reads the job's result line from spark-submit's output, and still logs every line.

A stand-in ``spark-submit`` on PATH prints what a job prints, so the hook's own ``submit()`` runs for real.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from airflow.exceptions import AirflowException

from airflow_iceberg.core.spark_job import LEASE_LOST_MARKER, format_result_line
from airflow_iceberg.hooks.spark_submit import IcebergSparkSubmitHook


@pytest.fixture
def spark_submit(tmp_path: Path, monkeypatch):
    """Install a stand-in spark-submit that prints ``lines`` and exits with ``status``."""
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[1]"}))

    def install(lines: list[str], status: int = 0) -> None:
        script = tmp_path / "spark-submit"
        body = "".join(f"printf '%s\\n' {json.dumps(line)}\n" for line in lines)
        script.write_text(f"#!/bin/sh\n{body}exit {status}\n")
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
        monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")

    return install


RESULT = {"rewritten_data_files_count": 36, "added_data_files_count": 2}


def test_the_result_line_is_kept_even_with_spark_progress_text_after_it(spark_submit):
    spark_submit(["Running: CALL ...", format_result_line(RESULT) + "\r[Stage 3:>   (0 + 1) / 1]", "bye"])
    seen: list[str] = []
    hook = IcebergSparkSubmitHook(on_line=seen.append, name="t")
    hook.submit("job.py")
    assert hook.result == RESULT
    assert seen[0] == "Running: CALL ..." and seen[-1] == "bye" and len(seen) == 3


def test_each_procedures_result_line_is_kept_by_its_name(spark_submit):
    deletes = {"rewritten_delete_files_count": 4, "added_delete_files_count": 0}
    spark_submit(
        [
            format_result_line({"procedure": "rewrite_data_files", **RESULT}),
            format_result_line({"procedure": "rewrite_position_delete_files", **deletes}),
        ]
    )
    hook = IcebergSparkSubmitHook(name="t")
    hook.submit("job.py")
    assert hook.results == {"rewrite_data_files": RESULT, "rewrite_position_delete_files": deletes}
    assert list(hook.results) == ["rewrite_data_files", "rewrite_position_delete_files"]


def test_no_result_line_leaves_the_result_empty(spark_submit):
    spark_submit(["just logs"])
    hook = IcebergSparkSubmitHook(name="t")
    hook.submit("job.py")
    assert hook.result is None and hook.results == {}


def test_a_failed_job_still_fails_the_hook(spark_submit):
    spark_submit(["Exception in thread main"], status=3)
    with pytest.raises(AirflowException, match="Error code is: 3"):
        IcebergSparkSubmitHook(name="t").submit("job.py")


def test_a_logger_name_puts_the_output_under_airflow_task_hooks(spark_submit, capfd):
    spark_submit(["hello from the job"])
    IcebergSparkSubmitHook(name="t", logger_name="devkit.test").submit("job.py")
    logged = [line for line in capfd.readouterr().out.splitlines() if "hello from the job" in line]
    assert len(logged) == 1 and "[airflow.task.hooks.devkit.test]" in logged[0]


def test_an_iceberg_commit_conflict_in_the_output_is_kept(spark_submit):
    conflict = "org.apache.iceberg.exceptions.CommitFailedException: Cannot commit: stale metadata"
    spark_submit(["Running: CALL ...", conflict, "at org.apache.iceberg..."], status=1)
    hook = IcebergSparkSubmitHook(name="t")
    with pytest.raises(AirflowException):
        hook.submit("job.py")
    assert hook.commit_conflict == conflict


def test_other_failures_are_no_commit_conflict(spark_submit):
    spark_submit(["org.apache.spark.sql.AnalysisException: cannot resolve 'nope'"], status=1)
    hook = IcebergSparkSubmitHook(name="t")
    with pytest.raises(AirflowException):
        hook.submit("job.py")
    assert hook.commit_conflict is None


def test_a_lost_lease_in_the_output_is_kept(spark_submit):
    spark_submit(["Running: CALL ...", LEASE_LOST_MARKER + "the write gate of lake.db.t is no longer held"], status=3)
    hook = IcebergSparkSubmitHook(name="t")
    with pytest.raises(AirflowException):
        hook.submit("job.py")
    assert hook.lease_lost == "the write gate of lake.db.t is no longer held"


TASK = """
import sys
from airflow_iceberg.hooks.spark_submit import IcebergSparkSubmitHook
IcebergSparkSubmitHook(name="t").submit("job.py")
"""


def test_spark_submit_dies_with_the_task_that_started_it(tmp_path, monkeypatch):
    """SIGKILL of the task's process (nothing of it can clean up) still ends spark-submit within seconds."""
    pid_file = tmp_path / "spark-submit.pid"
    script = tmp_path / "spark-submit"
    script.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 600\n")  # exec: the same process sleeps
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    task = subprocess.Popen([sys.executable, "-c", TASK])
    try:
        spark_pid = int(wait_for(lambda: pid_file.is_file() and pid_file.read_text().strip(), 60))
        assert psutil.pid_exists(spark_pid)
    finally:
        task.kill()
        task.wait(30)
    assert wait_for(lambda: not alive(spark_pid), 30), f"spark-submit (pid {spark_pid}) outlived its task"


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_for(condition, timeout: float):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"not within {timeout} s"
        time.sleep(0.1)
    return value
