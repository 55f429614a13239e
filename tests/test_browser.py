"""The dashboard in a real browser: `streamlit run` on 127.0.0.1, headless Chromium via selenium.

Screenshots of the placement explorer and the comparison page go to test-artifacts/. Never
skipped: without Chromium the test fails and says how to install it (`make browser`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import free_port, wait_for_http

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
START_TIMEOUT_S = 90
RENDER_TIMEOUT_S = 90
EXCEPTION = '[data-testid="stException"]'
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1600,1300",
)


@contextlib.contextmanager
def streamlit_server(home: Path, log_path: Path):
    """`streamlit run dashboard/app.py` on a free port over the store in `home`, stopped by its
    process id."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_TRACKING_URI")}
    env["DREAMSHARD_HOME"] = str(home)
    log = log_path.open("w")
    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "streamlit"),
            "run",
            str(ROOT / "dashboard" / "app.py"),
            "--server.address",
            "127.0.0.1",
            "--server.port",
            str(port),
            "--server.headless",
            "true",
            "--browser.gatherUsageStats",
            "false",
            "--client.toolbarMode",
            "viewer",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_http(f"{url}/_stcore/health", START_TIMEOUT_S, process)
        yield url
    finally:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


@pytest.fixture
def server(pipeline_home, tmp_path):
    with streamlit_server(pipeline_home, tmp_path / "streamlit.log") as url:
        yield url


