"""The wheel lists its packages by hand (two of them map other folders): every package of the tree is listed."""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_under_airflow_iceberg_ships_in_the_wheel():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(init.parent.relative_to(ROOT).parts) for init in (ROOT / "airflow_iceberg").rglob("__init__.py")}
    assert found - listed == set(), "packages missing from [tool.setuptools] packages in pyproject.toml"
