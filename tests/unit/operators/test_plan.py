"""The plan task's own checks, without a table: the predicates it hands the rewrite task."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_iceberg.operators.plan import _check_predicates


def test_the_plan_parses_every_predicate_it_hands_the_rewrite_and_fails_naming_a_bad_one():
    # The rewrite task trusts these (it runs with writers paused), so the plan fails first, before the gate.
    _check_predicates(
        {"rewrite_data_files": "ts >= TIMESTAMP '2026-11-22 00:00:00+00:00'", "rewrite_position_delete_files": None}
    )
    with pytest.raises(AirflowFailException, match="plan's where for rewrite_position_delete_files") as raised:
        _check_predicates(
            {
                "rewrite_data_files": "ts >= TIMESTAMP '2026-11-22 00:00:00+00:00'",
                "rewrite_position_delete_files": "ts >= '2026-11-22' OR 1 = (SELECT 1)",
            }
        )
    assert "SELECT 1" in str(raised.value)
