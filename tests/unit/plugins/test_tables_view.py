"""The fleet list's rules: a table's need, the orders, the filters, the pages, the summary."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from airflow_iceberg.exceptions import TablesQueryError
from airflow_iceberg.plugins.tables_view import NEEDS, TablesQuery, need_of, page, row

NOW = datetime(2026, 11, 25, 10, 0, tzinfo=timezone.utc)


def check(decision: str, score: int | None = None) -> dict:
    return {
        "decision": decision,
        "reason": "why",
        "reading": "listing",
        "score": score,
        "data_files": 10,
        "delete_files": 1,
        "checked_at": NOW,
    }


def last(outcome: str, hours_ago: float = 1) -> dict:
    started = NOW - timedelta(hours=hours_ago)
    return {
        "dag_id": "d",
        "run_id": f"r{hours_ago}",
        "decision": "compact",
        "outcome": outcome,
        "started_at": started,
        "finished_at": started,
    }


class Closed:
    pauses_writers = True
    closed_at = NOW

    class owner:  # noqa: N801 - a GateOwner's fields
        dag_id, run_id = "d", "owner"


def make(table: str, check_=None, last_run=None, gate=None, failed: int = 0) -> dict:
    return row(table, f"dag_{table}", gate, check_, last_run, failed, lambda d, r: f"/dags/{d}/runs/{r}")


@pytest.mark.parametrize(
    ("check_", "last_run", "need"),
    [
        (check("needs_work", 5), None, "needs_work"),
        (check("started", 5), None, "needs_work"),
        (check("waiting", 5), last("running"), "needs_work"),
        (check("error"), None, "check_failed"),
        (check("unreachable"), None, "check_failed"),
        (check("healthy", 0), last("failed"), "healthy"),  # the check is newer knowledge than a run
        (None, last("skipped"), "healthy"),
        (None, last("success"), "healthy"),
        (None, last("failed"), "unknown"),
        (None, None, "unknown"),
    ],
)
def test_a_tables_need_comes_from_its_check_else_from_its_last_run(check_, last_run, need):
    assert need_of(check_, last_run) == need


FLEET = [
    make("a.n.healthy", check("healthy", 0), last("skipped", 3)),
    make("a.n.mild", check("needs_work", 3)),
    make("a.n.worst", check("waiting", 40), last("running", 0.5), gate=Closed()),
    make("a.n.broken", check("error")),
    make("a.n.cron", None, last("failed", 2), failed=2),
]


def test_by_need_the_worst_come_first_then_failed_checks_unknown_and_healthy():
    answer = page(FLEET, TablesQuery())
    assert [r["table"] for r in answer["rows"]] == ["a.n.worst", "a.n.mild", "a.n.broken", "a.n.cron", "a.n.healthy"]
    assert [NEEDS.index(r["need"]) for r in answer["rows"]] == [0, 0, 1, 2, 3]
    assert answer["summary"] == {
        "tables": 5,
        "gates_closed": 1,
        "needing_work": 2,
        "check_failed": 1,
        "runs_failed_24h": 2,
    }


def test_the_other_orders():
    def order(sort: str) -> list[str]:
        return [r["table"] for r in page(FLEET, TablesQuery(sort=sort))["rows"]]

    assert order("table") == sorted(r["table"] for r in FLEET)
    assert order("gate")[0] == "a.n.worst"
    assert order("last_run") == ["a.n.worst", "a.n.cron", "a.n.healthy", "a.n.broken", "a.n.mild"]


def test_filters_keep_what_they_name_and_the_summary_still_counts_every_table():
    answer = page(FLEET, TablesQuery(need="needs_work", gate="open"))
    assert [r["table"] for r in answer["rows"]] == ["a.n.mild"] and answer["summary"]["tables"] == 5
    assert [r["table"] for r in page(FLEET, TablesQuery(outcome="none"))["rows"]] == ["a.n.mild", "a.n.broken"]
    assert [r["table"] for r in page(FLEET, TablesQuery(q="CRON"))["rows"]] == ["a.n.cron"]


def test_pages_are_cut_on_the_server_and_a_page_past_the_end_is_the_last():
    fleet = [make(f"a.n.t{i:04d}", check("needs_work", i)) for i in range(1000)]
    answer = page(fleet, TablesQuery(page=3, page_size=50))
    assert (answer["page"], answer["pages"], answer["matching"]) == (3, 20, 1000)
    assert [r["score"] for r in answer["rows"]] == list(range(899, 849, -1))
    assert page(fleet, TablesQuery(page=99))["page"] == 20


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("gate", "shut", "gate='shut' is not one of closed, open"),
        ("need", "x" * 10_000, "need='" + "x" * 100 + "' is not one of needs_work, check_failed, unknown, healthy"),
        ("page_size", 5000, "page_size=5000 is not between 1 and 500"),
        ("page", 0, "page=0 is not 1 or more"),
    ],
)
def test_a_query_value_the_page_does_not_know_is_refused_by_name(field, value, message):
    with pytest.raises(TablesQueryError) as refused:
        TablesQuery(**{field: value})
    assert str(refused.value) == message
