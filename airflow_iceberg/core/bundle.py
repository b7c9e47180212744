"""The core as one zip, for ``spark-submit --py-files``: what a Spark job (or a Spark writer) imports the core from."""

from __future__ import annotations

import hashlib
import os
import tempfile
import zipfile
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]  # airflow_iceberg/


def core_files() -> list[Path]:
    """The files the zip holds: the core's modules and the package's own ``__init__.py`` above them."""
    return [_PACKAGE / "__init__.py", *sorted((_PACKAGE / "core").glob("*.py"))]


def core_zip(directory: Path | None = None) -> Path:
    """The zip of :func:`core_files`, written once per content into ``directory`` (the system's temp folder).

    Its name carries a digest of the content, so an upgraded provider never ships a stale zip, and it is written
    to a temporary name and renamed, so tasks that build it at once never read half a file.
    """
    files = core_files()
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(_PACKAGE.parent).as_posix().encode() + b"\0" + path.read_bytes())
    target = Path(directory or tempfile.gettempdir()) / f"airflow-iceberg-core-{digest.hexdigest()[:16]}.zip"
    if not target.exists():
        handle, partial = tempfile.mkstemp(dir=target.parent, suffix=".zip.partial")
        os.close(handle)
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in files:
                archive.write(path, path.relative_to(_PACKAGE.parent).as_posix())
        os.chmod(partial, 0o644)
        os.replace(partial, target)
    return target
