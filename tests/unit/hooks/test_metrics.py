"""What a finished run and a health sweep send through Airflow's metrics (the live test reads them from StatsD)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from airflow.sdk.observability import stats

from airflow_iceberg.hooks import metrics


class Recorder:
    """A metrics backend that keeps every call: (kind, name, value, tags)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, float, dict]] = []

    def incr(self, stat, count=1, rate=1, *, tags=None):
        self.sent.append(("incr", stat, count, tags))

    def gauge(self, stat, value, rate=1, delta=False, *, tags=None):
        self.sent.append(("gauge", stat, value, tags))

    def timing(self, stat, dt, *, tags=None):
        self.sent.append(("timing", stat, dt, tags))


@pytest.fixture
def recorder():
    backend = Recorder()
    stats.initialize(factory=lambda: backend, export_legacy_names=False)
    yield backend
    from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger

    stats.initialize(factory=NoStatsLogger, export_legacy_names=False)


RECORD = {
    "table_name": "lake.db.t",
    "run_id": "manual__1",
    "decision": "compact",
    "outcome": "success",
    "data_files_before": 24,
    "data_files_after": 2,
    "delete_files_before": 3,
    "delete_files_after": 0,
    "gate_closed_seconds": Decimal("21.500"),
}


def test_a_finished_run_sends_its_outcome_files_and_pause_tagged_by_table(recorder):
    metrics.emit_run(RECORD)
    table = {"table": "lake.db.t"}
    assert recorder.sent == [
        ("incr", "iceberg.run.finished", 1, {**table, "outcome": "success", "decision": "compact"}),
        ("gauge", "iceberg.run.data_files_before", 24, table),
        ("gauge", "iceberg.run.data_files_after", 2, table),
        ("gauge", "iceberg.run.delete_files_before", 3, table),
        ("gauge", "iceberg.run.delete_files_after", 0, table),
        ("timing", "iceberg.run.gate_closed", 21500.0, table),
    ]


def test_a_run_that_ended_before_its_rewrites_sends_only_what_it_knows(recorder):
    skipped = {
        **RECORD,
        "decision": "skip",
        "outcome": "skipped",
        "data_files_after": None,
        "delete_files_after": None,
        "gate_closed_seconds": None,
    }
    metrics.emit_run(skipped)
    assert [name for _, name, _, _ in recorder.sent] == [
        "iceberg.run.finished",
        "iceberg.run.data_files_before",
        "iceberg.run.delete_files_before",
    ]


def test_a_sweep_sends_the_tables_needing_work_by_catalog(recorder):
    metrics.emit_sweep("lake", 3)
    assert recorder.sent == [("gauge", "iceberg.health.tables_needing_work", 3, {"catalog": "lake"})]


def test_a_failing_metrics_backend_never_fails_the_run(caplog):
    class Broken(Recorder):
        def incr(self, *args, **kwargs):
            raise OSError("no route to the metrics host")

    stats.initialize(factory=Broken, export_legacy_names=False)
    try:
        metrics.emit_run(RECORD)  # does not raise
    finally:
        from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger

        stats.initialize(factory=NoStatsLogger, export_legacy_names=False)
    assert "Could not send the metrics of run manual__1 of lake.db.t" in caplog.text
