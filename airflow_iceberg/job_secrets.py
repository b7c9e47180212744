"""A Spark job's secrets file, written by Airflow: mode 0600 in a private directory, removed when the job ends.

The job reads it and deletes it (``read_job_secrets`` in ``airflow_iceberg.core.spark_job``); the file's
path, which is no secret, is all that appears on spark-submit's command line.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from airflow_iceberg.core.spark_job import JOB_SECRETS_FILE


def write_job_secrets(secrets: Mapping[str, Any]) -> Path:
    """A new secrets file holding ``secrets`` as JSON, in a directory of its own; both readable by this user alone."""
    directory = Path(tempfile.mkdtemp(prefix="airflow-iceberg-job-"))  # mode 0700
    path = directory / JOB_SECRETS_FILE
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        json.dump(secrets, file)
    return path


@contextmanager
def job_secrets_file(secrets: Mapping[str, Any]) -> Iterator[Path]:
    """:func:`write_job_secrets`, and the file and its directory removed when the block ends, read or not."""
    path = write_job_secrets(secrets)
    try:
        yield path
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)
