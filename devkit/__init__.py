"""The workbench: demo, benches, the test harness and the reference writers. Not installed with the package."""

from __future__ import annotations

import os

#: More options for the JVMs devkit starts itself (Flink jobs, the Kafka broker). The test suite sets its
#: quick-start ones here (tests/integration/conftest.py); the benches leave it unset, so their JVMs run as a user's.
EXTRA_JVM_OPTIONS_ENV = "AIRFLOW_ICEBERG_DEVKIT_JVM_OPTIONS"


def extra_jvm_options() -> list[str]:
    return os.environ.get(EXTRA_JVM_OPTIONS_ENV, "").split()
