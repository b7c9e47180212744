"""A Spark job's secrets file, typed once for both sides: Airflow writes it, the job reads it and deletes it.

Airflow writes it (:func:`job_secrets_file`) mode 0600 in a private directory and removes it when the job ends;
the job reads and deletes it with its directory (:func:`read_job_secrets`) and applies it to its session
(:func:`apply_job_secrets`). The file's path, which is no secret, is all that appears on spark-submit's command
line. A task process killed outright (SIGKILL: the kernel's OOM killer, Airflow's kill after a SIGTERM went
unheeded) removes nothing; the next file written on the machine removes such a file once it is an hour old
(:func:`remove_orphaned_job_secrets`). No Airflow here: this module ships to Spark with the rest of the core.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NotRequired, TypedDict

#: The name of a job's secrets file: a JSON object, mode 0600, that the job reads and then deletes. It carries
#: secret Spark settings (a JDBC password, REST credentials, tokens and headers, S3 keys) under ``spark_conf``,
#: JVM system properties (AWS keys) under ``system_properties``, and the write gate's connection under ``gate``,
#: so none of them is ever on a command line, in a driver's spec, in rendered templates or in logs. In local and
#: client deploy modes the job gets the file's path; in cluster modes spark-submit ships it with ``--files``.
JOB_SECRETS_FILE = "airflow-iceberg-job-secrets.json"

#: A secrets file's directory, in the temporary directory: ``<prefix><pid>-<random>``, ``pid`` the writer's process.
_DIRECTORY_PREFIX = "airflow-iceberg-job-"

#: How old an orphaned secrets file must be before another writer removes it. A job reads its file as it starts, and
#: spark-submit ships it (``--files``) as it submits; the age spares a live writer whose process this one cannot see
#: (another PID namespace sharing the temporary directory).
ORPHAN_AGE_SECONDS = 3600


class GateOwnerSecrets(TypedDict):
    """The gate's connection and the run that holds it, for the job to renew the run's lease itself."""

    host: str
    port: int
    user: str
    password: str
    database: str
    table: str
    dag_id: str
    run_id: str
    lease_seconds: int
    #: Pre-started work (``core/gate_work.py``): the run's attempt, and how long the job may wait for the go. Its
    #: lease is then the gate's, read at the go (``lease_seconds`` is 0).
    attempt: NotRequired[int]
    wait_for_go_seconds: NotRequired[int]
    #: Where the job writes what it says to Airflow (``core/job_report.py``): one id per submit.
    report_id: NotRequired[str]


class JobSecrets(TypedDict, total=False):
    """The job's secrets file (:data:`JOB_SECRETS_FILE`)."""

    spark_conf: dict[str, str]  # secret Spark settings: a JDBC password, REST credentials, S3 keys
    system_properties: dict[str, str]  # JVM system properties of the driver: AWS keys
    gate: GateOwnerSecrets  # behind a write gate


def read_job_secrets(location: str | None) -> JobSecrets:
    """The job's secrets, from ``location``, and the file deleted once read; ``{}`` without a location.

    ``location`` is a local path (local and client deploy modes), or the name of a file spark-submit shipped
    with ``--files`` (cluster modes), found in the working directory or through ``SparkFiles`` (so call this
    once the Spark session exists).
    """
    if not location:
        return {}
    path = Path(location)
    if not path.is_file():
        from pyspark import SparkFiles

        path = Path(SparkFiles.get(path.name))
    secrets = json.loads(path.read_text())
    try:
        path.unlink()
    except OSError:  # a read-only copy (a cluster's staging area): the cluster removes it with the application
        pass
    else:
        if path.parent.name.startswith(_DIRECTORY_PREFIX):  # Airflow's own (local and client modes), empty now
            with contextlib.suppress(OSError):  # Airflow may have removed it as the job ended
                path.parent.rmdir()
    return secrets


def apply_job_secrets(spark: Any, secrets: JobSecrets) -> None:
    """Set the secret Spark settings on ``spark``'s session and the system properties in its driver's JVM.

    Catalogs are created when first used, so a catalog's secret settings take effect if set before that.
    """
    for key, value in secrets.get("spark_conf", {}).items():
        spark.conf.set(key, value)
    system = spark.sparkContext._jvm.java.lang.System
    for key, value in secrets.get("system_properties", {}).items():
        system.setProperty(key, value)


def write_job_secrets(secrets: JobSecrets) -> Path:
    """A new secrets file holding ``secrets`` as JSON, in a directory of its own; both readable by this user alone.

    Orphaned secrets files of this user are removed first (:func:`remove_orphaned_job_secrets`).
    """
    remove_orphaned_job_secrets()
    directory = Path(tempfile.mkdtemp(prefix=f"{_DIRECTORY_PREFIX}{os.getpid()}-"))  # mode 0700
    path = directory / JOB_SECRETS_FILE
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        json.dump(secrets, file)
    return path


@contextmanager
def job_secrets_file(secrets: JobSecrets) -> Iterator[Path]:
    """:func:`write_job_secrets`, and the file and its directory removed when the block ends, read or not."""
    path = write_job_secrets(secrets)
    try:
        yield path
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)


def remove_orphaned_job_secrets(now: float | None = None) -> list[Path]:
    """Remove the secrets directories of this user whose writer process is gone and that are an hour old or more.

    What a SIGKILLed task leaves: its job never read the file, or ran in a cluster deploy mode and read its own copy.
    Returns the directories removed.
    """
    now = time.time() if now is None else now
    removed = []
    for directory in Path(tempfile.gettempdir()).glob(f"{_DIRECTORY_PREFIX}*-*"):
        pid = directory.name.removeprefix(_DIRECTORY_PREFIX).split("-", 1)[0]
        try:
            status = directory.lstat()
        except OSError:  # removed meanwhile
            continue
        if (
            not pid.isdigit()
            or not stat.S_ISDIR(status.st_mode)
            or status.st_uid != os.getuid()
            or now - status.st_mtime < ORPHAN_AGE_SECONDS
            or _alive(int(pid))
        ):
            continue
        shutil.rmtree(directory, ignore_errors=True)
        removed.append(directory)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
