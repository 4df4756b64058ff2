"""Web panel faces of issue 17: the import upload and the attach form on the boots page, and the
boot kind shown. Real app (FastAPI TestClient), real store, real vLLM 0.26.0 log."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

VLLM_LOG = Path(__file__).parent / "data" / "vllm-0.26.0" / "C_draft_graph.server.log"


@pytest.fixture
def app_client(settings):
    from dynocell.runbooks.views import open_view_cell
    from dynocell.web.app import create_app
    from tests.weblogin import LAUNCH, logged_in

    cell = open_view_cell(settings)
    app = create_app(settings, cell=cell, launch_token=LAUNCH)
    with logged_in(app) as c:
        yield app, c, cell


def _csrf(html: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def test_upload_a_real_vllm_log_imports_it_and_the_boots_page_shows_the_kind(app_client):
    app, c, cell = app_client
    page = c.get("/boots")
    assert page.status_code == 200 and 'id="import-form"' in page.text and 'id="attach-form"' in page.text
    token = _csrf(page.text)
    r = c.post("/actions/import", data={"kind": "log", "csrf_token": token},
               files={"file": ("../../etc/passwd", VLLM_LOG.read_bytes(), "text/plain")}, follow_redirects=False)
    assert r.status_code == 303, r.text
    job_id = r.headers["location"].rsplit("/", 1)[-1]
    job = app.state.jobs.wait(job_id, timeout_s=60)
    assert job["state"] == "done", job
    stored = list((cell.settings.home / "uploads").iterdir())
    assert len(stored) == 1 and stored[0].suffix == ".log" and "passwd" not in stored[0].name
    boots = c.get("/boots").text
    assert "(imported)" in boots and "vllm" in boots


def test_upload_refusals_store_nothing(app_client):
    from dynocell.runbooks.imports import MAX_UPLOAD_BYTES

    app, c, cell = app_client
    token = _csrf(c.get("/boots").text)
    bad_kind = c.post("/actions/import", data={"kind": "../x", "csrf_token": token},
                      files={"file": ("a.log", b"hello\n", "text/plain")}, follow_redirects=False)
    assert bad_kind.status_code == 400 and "kind" in bad_kind.text
    big = c.post("/actions/import", data={"kind": "log", "csrf_token": token},
                 files={"file": ("big.log", b"x" * (MAX_UPLOAD_BYTES + 1), "text/plain")}, follow_redirects=False)
    assert big.status_code == 400 and "MiB" in big.text
    no_csrf = c.post("/actions/import", data={"kind": "log"}, files={"file": ("a.log", b"x\n", "text/plain")})
    assert no_csrf.status_code == 403
    up = cell.settings.home / "uploads"
    assert not up.exists() or not any(up.iterdir())


def test_attach_form_refuses_a_bad_url_in_its_job(app_client):
    app, c, _cell = app_client
    token = _csrf(c.get("/boots").text)
    r = c.post("/actions/attach", data={"url": "ftp://x", "csrf_token": token}, follow_redirects=False)
    assert r.status_code == 303
    job = app.state.jobs.wait(r.headers["location"].rsplit("/", 1)[-1], timeout_s=30)
    assert job["state"] == "failed" and "scheme" in (job.get("error") or "")


def test_tui_shows_the_boot_kind():
    from dynocell.cli.tui import format as fmt

    assert fmt.port_or_kind({"kind": "attached", "port": 30000}) == "att"
    assert fmt.port_or_kind({"kind": "imported", "port": 8300}) == "imp"
    assert fmt.port_or_kind({"kind": "started", "port": 8300}) == "8300"
    assert fmt.kind_word({"kind": "imported"}) == " imported" and fmt.kind_word({}) == ""


def test_attached_boot_pages_say_attached_not_a_ready_time(app_client, model_pair, tmp_path):
    """The boots table and the boot page of an engine started by hand: 'attached', never '0.0 s'."""
    from dynocell.engine.reference.launch import start_engine
    from dynocell.runbooks.attach import attach

    _app, c, cell = app_client
    eng = start_engine(model_pair.target, [], tmp_path / "hand.log")
    try:
        boot_id = attach(cell, eng.url)["boot_id"]
        row = re.search(rf'<tr data-boot="{boot_id}">.*?</tr>', c.get("/boots").text, re.S).group(0)
        # the ready column (after the port) says attached; the uptime beside it may well be 0.0 s
        assert re.search(r"<td>\d+</td>\s*<td>attached</td>", row), row
        page = c.get(f"/boots/{boot_id}").text
        ready = re.search(r'<span class="k">ready in</span>([^<]*)<', page).group(1)
        assert "unknown (attached" in ready, ready
        assert eng.proc.poll() is None
    finally:
        eng.stop()
