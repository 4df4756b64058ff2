"""Route tests of the web panel: every page, fragment and JSON mirror on a filled temporary store.

The store is filled once per session (``web_store``): by the real main job on the reference
engine when the procedures are complete, plus stand-in rows (tests/web_fill.py) for the cases a
clean run never produces (a failed boot, a log line and an entry with ``<script>``).
"""

from __future__ import annotations

import importlib.util
import re
import warnings

import pytest
from fastapi.testclient import TestClient

from tests.web_fill import REPO, fill_stand_in


def _real_run(cell) -> str | None:
    if importlib.util.find_spec("dynocell.runbooks.model_pair") is None:
        return None
    try:
        from dynocell.runbooks.run import run_job

        return run_job(cell, str(REPO / "examples" / "tiny.toml"))
    except Exception as e:  # noqa: BLE001 - procedures still in progress: fall back to stand-in rows
        warnings.warn(f"real run_job failed, web tests use stand-in rows only: {e}", stacklevel=1)
        return None


def panel_store(home, real_run: bool = True):
    """``(settings, cell, ids)`` of a panel store in ``home`` filled with the stand-in rows (and the real
    reference run, when ``real_run`` and one is shipped)."""
    from dynocell.runbooks.views import open_view_cell
    from dynocell.settings import load_settings

    settings = load_settings(home=home, poll_interval_s=1.0)
    cell = open_view_cell(settings)
    ids = fill_stand_in(cell)
    real = _real_run(cell) if real_run else None
    if real:
        ids["real_run"] = real
    return settings, cell, ids


@pytest.fixture(scope="session")
def web_store(tmp_path_factory):
    return panel_store(tmp_path_factory.mktemp("web-home"))


LAUNCH = "dcl_test-launch-token"


