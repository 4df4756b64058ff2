"""Real browser test: Playwright drives Debian's chromium (no browser download) against uvicorn.

Logs in with a token, opens the dashboard, starts a run, watches the job finish, opens the run
page and counts the acceptance-chart series and profile bars, stops an engine, and saves
screenshots of the dashboard, run and compare pages under test-output/screenshots/.

The run/stop procedures are the real ones when ``dynocell.runbooks.model_pair`` exists (the main job
can run on the reference engine); otherwise test-only stand-ins write the same rows.
"""

from __future__ import annotations

import importlib.util
import socket
import threading
import time
from pathlib import Path

import pytest

from tests.test_web_routes import web_store  # noqa: F401 - session fixture
from tests.web_fill import REPO, add_run

pytestmark = pytest.mark.browser
CHROMIUM = Path("/usr/bin/chromium")
SHOTS = REPO / "test-output" / "screenshots"
REAL = importlib.util.find_spec("dynocell.runbooks.model_pair") is not None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(web_store):  # noqa: F811
    import uvicorn

    from dynocell.db import tables as m
    from dynocell.runbooks import web_tokens
    from dynocell.web.app import create_app, uvicorn_options

    settings, cell, ids = web_store
    procedures = {}
    if not REAL:
        def stand_in_run(c, ref, progress=None):  # test-only: the real run_job is not complete yet
            for step in ("boot", "health", "bench", "acceptance", "profile", "diagnose", "stop"):
                progress(step, {"message": f"{step}…"})
                time.sleep(0.15)
            return add_run(c, ids["configs"][0], ids["boots"][0], scale=0.9)

        def stand_in_stop(c, boot_ref, progress=None):
            with c.store.session() as s:
                s.get(m.Boot, boot_ref).state = "stopped"
            return {"boot_id": boot_ref, "state": "stopped"}

        procedures = {"run": stand_in_run, "stop": stand_in_stop}
    token = web_tokens.create(cell, "browser")
    app = create_app(settings, cell=cell, bind_host="127.0.0.1", procedures=procedures)
    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                        **uvicorn_options(settings)))
    t = threading.Thread(target=srv.run, daemon=True)
    t.start()
    for _ in range(100):
        if srv.started:
            break
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", token, ids
    srv.should_exit = True
    t.join(10)


@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian chromium (apt-get install chromium)")
def test_browser_login_run_inspect_stop_compare(server):
    from playwright.sync_api import expect, sync_playwright

    base, token, ids = server
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(base + "/")
        assert "/login" in page.url
        page.fill("input[name=token]", token)
        page.click("button[type=submit]")
        page.wait_for_url(base + "/")
        expect(page.locator("#live-boots")).to_be_visible()

        # start a run; the job fragment polls until done and links the run
        page.fill("input[name=config]", "tiny")
        page.click("#start-run")
        job = page.locator("#jobs-slot .job").first
        expect(job).to_be_visible()
        expect(job).to_have_attribute("data-state", "done", timeout=120_000)
        link = job.locator("a.job-run-link")
        run_href = link.get_attribute("href")
        page.screenshot(path=str(SHOTS / "dashboard.png"), full_page=True)

        page.click("a.job-run-link")
        page.wait_for_url(base + run_href)
        charts = page.locator("svg.acceptance-chart")
        n_classes = charts.count()
        assert n_classes >= 1
        for i in range(n_classes):
            assert charts.nth(i).locator("g.series").count() == 2  # p_i and a_i
            assert charts.nth(i).locator("g.tau-marker").count() == 1
        bars = page.locator("svg.profile-chart rect.bar")
        assert bars.count() == page.locator("svg.profile-chart g.legend").count() >= 3
        assert page.evaluate("() => window.__pwned") is None
        page.screenshot(path=str(SHOTS / "run.png"), full_page=True)

        # stop an engine from the dashboard
        page.goto(base + "/")
        row = page.locator(f"tr[data-boot='{ids['live_boot']}']")
        expect(row).to_be_visible()
        row.locator("button.stop-btn").click()
        stop_job = page.locator("#jobs-slot .job").first
        expect(stop_job).to_have_attribute("data-state", "done", timeout=120_000)
        expect(page.locator(f"tr[data-boot='{ids['live_boot']}']")).to_have_count(0, timeout=10_000)

        # compare two runs
        page.goto(base + f"/compare?runs={ids['runs'][0]}&runs={ids['runs'][1]}")
        assert page.locator("svg.acceptance-chart g.series").count() == 4
        assert page.locator("svg.profile-chart g.stack").count() == 2
        page.screenshot(path=str(SHOTS / "compare.png"), full_page=True)
        browser.close()
