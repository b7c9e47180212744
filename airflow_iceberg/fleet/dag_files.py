"""The compaction DAG files of a DAG folder: ``iceberg_compaction.py``, and one more file for each further
``tables_per_dag_file`` tables of a long table list (:mod:`airflow_iceberg.fleet.shards` says why and how a table's
file is chosen).

File 0 is ``iceberg_compaction.py``; file *k* is ``iceberg_compaction_k.py``, a few lines that the provider writes
(:func:`write_dag_files`): ``airflow-iceberg dags`` does, and so does the fleet setting's DAG bundle when the table
list changes. Until file *k* exists, ``iceberg_compaction.py`` builds its tables' DAGs itself, so no table is ever
without its DAGs for want of a file; ``iceberg_table_list_check.py`` reports the missing files as an import error
that says how to make them. A file whose index the table list no longer reaches builds nothing.

This module imports no operator: the DAG bundle uses it in the dag-processor's manager.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from airflow_iceberg.core.tables import InvalidCallError, TableName
from airflow_iceberg.exceptions import IcebergConfigError
from airflow_iceberg.fleet.shards import dag_file_count, dag_file_of
from airflow_iceberg.table_list.loader import TABLES_PER_DAG_FILE_KEY, TableListDocument, read_table_list

#: File 0 of the compaction DAGs, the one the provider ships.
COMPACTION_DAG_FILE = "iceberg_compaction.py"

_NUMBERED = re.compile(r"iceberg_compaction_([1-9][0-9]*)\.py")

_TEXT = '''"""Compaction DAGs of Iceberg tables, file {index} of the table list's: airflow-iceberg writes it.

A table list of more than ``tables_per_dag_file`` tables (1,000 by default) is split across several DAG files, so
that no parse nears Airflow's import time-out; a hash of each table's name picks its file. Do not edit it:
``airflow-iceberg dags`` and the fleet setting's DAG bundle write it again. ``iceberg_compaction.py`` says more.
"""

from __future__ import annotations

from airflow_iceberg.surface.dag_factory import compaction_dag_file

globals().update(compaction_dag_file(__file__))
'''


def dag_files_taken(document: TableListDocument) -> int:
    """How many compaction DAG files the table list's entries take (:mod:`airflow_iceberg.fleet.shards`)."""
    return dag_file_count(len(document.entries), document.tables_per_dag_file)


def dag_files_in_use(document: TableListDocument) -> set[int]:
    """The indexes of the compaction DAG files that build at least one of the table list's tables (an entry without a
    valid table name builds none)."""
    files, used = dag_files_taken(document), set()
    for entry in document.entries:
        table = entry.get("table") if isinstance(entry, Mapping) else None
        if not isinstance(table, str):
            continue
        try:
            used.add(dag_file_of(str(TableName.of(table)), files))
        except InvalidCallError:
            continue
    return used


def dag_file_name(index: int) -> str:
    """The name of compaction DAG file ``index``."""
    return COMPACTION_DAG_FILE if index == 0 else f"iceberg_compaction_{index}.py"


def dag_file_index(name: str) -> int:
    """The index of the compaction DAG file called ``name``: 0 for ``iceberg_compaction.py`` and any other name
    (a copy of it under a name of one's own builds what it did)."""
    numbered = _NUMBERED.fullmatch(name)
    return int(numbered.group(1)) if numbered else 0


def dag_file_text(index: int) -> str:
    """What the provider writes as compaction DAG file ``index`` (1 or more)."""
    return _TEXT.format(index=index)


def missing_dag_files(folder: Path, files: int) -> list[Path]:
    """Compaction DAG files 1 to ``files - 1`` that ``folder`` lacks."""
    return [path for path in (folder / dag_file_name(k) for k in range(1, files)) if not path.exists()]


