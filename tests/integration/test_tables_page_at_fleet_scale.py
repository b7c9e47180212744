"""The "Iceberg tables" page with 1,000 tables in the table list, in Chromium against a live Airflow of its own.

The health watch's checks, closed gates and failed runs of a fleet are in the gate database, as the watch and the
runs leave them. The page's summary bar counts them, and its list puts the tables that need work first, the worst
first, then the tables whose check failed, then the ones nothing is known of, then the healthy ones. The page
reads no table's metadata for this: the tables are not even in the catalog. A screenshot goes in the README.
"""

from __future__ import annotations

import pytest
import yaml
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from airflow_iceberg.core.gate_state import GateOwner
from airflow_iceberg.core.tables import TableName
from airflow_iceberg.hooks.run_records import RUN_TABLE
from airflow_iceberg.hooks.write_gate import WriteGateHook
from airflow_iceberg.plugins.tables_page import UI_ROUTE
from airflow_iceberg.surface.dag_factory import compaction_dag_id
from tests.integration.conftest import BUILD, DB_SUFFIX, login, suite_defaults

FLEET = 1000
TABLES = [TableName("lake", "fleet_page", f"t{n:04d}") for n in range(FLEET)]
#: What the health watch last decided, by table number: the rest were found healthy, and ten were never checked.
NEEDING = {n: ("needs_work", (n * 37) % 500 + 1) for n in range(0, 300, 10)}  # 30 tables, scores 1..500
NEEDING |= {n: ("waiting", 600 + n) for n in (5, 15, 25, 35, 45)} | {n: ("started", 700 + n) for n in (7, 17, 27)}
CHECK_FAILED = {n: "error" for n in (3, 13, 23, 33)} | {n: "unreachable" for n in (43, 53)}
NEVER_CHECKED = set(range(990, 1000))
CLOSED = (2, 12, 22)
FAILED_TODAY, FAILED_LONG_AGO = (4, 14, 24, 24), (34,)


@pytest.fixture(scope="module")
def fleet_airflow(tmp_path_factory, integration_stack):
    """A live Airflow whose table list has the 1,000 tables (manual-only, every DAG paused), and their state."""
    from devkit.live_airflow import running

    gate_hook = WriteGateHook()

    root = tmp_path_factory.mktemp("tables-page")
    table_list = root / "tables.yaml"
    entries = [{"table": str(t), "full_rewrite": {"schedule": None}} for t in TABLES]
    table_list.write_text(yaml.safe_dump({"defaults": suite_defaults(), "tables": entries}))
    checks = []
    for n, table in enumerate(TABLES):
        if n in NEVER_CHECKED:
            continue
        decision, score = NEEDING.get(n, (CHECK_FAILED.get(n, "healthy"), 0))
        checks.append(
            {
                "table_name": table,
                "snapshot_id": n,
                "decision": decision,
                "reason": f"{decision} (t{n})",
                "reading": "listing",
                "score": None if n in CHECK_FAILED else score,
                "data_files": 10 + n,
                "delete_files": n % 7,
            }
        )
    owners = [GateOwner(compaction_dag_id(TABLES[n]), f"manual__held_{n}") for n in CLOSED]
    every_dag = (
        f"{2 * FLEET} DAGs parsed",
        lambda airflow: airflow.query("SELECT count(*) FROM dag WHERE NOT is_stale")[0][0] >= 2 * FLEET,
        1200,
    )
    with running(
        root / "home",
        table_list,
        ready=every_dag,
        meta_db=f"airflow_iceberg_test_fleet_page{DB_SUFFIX}",
        settings={"AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True"},
    ) as airflow:
        try:
            gate_hook.records.record_health_checks(checks)
            for n, owner in zip(CLOSED, owners, strict=True):
                gate_hook.close_gate(TABLES[n], owner, lease_seconds=3600)
            for i, n in enumerate(FAILED_TODAY + FAILED_LONG_AGO):
                gate_hook.records.record_failed_run(
                    TABLES[n],
                    compaction_dag_id(TABLES[n]),
                    f"manual__failed_{i}",
                    "plan_compaction",
                    RuntimeError("down"),
                )
            with gate_hook.get_conn() as db, db.cursor() as cursor:  # one failure is older than the summary's 24 hours
                cursor.execute(
                    f"UPDATE {RUN_TABLE} SET started_at = NOW(6) - INTERVAL 2 DAY WHERE table_name = %s",
                    (str(TABLES[FAILED_LONG_AGO[0]]),),
                )
                db.commit()
            yield airflow
        finally:
            for n in CLOSED:
                gate_hook.force_open(TABLES[n], "test done")


def expected_order() -> list[str]:
    """The list's order by need, worked out from the state the fixture left."""
    needing = sorted(NEEDING, key=lambda n: (-NEEDING[n][1], str(TABLES[n])))
    failed = sorted(CHECK_FAILED, key=lambda n: str(TABLES[n]))
    unknown = sorted(NEVER_CHECKED, key=lambda n: str(TABLES[n]))  # the failed runs' tables were checked
    return [str(TABLES[n]) for n in needing + failed + unknown]


def test_the_summary_counts_every_table_and_the_list_puts_the_worst_first(browser, fleet_airflow):
    login(browser, fleet_airflow, "admin")
    browser.get(f"{fleet_airflow.url}/plugin/{UI_ROUTE}")
    # A row the page re-renders between finding it and reading it is looked for again, not taken for a failure.
    wait = WebDriverWait(browser, 120, ignored_exceptions=(StaleElementReferenceException,))
    wait.until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "tr[data-table]")))

    def figure(name: str) -> int:
        return int(browser.find_element(By.CSS_SELECTOR, f"[data-summary='{name}']").text.replace(",", ""))

    assert {
        name: figure(name) for name in ("tables", "gates_closed", "needing_work", "check_failed", "runs_failed_24h")
    } == {
        "tables": FLEET,
        "gates_closed": len(CLOSED),
        "needing_work": len(NEEDING),
        "check_failed": len(CHECK_FAILED),
        "runs_failed_24h": len(FAILED_TODAY),
    }
    rows = browser.find_elements(By.CSS_SELECTOR, "tr[data-table]")
    assert len(rows) == 50 and "Page 1 of 20" in browser.find_element(By.ID, "pages").text
    shown = [r.get_attribute("data-table") for r in rows]
    order = expected_order()
    assert shown == order[:50]  # 38 needing work, the worst first; 6 failed checks; then 6 of the 10 unknown
    assert [r.get_attribute("data-need") for r in rows[:44]] == ["needs_work"] * 38 + ["check_failed"] * 6
    BUILD.mkdir(exist_ok=True)
    browser.save_screenshot(str(BUILD / "iceberg-tables-fleet.png"))

    browser.find_element(By.NAME, "gate").send_keys("closed")  # the closed gates, through the page's own filter
    wait.until(
        lambda b: sorted(r.get_attribute("data-table") for r in b.find_elements(By.CSS_SELECTOR, "tr[data-table]"))
        == sorted(str(TABLES[n]) for n in CLOSED)
    )
    assert all(
        r.get_attribute("data-gate") == "closed" for r in browser.find_elements(By.CSS_SELECTOR, "tr[data-table]")
    )
