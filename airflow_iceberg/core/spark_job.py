"""What Airflow and the Spark job exchange, defined once for both sides.

- :class:`JobArguments`: the job's command line, the table and its :class:`ProcedureCall` list (no secret ever);
- :class:`JobSecrets`: its secrets file, which the job reads and deletes;
- its result lines (:func:`format_result_line`) and the marker it prints when its run lost the gate.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from airflow_iceberg.core.procedures import build_call
from airflow_iceberg.core.tables import InvalidCallError, TableName, shown

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


@dataclass(frozen=True)
class ProcedureCall:
    """One Iceberg procedure for the job to run: its options, ``where`` predicate and other arguments."""

    procedure: str
    options: Mapping[str, Any] = field(default_factory=dict)
    where: str | None = None
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def statement(self, table: TableName) -> str:
        """The checked ``CALL`` on ``table``; :class:`InvalidCallError` names a bad value."""
        return build_call(self.procedure, table, self.options, self.where, self.arguments)

    @classmethod
    def from_json(cls, value: object) -> ProcedureCall:
        """The call a JSON object describes; :class:`InvalidCallError` names an object that is not one."""
        known = {"procedure", "options", "where", "arguments"}
        if not isinstance(value, dict) or not isinstance(value.get("procedure"), str) or set(value) - known:
            raise InvalidCallError(f"a procedure call is an object with a procedure and {known}, got {shown(value)}")
        return cls(**value)


@dataclass(frozen=True)
class JobArguments:
    """The job's command line: everything but its secrets, which travel in its secrets file."""

    table: TableName
    calls: Sequence[ProcedureCall]
    job_secrets: str | None = None  # a path, or in cluster deploy modes the name of a file shipped with --files

    def argv(self) -> list[str]:
        calls = json.dumps([asdict(call) for call in self.calls])
        secrets = ["--job-secrets", self.job_secrets] if self.job_secrets else []
        return ["--table", str(self.table), "--calls", calls, *secrets]

    @classmethod
    def parse(cls, argv: Sequence[str] | None = None) -> JobArguments:
        """The arguments in ``argv``, each checked: a bad one raises before Spark starts."""
        parser = argparse.ArgumentParser(description="Run Iceberg procedures on one table, in order")
        parser.add_argument("--table", required=True, help="catalog.namespace.table")
        parser.add_argument("--calls", required=True, help="JSON list of procedure calls (ProcedureCall)")
        parser.add_argument("--job-secrets", default=None, help="the job's secrets file: a path, or a --files name")
        args = parser.parse_args(argv)
        calls = json.loads(args.calls)
        if not isinstance(calls, list) or not calls:
            raise InvalidCallError(f"--calls must be a non-empty JSON list of procedure calls, got {shown(calls)}")
        return cls(TableName.parse(args.table), tuple(ProcedureCall.from_json(c) for c in calls), args.job_secrets)


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
