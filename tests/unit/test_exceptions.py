"""Every exception the provider defines is importable from airflow_iceberg.exceptions, and defined there or in core."""

from __future__ import annotations

import ast
from pathlib import Path

import airflow_iceberg
from airflow_iceberg import exceptions

PACKAGE = Path(airflow_iceberg.__file__).resolve().parent


def defined_exceptions() -> dict[str, Path]:
    """Each public class of the package whose name says it is an error, and the file that defines it."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and node.name.endswith(("Error", "Exception")):
                if not node.name.startswith("_"):
                    found[node.name] = path.relative_to(PACKAGE)
    return found


def test_every_exception_is_exported_from_the_one_module():
    assert sorted(defined_exceptions()) == sorted(exceptions.__all__)
    assert all(isinstance(getattr(exceptions, name), type) for name in exceptions.__all__)


def test_exceptions_live_in_exceptions_py_or_beside_the_airflow_free_core_that_raises_them():
    places = {str(path) for path in defined_exceptions().values()}
    core = {
        "core/tables.py",
        "core/gate_protocol.py",
        "core/lease.py",
        "core/gate_holder.py",
        "core/gate_store.py",
        "core/gate_work.py",
    }
    assert places <= {"exceptions.py", *core}, places
