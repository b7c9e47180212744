"""The "Iceberg tables" plugin: what Airflow loads, and what a task process pays for it."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from importlib.metadata import entry_points

import pytest

from airflow_iceberg.core.gate_state import GateOwner, GateState
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.surface.report import Health, TableSummary

LOAD = """
import json, sys
{first}
from airflow_iceberg.plugins.tables_page import IcebergTablesPlugin as P
print(json.dumps({{"apps": [a["url_prefix"] for a in P.fastapi_apps], "fastapi": "fastapi" in sys.modules,
                  "react_apps": P.react_apps, "views": P.external_views}}))
"""


def load(first: str = "") -> dict:
    """The plugin as a fresh process loads it, after running ``first``."""
    result = subprocess.run(
        [sys.executable, "-c", LOAD.format(first=first)], capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_airflow_finds_the_plugin_through_its_entry_point():
    [plugin] = [e for e in entry_points(group="airflow.plugins") if e.name == "iceberg_tables"]
    assert plugin.value == "airflow_iceberg.plugins.tables_page:IcebergTablesPlugin"


def test_a_task_process_loading_plugins_does_not_import_fastapi_or_build_the_app():
    assert load() == {
        "apps": [],
        "fastapi": False,
        "react_apps": [
            {
                "name": "Iceberg tables",
                "bundle_url": "iceberg/static/iceberg-tables.js",
                "destination": "nav",
                "category": "browse",
                "url_route": "iceberg-tables",
            }
        ],
        "views": [],
    }


def test_the_api_server_which_runs_on_fastapi_gets_the_app_under_its_prefix():
    assert load("import fastapi")["apps"] == ["/iceberg"]


# --- the page's API, on a fake gate database and a fake auth manager (the live tests use the real ones) ----------

TABLE = "lake.ui.events"
OTHER = "lake.ui.clicks"
HELD_BY = GateOwner("iceberg_compact__lake__ui__events", "manual__2026-11-25")
NOW = datetime(2026, 11, 25, 10, 0, tzinfo=timezone.utc)


def gate(closed: bool) -> GateState:
    return GateState(
        TABLE,
        "closed" if closed else "open",
        HELD_BY if closed else None,
        NOW,
        NOW + timedelta(seconds=300) if closed else None,
        None,
        NOW,
    )


def run(run_id: str, started: datetime, outcome: str = "success", detail: str | None = None) -> dict:
    return {
        "run_id": run_id,
        "dag_id": HELD_BY.dag_id,
        "started_at": started,
        "finished_at": started,
        "decision": "compact",
        "outcome": outcome,
        "reason": "1 of 2 partitions need work",
        "data_files_before": 24,
        "data_files_after": 2,
        "delete_files_before": 3,
        "delete_files_after": 0,
        "bytes_before": 48_000,
        "bytes_after": 40_000,
        "gate_closed_seconds": 21.5,
        "rewrite_seconds": 12.0,
        "detail": detail,
        "writers": None,
    }


FAILURE = "rewrite_data_files left 7 data files of 40 planned as they were: 7 were rewritten but their commit failed"
RUNS = [run("manual__old", NOW - timedelta(days=40)), run("manual__1", NOW - timedelta(hours=2), "failed", FAILURE)]


def summary(closed: bool) -> TableSummary:
    return TableSummary(TABLE, gate(closed), Health(2, 0, 0, 40_000), list(RUNS))


@pytest.fixture
def client(monkeypatch, tmp_path):
    """The app as the api-server mounts it, with ``user`` signed in, may-edit rights by user, and a fake gate."""
    from airflow.api_fastapi.core_api import security
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from airflow_iceberg.hooks.run_records import RunRecords
    from airflow_iceberg.hooks.write_gate import WriteGateHook
    from airflow_iceberg.plugins import tables_page
    from airflow_iceberg.surface import report
    from airflow_iceberg.surface.dag_factory import compaction_dag_id

    table_list = tmp_path / "iceberg_tables.yaml"
    table_list.write_text(f"tables:\n  - table: {TABLE}\n  - table: {OTHER}\n  - table: lake.ui.hidden\n")
    monkeypatch.setenv("AIRFLOW_ICEBERG_CONFIG", str(table_list))
    state = {"closed": True, "user": "admin", "forced": [], "health_reads": 0}

    def summarize(tables):
        state["health_reads"] += len(tables)
        return [summary(state["closed"]) for _ in tables]

    monkeypatch.setattr(report, "summarize", summarize)
    readable = {compaction_dag_id(TableName.parse(t)) for t in (TABLE, OTHER)}  # not lake.ui.hidden's
    monkeypatch.setattr(tables_page, "_readable_dag_ids", lambda user: readable)
    monkeypatch.setattr(
        tables_page,
        "_may",
        lambda user, method, dag_id: dag_id in readable and (method == "GET" or user.name == "admin"),
    )
    monkeypatch.setattr(WriteGateHook, "audit_trail", lambda self, table: [])
    monkeypatch.setattr(WriteGateHook, "gate_states", lambda self: {TABLE: gate(state["closed"])})
    checks = {
        OTHER: {
            "decision": "needs_work",
            "reason": "3 partitions need work",
            "reading": "manifests",
            "score": 40,
            "data_files": 90,
            "delete_files": 4,
            "checked_at": NOW,
            "started_at": None,
        }
    }
    monkeypatch.setattr(RunRecords, "health_checks", lambda self, table=None: checks)
    monkeypatch.setattr(RunRecords, "last_runs", lambda self, tables: {TABLE: RUNS[-1] | {"table_name": TABLE}})
    monkeypatch.setattr(RunRecords, "failed_runs", lambda self, seconds: {TABLE: 1})

    def force_open(self, table, reason):
        state["forced"].append((str(table), reason))
        state["closed"] = False
        return True

    monkeypatch.setattr(WriteGateHook, "force_open", force_open)
    root = FastAPI()
    app = tables_page.build_app()
    app.dependency_overrides[security.get_user] = lambda: type(
        "User", (), {"name": state["user"], "get_name": lambda self: self.name, "get_id": lambda self: self.name}
    )()
    root.mount(tables_page.URL_PREFIX, app)
    return TestClient(root), state


def test_the_list_joins_gates_checks_and_runs_by_need_and_reads_no_table(client):
    http, state = client
    answer = http.get("/iceberg/api/tables").json()
    assert answer["summary"] == {
        "tables": 2,
        "gates_closed": 1,
        "needing_work": 1,
        "check_failed": 0,
        "runs_failed_24h": 1,
    }
    assert [r["table"] for r in answer["rows"]] == [OTHER, TABLE]  # needs work first; hidden is not listed
    other, table = answer["rows"]
    assert (other["need"], other["score"], other["data_files"], other["gate"]) == ("needs_work", 40, 90, "open")
    assert table["gate"] == "closed" and table["owner"]["url"] == f"/dags/{HELD_BY.dag_id}/runs/{HELD_BY.run_id}"
    assert (table["need"], table["last_run"]["outcome"], table["failed_runs_24h"]) == ("unknown", "failed", 1)
    assert state["health_reads"] == 0  # the list reads no table's metadata


def test_the_list_filters_and_refuses_an_unknown_value_by_name(client):
    http, _ = client
    assert [r["table"] for r in http.get("/iceberg/api/tables?gate=closed").json()["rows"]] == [TABLE]
    assert [r["table"] for r in http.get("/iceberg/api/tables?outcome=none").json()["rows"]] == [OTHER]
    refused = http.get("/iceberg/api/tables?sort=worst")
    assert refused.status_code == 400 and refused.json()["detail"] == (
        "sort='worst' is not one of need, table, gate, last_run"
    )


def test_the_page_is_one_script_served_from_the_package(client):
    http, _ = client
    from airflow_iceberg.plugins.tables_page import BUNDLE

    script = http.get("/iceberg/static/iceberg-tables.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert script.content == BUNDLE.read_bytes() and b"globalThis.AirflowPlugin=" in script.content
    home = http.get("/iceberg/", follow_redirects=False)
    assert home.status_code == 307 and home.headers["location"] == "/plugin/iceberg-tables"


def form_token(http) -> str:
    """The force-open form's token, from the table's page as the signed-in user sees it."""
    token = http.get(f"/iceberg/api/tables/{TABLE}").json()["form_token"]
    assert token, "the table's page offers no force-open"
    return token


def test_a_table_page_offers_force_open_to_editors_only_and_keeps_the_runs_of_its_range(client):
    http, state = client
    page = http.get(f"/iceberg/api/tables/{TABLE}?days=30").json()
    assert page["may_force_open"] and page["gate"]["owner"]["run_id"] == HELD_BY.run_id
    assert page["gate"]["line"].startswith(f"closed by dag {HELD_BY.dag_id} run {HELD_BY.run_id}, lease 300 s left")
    assert [r["run_id"] for r in page["runs"]] == ["manual__1"]  # the 40-day-old run is out of range
    assert page["runs"][0]["outcome"] == "failed" and page["runs"][0]["detail"] == FAILURE  # what it left undone
    assert [r["run_id"] for r in http.get(f"/iceberg/api/tables/{TABLE}?days=0").json()["runs"]] == [
        "manual__old",
        "manual__1",
    ]
    token = form_token(http)
    state["user"] = "viewer"
    viewer = http.get(f"/iceberg/api/tables/{TABLE}").json()
    assert not viewer["may_force_open"] and viewer["form_token"] is None
    refused = http.post(f"/iceberg/api/tables/{TABLE}/force-open", data={"reason": "mine now", "form_token": token})
    assert refused.status_code == 403 and state["forced"] == []  # the admin's form, posted as the viewer


def test_force_open_needs_a_reason_and_records_who_gave_it(client):
    http, state = client
    token = form_token(http)
    blank = http.post(f"/iceberg/api/tables/{TABLE}/force-open", data={"reason": "  ", "form_token": token})
    assert blank.status_code == 400
    done = http.post(
        f"/iceberg/api/tables/{TABLE}/force-open",
        data={"reason": "run died", "form_token": token},
        headers={"Origin": "http://testserver"},
    )
    assert done.status_code == 200 and done.json() == {"table": TABLE, "opened": True}
    assert state["forced"] == [(TABLE, "run died (by admin, in the Airflow UI)")]
    page = http.get(f"/iceberg/api/tables/{TABLE}").json()  # the gate is open now: nothing to force, no owner
    assert page["gate"]["state"] == "open" and not page["may_force_open"]


@pytest.mark.parametrize(
    ("headers", "token", "refusal"),
    [
        ({"Origin": "http://localhost:8081"}, "the page's", "it came from a page of 'http://localhost:8081'"),
        ({"Origin": "http://testserver:8081"}, "the page's", "it came from a page of 'http://testserver:8081'"),
        ({"Origin": "null"}, "the page's", "it came from a page of 'null'"),
        ({"Referer": "http://evil.example/x"}, "the page's", "it came from a page of 'http://evil.example'"),
        ({}, None, "without this Airflow's force-open form token"),
        ({"Origin": "http://testserver"}, "forged", "without this Airflow's force-open form token"),
        ({}, "another user's", "without this Airflow's force-open form token"),
    ],
    ids=["another-site", "another-port", "opaque-origin", "foreign-referer", "no-token", "forged", "other-user"],
)
def test_a_cross_site_force_open_is_refused_and_the_gate_stays_closed(client, headers, token, refusal):
    http, state = client
    from airflow_iceberg.plugins.tables_page import _form_signer

    tokens = {
        "the page's": form_token(http),
        "forged": "x" + form_token(http)[1:],
        "another user's": _form_signer().dumps("viewer"),
        None: None,
    }
    data = {"reason": "writers, resume"} | ({"form_token": tokens[token]} if tokens[token] else {})
    refused = http.post(f"/iceberg/api/tables/{TABLE}/force-open", data=data, headers=headers)
    assert refused.status_code == 403 and refusal in refused.json()["detail"], refused.text
    assert state["forced"] == [] and state["closed"]


def test_an_expired_form_is_refused_with_what_to_do(client, monkeypatch):
    http, state = client

    from airflow_iceberg.plugins import tables_page

    token = form_token(http)
    monkeypatch.setattr(tables_page, "FORM_MAX_AGE", -1)
    refused = http.post(f"/iceberg/api/tables/{TABLE}/force-open", data={"reason": "run died", "form_token": token})
    assert refused.status_code == 403 and "reload the table's page" in refused.json()["detail"]
    assert state["forced"] == []


def test_a_request_with_a_bearer_token_needs_no_form_token(client):
    # A page of another origin cannot make a browser send an Authorization header: scripts use the API's tokens.
    http, state = client
    bearer = {"Authorization": "Bearer a-token-the-api-server-checked"}  # the fake auth manager's user is admin
    done = http.post(f"/iceberg/api/tables/{TABLE}/force-open", data={"reason": "run died"}, headers=bearer)
    assert done.status_code == 200 and state["forced"] == [(TABLE, "run died (by admin, in the Airflow UI)")]


def test_a_table_not_in_the_list_or_not_readable_is_not_found(client):
    http, _ = client
    for table in ("lake.no.such", "lake.ui.hidden"):
        missing = http.get(f"/iceberg/api/tables/{table}")
        assert missing.status_code == 404 and missing.json()["detail"] == (
            f"no table {table!r} in the table list that you may read"
        )
