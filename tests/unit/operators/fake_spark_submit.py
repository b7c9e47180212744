"""A spark-submit that is a shell script, and a task instance that keeps what a task pushes: for running the
procedure operators' ``execute`` without Spark."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest


def fake_spark_submit(directory: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    """Put a ``spark-submit`` running ``script`` (its output, then its exit status) first on the PATH, with a
    local Spark connection and a catalog connection ``lake`` that nothing reaches."""
    spark_submit = directory / "spark-submit"
    spark_submit.write_text(f"#!/bin/sh\n{script}")
    spark_submit.chmod(0o755)
    monkeypatch.setenv("PATH", f"{directory}:{os.environ['PATH']}")
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[1]"}))
    catalog = {"type": "sql", "uri": "mysql+pymysql://u@127.0.0.1:1/unused", "warehouse": "file:///tmp/unused"}
    monkeypatch.setenv("AIRFLOW_CONN_LAKE", json.dumps({"conn_type": "iceberg", "extra": catalog}))


class PushedXCom:
    """A task instance's ``xcom_push``, kept."""

    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def flag(command: list[str], name: str) -> str:
    """The value after ``name`` in a spark-submit command."""
    return command[command.index(name) + 1]
