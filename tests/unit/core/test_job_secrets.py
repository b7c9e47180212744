"""The Spark job's secrets file: readable by its user alone, in a directory of its own, gone when the job ends."""

from __future__ import annotations

import json
import stat

import pytest

from airflow_iceberg.core.job_secrets import JOB_SECRETS_FILE, job_secrets_file


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
