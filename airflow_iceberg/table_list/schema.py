"""The table list's schema: every setting of an entry, its type, its check and its one default (pydantic).

The models here are the one place where settings get their defaults: operators take explicit values. Reading
the file and validating each entry is ``loader.py``; ``docs/configuration.md`` lists every setting from here.
"""

from __future__ import annotations

import functools
import os
import re
import string
from collections.abc import Mapping
from datetime import date
from typing import Annotated, Any, Literal

from airflow.sdk import CronTriggerTimetable
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    field_validator,
    model_validator,
)

from airflow_iceberg.core.gate_protocol import WRITE_GATE_DEFAULT_CONN_ID
from airflow_iceberg.core.iceberg_runtime import IcebergRuntime, check_options, options_it_takes, runtime_of
from airflow_iceberg.core.maintenance import FLINK_CHECKPOINT_MARKER, ORPHAN_MARGIN, minimum_orphan_age
from airflow_iceberg.core.procedures import REWRITE_PROCEDURES, normalize_options
from airflow_iceberg.core.tables import InvalidCallError, TableName
from airflow_iceberg.planning.health import HealthThresholds
from airflow_iceberg.planning.templates import may_hold_template

#: The Spark provider's default connection id (``SparkSubmitHook.default_conn_name``), written here so that
#: reading the table list does not import the Spark provider; a unit test holds the two together.
SPARK_DEFAULT_CONN_ID = "spark_default"
#: What every run of a table puts under its own ``rewrite_data_files`` options (its own win): rewrite each data
#: file that carries a delete file, applying its deletes (``delete-file-threshold``), then remove the delete files
#: that apply to no live data file any more (``remove-dangling-deletes``). Iceberg's defaults do neither, so a
#: rewrite would leave a streaming upsert's equality deletes behind for ever, and health would keep counting them.
DELETE_FOLDING_OPTIONS: dict[str, Any] = {"delete-file-threshold": 1, "remove-dangling-deletes": True}
#: What every run of a table puts under its own ``rewrite_position_delete_files`` options: rewrite every delete
#: file of the partitions the run gives it (``rewrite-all``). That rewriter keeps only the deletes that name a live
#: data file, so the delete files the data rewrite just left dangling go, even a partition's single one, which
#: Iceberg's default (a group of two files or more) would leave for ever; after ``rewrite_data_files`` with
#: ``delete-file-threshold`` 1 they are few and small.
POSITION_DELETE_FOLDING_OPTIONS: dict[str, Any] = {"rewrite-all": True}
#: Iceberg's own ``min-input-files`` of ``rewrite_data_files``: a group of fewer files is not rewritten (unless
#: other rules pick it). A ``health.min_small_files`` below it would start runs that rewrite nothing, and start
#: them again after each cool-down; such a table's rewrites get ``min-input-files`` = its ``min_small_files``.
ICEBERG_MIN_INPUT_FILES = 5


@functools.cache
def triggerer_shares_streams() -> bool:
    """Whether this Airflow's triggerer runs watchers of one ``shared_stream_key`` on one stream (3.3 and later):
    without it, every table's trigger would sweep its whole catalog."""
    from airflow.triggers.base import BaseEventTrigger

    return hasattr(BaseEventTrigger, "shared_stream_key")


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
    iceberg_version: str | None = Field(
        default=None,
        description="Iceberg's version in the rewrite jobs' Spark, e.g. 1.5.2; needed only when neither jars nor "
        "packages name an iceberg-spark-runtime (the cluster brings its own). An option that version lacks is "
        "never sent, and one a table asks for fails the table",
    )

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

    @model_validator(mode="after")
    def _one_known_iceberg(self) -> SparkSettings:
        try:
            self.iceberg_runtime()
        except InvalidCallError as error:
            raise ValueError(str(error)) from None
        return self

    def iceberg_runtime(self) -> IcebergRuntime | None:
        """The Iceberg the rewrite jobs run: ``iceberg_version``, or the runtime the jars or packages name."""
        return runtime_of(self.packages, self.jars, self.iceberg_version)


