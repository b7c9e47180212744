"""What the provider reports through Airflow's own metrics, tagged by table, for the dashboards teams already run.

Airflow sends them where its ``[metrics]`` section says (StatsD, or OpenTelemetry), with its ``statsd_prefix``
(``airflow`` by default) in front. Tags reach StatsD with ``statsd_influxdb_enabled = True`` (``name,tag=value``,
which statsd_exporter and Telegraf read) or through DogStatsD (``statsd_datadog_enabled``); OpenTelemetry carries
them as attributes.

Each finished run, whatever ended it (a skip, a dry run, a failure, a compaction), sends from its run record:

- ``iceberg.run.finished``: counter, 1, tagged ``table``, ``outcome`` and ``decision``;
- ``iceberg.run.gate_closed``: timer, the milliseconds the run paused the writers, tagged ``table``;
- ``iceberg.run.data_files_before``, ``iceberg.run.data_files_after``, ``iceberg.run.delete_files_before`` and
  ``iceberg.run.delete_files_after``: gauges, the table's files when the run planned and after its rewrites,
  tagged ``table``.

Each sweep of the health watch sends ``iceberg.health.tables_needing_work``: a gauge, the tables of one Iceberg
connection it found needing work (a run started, or one already under way), tagged ``catalog``.

A value the record does not hold (no rewrite ran, say) is not sent. Metrics never fail a run: an error is logged.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

#: The run record's counts sent as gauges, each under ``iceberg.run.<column>``.
RUN_GAUGES = ("data_files_before", "data_files_after", "delete_files_before", "delete_files_after")


def emit_run(record: Mapping[str, Any]) -> None:
    """Send the metrics of one finished run, from its run record (a ``RunRecords.run_records`` row)."""
    try:
        from airflow.providers.common.compat.sdk import Stats

        table = {"table": str(record["table_name"])}
        Stats.incr("iceberg.run.finished", tags={**table, "outcome": record["outcome"], "decision": record["decision"]})
        for column in RUN_GAUGES:
            if record.get(column) is not None:
                Stats.gauge(f"iceberg.run.{column}", record[column], tags=table)
        if record.get("gate_closed_seconds") is not None:
            Stats.timing("iceberg.run.gate_closed", float(record["gate_closed_seconds"]) * 1000, tags=table)
    except Exception:  # a metrics backend that fails must not fail the run it reports
        log.exception("Could not send the metrics of run %s of %s", record.get("run_id"), record.get("table_name"))


def emit_sweep(catalog: str, needing_work: int) -> None:
    """Send how many tables of ``catalog`` (an Iceberg connection id) a health sweep found needing work."""
    try:
        from airflow.providers.common.compat.sdk import Stats

        Stats.gauge("iceberg.health.tables_needing_work", needing_work, tags={"catalog": catalog})
    except Exception:
        log.exception("Could not send the health metrics of %s", catalog)
