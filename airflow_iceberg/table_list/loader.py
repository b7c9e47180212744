"""The table list: which Iceberg tables get a compaction DAG, read and validated entry by entry.

Read from the file named by ``AIRFLOW_ICEBERG_CONFIG``, or else ``iceberg_tables.yaml`` in Airflow's DAG folder
(``[core] dags_folder``). Each entry under ``tables`` is validated on its own (``schema.TableConfig``), after the
``defaults`` block is merged under it, so one bad entry is reported by its position, table name and field while
every other table still gets its DAG.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from airflow.sdk import conf
from pydantic import ValidationError

from airflow_iceberg.core.tables import InvalidCallError, TableName, shown
from airflow_iceberg.exceptions import IcebergConfigError
from airflow_iceberg.table_list.schema import TableConfig

CONFIG_ENV = "AIRFLOW_ICEBERG_CONFIG"

TABLE_LIST_FILE = "iceberg_tables.yaml"

#: Top-level keys with this prefix are ignored, as extension fields are in Compose files: they hold blocks that
#: entries reuse through YAML anchors.
EXTENSION_PREFIX = "x-"

#: The optional top-level key that caps how many tables' DAGs one compaction DAG file builds
#: (:mod:`airflow_iceberg.fleet.shards` splits a longer list across files).
TABLES_PER_DAG_FILE_KEY = "tables_per_dag_file"

#: How many tables' DAGs one compaction DAG file builds at most, unless the table list says otherwise
#: (``tables_per_dag_file``): at this size a file builds in about a fifth of Airflow's import time-out on two cores.
TABLES_PER_DAG_FILE = 1000


@dataclass(frozen=True)
class TableList:
    """The valid entries, and one message for each invalid one."""

    tables: list[TableConfig]
    errors: list[str]


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors():
        field = ".".join(str(p) for p in item["loc"]) or "(entry)"
        message = item["msg"].removeprefix("Value error, ")
        got = "" if item["type"] in ("value_error", "missing") else f" (got {shown(item['input'])})"
        parts.append(f"field {field!r}: {message}{got}")
    return "; ".join(parts)


def _merge(defaults: Mapping[str, Any], entry: Mapping[str, Any]) -> dict[str, Any]:
    """``entry`` over ``defaults``; mappings in both (``spark``, ``spark.conf``, options) merge key by key."""
    merged = {**defaults, **entry}
    for key, value in entry.items():
        if isinstance(value, Mapping) and isinstance(defaults.get(key), Mapping):
            merged[key] = _merge(defaults[key], value)
    return merged


def dags_folder() -> Path:
    """Airflow's DAG folder, ``[core] dags_folder``."""
    return Path(conf.get("core", "dags_folder")).expanduser()


def config_path() -> Path:
    """The table list in use: ``$AIRFLOW_ICEBERG_CONFIG`` if set, else ``iceberg_tables.yaml`` in the DAG folder."""
    explicit = os.environ.get(CONFIG_ENV)
    if explicit:
        return Path(explicit)
    return dags_folder() / TABLE_LIST_FILE


# libyaml's loader when PyYAML was built with it: a 1,000-table list loads in half the time.
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_table_list(path: Path | None = None, select: Callable[[TableName], bool] | None = None) -> TableList:
    """Read and validate the table list. A file that cannot be read at all raises :class:`IcebergConfigError`.

    With ``select``, only the entries whose table it accepts are validated and returned, with their errors: a
    task's process needs one table's settings, not every table's.
    """
    return read_table_list(path).validate(select)


@dataclass(frozen=True)
class TableListDocument:
    """The table list as read, before its entries are validated: what a DAG file needs to pick its tables."""

    path: Path
    defaults: Mapping[str, Any]
    entries: list[Any]
    tables_per_dag_file: int

    def validate(self, select: Callable[[TableName], bool] | None = None) -> TableList:
        """Validate each entry (only those whose table ``select`` accepts, with it), the defaults merged under it."""
        tables: list[TableConfig] = []
        errors: list[str] = []
        seen: set[TableName] = set()
        for index, entry in enumerate(self.entries):
            label = f"{self.path.name}: tables[{index}]"
            if not isinstance(entry, Mapping):
                errors.append(f"{label}: expected a mapping with at least 'table', got {shown(entry)}")
                continue
            label += f" ({shown(entry.get('table', 'no table'), quoted=False)})"
            if select is not None and not _selected(entry.get("table"), select):
                continue
            try:
                config = TableConfig.model_validate(_merge(self.defaults, entry))
            except ValidationError as error:
                errors.append(f"{label}: {_describe(error)}")
                continue
            if config.table in seen:
                errors.append(f"{label}: field 'table': {config.table} is listed more than once")
                continue
            seen.add(config.table)
            tables.append(config)
        return TableList(tables=tables, errors=errors)


def read_table_list(path: Path | None = None) -> TableListDocument:
    """Read the table list's document and check its top level; :class:`IcebergConfigError` naming what is wrong.

    The entries are not validated here (:meth:`TableListDocument.validate`).
    """
    path = path or config_path()
    try:
        document = yaml.load(path.read_text(), Loader=_YAML_LOADER) or {}
    except (OSError, yaml.YAMLError) as error:
        raise IcebergConfigError(f"{path}: cannot read the table list: {error}") from None
    if not isinstance(document, Mapping) or not isinstance(document.get("tables"), list):
        raise IcebergConfigError(f"{path}: expected a mapping with a 'tables' list")
    known = {"defaults", "tables", TABLES_PER_DAG_FILE_KEY}
    unknown = {key for key in document if not str(key).startswith(EXTENSION_PREFIX)} - known
    if unknown:
        raise IcebergConfigError(
            f"{path}: unknown top-level keys {sorted(unknown)}; expected defaults, tables, "
            f"{TABLES_PER_DAG_FILE_KEY}, and any {EXTENSION_PREFIX}* blocks for YAML anchors"
        )
    defaults = document.get("defaults") or {}
    if not isinstance(defaults, Mapping):
        raise IcebergConfigError(f"{path}: 'defaults' must be a mapping")
    per_file = document.get(TABLES_PER_DAG_FILE_KEY, TABLES_PER_DAG_FILE)
    if isinstance(per_file, bool) or not isinstance(per_file, int) or per_file < 1:
        raise IcebergConfigError(
            f"{path}: {TABLES_PER_DAG_FILE_KEY} must be a whole number of at least 1, got {shown(per_file)}"
        )
    return TableListDocument(path, defaults, document["tables"], per_file)


def _selected(table: Any, select: Callable[[TableName], bool]) -> bool:
    """Whether ``select`` takes the entry's table; an entry without a valid name is not selected."""
    try:
        return select(TableName.of(table))
    except InvalidCallError:
        return False