def _airflow_schedule(value: str | None) -> str | None:
    """``value`` if Airflow accepts it as a DAG's schedule (None, a preset or a cron expression).

    Checked here, with Airflow's own timetable, so that a bad schedule is reported with its table and field
    like any other setting, instead of as an import error of the whole DAG file.
    """
    if value is None or value in ("@once", "@continuous"):
        return value
    try:
        CronTriggerTimetable(value, timezone="UTC").validate()
    except Exception as error:
        raise ValueError(f"schedule {value!r} is not a cron expression or preset Airflow accepts: {error}") from None
    return value


#: A DAG schedule, checked as Airflow checks it.
ScheduleField = Annotated[str | None, AfterValidator(_airflow_schedule)]

_DATE_TOKENS = {"yyyy": "%Y", "MM": "%m", "dd": "%d", "HH": "%H"}
_DATE_PATTERN = re.compile(r"(yyyy|MM|dd|HH|[-_/.: ])+")


class PartitionOfDay(BaseModel):
    """How a run's logical date D selects D's partitions.

    Either a string column holding the day in a format (the source design's ``dt = 'yyyyMMdd'``), or a
    timestamp column partitioned with Iceberg's ``day`` transform.
    """

    model_config = ConfigDict(extra="forbid")

    column: str = Field(description="Partition source column")
    format: str | None = Field(default=None, description="Java-style date format, e.g. yyyyMMdd or yyyy-MM-dd")
    transform: Literal["day"] | None = Field(default=None, description="'day' for a day-partitioned timestamp")

    @field_validator("column")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError(f"column {value!r} must be a plain identifier")
        return value

    @field_validator("format")
    @classmethod
    def _date_format(cls, value: str | None) -> str | None:
        if value is not None and not _DATE_PATTERN.fullmatch(value):
            raise ValueError(f"format {value!r} may use only yyyy, MM, dd, HH and the separators - _ / . : space")
        return value

    @model_validator(mode="after")
    def _one_way(self) -> PartitionOfDay:
        if (self.format is None) == (self.transform is None):
            raise ValueError("give exactly one of format (a string column) or transform: day (a timestamp column)")
        return self

    def predicate_template(self) -> str:
        """A Jinja template rendering to the Spark SQL predicate for the run's logical date."""
        if self.transform == "day":
            return (
                f"`{self.column}` >= TIMESTAMP '{{{{ ds }}}} 00:00:00' "
                f"AND `{self.column}` < TIMESTAMP '{{{{ macros.ds_add(ds, 1) }}}} 00:00:00'"
            )
        return f"`{self.column}` = '{self._formatted_day()}'"

    def _formatted_day(self) -> str:
        strftime = re.sub("yyyy|MM|dd|HH", lambda m: _DATE_TOKENS[m.group(0)], self.format or "")
        return f'{{{{ logical_date.strftime("{strftime}") }}}}'


class FullRewriteConfig(BaseModel):
    """The daily full rewrite: every data file and position-delete file of a day's partitions, rewritten."""

    model_config = ConfigDict(extra="forbid")

    schedule: ScheduleField = Field(default="@daily", description="Cron or preset; None for manual runs only")
    catchup: bool = Field(default=False, description="Run the days missed since start_date")
    start_date: date = Field(default=date(2026, 1, 1), description="First logical date")
    partition: PartitionOfDay | None = Field(default=None, description="Without it, the whole table")
    max_concurrent_file_group_rewrites: int = Field(default=200, gt=0)


#: The health thresholds' defaults, defined once, with their sources, in ``planning/health.py``.
_THRESHOLDS = HealthThresholds()


