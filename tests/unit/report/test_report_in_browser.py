"""A written report opened from disk in a real headless chromium, offline: every chart is drawn
with the bars the data say, and a screenshot is kept (test-artifacts/reports/)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.unit.report.test_chaos_report import recorded_run
from txnsim.report import chaos_report, write_report

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

pytestmark = pytest.mark.slow

ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts" / "reports"
CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def browser():
    if not (CHROMEDRIVER and CHROMIUM):
        pytest.skip("chromium and chromium-driver are not installed (scripts/setup.sh installs them as root)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1300,2400"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    yield driver
    driver.quit()


def test_the_chaos_report_draws_its_charts_in_a_browser_without_network(tmp_path, browser):
    path = write_report(chaos_report(recorded_run()), tmp_path / "chaos-report.html")
    browser.get(path.as_uri())
    drawn = WebDriverWait(browser, 30, poll_frequency=0.1).until(
        lambda d: d.execute_script(
            "var ids = ['txn-outcomes', 'ownership'];"
            "return ids.every(function (id) { return document.querySelector('#' + id + ' .main-svg'); })"
            " && {bars: document.querySelectorAll('#txn-outcomes g.point').length,"
            "     lines: document.querySelectorAll('#ownership g.trace.scatter').length}"),
        "plotly never drew the report's charts")
    # 4 outcome series over 9 one-second bins (zero-height bars are drawn as empty paths too),
    # one ownership line per node
    assert drawn["bars"] == 4 * 9 and drawn["lines"] == 3
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "chaos-report.png"))
