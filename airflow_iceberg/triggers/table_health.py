"""Table health watched in the triggerer: a compaction run starts only for a table that needs work.

Each table's compaction DAG is scheduled on an Asset (:func:`health_asset`) whose ``AssetWatcher`` runs a
:class:`TableHealthTrigger`. The watchers of one catalog (same Iceberg connection, gate connection and poll
interval) share one poll loop, a :class:`CatalogSweep`, through Airflow's ``shared_stream_key``: one sweep per
interval for the whole catalog, not one poller per table.

The sweep itself, what it reads and when it holds a run back, is :mod:`airflow_iceberg.triggers.health_sweep`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Hashable
from dataclasses import asdict
from typing import Any

from airflow.sdk import Asset, AssetWatcher
from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_iceberg.core.tables import TableName
from airflow_iceberg.planning.health import HealthThresholds
from airflow_iceberg.triggers.health_sweep import WATCHERS, CatalogSweep, stream_key

#: The health thresholds' defaults, which a trigger leaves out of its serialized arguments.
_DEFAULT_THRESHOLDS = asdict(HealthThresholds())


def health_asset_name(table: TableName) -> str:
    """``iceberg_health__<catalog>__<namespace>__<table>``: the Asset a table's health watch updates."""
    return f"iceberg_health__{table.catalog}__{table.namespace}__{table.table}"


def health_asset(trigger: TableHealthTrigger) -> Asset:
    """The Asset whose watcher runs ``trigger``; a DAG scheduled on it runs when the table needs work."""
    name = health_asset_name(TableName.parse(trigger.table))
    return Asset(name=name, group="iceberg-health", watchers=[AssetWatcher(name=name, trigger=trigger)])


class TableHealthTrigger(BaseEventTrigger):
    """Fire when ``table`` needs work by its health thresholds, at most once per need (see the module doc).

    The event's payload, which becomes the asset event's extra, says why: ``{"table", "snapshot_id", "reason",
    "partitions", "checked_at"}``.

    Its arguments are flat scalars, and those left at their defaults are not serialized: the dag-processor
    serializes, hashes and decodes every watcher's arguments many times at each parse (a nested dict cost five
    times a flat one), which at 1,000 tables was a large part of what watching costs over idle
    (``make bench-fleet``).

    :param table: The table, ``catalog.namespace.table``.
    :param dag_id: The DAG the event runs: a run of it queued or running holds the next event back.
    :param iceberg_conn_id: Iceberg connection of the table's catalog.
    :param write_gate_conn_id: Connection of the gate's database: run records and where checks are written.
    :param poll_interval: Seconds between sweeps of the catalog.
    :param cooldown_minutes: No event sooner than this after the table's last run ended, or after the last event.
    :param rewrite_data_files_where: ``rewrite_data_files``' predicate template, rendered as of the sweep, as a
        watch-started run renders it as of when it was started. None: the whole table.
    :param rewrite_position_delete_files_where: The same for ``rewrite_position_delete_files``.
    :param target_file_size_bytes: ``rewrite_data_files``' target file size, which defines small files. None:
        the table's ``write.target-file-size-bytes``.
    :param thresholds: The table's health thresholds, by ``HealthThresholds`` field; the others keep its defaults.
    """

    def __init__(
        self,
        *,
        table: str,
        dag_id: str,
        iceberg_conn_id: str,
        write_gate_conn_id: str,
        poll_interval: float,
        cooldown_minutes: float = 10.0,
        rewrite_data_files_where: str | None = None,
        rewrite_position_delete_files_where: str | None = None,
        target_file_size_bytes: int | None = None,
        **thresholds: Any,
    ) -> None:
        super().__init__()
        self.table = str(table)
        self.dag_id = dag_id
        self.iceberg_conn_id = iceberg_conn_id
        self.write_gate_conn_id = write_gate_conn_id
        self.poll_interval = float(poll_interval)
        self.cooldown_minutes = float(cooldown_minutes)
        self.where = {
            "rewrite_data_files": rewrite_data_files_where,
            "rewrite_position_delete_files": rewrite_position_delete_files_where,
        }
        self.target_file_size_bytes = target_file_size_bytes
        self.thresholds = HealthThresholds(**thresholds)  # an unknown name fails here, naming it

    @property
    def options(self) -> dict[str, Any]:
        """The ``rewrite_data_files`` options the plan reads."""
        target = self.target_file_size_bytes
        return {} if target is None else {"target-file-size-bytes": target}

    def serialize(self) -> tuple[str, dict[str, Any]]:
        optional = {
            "rewrite_data_files_where": self.where["rewrite_data_files"],
            "rewrite_position_delete_files_where": self.where["rewrite_position_delete_files"],
            "target_file_size_bytes": self.target_file_size_bytes,
        }
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table": self.table,
                "dag_id": self.dag_id,
                "iceberg_conn_id": self.iceberg_conn_id,
                "write_gate_conn_id": self.write_gate_conn_id,
                "poll_interval": self.poll_interval,
                "cooldown_minutes": self.cooldown_minutes,
                **{name: value for name, value in optional.items() if value is not None},
                **{
                    name: value for name, value in asdict(self.thresholds).items() if value != _DEFAULT_THRESHOLDS[name]
                },
            },
        )

    def __repr__(self) -> str:
        # Airflow's repr serializes every argument. A DAG's hash takes the repr of its schedule, and wiring each
        # task of the DAG hashes the DAG again: 16 reprs of each table's trigger at every parse, about a tenth of
        # what building a fleet's DAGs cost (make bench-parse).
        return f"<{type(self).__name__} {self.table} for {self.dag_id}>"

    def shared_stream_key(self) -> Hashable:
        """One sweep per catalog, gate database and poll interval."""
        return stream_key(self.iceberg_conn_id, self.write_gate_conn_id, self.poll_interval)

    @classmethod
    async def open_shared_stream(cls, kwargs: dict[str, Any]) -> AsyncIterator[Any]:
        sweep = CatalogSweep(kwargs["iceberg_conn_id"], kwargs["write_gate_conn_id"], float(kwargs["poll_interval"]))
        async for result in sweep.stream():
            yield result

    async def filter_shared_stream(self, shared_stream: AsyncIterator[Any]) -> AsyncIterator[TriggerEvent]:
        key = self.shared_stream_key()
        WATCHERS.setdefault(key, {})[self.table] = self
        try:
            async for sweep in shared_stream:
                payload = sweep["started"].get(self.table)
                if payload is not None:
                    yield TriggerEvent(payload)
        finally:
            watchers = WATCHERS.get(key, {})
            if watchers.get(self.table) is self:
                del watchers[self.table]

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Without the triggerer's shared streams (unit tests), the same sweep for this table alone."""
        async for event in self.filter_shared_stream(type(self).open_shared_stream(self.serialize()[1])):
            yield event