class HealthConfig(BaseModel):
    """When the compaction DAG rewrites at all: thresholds read from table metadata (see ``health.HealthThresholds``).

    With ``enabled: false`` every run closes the gate and rewrites, as before health planning. With ``watch`` (the
    default, and only with ``enabled``), the triggerer sweeps the catalog every ``poll_interval`` seconds and starts
    a run when the table needs work by these thresholds (``triggers/table_health.py``); the table's ``schedule``, if
    any, runs as well, as a safety net.
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    watch: bool | None = Field(
        default=None,
        description="Watch health in the triggerer and start a run when the table needs work (an asset-scheduled "
        "DAG); false: only the table's schedule and manual runs. Unset: on with Airflow 3.3 and later, whose "
        "triggerer shares one catalog sweep among a catalog's watched tables; off below 3.3, where true is refused",
    )
    poll_interval: float = Field(
        default=60, ge=5, description="Seconds between sweeps of the catalog; tables with the same one share a sweep"
    )
    cooldown_minutes: float = Field(
        default=10, ge=0, description="No watch-started run sooner than this after the table's last run ended"
    )
    small_file_ratio: float = Field(
        default=_THRESHOLDS.small_file_ratio, gt=0, le=1, description="Small: below this share of the target"
    )
    min_small_files: int = Field(
        default=_THRESHOLDS.min_small_files,
        ge=1,
        description="Small files plus equality-delete files in a partition that trigger a rewrite",
    )
    max_delete_ratio: float = Field(
        default=_THRESHOLDS.max_delete_ratio, gt=0, description="Delete records per data record that trigger one"
    )
    max_delete_age_minutes: float = Field(
        default=_THRESHOLDS.max_delete_age_minutes, ge=0, description="A delete file this old triggers one"
    )
    max_equality_delete_files: int | None = Field(
        default=_THRESHOLDS.max_equality_delete_files,
        ge=1,
        description="Equality-delete files in a partition that trigger one; unset: not this way",
    )
    max_equality_delete_records: int | None = Field(
        default=_THRESHOLDS.max_equality_delete_records,
        ge=1,
        description="Records in a partition's equality-delete files that trigger one; unset: not",
    )

    @field_validator("watch")
    @classmethod
    def _watch_needs_shared_streams(cls, value: bool | None) -> bool | None:
        if value and not triggerer_shares_streams():
            from airflow import __version__

            raise ValueError(
                f"health.watch needs Airflow 3.3 or newer, whose triggerer shares one catalog sweep among the watched "
                f"tables; this Airflow is {__version__}. Set health.watch: false (or leave it out) and give the "
                "table a schedule: each scheduled run plans from health the same way and skips a healthy table"
            )
        return value

    @property
    def watching(self) -> bool:
        """Whether the triggerer watches the table's health: ``watch``, or unset, whether Airflow can share sweeps."""
        return self.enabled and (triggerer_shares_streams() if self.watch is None else self.watch)

    def thresholds(self) -> HealthThresholds:
        return HealthThresholds(**self.model_dump(exclude={"enabled", "watch", "poll_interval", "cooldown_minutes"}))


class MaintenanceConfig(BaseModel):
    """Upkeep after the daily full rewrite, once the gate is open again: it never pauses writers."""

    model_config = ConfigDict(extra="forbid")

    rewrite_manifests: bool = True
    expire_snapshots: bool = True
    expire_older_than_hours: float = Field(
        default=24.0, ge=0, description="Expire snapshots older than this, before the table's current snapshot"
    )
    retain_last: int = Field(default=10, gt=0, description="Keep at least this many snapshots")
    checkpoint_marker: str = Field(
        default=FLINK_CHECKPOINT_MARKER,
        description="Snapshot-summary key of the streaming writer's checkpoint; its newest snapshot is kept",
    )
    remove_orphan_files: bool = True
    orphan_older_than_hours: float = Field(default=72.0, gt=0, description="Remove orphans older than this")


def _table_name(value: Any) -> TableName:
    try:
        return TableName.of(value)
    except InvalidCallError as error:
        raise ValueError(str(error)) from None


#: A table name as the config holds it: parsed once from ``catalog.namespace.table``, written back as text.
TableNameField = Annotated[TableName, BeforeValidator(_table_name), PlainSerializer(str, return_type=str)]


