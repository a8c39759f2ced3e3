"""The NNI web UI of a real experiment, looked at in headless Chromium as a person would.

A short CPU experiment runs through `nnictl create`; the Trials detail page must list every trial with
NNI's status and its GFLOPS as the default metric, and, once the metric's `status` and `gflops` columns
are added through "Add/Remove columns", those too, matching what the trials reported. The page is saved
as a screenshot under the test's tmp_path.

The browser is Debian's chromium (`make test` installs it), driven by the playwright package; playwright
never downloads a browser of its own here.
"""
from pathlib import Path

import pytest
from nni_experiment import free_port, running, write_config

from experiments import tune

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TRIALS = 4


@pytest.fixture
def chromium() -> Path:
    """A missing browser fails the test (it would otherwise go untested in CI), with the fix in the message."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: the web UI test needs Debian's chromium "
                    "(`make test-debs` or `make test` installs it with apt-get)", pytrace=False)
    return CHROMIUM


@pytest.fixture
def experiment(tmp_path):
    """A finished mm/N32K32M32 OpEvo experiment of 4 trials, 2 at a time, kept under tmp_path; yields
    (port, trial records). It is stopped afterwards whatever happens."""
    config = write_config(tmp_path, "mm/N32K32M32", "opevo", trials=TRIALS, seed=1)
    port = free_port()
    with running(config, port):
        assert tune.wait(port, timeout_s=300, poll_s=2) == "DONE"
        yield port, tune.trials(port)


def table_rows(page) -> dict[str, dict[str, str]]:
    """The trial table as {trial id: {column key: cell text}}, the keys being the table's own
    (`status`, `latestAccuracy` for the default metric, `metric/<key>` for added metric columns)."""
    rows = {}
    for row in page.get_by_role("row").filter(has=page.locator("[data-automation-key=id]")).all():
        cells = {cell.get_attribute("data-automation-key"): cell.inner_text().strip()
                 for cell in row.get_by_role("gridcell").all()}
        rows[cells["id"].split()[0]] = cells
    return rows


def test_trials_table_shows_each_trial_with_status_and_gflops(chromium, experiment, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    port, records = experiment
    assert len(records) == TRIALS and all(r.metric for r in records), records
    screenshot = tmp_path / "webui-trials.png"
    with sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=str(chromium), headless=True,
            args=CHROMIUM_FLAGS, viewport={"width": 1600, "height": 1000})
        page = browser.pages[0] if browser.pages else browser.new_page()
        try:
            page.set_default_timeout(30_000)
            page.goto(f"http://127.0.0.1:{port}/detail")
            expect(page.get_by_text("Trial jobs", exact=True)).to_be_visible()
            ids = page.locator("[role=row] [data-automation-key=id]")
            expect(ids).to_have_count(TRIALS)

            page.get_by_role("button", name="Add/Remove columns").click()
            dialog = page.get_by_role("dialog")
            for column in ("status (metric)", "gflops (metric)"):
                dialog.get_by_text(column, exact=True).click()
                expect(dialog.get_by_label(column)).to_be_checked()
            dialog.get_by_role("button", name="Save").click()
            expect(page.get_by_role("columnheader", name="gflops (metric)")).to_be_visible()

            rows = table_rows(page)
            assert sorted(rows) == sorted(r.trial_id for r in records), rows
            for r in records:
                cells = rows[r.trial_id]
                assert cells["status"] == r.status == "SUCCEEDED", cells
                default, kind = cells["latestAccuracy"].split()
                assert kind == "(FINAL)"
                assert float(default) == pytest.approx(r.metric["default"], abs=1e-6), cells
                assert float(cells["metric/gflops"]) == pytest.approx(r.metric["gflops"], rel=1e-9), cells
                assert cells["metric/status"] == r.metric["status"], cells
        finally:
            page.screenshot(path=str(screenshot), full_page=True)
            browser.close()
    assert screenshot.stat().st_size > 10_000
