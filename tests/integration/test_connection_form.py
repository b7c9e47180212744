"""The write gate's connection form, as the Airflow 3.3 UI shows it in a real browser (Debian's headless Chromium).

The UI reads how to draw the form from the provider's metadata (``ui-field-behaviour`` in
``get_provider_info``): "Database" instead of "Schema", and placeholders. The provider also declares Extra as
hidden, but Airflow 3.3's UI draws its "Extra Fields JSON" section (collapsed) for every connection type.
"""

from __future__ import annotations

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from airflow_iceberg.get_provider_info import WRITE_GATE_FORM
from tests.integration.conftest import BUILD, login


def test_the_write_gate_form_shows_database_and_placeholders(browser, live_airflow):
    wait = WebDriverWait(browser, 120)
    login(browser, live_airflow, "admin")
    browser.get(f"{live_airflow.url}/connections")
    add = wait.until(expected_conditions.element_to_be_clickable((By.XPATH, "//button[contains(., 'Add Connection')]")))
    add.click()
    kind = wait.until(expected_conditions.element_to_be_clickable((By.XPATH, "//input[@role='combobox']")))
    kind.click()
    kind.send_keys("Iceberg Write Gate")
    kind.send_keys(Keys.ENTER)
    wait.until(expected_conditions.visibility_of_element_located((By.XPATH, "//label[.='Database']")))
    form = browser.find_element(By.TAG_NAME, "body")
    BUILD.mkdir(exist_ok=True)
    browser.save_screenshot(str(BUILD / "connection-form-iceberg-write-gate.png"))

    labels = [label.text.strip() for label in form.find_elements(By.TAG_NAME, "label") if label.text.strip()]
    assert "Database" in labels and "Schema" not in labels, labels
    placeholders = {element.get_attribute("placeholder") for element in form.find_elements(By.TAG_NAME, "input")}
    assert set(WRITE_GATE_FORM["placeholders"].values()) <= placeholders, placeholders
