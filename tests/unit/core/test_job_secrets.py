"""The Spark job's secrets file: readable by its user alone, in a directory of its own, gone when the job ends."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from airflow_iceberg.core import job_secrets
from airflow_iceberg.core.job_secrets import (
    JOB_SECRETS_FILE,
    job_secrets_file,
    read_job_secrets,
    remove_orphaned_job_secrets,
    write_job_secrets,
)


@pytest.fixture(autouse=True)
def private_temporary_directory(tmp_path, monkeypatch):
    """Each test's secrets directories in a temporary directory of its own, not among the machine's."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def test_the_secrets_file_is_private_holds_the_secrets_and_is_removed_with_its_directory():
    secrets = {"catalog": {"jdbc.password": "s3cr3t"}, "gate": {"password": "g4te"}}
    with job_secrets_file(secrets) as path:
        assert path.name == JOB_SECRETS_FILE  # the name the job looks for in cluster deploy modes
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert json.loads(path.read_text()) == secrets
    assert not path.exists() and not path.parent.exists()


def test_the_secrets_file_is_removed_when_the_job_fails_too():
    with pytest.raises(RuntimeError, match="spark-submit failed"), job_secrets_file({"k": "v"}) as path:
        raise RuntimeError("spark-submit failed")
    assert not path.parent.exists()


def test_two_jobs_never_share_a_secrets_file():
    with job_secrets_file({"job": 1}) as first, job_secrets_file({"job": 2}) as second:
        assert first.parent != second.parent
        assert json.loads(first.read_text()) == {"job": 1}


def test_the_job_removes_the_file_it_read_with_airflows_directory():
    path = write_job_secrets({"gate": {"password": "g4te"}})
    assert read_job_secrets(str(path)) == {"gate": {"password": "g4te"}}
    assert not path.parent.exists()


def dead_pid() -> int:
    """A PID no process has: a child that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def orphan(pid: int, age: float) -> Path:
    """A secrets directory as a task with ``pid`` leaves it when SIGKILLed before its job read the file."""
    directory = Path(tempfile.mkdtemp(prefix=f"airflow-iceberg-job-{pid}-"))
    (directory / JOB_SECRETS_FILE).write_text('{"gate": {"password": "g4te"}}')
    os.utime(directory, (time.time() - age, time.time() - age))
    return directory


def test_a_killed_tasks_secrets_are_removed_by_the_next_file_written_once_an_hour_old():
    gone = orphan(dead_pid(), age=3601)
    young = orphan(dead_pid(), age=600)  # perhaps a live writer that this process cannot see: spared for now
    alive = orphan(os.getpid(), age=7200)  # its writer still runs
    with job_secrets_file({"job": 1}) as path:
        assert path.parent.name.startswith(f"airflow-iceberg-job-{os.getpid()}-")
        assert not gone.exists()
        assert young.exists() and alive.exists()
    assert remove_orphaned_job_secrets(now=time.time() + 3600) == [young]
    assert alive.exists()


def test_another_users_secrets_are_never_touched(monkeypatch):
    theirs = orphan(dead_pid(), age=7200)
    with monkeypatch.context() as as_another_user:
        as_another_user.setattr(job_secrets.os, "getuid", lambda: theirs.stat().st_uid + 1)
        assert remove_orphaned_job_secrets() == []
    assert remove_orphaned_job_secrets() == [theirs]  # and as its owner
