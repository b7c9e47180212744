"""Fixtures every test may use, and what keeps the workers of a parallel run (``pytest -n 2``, pytest-xdist) apart.

Each worker has databases, a warehouse and an Airflow home of its own (``WORKER_SUFFIX``). Its Airflow home holds a
copy of the metadata database that ``make setup`` migrated, made here, before anything imports Airflow, because
Airflow reads ``AIRFLOW_HOME`` once, at import; two ``dag.test()`` at once on one SQLite file would lock each other.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

#: The environment as the suite was started with, before a worker gets an Airflow home of its own: what a user's
#: own ``make demo`` would see.
ENV_BEFORE_THE_SUITE = dict(os.environ)
#: The xdist worker this process is (``gw0``, ``gw1``, ...), or "" in a run without workers.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
#: Ends the names of what a worker keeps to itself: databases, MySQL users, the warehouse, the Airflow home.
WORKER_SUFFIX = f"_{WORKER}" if WORKER else ""


def _own_airflow_home() -> None:
    shared = Path(os.environ["AIRFLOW_HOME"])
    own = shared.with_name(f"{shared.name}{WORKER_SUFFIX}")
    shutil.rmtree(own, ignore_errors=True)
    own.mkdir(parents=True)
    if (shared / "airflow.db").is_file():  # Airflow writes its own airflow.cfg for the new home at import
        shutil.copyfile(shared / "airflow.db", own / "airflow.db")
    os.environ["AIRFLOW_HOME"] = str(own)


if WORKER and "AIRFLOW_HOME" in os.environ:
    _own_airflow_home()


def pytest_sessionstart(session: pytest.Session) -> None:
    """A run with integration tests writes the stack's check records anew (conftest's ``stack_check``): cleared
    here, once, by the process that starts the run, not by each worker, which would delete the others'."""
    if WORKER or "AIRFLOW_ICEBERG_STACK_BUILD" not in os.environ:
        return
    integration = Path(__file__).resolve().parent / "integration"
    chosen = [Path(str(arg).split("::")[0]).resolve() for arg in session.config.args]
    if any(path == integration or integration in path.parents or path in integration.parents for path in chosen):
        shutil.rmtree(Path(os.environ["AIRFLOW_ICEBERG_STACK_BUILD"]) / "checks", ignore_errors=True)


#: The fixtures that start a live ``airflow standalone`` (tests/integration).
LIVE_AIRFLOWS = {"live_airflow", "fleet_airflow"}


def uses_live_airflow(item: pytest.Item) -> bool:
    return bool(LIVE_AIRFLOWS & set(getattr(item, "fixturenames", ())))


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The tests that share one live Airflow come first and one after the other, on one worker (--dist loadgroup):
    # it starts once, and stops when the last of them is done (tests/integration/conftest.py), not at the end.
    # The fleet's own Airflow (a module's) first, so that it is gone before the session's starts: never two at once.
    live = sorted(
        (item for item in items if uses_live_airflow(item)), key=lambda i: "fleet_airflow" not in i.fixturenames
    )
    for item in live:
        item.add_marker(pytest.mark.xdist_group("live_airflow"))
    items[:] = live + [item for item in items if not uses_live_airflow(item)]


@pytest.hookimpl(tryfirst=True)  # before the live Airflow's fixture starts one
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A live Airflow's test fails if xdist did not group it with the others: ungrouped, they would run on both
    workers, each starting an Airflow of its own. pytest-xdist 3.8 groups by rewriting node ids, which pytest 9.2
    no longer reads (pytest-xdist#1386), hence pyproject's ``pytest<9.2``."""
    if WORKER and item.config.getoption("loadgroup", default=False) and uses_live_airflow(item):
        if not item.nodeid.endswith("@live_airflow"):
            pytest.fail(
                f"pytest-xdist's --dist loadgroup did not group {item.nodeid} with the other tests of the live "
                "Airflow (pytest-xdist#1386): install pytest and pytest-xdist as pyproject.toml asks",
                pytrace=False,
            )


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> str:
    """A short identifier unique to this test and run, usable as an Iceberg namespace or table name."""
    stem = "".join(c if c.isalnum() else "_" for c in request.node.name.lower())[:30].strip("_")
    return f"{stem}_{uuid.uuid4().hex[:6]}"