class TableConfig(BaseModel):
    """One gated table and how its compaction DAG runs."""

    model_config = ConfigDict(extra="forbid")

    table: TableNameField = Field(description="catalog.namespace.table")
    schedule: ScheduleField = Field(default=None, description="Cron expression or preset; None for manual runs")
    idle_seconds: int = Field(default=300, ge=0, description="Idle time required after the gate closes")
    lease_seconds: int = Field(
        default=300, ge=5, description="Renewed while the run works; how long writers stay paused if the run dies"
    )
    max_pause_seconds: int = Field(
        default=3600, gt=0, description="Hard ceiling on how long one run keeps writers paused"
    )
    poke_interval: float = Field(
        default=10, gt=0, description="Seconds between looks: for an idle writer, and at a gate another run holds"
    )
    gate_wait_seconds: int = Field(
        default=900, ge=0, description="How long close_gate waits for a held gate or a Spark slot"
    )
    deferrable: bool = Field(default=False, description="Wait for the writer in the triggerer")
    prestart_spark: bool = Field(
        default=False,
        description="Start the rewrite's Spark application beside close_gate, which closes once it is ready; it "
        "begins at the idle wait's go, so neither Spark's start-up nor a scheduler round trip is inside the pause. "
        "Needs an executor that runs a run's tasks at once (not `airflow dags test`); not with spark_slots",
    )
    pause_writers: Literal["conflicting", "all"] = Field(
        default="conflicting",
        description="Which writers a compaction pauses: `conflicting`, those whose commits can conflict with its "
        "rewrites (each writer declares what it commits; one that declares nothing pauses), or `all`, every writer",
    )
    where: str | dict[str, str | None] | None = Field(
        default=None,
        description="Templated Spark SQL predicate for both rewrites, or one per procedure (a procedure left out "
        "or null rewrites the whole table)",
    )
    health: HealthConfig = Field(default_factory=HealthConfig)
    rewrite_data_files: dict[str, Any] = Field(default_factory=dict, description="Options by Iceberg's names")
    rewrite_position_delete_files: dict[str, Any] = Field(default_factory=dict)
    spark_conn_id: str = SPARK_DEFAULT_CONN_ID
    iceberg_conn_id: str | None = Field(default=None, description="Defaults to the catalog's name")
    write_gate_conn_id: str = WRITE_GATE_DEFAULT_CONN_ID
    spark: SparkSettings = Field(default_factory=SparkSettings)
    spark_slots: int | None = Field(
        default=None,
        gt=0,
        description="Tables paused and rewritten at once on this table's Spark connection, across all tables: "
        "close_gate waits for a slot, worst health first, before it pauses writers, and the run holds it until its "
        "gate opens; the one limit, with no Airflow pool to create; unset, no limit",
    )
    full_rewrite: FullRewriteConfig = Field(default_factory=FullRewriteConfig)
    maintenance: MaintenanceConfig = Field(default_factory=MaintenanceConfig)

    @field_validator("where")
    @classmethod
    def _valid_where(cls, value: str | dict[str, str | None] | None) -> str | dict[str, str | None] | None:
        if isinstance(value, dict):
            unknown = sorted(set(value) - set(REWRITE_PROCEDURES))
            if unknown:
                raise ValueError(
                    f"where names {unknown}: give a predicate per procedure, of {list(REWRITE_PROCEDURES)}"
                )
        for name, text in value.items() if isinstance(value, dict) else [("where", value)]:
            what = "where" if name == "where" else f"where.{name}"
            if text is not None and not text.strip():
                raise ValueError(
                    f"{what} is empty: give a predicate, or leave it out to rewrite the whole table (an empty "
                    "predicate is never taken to mean the whole table)"
                )
            if text is not None and not may_hold_template(text):
                # Without a template it is final now: refuse it here, not in every run's plan_compaction. (sqlglot
                # is imported only for such a table; a templated predicate is checked once rendered, in each run.)
                from airflow_iceberg.exceptions import PredicateError
                from airflow_iceberg.planning.predicates import parse_predicate

                try:
                    parse_predicate(text, what=what, rendered=True)
                except PredicateError as error:
                    raise ValueError(str(error)) from None
        return value

    def options_for(self, procedure: str) -> dict[str, Any]:
        """The options ``procedure`` runs with in the compaction DAG: the table's own over the provider's
        (:data:`DELETE_FOLDING_OPTIONS` for ``rewrite_data_files``, and ``min-input-files`` where health's
        ``min_small_files`` is below :data:`ICEBERG_MIN_INPUT_FILES`; :data:`POSITION_DELETE_FOLDING_OPTIONS` for
        ``rewrite_position_delete_files``; those the table's Iceberg takes)."""
        own = getattr(self, procedure)
        if procedure == "rewrite_position_delete_files":
            return {**self.provider_options(procedure, POSITION_DELETE_FOLDING_OPTIONS), **own}
        if procedure != "rewrite_data_files":
            return dict(own)
        provider = dict(DELETE_FOLDING_OPTIONS)
        if self.health.enabled and self.health.min_small_files < ICEBERG_MIN_INPUT_FILES:
            provider["min-input-files"] = self.health.min_small_files
        return {**self.provider_options(procedure, provider), **own}

    def provider_options(self, procedure: str, options: Mapping[str, Any]) -> dict[str, Any]:
        """Options this provider gives ``procedure`` on its own, without those the table's Iceberg lacks."""
        taken = options_it_takes(procedure, normalize_options(procedure, options), self.spark.iceberg_runtime())
        return {name: value for name, value in options.items() if name in taken}

    def where_for(self, procedure: str) -> str | None:
        """The predicate template ``procedure`` runs with: the table's one ``where``, or its own entry."""
        if isinstance(self.where, dict):
            return self.where.get(procedure)
        return self.where

    @field_validator("rewrite_data_files", "rewrite_position_delete_files")
    @classmethod
    def _options(cls, value: dict[str, Any], info: Any) -> dict[str, Any]:
        try:
            normalize_options(info.field_name, value)
        except InvalidCallError as error:
            raise ValueError(str(error)) from None
        return value

    @model_validator(mode="after")
    def _options_fit_its_iceberg(self) -> TableConfig:
        runtime = self.spark.iceberg_runtime()
        for procedure in REWRITE_PROCEDURES:
            try:
                check_options(procedure, normalize_options(procedure, getattr(self, procedure)), runtime)
            except InvalidCallError as error:
                raise ValueError(str(error)) from None
        return self

    @model_validator(mode="after")
    def _schedule_goes_with_the_watch(self) -> TableConfig:
        if self.health.watching and self.schedule in ("@once", "@continuous"):
            raise ValueError(
                f"schedule {self.schedule!r} cannot go with the health watch: give a cron expression or preset as a "
                "safety net, or set health.watch: false"
            )
        return self

    @model_validator(mode="after")
    def _pause_covers_the_wait(self) -> TableConfig:
        # The sensor gives up at half the longest pause, leaving the other half for the rewrites.
        if self.max_pause_seconds <= 2 * self.idle_seconds:
            raise ValueError(
                f"max_pause_seconds ({self.max_pause_seconds}) must be more than twice idle_seconds "
                f"({self.idle_seconds}), so the writer can go idle and the rewrites finish within one pause"
            )
        if self.max_pause_seconds < self.lease_seconds:
            raise ValueError(
                f"max_pause_seconds ({self.max_pause_seconds}) must be at least lease_seconds ({self.lease_seconds})"
            )
        if self.lease_seconds < 3 * self.poke_interval:
            raise ValueError(
                f"lease_seconds ({self.lease_seconds}) must be at least three poke intervals "
                f"({3 * self.poke_interval:g} s): the idle wait renews the lease once per poke"
            )
        maintenance = self.maintenance
        minimum_hours = minimum_orphan_age(self.max_pause_seconds).total_seconds() / 3600
        if maintenance.remove_orphan_files and maintenance.orphan_older_than_hours < minimum_hours:
            raise ValueError(
                f"maintenance.orphan_older_than_hours ({maintenance.orphan_older_than_hours}) must be at least "
                f"max_pause_seconds ({self.max_pause_seconds} s) plus {ORPHAN_MARGIN}, and Iceberg's own 24 hours: "
                f"{minimum_hours:.2f} hours. A closed gate keeps a writer's files uncommitted for up to its longest "
                "pause, and removing them would lose data"
            )
        return self

    @property
    def catalog_conn_id(self) -> str:
        return self.iceberg_conn_id or self.table.catalog
