"""The rules that keep maintenance safe beside a gated writer: how old an orphan must be before it is removed."""

from __future__ import annotations

from datetime import timedelta

import pytest

from airflow_iceberg.core.maintenance import ICEBERG_ORPHAN_FLOOR, ORPHAN_MARGIN, minimum_orphan_age


@pytest.mark.parametrize(
    ("max_pause_seconds", "minimum"),
    [
        (3600, ICEBERG_ORPHAN_FLOOR),  # an hour's pause plus the margin is under Iceberg's own 24 hours
        (23 * 3600, ICEBERG_ORPHAN_FLOOR),  # exactly the floor
        (30 * 3600, timedelta(hours=30) + ORPHAN_MARGIN),  # a longer pause: its files may wait that long uncommitted
    ],
)
def test_an_orphan_must_outlive_the_gates_longest_pause_and_a_margin_and_never_less_than_icebergs_floor(
    max_pause_seconds, minimum
):
    assert minimum_orphan_age(max_pause_seconds) == minimum