@pytest.fixture
def browser(tmp_path):
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} missing: run `make browser` (installs Debian's "
            "chromium and chromium-driver) before the browser test"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS + (f"--user-data-dir={tmp_path / 'chromium'}",):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def open_and_wait(driver, url: str, name: str, ready, what: str) -> Path:
    """Open `url`, wait until `ready(driver)` or an exception shows, save a screenshot."""
    driver.get(url)
    return wait_and_save(driver, name, ready, what)


def wait_and_save(driver, name: str, ready, what: str) -> Path:
    """Wait until `ready(driver)` or an exception shows on the page open now, save a
    screenshot."""
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def ready_or_failed(d) -> bool:
        return ready(d) or bool(d.find_elements(By.CSS_SELECTOR, EXCEPTION))

    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    url = driver.current_url
    # Streamlit redraws while the page settles: an element found a moment ago may be gone by
    # the time its text is read; that is "not yet", and the wait asks again
    waiting = WebDriverWait(
        driver, RENDER_TIMEOUT_S, ignored_exceptions=(StaleElementReferenceException,)
    )
    try:
        waiting.until(ready_or_failed)
    except TimeoutException:
        driver.save_screenshot(str(path))
        raise AssertionError(
            f"{url}: {what} not drawn in {RENDER_TIMEOUT_S} s; see {path}"
        ) from None
    errors = driver.find_elements(By.CSS_SELECTOR, EXCEPTION)
    assert not errors, f"{url} shows an exception: {errors[0].text}"
    time.sleep(1.5)  # let the last chart finish its layout; a "Page not found" dialog is up
    assert driver.save_screenshot(str(path)), f"no screenshot of {url}"
    return path


def screenshot(driver, url: str, charts: int, name: str) -> Path:
    """Open `url`, wait until `charts` Plotly charts have drawn, save a screenshot."""
    from selenium.webdriver.common.by import By

    def drawn(d) -> bool:
        return len(d.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .main-svg")) >= charts

    return open_and_wait(driver, url, name, drawn, f"{charts} chart(s)")


def open_runs_page(driver, url: str, name: str) -> Path:
    """Open `url`, wait until the Runs page shows its heading and its table, save a screenshot."""
    from selenium.webdriver.common.by import By

    def drawn(d) -> bool:
        heading = any(h.text.strip() == "Runs" for h in d.find_elements(By.CSS_SELECTOR, "h1"))
        return heading and bool(d.find_elements(By.CSS_SELECTOR, '[data-testid="stDataFrame"]'))

    return open_and_wait(driver, url, name, drawn, "the Runs page")


def test_runs_page_opens_at_runs_and_at_the_root(pipeline_home, server, browser):
    """/runs is the Runs page itself; the root URL switches to it, keeping `?run=`."""
    from selenium.webdriver.support.ui import WebDriverWait

    for url, name in ((f"{server}/runs", "dashboard-runs"), (f"{server}/", "dashboard-root")):
        open_runs_page(browser, url, name)
        assert "Page not found" not in browser.page_source, f"{url} says Page not found"
        path = browser.current_url.split("?")[0]  # the page adds ?run=<the run it opened>
        assert path == f"{server}/runs", f"{url} ended at {browser.current_url}"

    with sqlite3.connect(pipeline_home / "mlflow.db") as db:  # not the newest run, shown first
        (run_id,) = db.execute(
            "SELECT run_uuid FROM tags WHERE key = 'flow' AND value = 'collect-costs'"
        ).fetchone()
    open_runs_page(browser, f"{server}/?run={run_id}", "dashboard-root-run")
    WebDriverWait(browser, RENDER_TIMEOUT_S).until(lambda d: f"run {run_id}" in d.page_source)
    assert "Page not found" not in browser.page_source
    assert browser.current_url == f"{server}/runs?run={run_id}"


def test_placement_explorer_and_comparison_render_in_chromium(server, browser):
    placement = screenshot(browser, f"{server}/placement", 2, "dashboard-placement")
    assert "Placement explorer" in browser.page_source
    compare = screenshot(browser, f"{server}/compare", 1, "dashboard-compare")
    assert "Compare planners" in browser.page_source
    for path in (placement, compare):
        assert path.stat().st_size > 20_000  # a real picture, not a blank page


def click_text(driver, selector: str, text: str) -> None:
    """Click the first element matching `selector` whose text is `text` (waits for it)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def found(d):
        return next(
            (e for e in d.find_elements(By.CSS_SELECTOR, selector) if e.text.strip() == text),
            False,
        )

    WebDriverWait(driver, RENDER_TIMEOUT_S).until(found).click()


def choose(driver, label: str, option: str) -> None:
    """Pick `option` in the select box labelled `label` (a combo box: its input carries the
    label, the button beside it opens the options)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    field = f'input[role="combobox"][aria-label="{label}"]'
    WebDriverWait(driver, RENDER_TIMEOUT_S).until(lambda d: d.find_elements(By.CSS_SELECTOR, field))
    driver.find_element(By.CSS_SELECTOR, field).find_element(
        By.XPATH, "following-sibling::button"
    ).click()
    click_text(driver, '[role="option"]', option)


def test_place_tables_renders_a_split_plan_in_chromium(server, browser):
    """The pasted example spec placed by `lookup` with split auto: history_items is cut
    row-wise over the 4 devices, and its four shards are drawn under one legend entry."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    legend = "history_items: row-wise into 4 shards"
    screenshot(browser, f"{server}/place_tables", 1, "dashboard-place-tables")
    click_text(browser, '[data-testid="stRadio"] label', "Paste CSV")
    WebDriverWait(browser, RENDER_TIMEOUT_S).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, '[data-testid="stTextArea"] textarea')
    )
    choose(browser, "Planner or registered model", "lookup")

    def drawn(d) -> bool:
        texts = [e.text for e in d.find_elements(By.CSS_SELECTOR, ".js-plotly-plot .legendtext")]
        return legend in texts and len(d.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")) >= 2

    path = wait_and_save(browser, "dashboard-place-split", drawn, legend)
    assert "history_items row-wise into 4 shards" in browser.page_source
    planner = browser.find_element(
        By.CSS_SELECTOR, 'input[aria-label="Planner or registered model"]'
    )
    assert planner.get_attribute("value") == "lookup"
    assert path.stat().st_size > 20_000
    # the plan explained (`dreamshard explain`'s numbers) in its expander
    summary = next(
        e
        for e in browser.find_elements(By.CSS_SELECTOR, "details summary")
        if "Why each table sits where it does" in e.text
    )
    summary.click()
    WebDriverWait(browser, RENDER_TIMEOUT_S).until(
        lambda d: "(key: lookup)" in d.page_source and "the slowest forward plus" in d.page_source
    )


def test_evidence_lists_every_study_in_chromium(server, browser):
    """A fresh clone's study runs (`python -m benchmarks import`, in the store `pipeline_home`
    holds): every study with its targets on the Evidence page."""
    from selenium.webdriver.common.by import By

    studies = sorted(p.name.removesuffix(".rows.json") for p in RESULTS.glob("*.rows.json"))

    def drawn(d) -> bool:
        heads = {h.text.strip() for h in d.find_elements(By.CSS_SELECTOR, "h3")}
        return "Evidence" in d.page_source and set(studies) <= heads

    path = open_and_wait(browser, f"{server}/evidence", "dashboard-evidence", drawn, "studies")
    tables = browser.find_elements(By.CSS_SELECTOR, '[data-testid="stDataFrame"]')
    assert len(tables) >= 2  # the summary and a study's targets
    assert "Page not found" not in browser.page_source
    assert path.stat().st_size > 20_000
