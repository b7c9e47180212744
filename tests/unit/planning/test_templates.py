"""Predicate templates rendered as of a time: as the health watch plans a table, and as a run it starts renders them."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from airflow_iceberg.planning.templates import holds_template, may_hold_template, render_at


def test_a_predicate_renders_as_of_the_sweep_as_a_watch_started_run_renders_it():
    when = datetime(2026, 11, 26, 9, 30, tzinfo=timezone.utc)
    assert render_at("ts >= '{{ macros.ds_add(ds, -2) }}'", when) == "ts >= '2026-11-24'"
    assert render_at("dt = '{{ ds_nodash }}'", when) == "dt = '20261126'"
    assert render_at(None, when) is None


@pytest.mark.parametrize(
    ("text", "marked", "template"),
    [
        ("dt >= '{{ ds }}'", True, True),
        ("{% if true %}dt = 1{% endif %}", True, True),
        ("dt = '{{ conn.lake.password }}'", True, True),  # names what is not here: still a template
        ("note = 'a {{ b'", True, False),  # Jinja cannot take it: data
        ("dt >= '2026-11-25'", False, False),
    ],
)
def test_a_template_is_told_from_plain_text_by_its_markers_then_by_jinja(text, marked, template):
    assert may_hold_template(text) is marked
    assert holds_template(text) is template
