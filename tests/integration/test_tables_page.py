"""The "Iceberg tables" page, in a real browser (Debian's headless Chromium) against the live Airflow's api-server.

The page is a React app inside the Airflow UI (a plugin's ``react_apps``). After two compaction runs and one skipped
run of a table, triggered through the REST API as a user would, the page lists the table with its gate, need and
last run, and the table's page shows the runs and the charts. A gate a test closed is forced open from the page,
with a reason that lands in the audit trail; a viewer (who may not edit the DAG) is offered no force-open, and the
endpoint refuses them. Pages of other origins, one on another host name and one on another port of the same host,
submit a force-open form while the admin is signed in: both are refused, and the gate stays closed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote

import pytest
import requests
from airflow.providers.apache.iceberg.hooks.iceberg import IcebergHook
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from airflow_iceberg.core.gate_state import GateOwner
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.hooks.metrics import RUN_GAUGES
from airflow_iceberg.plugins.tables_page import UI_ROUTE, URL_PREFIX
from airflow_iceberg.surface.dag_factory import compaction_dag_id
from airflow_iceberg.table_list.schema import TableConfig
from devkit.writers import write_small_files
from tests.integration.conftest import BUILD, login, suite_defaults

OWNER = GateOwner("someone_elses_dag", "manual__held_by_the_test")


def trigger_and_wait(live_airflow, dag_id: str, conf: dict) -> dict:
    response = live_airflow.api("POST", f"dags/{dag_id}/dagRuns", json={"logical_date": None, "conf": conf})
    assert response.status_code == 200, response.text
    return live_airflow.wait_for_run(dag_id, response.json()["dag_run_id"], timeout=900)


@pytest.fixture(scope="module")
def compacted_table(live_airflow) -> TableName:
    """A table of small files, compacted twice (once by its health, once forced) and then skipped as healthy."""
    table = TableName.parse("lake.ui.events")
    IcebergHook("lake").catalog.create_namespace_if_not_exists(table.namespace)  # the catalog's tables too, if new
    config = TableConfig.model_validate({**suite_defaults(), "table": str(table)})
    write_small_files(config, "--days", "2", "--commits", "3", "--files-per-commit", "4", "--delete-commits", "0")
    live_airflow.add_tables({"table": str(table), "full_rewrite": {"schedule": None}})
    dag_id = compaction_dag_id(table)
    runs = [trigger_and_wait(live_airflow, dag_id, conf) for conf in ({}, {"force": True}, {})]
    assert [run["state"] for run in runs] == ["success"] * 3, runs
    return table


@contextmanager
def site_of_another_origin(html: str, host: str) -> Iterator[str]:
    """Serves ``html`` at ``http://{host}:{a port of its own}/``, an origin that is not the api-server's."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = html.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://{host}:{server.server_port}/"
    finally:
        server.shutdown()
        server.server_close()


def page(browser, url: str, ready: str):
    browser.get(url)
    return WebDriverWait(browser, 120).until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, ready)))


def ui(live_airflow, query: str = "") -> str:
    """The page's address in the Airflow UI."""
    return f"{live_airflow.url}/plugin/{UI_ROUTE}{query}"


def api(live_airflow, path: str) -> str:
    return f"{live_airflow.url}{URL_PREFIX}/api/{path}"