def logged_in(app) -> TestClient:
    """A TestClient logged in the way `dynocell web` users are: through the printed token URL."""
    c = TestClient(app)
    r = c.get(f"/?token={LAUNCH}", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/", r.text
    return c


@pytest.fixture
def client(web_store):
    from dynocell.web.app import create_app

    settings, cell, _ = web_store
    app = create_app(settings, cell=cell, launch_token=LAUNCH)
    with logged_in(app) as c:
        yield c


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def test_dashboard_lists_live_boots_runs_and_failures(client, web_store):
    _, _, ids = web_store
    r = client.get("/")
    assert r.status_code == 200
    assert ids["live_boot"] in r.text and ids["runs"][0] in r.text
    assert "cuda-oom" in r.text  # failure with its signature
    assert 'hx-trigger="every 1.0s"' in r.text  # polls at settings.poll_interval_s
    frag = client.get("/?fragment=live", headers={"HX-Request": "true"})
    assert frag.status_code == 200 and "<html" not in frag.text and 'id="live"' in frag.text


def test_run_page_has_tables_and_charts(client, web_store):
    _, _, ids = web_store
    r = client.get(f"/runs/{ids['runs'][0]}")
    assert r.status_code == 200
    assert r.text.count('class="bench-level"') == 3
    assert r.text.count("class='chart acceptance-chart'") == 2  # one per text class
    assert r.text.count("class='series' data-name='p'") == 2 and r.text.count("class='series' data-name='a'") == 2
    assert r.text.count("class='tau-marker'") == 2
    assert r.text.count("<rect class='bar'") == 7  # seven categories
    assert "draft position" in r.text and "share of device time (%)" in r.text  # axis labels with units
    assert "depth_decay" in r.text and "acceptance-definitions" in r.text
    # prefix resolution
    assert client.get(f"/runs/{ids['runs'][0][:7]}").status_code == 200


def test_compare_page_overlays_and_deltas(client, web_store):
    _, _, ids = web_store
    r = client.get("/compare", params={"runs": ids["runs"]})
    assert r.status_code == 200
    assert r.text.count("data-name='p:") == 4  # 2 runs × 2 classes overlaid
    assert 'id="throughput-deltas"' in r.text and "+20.0 %" in r.text
    assert r.text.count("class='stack'") == 2
    api = client.get("/api/compare", params={"runs": ",".join(ids["runs"])}).json()
    assert abs(api["throughput"][0]["deltas_pct"][1] - 20.0) < 1e-6
    assert client.get("/api/compare", params={"runs": ids["runs"][0]}).status_code == 400


def test_boot_page_timeline_health_log_and_search(client, web_store):
    _, _, ids = web_store
    b = ids["boots"][0]
    r = client.get(f"/boots/{b}")
    assert r.status_code == 200
    assert r.text.count("class='phase'") == 6 and "seconds since spawn (s)" in r.text
    assert 'id="health"' in r.text and "health_generate" in r.text
    frag = client.get(f"/boots/{b}?fragment=log&q=draft", headers={"HX-Request": "true"})
    assert "loading draft model" in frag.text and "capturing graphs" not in frag.text
    assert client.get(f"/api/boots/{b}/log", params={"q": "graphs"}).json()["matched"] == 1
    failed = client.get(f"/boots/{ids['failed_boot']}")
    assert "cuda-oom" in failed.text
    assert client.get(f"/boots/{b}/artifacts/log").status_code == 200
    assert client.get(f"/boots/{b}/artifacts/traces/rank0.trace.json.gz").status_code == 200


def test_configs_list_detail_and_diff(client, web_store):
    _, _, ids = web_store
    r = client.get("/configs")
    assert "tiny-d2" in r.text and ids["configs"][0][7:19] in r.text
    d = client.get("/configs/tiny")
    assert d.status_code == 200 and "STANDALONE" in d.text and ids["runs"][0] in d.text
    diff = client.get("/configs-diff", params={"a": "tiny", "b": "tiny-d2"})
    assert diff.text.count('class="diff-row"') == 2 and "speculative.num_draft_tokens" in diff.text
    assert client.get("/api/configs-diff", params={"a": "tiny", "b": "tiny-d2"}).json()["fields"][0]["field"]


def test_runbooks_search_and_entry(client):
    r = client.get("/runbooks")
    assert r.status_code == 200
    e = client.get("/runbooks/test-xss-entry")
    assert e.status_code == 200 and "<h1>Hello</h1>" in e.text


def test_api_mirror_and_openapi(client, web_store):
    _, _, ids = web_store
    assert client.get("/api/dashboard").json()["counts"]["runs"] >= 2
    run = client.get(f"/api/runs/{ids['runs'][0]}").json()
    assert len(run["curves"]) == 2 and len(run["profile"]["splits"]) == 7
    assert [p["position"] for p in run["curves"][0]["points"]] == [1, 2, 3]
    spec = client.get("/openapi.json").json()
    for path in ("/api/runs/{run_id}", "/api/compare", "/api/boots/{boot_id}/stop", "/api/jobs/{job_id}"):
        assert path in spec["paths"]
    nf = client.get("/api/runs/nope-nope")
    assert nf.status_code == 404 and nf.json()["error"].startswith("no run")


def test_errors_render_as_page_fragment_or_json(client):
    page = client.get("/runs/zzz")
    assert page.status_code == 404 and "<html" in page.text and "no run matches" in page.text
    frag = client.get("/runs/zzz", headers={"HX-Request": "true"})
    assert frag.status_code == 404 and "<html" not in frag.text and "error-box" in frag.text
    assert client.get("/api/runs/zzz").headers["content-type"].startswith("application/json")


def test_actions_run_as_deduplicated_jobs(web_store):
    """A stand-in run procedure (tests only) proves the job plumbing: two identical starts → one job."""
    import threading

    from dynocell.web.app import create_app

    settings, cell, ids = web_store
    release = threading.Event()
    calls = []

    def fake_run(c, ref, progress=None):
        calls.append(ref)
        progress("bench", {"run_id": ids["runs"][0], "message": "level 1/3"})
        release.wait(10)
        return ids["runs"][0]

    app = create_app(settings, cell=cell, launch_token=LAUNCH, procedures={"run": fake_run})
    with logged_in(app) as c:
        token = csrf_of(c.get("/").text)
        r1 = c.post("/actions/run", data={"config": "tiny", "csrf_token": token}, follow_redirects=False)
        r2 = c.post("/actions/run", data={"config": ids["configs"][0], "csrf_token": token}, follow_redirects=False)
        assert r1.status_code == 303 and r1.headers["location"] == r2.headers["location"]
        job_url = r1.headers["location"]
        assert "level 1/3" in c.get(job_url).text
        release.set()
        job_id = job_url.rsplit("/", 1)[1]
        st = app.state.jobs.wait(job_id, 10)
        assert st["state"] == "done" and st["result"] == ids["runs"][0] and len(calls) == 1
        assert f'href="/runs/{ids["runs"][0]}"' in c.get(job_url + "?fragment=job", headers={"HX-Request": "1"}).text
        # note action
        n = c.post("/notes", data={"kind": "run", "target": ids["runs"][1], "text": "looks **good**",
                                   "csrf_token": token}, follow_redirects=True)
        assert "<strong>good</strong>" in n.text
