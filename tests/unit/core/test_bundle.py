"""The core is Airflow-free and ships to Spark as one zip that imports on its own."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from airflow_iceberg.core import bundle

CORE = Path(bundle.__file__).resolve().parent


def test_the_zip_holds_every_core_module_and_the_package_init_and_nothing_else(tmp_path: Path):
    names = zipfile.ZipFile(bundle.core_zip(tmp_path)).namelist()
    expected = ["airflow_iceberg/__init__.py", *sorted(f"airflow_iceberg/core/{p.name}" for p in CORE.glob("*.py"))]
    assert sorted(names) == sorted(expected)


def test_the_zip_is_built_once_per_content(tmp_path: Path):
    first = bundle.core_zip(tmp_path)
    assert bundle.core_zip(tmp_path) == first
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no partial file left behind


def test_every_module_of_the_zip_imports_alone_without_airflow(tmp_path: Path):
    """What a Spark driver or a writer has: the zip on its path and no Airflow (pymysql and pyspark are imported
    when used). Every module the zip holds, found in it, not listed here."""
    zipped = bundle.core_zip(tmp_path)
    modules = sorted(
        name.removesuffix(".py").replace("/", ".")
        for name in zipfile.ZipFile(zipped).namelist()
        if name.startswith("airflow_iceberg/core/") and not name.endswith("__init__.py")
    )
    assert len(modules) == len(list(CORE.glob("*.py"))) - 1
    probe = (
        "import importlib, sys; sys.modules['airflow'] = None\n"  # any import of Airflow fails
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(sys.modules['airflow_iceberg.core.procedures'].__file__)"
    )
    done = subprocess.run(
        [sys.executable, "-S", "-c", probe],  # -S: no site-packages, so no installed provider,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(zipped)},
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(str(tmp_path)), done.stdout
