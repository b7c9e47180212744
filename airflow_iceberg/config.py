"""The table list: which Iceberg tables get a compaction DAG, and with which settings.

Read from ``dags/iceberg_tables.yaml`` or the file named by ``AIRFLOW_ICEBERG_CONFIG``. Each entry under
``tables`` is validated on its own, after the ``defaults`` block is merged under it, so one bad entry is
reported by its position, table name and field while every other table still gets its DAG.
"""

from __future__ import annotations

import os
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from spark_jobs.iceberg_call import InvalidCallError, TableName, normalize_options

CONFIG_ENV = "AIRFLOW_ICEBERG_CONFIG"
DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "dags" / "iceberg_tables.yaml"


class IcebergConfigError(ValueError):
    """The table list, or entries in it, cannot be used; the message names each entry and field."""


class SparkSettings(BaseModel):
    """How the rewrite jobs reach Spark and Iceberg's runtime: jars on disk, or Maven packages."""

    model_config = ConfigDict(extra="forbid")

    jars: list[str] = Field(default_factory=list, description="Jar paths; ${VAR} expands from the environment")
    packages: list[str] = Field(default_factory=list, description="Maven coordinates for spark.jars.packages")
    conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark settings")
    driver_memory: str | None = Field(default=None, description="e.g. 4G")
    executor_memory: str | None = Field(default=None, description="e.g. 8G")
    num_executors: int | None = Field(default=None, gt=0, description="YARN and Kubernetes")
    executor_cores: int | None = Field(default=None, gt=0, description="YARN and standalone")
    total_executor_cores: int | None = Field(default=None, gt=0, description="Standalone only")

    @field_validator("jars", "packages", mode="before")
    @classmethod
    def _expand_environment(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        expanded = []
        for item in value:
            try:
                expanded.append(string.Template(str(item)).substitute(os.environ))
            except KeyError as missing:
                raise ValueError(f"{item!r} uses environment variable {missing} which is not set") from None
            except ValueError as error:
                raise ValueError(f"{item!r}: {error}") from None
        return expanded


class TableConfig(BaseModel):
    """One gated table and how its compaction DAG runs."""

    model_config = ConfigDict(extra="forbid")

    table: str = Field(description="catalog.namespace.table")
    schedule: str | None = Field(default=None, description="Cron expression or preset; None for manual runs")
    idle_seconds: int = Field(default=300, ge=0, description="Quiet time required after the gate closes")
    lease_seconds: int = Field(default=3600, gt=0, description="Longest the gate stays closed if a run dies")
    poke_seconds: int = Field(default=10, gt=0, description="Pause between checks for a quiet writer")
    deferrable: bool = Field(default=False, description="Wait for the writer in the triggerer")
    where: str | None = Field(default=None, description="Templated Spark SQL predicate for recent partitions")
    rewrite_data_files: dict[str, Any] = Field(default_factory=dict, description="Options by Iceberg's names")
    rewrite_position_delete_files: dict[str, Any] = Field(default_factory=dict)
    spark_conn_id: str = "spark_default"
    iceberg_conn_id: str | None = Field(default=None, description="Defaults to the catalog's name")
    write_gate_conn_id: str = "write_gate_default"
    spark: SparkSettings = Field(default_factory=SparkSettings)

    @field_validator("table")
    @classmethod
    def _table_name(cls, value: str) -> str:
        try:
            return str(TableName.parse(value))
        except InvalidCallError as error:
            raise ValueError(str(error)) from None

    @field_validator("rewrite_data_files", "rewrite_position_delete_files")
    @classmethod
    def _options(cls, value: dict[str, Any], info: Any) -> dict[str, Any]:
        try:
            normalize_options(info.field_name, value)
        except InvalidCallError as error:
            raise ValueError(str(error)) from None
        return value

    @model_validator(mode="after")
    def _lease_covers_the_wait(self) -> TableConfig:
        # The sensor gives up at half the lease, leaving the other half for the rewrites.
        if self.lease_seconds <= 2 * self.idle_seconds:
            raise ValueError(
                f"lease_seconds ({self.lease_seconds}) must be more than twice idle_seconds "
                f"({self.idle_seconds}), so the writer can go quiet and the rewrites finish within the lease"
            )
        return self

    @property
    def name(self) -> TableName:
        return TableName.parse(self.table)

    @property
    def catalog_conn_id(self) -> str:
        return self.iceberg_conn_id or self.name.catalog


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
        shown = "" if item["type"] in ("value_error", "missing") else f" (got {item['input']!r})"
        parts.append(f"field {field!r}: {message}{shown}")
    return "; ".join(parts)


def _merge(defaults: Mapping[str, Any], entry: Mapping[str, Any]) -> dict[str, Any]:
    """``entry`` over ``defaults``; mappings in both (``spark``, ``spark.conf``, options) merge key by key."""
    merged = {**defaults, **entry}
    for key, value in entry.items():
        if isinstance(value, Mapping) and isinstance(defaults.get(key), Mapping):
            merged[key] = _merge(defaults[key], value)
    return merged


def config_path() -> Path:
    """The table list in use: ``$AIRFLOW_ICEBERG_CONFIG`` if set, else ``dags/iceberg_tables.yaml``."""
    return Path(os.environ.get(CONFIG_ENV) or DEFAULT_CONFIG)


def load_table_list(path: Path | None = None) -> TableList:
    """Read and validate the table list. A file that cannot be read at all raises :class:`IcebergConfigError`."""
    path = path or config_path()
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise IcebergConfigError(f"{path}: cannot read the table list: {error}") from None
    if not isinstance(document, Mapping) or not isinstance(document.get("tables"), list):
        raise IcebergConfigError(f"{path}: expected a mapping with a 'tables' list")
    unknown = set(document) - {"defaults", "tables"}
    if unknown:
        raise IcebergConfigError(f"{path}: unknown top-level keys {sorted(unknown)}; expected defaults, tables")
    defaults = document.get("defaults") or {}
    if not isinstance(defaults, Mapping):
        raise IcebergConfigError(f"{path}: 'defaults' must be a mapping")

    tables: list[TableConfig] = []
    errors: list[str] = []
    seen: set[str] = set()
    for index, entry in enumerate(document["tables"]):
        label = f"{path.name}: tables[{index}]"
        if not isinstance(entry, Mapping):
            errors.append(f"{label}: expected a mapping with at least 'table', got {entry!r}")
            continue
        label += f" ({entry.get('table', 'no table')})"
        try:
            config = TableConfig.model_validate(_merge(defaults, entry))
        except ValidationError as error:
            errors.append(f"{label}: {_describe(error)}")
            continue
        if config.table in seen:
            errors.append(f"{label}: field 'table': {config.table} is listed more than once")
            continue
        seen.add(config.table)
        tables.append(config)
    return TableList(tables=tables, errors=errors)