def test_the_page_shows_the_gate_health_and_history_and_forces_a_stuck_gate_open(
    browser, live_airflow, compacted_table, gate_hook
):
    table = str(compacted_table)
    records = gate_hook.records.run_records(table)
    assert [(r["decision"], r["outcome"]) for r in records] == [
        ("compact", "success"),
        ("force", "success"),
        ("skip", "skipped"),
    ]
    gate_hook.close_gate(table, OWNER, lease_seconds=600)  # a run that died with the gate closed
    login(browser, live_airflow, "admin")

    row = page(browser, ui(live_airflow, f"?q={table}"), f"tr[data-table='{table}']")
    assert (row.get_attribute("data-gate"), row.get_attribute("data-need")) == ("closed", "healthy")  # its last run
    cells = [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
    assert cells[1].startswith("closed ") and cells[5] == "not watched"  # the suite's tables are not watched
    assert cells[6].startswith("skipped")  # the last run, linked to Airflow's page of it
    run_link = row.find_elements(By.TAG_NAME, "a")[-1].get_attribute("href")
    assert run_link.endswith(f"/dags/{compaction_dag_id(compacted_table)}/runs/{quote(records[-1]['run_id'], safe='')}")
    BUILD.mkdir(exist_ok=True)
    browser.save_screenshot(str(BUILD / "iceberg-tables-list.png"))

    row.find_element(By.LINK_TEXT, table).click()
    form = WebDriverWait(browser, 120).until(expected_conditions.presence_of_element_located((By.ID, "force-open")))
    shown = browser.find_elements(By.CSS_SELECTOR, "#runs tr[data-run-id]")
    assert [r.get_attribute("data-run-id") for r in shown] == [r["run_id"] for r in reversed(records)]
    assert [r.get_attribute("data-outcome") for r in shown] == ["skipped", "success", "success"]
    charts = browser.find_elements(By.CSS_SELECTOR, "canvas[data-chart]")
    assert sorted(c.get_attribute("data-chart") for c in charts) == ["delete_files", "file_size", "files", "paused"]
    drawn = "const c = arguments[0]; return c.getContext('2d').getImageData(0, 0, c.width, c.height).data.some(v => v)"
    for chart in charts:  # each chart drew something on its canvas
        assert chart.size["width"] > 100 and browser.execute_script(drawn, chart), chart.get_attribute("data-chart")
    owner_link = browser.find_element(By.CSS_SELECTOR, "#gate a").get_attribute("href")
    assert owner_link.endswith(f"/dags/{OWNER.dag_id}/runs/{OWNER.run_id}")
    browser.save_screenshot(str(BUILD / "iceberg-table-page.png"))

    reason = "run died at 03:10; releasing ingest"
    form.find_element(By.NAME, "reason").send_keys(reason)
    form.find_element(By.CSS_SELECTOR, "button[type='submit']").click()
    WebDriverWait(browser, 120).until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "#gate[data-gate='open']"))
    )
    assert not browser.find_elements(By.ID, "force-open")  # nothing left to force open
    forced = gate_hook.audit_trail(table)[-1]
    assert forced["action"] == "force_open" and forced["owner_run_id"] == OWNER.run_id
    assert forced["detail"] == f"{reason} (by admin, in the Airflow UI)"
    assert not gate_hook.get_state(table).pauses_writers
    audited = browser.find_element(By.CSS_SELECTOR, "#audit tr[data-action='force_open']")
    assert audited.text.endswith(forced["detail"])


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"], ids=["another-site", "another-port-of-the-host"])
def test_a_page_of_another_origin_cannot_force_a_gate_open(browser, live_airflow, compacted_table, gate_hook, host):
    table = str(compacted_table)
    endpoint = api(live_airflow, f"tables/{table}/force-open")
    attack = (
        f'<!doctype html><form method="post" action="{endpoint}"><input name="reason" value="writers, resume">'
        '<input name="form_token" value="guessed"></form><script>document.forms[0].submit()</script>'
    )
    gate_hook.close_gate(table, OWNER, lease_seconds=600)
    try:
        login(browser, live_airflow, "admin")  # just now: Chromium still sends a fresh lax cookie with a POST
        with site_of_another_origin(attack, host) as attacker:
            assert not attacker.startswith(live_airflow.url)
            browser.get(attacker)
            refused = WebDriverWait(browser, 60).until(
                lambda b: b.current_url == endpoint and "refused a cross-site request" in b.page_source
            )
        assert refused
        # The browser sent the admin's session (else the answer would be 401, not this refusal), and named the page:
        assert f"it came from a page of '{attacker.rstrip('/')}'" in browser.page_source
        assert gate_hook.get_state(table).owner == OWNER  # still closed, by the same run
        assert [r["action"] for r in gate_hook.audit_trail(table)][-1] == "close"

        # Without a browser's Origin: the session cookie alone, with no form token of this Airflow, is refused too.
        session = {"_token": browser.get_cookie("_token")["value"]}
        bare = requests.post(endpoint, data={"reason": "no token"}, cookies=session, timeout=60, allow_redirects=False)
        assert bare.status_code == 403 and "without this Airflow's force-open form token" in bare.text, bare.text
        assert gate_hook.get_state(table).owner == OWNER
    finally:
        gate_hook.force_open(table, "test done")