def files_built_by(path: Path, files: int) -> set[int]:
    """The indexes of the DAG files whose tables the DAG file at ``path`` builds, of ``files``: its own, and for
    file 0 those of any file missing beside it; none when the table list takes fewer files than its index."""
    index = dag_file_index(path.name)
    if index >= files:
        return set()
    if index > 0:
        return {index}
    return {0} | {dag_file_index(missing.name) for missing in missing_dag_files(path.parent, files)}


def builds_its_share(path: Path) -> bool:
    """Whether the compaction DAG file at ``path`` builds only its own file's tables, as this provider's files do
    (an older provider's ``iceberg_compaction.py`` builds every table's)."""
    try:
        return "compaction_dag_file(__file__)" in path.read_text(errors="replace")
    except OSError:
        return False


def write_dag_files(folder: Path, files: int, *, remove_surplus: bool = False) -> tuple[list[Path], list[Path]]:
    """Write compaction DAG files 1 to ``files - 1`` into ``folder`` where missing or not the provider's current
    text; with ``remove_surplus``, delete numbered files past them. The paths written, and those removed.

    Raises :class:`OSError` when the folder cannot be written.
    """
    written = []
    for index in range(1, files):
        path = folder / dag_file_name(index)
        text = dag_file_text(index)
        try:
            if path.read_text() == text:
                continue
        except OSError:
            pass
        path.write_text(text)
        written.append(path)
    removed = []
    if remove_surplus:
        for path in surplus_dag_files(folder, files):
            path.unlink()
            removed.append(path)
    return written, removed


def surplus_dag_files(folder: Path, files: int) -> list[Path]:
    """The numbered compaction DAG files of ``folder`` that a table list of ``files`` files no longer reaches."""
    return [
        path
        for path in sorted(folder.glob("iceberg_compaction_*.py"))
        if _NUMBERED.fullmatch(path.name) and dag_file_index(path.name) >= files
    ]


def ask_for_parses(bundle_name: str, files: list[str]) -> None:
    """Ask Airflow's dag-processor to parse ``files`` (relative to DAG bundle ``bundle_name``'s folder) at once: a
    priority parsing request in Airflow's metadata database, what the UI's reparse button makes. The dag-processor
    also lists the bundle's folder again for it, so a new file is parsed within seconds, not at its next listing of
    the folder (the bundle's ``refresh_interval``). Raises what the database raises."""
    from airflow.models.dagbag import DagPriorityParsingRequest
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        asked = DagPriorityParsingRequest.bundle_name == bundle_name
        pending = set(session.scalars(select(DagPriorityParsingRequest.relative_fileloc).where(asked)))
        session.add_all(DagPriorityParsingRequest(bundle_name, file) for file in files if file not in pending)


def table_list_problems(folder: Path) -> None:
    """Raise :class:`IcebergConfigError` naming the table list's bad entries, and the compaction DAG files the
    list takes that ``folder`` lacks (when ``folder`` holds ``iceberg_compaction.py``): the check DAG file's
    import error."""
    document = read_table_list()
    errors = document.validate().errors
    problems = []
    if errors:
        problems.append(
            f"{len(errors)} bad entr{'y' if len(errors) == 1 else 'ies'} in {document.path}:\n" + "\n".join(errors)
        )
    files = dag_files_taken(document)
    missing = missing_dag_files(folder, files) if (folder / COMPACTION_DAG_FILE).exists() else []
    if missing:
        problems.append(
            f"{document.path} lists {len(document.entries):,} tables, which take {files} compaction DAG "
            f"files of at most {document.tables_per_dag_file:,} tables ({TABLES_PER_DAG_FILE_KEY}), and {folder} "
            f"lacks {', '.join(path.name for path in missing)}: {COMPACTION_DAG_FILE} builds their tables' DAGs "
            f"meanwhile, in one parse that may pass Airflow's time-out. Run `airflow-iceberg dags {folder}`, or use "
            "the fleet setting's DAG bundle, which writes them when the list changes"
        )
    if problems:
        raise IcebergConfigError("\n".join(problems))
