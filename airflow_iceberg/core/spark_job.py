"""What Airflow and the Spark job exchange: the job's secrets file, its result lines and its markers."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: The line prefix the Spark job prints its procedure result row behind, for the Airflow operator to find.
RESULT_MARKER = "AIRFLOW_ICEBERG_RESULT "


#: The line prefix the Spark job prints behind the reason it stopped: its run no longer holds the write gate.
LEASE_LOST_MARKER = "AIRFLOW_ICEBERG_LEASE_LOST "


#: The name of a job's secrets file: a JSON object, mode 0600, that the job reads and then deletes. It carries
#: secret Spark settings (a JDBC password, REST credentials, tokens and headers, S3 keys) under ``spark_conf``,
#: JVM system properties (AWS keys) under ``system_properties``, and the write gate's connection under ``gate``,
#: so none of them is ever on a command line, in a driver's spec, in rendered templates or in logs. In local and
#: client deploy modes the job gets the file's path; in cluster modes spark-submit ships it with ``--files``.
JOB_SECRETS_FILE = "airflow-iceberg-job-secrets.json"


def read_job_secrets(location: str | None) -> dict[str, Any]:
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
    return secrets


def apply_job_secrets(spark: Any, secrets: Mapping[str, Any]) -> None:
    """Set the secret Spark settings on ``spark``'s session and the system properties in its driver's JVM.

    Catalogs are created when first used, so a catalog's secret settings take effect if set before that.
    """
    for key, value in secrets.get("spark_conf", {}).items():
        spark.conf.set(key, value)
    system = spark.sparkContext._jvm.java.lang.System
    for key, value in secrets.get("system_properties", {}).items():
        system.setProperty(key, value)


def format_result_line(result: Mapping[str, object]) -> str:
    """The line the Spark job prints for its result row."""
    return RESULT_MARKER + json.dumps(dict(result), sort_keys=True, default=str)


def parse_result_line(line: str) -> dict[str, object] | None:
    """The result row from a line printed by :func:`format_result_line`, or None for any other line.

    Text after the JSON object is ignored: spark-submit's stderr (Spark's console progress bar, which ends
    its updates with a carriage return, not a newline) can land on the same line of the merged output.
    """
    start = line.find(RESULT_MARKER)
    if start < 0:
        return None
    try:
        result, _ = json.JSONDecoder().raw_decode(line, start + len(RESULT_MARKER))
    except ValueError:
        return None
    return result if isinstance(result, dict) else None
