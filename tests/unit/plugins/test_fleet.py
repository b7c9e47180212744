"""The "Iceberg tables" plugin: what Airflow loads, and what a task process pays for it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from importlib.metadata import entry_points

import pytest

from airflow_iceberg.hooks.write_gate import GateOwner, GateState
from airflow_iceberg.report import Health, TableSummary

LOAD = """
import json, sys
{first}
from airflow_iceberg.plugins.fleet import IcebergFleetPlugin as P
print(json.dumps({{"apps": [a["url_prefix"] for a in P.fastapi_apps], "fastapi": "fastapi" in sys.modules,
                  "views": P.external_views}}))
"""


def load(first: str = "") -> dict:
    """The plugin as a fresh process loads it, after running ``first``."""
    result = subprocess.run([sys.executable, "-c", LOAD.format(first=first)], capture_output=True, text=True,
                            timeout=300, check=True)  # fmt: skip
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_airflow_finds_the_plugin_through_its_entry_point():
    [plugin] = [e for e in entry_points(group="airflow.plugins") if e.name == "iceberg_tables"]
    assert plugin.value == "airflow_iceberg.plugins.fleet:IcebergFleetPlugin"


def test_a_task_process_loading_plugins_does_not_import_fastapi_or_build_the_app():
    assert load() == {
        "apps": [],
        "fastapi": False,
        "views": [{"name": "Iceberg tables", "href": "/iceberg/", "destination": "nav", "category": "browse",
                   "url_route": "iceberg-tables"}],
    }  # fmt: skip


def test_the_api_server_which_runs_on_fastapi_gets_the_app_under_its_prefix():
    assert load("import fastapi")["apps"] == ["/iceberg"]


# --- the pages, on a fake gate database and a fake auth manager (the live test uses the real ones) ---------------

TABLE = "lake.ui.events"
HELD_BY = GateOwner("iceberg_compact__lake__ui__events", "manual__2026-11-25")


def summary(closed: bool) -> TableSummary:
    now = datetime(2026, 11, 25, 10, 0, tzinfo=timezone.utc)
    gate = GateState(TABLE, "closed" if closed else "open", HELD_BY if closed else None, now, now + timedelta(
        seconds=300) if closed else None, None, now)  # fmt: skip
    run = {"run_id": "manual__1", "dag_id": HELD_BY.dag_id, "started_at": now, "finished_at": now,
           "decision": "compact", "outcome": "success", "reason": "1 of 2 partitions need work",
           "data_files_before": 24, "data_files_after": 2, "delete_files_before": 3, "delete_files_after": 0,
           "bytes_before": 48_000, "bytes_after": 40_000, "gate_closed_seconds": 21.5}  # fmt: skip
    return TableSummary(TABLE, gate, Health(2, 0, 0, 40_000), [run])


@pytest.fixture
def client(monkeypatch, tmp_path):
    """The app as the api-server mounts it, with ``user`` signed in, may-edit rights by user, and a fake gate."""
    from airflow.api_fastapi.core_api import security
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from airflow_iceberg import report
    from airflow_iceberg.hooks.write_gate import WriteGateHook
    from airflow_iceberg.plugins import fleet

    table_list = tmp_path / "iceberg_tables.yaml"
    table_list.write_text(f"tables:\n  - table: {TABLE}\n")
    monkeypatch.setenv("AIRFLOW_ICEBERG_CONFIG", str(table_list))
    state = {"closed": True, "user": "admin", "forced": [], "health_reads": 0}

    def summarize(tables):
        state["health_reads"] += len(tables)
        return [summary(state["closed"]) for _ in tables]

    monkeypatch.setattr(report, "summarize", summarize)
    monkeypatch.setattr(fleet, "_may", lambda user, method, dag_id: method == "GET" or user.name == "admin")
    monkeypatch.setattr(WriteGateHook, "audit_trail", lambda self, table: [])
    monkeypatch.setattr(WriteGateHook, "run_records", lambda self, table: summary(state["closed"]).runs)

    def force_open(self, table, reason):
        state["forced"].append((str(table), reason))
        state["closed"] = False
        return True

    monkeypatch.setattr(WriteGateHook, "force_open", force_open)
    root = FastAPI()
    app = fleet.build_app()
    app.dependency_overrides[security.get_user] = lambda: type(
        "User", (), {"name": state["user"], "get_name": lambda self: self.name, "get_id": lambda self: self.name}
    )()
    root.mount(fleet.URL_PREFIX, app)
    return TestClient(root), state


def test_the_list_shows_each_tables_gate_health_and_last_compaction(client):
    http, _ = client
    page = http.get("/iceberg/").text
    assert f'<tr data-table="{TABLE}" data-gate="closed">' in page
    assert f"closed by dag {HELD_BY.dag_id} run {HELD_BY.run_id}, lease 300 s left" in page
    assert f'href="/dags/{HELD_BY.dag_id}/runs/{HELD_BY.run_id}"' in page  # the run that holds it, in Airflow
    assert "2 data files (0 small), 0 delete files, average 0.02 MB" in page
    assert "compact  success  data files 24 -&gt; 2  delete files 3 -&gt; 0  paused 21.5 s" in page


def form_token(http) -> str:
    """The force-open form's token, from the table's page as the signed-in user sees it."""
    found = re.search(r'name="form_token" value="([^"]+)"', http.get(f"/iceberg/tables/{TABLE}").text)
    assert found, "the table's page has no force-open form"
    return found.group(1)


def test_a_table_page_offers_force_open_to_editors_only_and_links_the_holding_run(client):
    http, state = client
    page = http.get(f"/iceberg/tables/{TABLE}").text
    assert 'id="force-open"' in page and f"/dags/{HELD_BY.dag_id}/runs/{HELD_BY.run_id}" in page
    assert page.count("<img ") == 3
    token = form_token(http)
    state["user"] = "viewer"
    assert 'id="force-open"' not in http.get(f"/iceberg/tables/{TABLE}").text
    refused = http.post(f"/iceberg/tables/{TABLE}/force-open", data={"reason": "mine now", "form_token": token})
    assert refused.status_code == 403 and state["forced"] == []  # the admin's form, posted as the viewer


def test_force_open_needs_a_reason_and_records_who_gave_it(client):
    http, state = client
    token = form_token(http)
    blank = http.post(f"/iceberg/tables/{TABLE}/force-open", data={"reason": "  ", "form_token": token})
    assert blank.status_code == 400
    done = http.post(f"/iceberg/tables/{TABLE}/force-open", data={"reason": "run died", "form_token": token},
                     headers={"Origin": "http://testserver"}, follow_redirects=False)  # fmt: skip
    assert done.status_code == 303 and done.headers["location"].endswith(f"/iceberg/tables/{TABLE}")
    assert state["forced"] == [(TABLE, "run died (by admin, in the Airflow UI)")]
    page = http.get(done.headers["location"]).text  # the gate is open now: nothing to force, no holder
    assert 'data-gate="open"' in page and 'id="force-open"' not in page


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
    from airflow_iceberg.plugins.fleet import _form_signer

    tokens = {"the page's": form_token(http), "forged": "x" + form_token(http)[1:],
              "another user's": _form_signer().dumps("viewer"), None: None}  # fmt: skip
    data = {"reason": "writers, resume"} | ({"form_token": tokens[token]} if tokens[token] else {})
    refused = http.post(f"/iceberg/tables/{TABLE}/force-open", data=data, headers=headers, follow_redirects=False)
    assert refused.status_code == 403 and refusal in refused.json()["detail"], refused.text
    assert state["forced"] == [] and state["closed"]


def test_an_expired_form_is_refused_with_what_to_do(client, monkeypatch):
    http, state = client
    from airflow_iceberg.plugins import fleet

    token = form_token(http)
    monkeypatch.setattr(fleet, "FORM_MAX_AGE", -1)
    refused = http.post(f"/iceberg/tables/{TABLE}/force-open", data={"reason": "run died", "form_token": token})
    assert refused.status_code == 403 and "reload the table's page" in refused.json()["detail"]
    assert state["forced"] == []


def test_a_request_with_a_bearer_token_needs_no_form_token(client):
    # A page of another origin cannot make a browser send an Authorization header: scripts use the API's tokens.
    http, state = client
    bearer = {"Authorization": "Bearer a-token-the-api-server-checked"}  # the fake auth manager's user is admin
    done = http.post(
        f"/iceberg/tables/{TABLE}/force-open", data={"reason": "run died"}, headers=bearer, follow_redirects=False
    )
    assert done.status_code == 303 and state["forced"] == [(TABLE, "run died (by admin, in the Airflow UI)")]


def test_a_table_not_in_the_list_is_not_found_and_charts_are_pngs_drawn_from_the_runs_alone(client):
    http, state = client
    assert http.get("/iceberg/tables/lake.no.such").status_code == 404
    png = http.get(f"/iceberg/tables/{TABLE}/charts/files.png")
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG\r\n\x1a\n")
    assert state["health_reads"] == 0  # a chart reads no table metadata
    assert http.get(f"/iceberg/tables/{TABLE}/charts/nope.png").status_code == 404