def test_the_page_is_in_the_airflow_ui_behind_its_login(browser, live_airflow, compacted_table):
    listed = live_airflow.api("GET", "plugins").json()["plugins"]
    [plugin] = [p for p in listed if p["name"] == "iceberg_tables"]
    [app] = plugin["react_apps"]
    assert (app["name"], app["url_route"], app["destination"]) == ("Iceberg tables", UI_ROUTE, "nav")
    assert requests.get(api(live_airflow, "tables"), timeout=60).status_code == 401  # no session

    login(browser, live_airflow, "admin")
    browser.get(f"{live_airflow.url}/")
    WebDriverWait(browser, 120).until(
        expected_conditions.element_to_be_clickable((By.CSS_SELECTOR, "button[title='Browse'], [aria-label='Browse']"))
    ).click()
    WebDriverWait(browser, 60).until(
        expected_conditions.element_to_be_clickable((By.LINK_TEXT, "Iceberg tables"))
    ).click()
    # A search reloads the list: a row read while the old page goes away is stale, which means "not yet".
    wait = WebDriverWait(browser, 120, ignored_exceptions=(StaleElementReferenceException,))
    rows = wait.until(expected_conditions.presence_of_all_elements_located((By.CSS_SELECTOR, "tr[data-table]")))
    assert browser.current_url.split("?")[0] == ui(live_airflow)
    assert len(rows) == 50  # a fleet of 200 tables and more, a page at a time
    assert not browser.find_elements(By.TAG_NAME, "iframe")  # the UI's own page, not a frame
    search = browser.find_element(By.NAME, "q")
    search.send_keys(str(compacted_table))
    search.submit()
    wait.until(
        lambda b: [r.get_attribute("data-table") for r in b.find_elements(By.CSS_SELECTOR, "tr[data-table]")]
        == [str(compacted_table)]
    )
    browser.save_screenshot(str(BUILD / "iceberg-tables-in-the-airflow-ui.png"))

    # Dark mode, as the UI's own switch sets it (next-themes: localStorage "theme"): the page follows the theme.
    assert lightness(browser, "h2") < 0.5
    browser.execute_script("localStorage.setItem('theme', 'dark')")
    browser.refresh()
    wait.until(lambda b: b.find_elements(By.CSS_SELECTOR, "tr[data-table]"))
    assert browser.execute_script("return document.documentElement.classList.contains('dark')")
    assert lightness(browser, "h2") > 0.5 and lightness(browser, "tr[data-table] td") > 0.5
    browser.save_screenshot(str(BUILD / "iceberg-tables-dark.png"))
    browser.execute_script("localStorage.removeItem('theme')")


def lightness(browser, selector: str) -> float:
    """The relative luminance (0 black, 1 white) of the text color of the first element ``selector`` finds."""
    # The theme's colors are oklch(): a canvas turns the computed color into sRGB.
    r, g, b = (v / 255 for v in browser.execute_script(TO_RGB, browser.find_element(By.CSS_SELECTOR, selector)))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


TO_RGB = """const canvas = document.createElement("canvas"); canvas.width = canvas.height = 1;
const context = canvas.getContext("2d"); context.fillStyle = getComputedStyle(arguments[0]).color;
context.fillRect(0, 0, 1, 1); return Array.from(context.getImageData(0, 0, 1, 1).data.slice(0, 3));"""


def test_a_user_who_may_not_edit_the_dag_sees_no_force_open_and_is_refused(
    browser, live_airflow, compacted_table, gate_hook
):
    table = str(compacted_table)
    gate_hook.close_gate(table, OWNER, lease_seconds=600)
    try:
        login(browser, live_airflow, "viewer")
        page(browser, ui(live_airflow, f"?table={table}"), "#gate[data-gate='closed']")
        assert not browser.find_elements(By.ID, "force-open")

        endpoint = api(live_airflow, f"tables/{table}/force-open")
        as_viewer = {"Authorization": f"Bearer {live_airflow.token('viewer')}"}
        refused = requests.post(endpoint, data={"reason": "not mine to open"}, headers=as_viewer, timeout=60)
        assert refused.status_code == 403, refused.text
        anonymous = requests.post(endpoint, data={"reason": "nobody"}, timeout=60, allow_redirects=False)
        assert anonymous.status_code == 401, anonymous.text
        assert gate_hook.get_state(table).owner == OWNER  # still closed, by the same run
        assert [r["action"] for r in gate_hook.audit_trail(table)][-1] == "close"
    finally:
        gate_hook.force_open(table, "test done")


def test_each_finished_run_sends_its_record_to_airflows_metrics_tagged_by_table(
    live_airflow, compacted_table, gate_hook, statsd
):
    table = str(compacted_table)
    records = gate_hook.records.run_records(table)  # compacted, forced, skipped
    finished = live_airflow.wait_for(
        "a finished-run metric of each run",
        lambda: (got := statsd.sent("iceberg.run.finished", "c", table=table)) and len(got) >= len(records) and got,
        120,
    )
    assert finished == [({"table": table, "outcome": r["outcome"], "decision": r["decision"]}, 1.0) for r in records]
    for column in RUN_GAUGES:
        values = [value for _, value in statsd.sent(f"iceberg.run.{column}", "g", table=table)]
        assert values == [r[column] for r in records if r[column] is not None], column
    paused = [round(value) for _, value in statsd.sent("iceberg.run.gate_closed", "ms", table=table)]
    assert paused == [round(float(r["gate_closed_seconds"]) * 1000) for r in records[:2]]  # the skip paused nothing
    assert records[2]["gate_closed_seconds"] is None and all(p > 0 for p in paused)


def test_what_the_page_reads_needs_a_session_too(live_airflow, compacted_table):
    for path in ("tables", f"tables/{compacted_table}"):
        assert requests.get(api(live_airflow, path), timeout=60).status_code == 401, path
    as_admin = {"Authorization": f"Bearer {live_airflow.token('admin')}"}
    one = requests.get(api(live_airflow, f"tables/{compacted_table}?days=0"), headers=as_admin, timeout=120)
    assert one.status_code == 200 and [r["decision"] for r in one.json()["runs"]] == ["compact", "force", "skip"]
