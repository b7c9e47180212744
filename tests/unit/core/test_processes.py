"""A process that must die with its parent checks, once armed, that its parent is the one it expects."""

from __future__ import annotations

import subprocess
import sys

PROBE = "from airflow_iceberg.core.processes import die_with_parent; die_with_parent({}); print('alive')"


def test_a_process_whose_parent_is_still_there_goes_on():
    done = subprocess.run([sys.executable, "-c", PROBE.format("")], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "alive"), done.stderr


def test_a_process_whose_expected_parent_is_gone_exits_at_once():
    """As a preexec_fn does when the task died between its fork and the signal being armed."""
    gone = 2**22 + 1  # above Linux's default pid_max: no process has it, so it is not this process's parent
    done = subprocess.run([sys.executable, "-c", PROBE.format(gone)], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
