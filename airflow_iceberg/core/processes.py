"""Processes that end with the process that started them."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

# Loaded at import, before any fork: a function that runs in a child between fork and exec may import nothing.
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent: int | None = None) -> None:
    """Have Linux kill this process (SIGKILL) when its parent process dies; elsewhere, nothing.

    A Spark job started by spark-submit in local or client deploy mode is a child of spark-submit's JVM, which
    is a child of the Airflow task: with this in both (spark-submit gets it as its ``preexec_fn``), killing the
    task ends the Spark work within moments.

    :param parent: The process id the parent must have; by default, the parent's now. A ``preexec_fn`` passes
        the starting process's id, read before the fork. If the parent is already gone, this process exits at once.
    """
    if _LIBC is None:
        return
    expected = os.getppid() if parent is None else parent
    # Refused in a restricted sandbox; the lease still bounds the work there.
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != expected:  # the parent died before the signal was armed
        os._exit(1)
