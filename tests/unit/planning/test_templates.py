"""Predicate templates rendered as of a time: as the health watch plans a table, and as a run it starts renders them."""

from __future__ import annotations

from datetime import datetime, timezone

from airflow_iceberg.planning.templates import render_at


def test_a_predicate_renders_as_of_the_sweep_as_a_watch_started_run_renders_it():
    when = datetime(2026, 11, 26, 9, 30, tzinfo=timezone.utc)
    assert render_at("ts >= '{{ macros.ds_add(ds, -2) }}'", when) == "ts >= '2026-11-24'"
    assert render_at("dt = '{{ ds_nodash }}'", when) == "dt = '20261126'"
    assert render_at(None, when) is None
