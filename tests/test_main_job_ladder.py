"""Acceptance by context length on the real reference engine (issue 22, shape 5): `dynocell run --workload
ladder` through the console script, then the curve as the operator reads it (`show`, `show --json`) and the
doctor's silence about a healthy pair.

The ladder workload (dynocell/engine/workloads/ladder.toml) measures the acceptance level at 96 / 384 / 896
input tokens on the tiny CPU pair; the numbers are whatever this machine measures, so the test checks that
they agree with each other (τ = 1 + Σ p_i, prompts grow with the rung, break-even = verify / plain step), not
their values.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def _dynocell(env, *args):
    proc = subprocess.run([sys.executable, "-m", "dynocell", *args], env=env, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, (f"dynocell {' '.join(args)} → {proc.returncode}\n{proc.stdout[-3000:]}\n"
                                  f"{proc.stderr[-3000:]}")
    return proc.stdout


@pytest.fixture(scope="module")
def ladder_run(model_pair, tmp_path_factory):
    import os
    from pathlib import Path

    cache = Path(__file__).resolve().parents[1] / ".cache" / "models"
    env = dict(os.environ, DYNOCELL_HOME=str(tmp_path_factory.mktemp("ladder-home")), DYNOCELL_MODEL_CACHE=str(cache),
               PYTHONUNBUFFERED="1", COLUMNS="80")
    _dynocell(env, "run", "--workload", "ladder", "--no-profile")
    run_id = next(r["id"] for r in json.loads(_dynocell(env, "runs", "--json")) if r["kind"] == "run")
    return env, run_id, json.loads(_dynocell(env, "show", run_id, "--json"))


def test_the_curve_has_one_bucket_per_rung_and_adds_up(ladder_run):
    _env, _rid, shown = ladder_run
    curve = shown["by_length"]
    rungs = curve["buckets"]
    assert [b["input_tokens"] for b in rungs] == [96, 384, 896]
    prompts = [b["prompt_tokens"] for b in rungs]
    assert prompts == sorted(prompts) and prompts[-1] > 700, prompts  # the cap (1024 − 32 − 8) is not hit
    assert sum(b["requests"] for b in rungs) == 30  # 5 classes × 2 requests × 3 rungs, none failed
    for b in rungs:
        assert b["steps"] == sum(b["histogram"]) > 0
        assert b["tau"] == pytest.approx(1 + sum(b["p"]), abs=2e-3)
        assert b["verify_step_ms"] > 0
        # the run's plain step (its lossless twin) gives each rung its own break-even
        plain = curve["plain_step_ms"]
        assert plain == shown["run"]["breakeven"]["plain_step_ms"] > 0
        assert b["breakeven_tau"] == pytest.approx(b["verify_step_ms"] / plain, rel=1e-3)
        assert b["speedup"] == pytest.approx(b["tau"] / b["breakeven_tau"], rel=1e-3)
        assert b["pays"] == (b["speedup"] > 1)
    # the pooled rungs hold the same verify steps as the per-class curves
    assert sum(b["steps"] for b in rungs) == sum(c["steps"] for c in shown["curves"])


def test_show_prints_the_section_in_80_columns(ladder_run):
    env, rid, shown = ladder_run
    text = _dynocell(env, "show", rid)
    assert "acceptance by context length" in text
    block = text[text.index("acceptance by context length"):text.index("lossless:")]
    assert all(len(line) <= 80 for line in block.splitlines()), block
    for b in shown["by_length"]["buckets"]:
        assert f" {b['input_tokens']} " in block and f"{b['tau']:.2f}" in block
    assert ("stops paying from" in block or "pays at every length" in block or "pays at no length" in block)


def test_no_length_bug_on_a_healthy_pair(ladder_run):
    """The reference pair has no length boundary: no cliff, no zero past a length."""
    _env, _rid, shown = ladder_run
    rules = {f["rule"] for f in shown["findings"]}
    assert not {"length_cliff", "zero_past_length"} & rules, rules


def test_web_run_page_shows_the_table_and_the_plot(ladder_run):
    """The run page's "Acceptance by context length" card: one row per bucket and an SVG with τ and the
    break-even τ per bucket (real HTTP through the app, logged in as `dynocell web` users are)."""
    import re

    from dynocell.runbooks.views import open_view_cell
    from dynocell.settings import load_settings
    from dynocell.web.app import create_app
    from tests.weblogin import LAUNCH, logged_in

    env, rid, shown = ladder_run
    settings = load_settings(home=env["DYNOCELL_HOME"])
    app = create_app(settings, cell=open_view_cell(settings), launch_token=LAUNCH)
    with logged_in(app) as c:
        page = c.get(f"/runs/{rid}")
        api = c.get(f"/api/runs/{rid}")
    assert page.status_code == 200 and api.status_code == 200
    assert api.json()["by_length"] == shown["by_length"]
    html = page.text
    card = html[html.index('id="by-length"'):]
    card = card[:card.index("</section>")]
    rows = re.findall(r'<tr class="length-bucket" data-tokens="(\d+)">', card)
    assert rows == ["96", "384", "896"]
    svg = card[card.index("<svg class='chart length-chart'"):]
    for name in ("tau", "breakeven"):
        series = re.search(rf"<g class='series' data-name='{name}'>(.*?)</g>", svg).group(1)
        assert series.count("<circle class='point'") == 3, name
    cross = shown["by_length"]["crossover_tokens"]
    assert ("data-tokens='%s'" % cross in svg) if cross is not None else "class='crossover'" not in svg


@pytest.mark.browser
@pytest.mark.skipif(not __import__("pathlib").Path("/usr/bin/chromium").exists(),
                    reason="needs Debian chromium (apt-get install chromium)")
def test_browser_shows_the_length_card(ladder_run):
    """A real browser (Playwright + Debian chromium, as tests/test_web_browser.py) on uvicorn: the run page's
    length card draws τ and the break-even τ with one point per bucket, and the table has one row per bucket."""
    import socket
    import threading
    import time

    import uvicorn
    from playwright.sync_api import expect, sync_playwright

    from dynocell.runbooks import web_tokens
    from dynocell.runbooks.views import open_view_cell
    from dynocell.settings import load_settings
    from dynocell.web.app import create_app, uvicorn_options

    env, rid, shown = ladder_run
    settings = load_settings(home=env["DYNOCELL_HOME"])
    cell = open_view_cell(settings)
    token = web_tokens.create(cell, "browser")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(create_app(settings, cell=cell, bind_host="127.0.0.1"), host="127.0.0.1",
                                        port=port, log_level="warning", **uvicorn_options(settings)))
    t = threading.Thread(target=srv.run, daemon=True)
    t.start()
    try:
        for _ in range(200):
            if srv.started:
                break
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port}"
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--no-first-run"])
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(base + "/")
            page.fill("input[name=token]", token)
            page.click("button[type=submit]")
            page.wait_for_url(base + "/")
            page.goto(f"{base}/runs/{rid}")
            card = page.locator("#by-length")
            expect(card).to_be_visible()
            assert card.locator("tr.length-bucket").count() == len(shown["by_length"]["buckets"]) == 3
            chart = card.locator("svg.length-chart")
            assert chart.locator("g.series[data-name='tau'] circle.point").count() == 3
            assert chart.locator("g.series[data-name='breakeven'] circle.point").count() == 3
            browser.close()
    finally:
        srv.should_exit = True
        t.join(10)
