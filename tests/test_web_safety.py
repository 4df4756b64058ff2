"""Issue 16 (Safety), the web panel's part: each test is one reproduction of the attack pass.

Real parts throughout: a real store (SQLite file), the real `dynocell web` process or the app
served by uvicorn on 127.0.0.1, real config files and TOML text, real supervisor and engine
processes for the dead-supervisor case (the SGLang adapter driving tests/engines/fake_engine.py).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
import requests
from fastapi.testclient import TestClient

from engines.shim import write_shim
from tests.test_web_fuzz import StubProcedures, free_port, serve
from tests.test_web_routes import LAUNCH, logged_in

REPO = Path(__file__).resolve().parents[1]
TINY = (REPO / "examples" / "tiny.toml").read_text()


def _http() -> requests.Session:
    s = requests.Session()
    s.trust_env = False  # loopback only: no proxies from the environment
    return s


@pytest.fixture
def cell(settings):
    from dynocell.runbooks.cell import open_cell

    return open_cell(settings)


def _app(settings, cell, procs=None, **kw):
    from dynocell.web.app import create_app

    return create_app(settings, cell=cell, launch_token=LAUNCH, procedures=procs or StubProcedures(), **kw)


def _csrf(c: TestClient) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', c.get("/").text).group(1)


def _add(cell, text: str, name: str) -> str:
    from dynocell.runbooks.configs import add_config_text

    return add_config_text(cell, text, name).hash


# ---------------------------------------------------------------- item 1: login always, token URL

@pytest.fixture
def panel(cli_env, tmp_path):
    """The real `dynocell web` on a fresh data directory (no token stored): its printed login URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "dynocell", "web", "--port", str(port)], env=cli_env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    found = threading.Event()
    url: list[str] = []

    def read() -> None:
        for line in proc.stderr:
            lines.append(line)
            m = re.search(r"(http://127\.0\.0\.1:\d+/\?token=\S+)", line)
            if m:
                url.append(m.group(1))
                found.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert found.wait(120), "no login URL printed:\n" + "".join(lines)
        base = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                _http().get(base + "/healthz", timeout=5)
                break
            except requests.ConnectionError:
                time.sleep(0.1)
        yield base, url[0]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_dynocell_web_always_requires_login_and_prints_a_token_url(panel):
    base, url = panel
    http = _http()
    # no token stored, loopback: still nothing without a login (was an anonymous session)
    r = http.get(base + "/", allow_redirects=False, timeout=30)
    assert r.status_code == 303 and r.headers["location"].startswith("/login"), r.status_code
    assert http.get(base + "/api/dashboard", timeout=30).status_code == 401
    assert http.post(base + "/actions/boot", data={"config": "tiny"}, allow_redirects=False,
                     timeout=30).status_code in (401, 403)
    # the printed URL trades its token for the session cookie and drops it from the address bar
    r = http.get(url, allow_redirects=False, timeout=30)
    assert r.status_code == 303 and r.headers["location"] == "/", (r.status_code, r.headers.get("location"))
    assert "dynocell_session=" in r.headers["set-cookie"]
    page = http.get(base + "/", timeout=30)
    assert page.status_code == 200 and "token=" not in page.url and "Log out" in page.text
    # a wrong token in the URL logs nobody in
    bad = _http().get(base + "/?token=dcl_wrong", allow_redirects=False, timeout=30)
    assert bad.status_code == 401 and "set-cookie" not in bad.headers


def test_every_response_forbids_framing_and_foreign_scripts(panel):
    """Item 11: X-Frame-Options DENY and a CSP that allows only the panel's own scripts."""
    base, url = panel
    http = _http()
    http.get(url, timeout=30)
    for path in ("/", "/login", "/api/runs", "/static/panel.css", "/nope"):
        r = http.get(base + path, timeout=30)
        assert r.headers.get("x-frame-options") == "DENY", path
        csp = r.headers.get("content-security-policy", "")
        script_src = re.search(r"script-src ([^;]*)", csp).group(1).split()
        assert script_src == ["'self'"], (path, csp)
        assert "frame-ancestors 'none'" in csp
    # and the panel's pages load scripts only from /static (what the CSP allows)
    html = http.get(base + "/", timeout=30).text
    assert re.findall(r"<script[^>]*>", html) == ['<script src="/static/htmx-2.0.4.min.js" defer>']


def test_cross_origin_login_form_is_refused(panel):
    """Item 9: a page on another origin posting the right token must not log the browser in."""
    base, url = panel
    token = url.split("token=", 1)[1]
    http = _http()
    for origin in ("http://evil.example", "null", "http://127.0.0.1:1"):
        r = http.post(base + "/login", data={"token": token}, headers={"Origin": origin}, allow_redirects=False,
                      timeout=30)
        assert r.status_code == 403 and "set-cookie" not in r.headers, (origin, r.status_code)
    r = http.post(base + "/login", data={"token": token}, headers={"Referer": "http://evil.example/x"},
                  allow_redirects=False, timeout=30)
    assert r.status_code == 403
    same = http.post(base + "/login", data={"token": token}, headers={"Origin": base}, allow_redirects=False,
                     timeout=30)
    assert same.status_code == 303 and "dynocell_session=" in same.headers["set-cookie"]


# ---------------------------------------------------------------- items 8 + 10: back-off

def test_concurrent_wrong_logins_reach_the_check_at_most_limit_times(settings, cell):
    """Item 8: 30 concurrent wrong logins gave 28 × 401 (the limiter checked before the slow scrypt
    and recorded after). The attempt is reserved first: at most the limit are verified."""
    from dynocell.runbooks import web_tokens

    token = web_tokens.create(cell, "script")
    app = _app(settings, cell, bind_host="127.0.0.1", login_max_failures=5, login_backoff_s=600)
    with serve(app) as base:
        http = _http()
        bearer = {"Authorization": f"Bearer {token}"}
        assert http.get(base + "/api/runs", headers=bearer, timeout=60).status_code == 200
        barrier = threading.Barrier(30)

        def wrong(i: int) -> int:
            barrier.wait(60)
            return _http().post(base + "/login", data={"token": f"wrong-{i}"}, allow_redirects=False,
                                timeout=120).status_code

        with ThreadPoolExecutor(30) as ex:
            codes = list(ex.map(wrong, range(30)))
        assert codes.count(401) <= 5 and codes.count(401) + codes.count(429) == 30, codes
        # item 10: backing off is no lockout for a script holding the right token
        assert http.get(base + "/api/runs", headers=bearer, timeout=60).status_code == 200


def test_backoff_grows_and_a_right_token_gets_in_after_it(settings, cell):
    """Items 10 and 11: a growing wait for a client's failures, never a lockout: a right token gets in
    at once, even from the address that is backing off (every local user shares 127.0.0.1)."""
    from dynocell.runbooks import web_tokens

    token = web_tokens.create(cell, "ops")
    app = _app(settings, cell, login_max_failures=2, login_backoff_s=1.0)
    with TestClient(app) as c:
        assert [c.post("/login", data={"token": "x"}).status_code for _ in range(2)] == [401, 401]
        r = c.post("/login", data={"token": "x"})
        assert r.status_code == 429
        first = int(r.headers["retry-after"])
        time.sleep(first + 0.2)
        assert c.post("/login", data={"token": "x"}).status_code == 401  # the wait doubles
        r = c.post("/login", data={"token": "x"})
        assert r.status_code == 429 and int(r.headers["retry-after"]) > first
        assert c.post("/login", data={"token": token}, follow_redirects=False).status_code == 303


# ---------------------------------------------------------------- item 11: tokens list / revoke

def test_token_revoke_ends_its_sessions(settings, cell, cli_env):
    from dynocell.runbooks import web_tokens

    def cli(*args: str) -> str:
        res = subprocess.run([sys.executable, "-m", "dynocell", "web", "token", *args], env=cli_env,
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stdout + res.stderr
        return res.stdout

    token = web_tokens.create(cell, "laptop")
    other = web_tokens.create(cell, "ci")
    app = _app(settings, cell)
    with TestClient(app) as c, TestClient(app) as c2:
        assert c.post("/login", data={"token": token}, follow_redirects=False).status_code == 303
        assert c2.post("/login", data={"token": other}, follow_redirects=False).status_code == 303
        assert c.get("/", follow_redirects=False).status_code == 200
        listed = cli("list")
        row = next(line for line in listed.splitlines() if "laptop" in line)
        assert token not in listed and "live" in row
        cli("revoke", row.split()[0])
        assert c.get("/", follow_redirects=False).status_code == 303  # its session ended
        assert c.get("/api/runs", headers={"Authorization": f"Bearer {token}"}).status_code == 401
        assert c2.get("/", follow_redirects=False).status_code == 200  # the other token's session lives
        assert "revoked" in next(line for line in cli("list").splitlines() if "laptop" in line)


# ---------------------------------------------------------------- item 1: stored configs only, upload, label moves

def test_web_actions_never_read_a_config_path(settings, cell, tmp_path):
    """The attack: POST /actions/boot with a TOML path whose [env] PYTHONPATH runs a sitecustomize."""
    from dynocell.runbooks.configs import list_configs

    evil = tmp_path / "evil.toml"
    evil.write_text(TINY.replace('[meta]', '[env]\nPYTHONPATH = "/tmp/x"\n\n[meta]') + '\n')
    procs = StubProcedures()
    with logged_in(_app(settings, cell, procs)) as c:
        csrf = _csrf(c)
        for url, kw in (("/actions/boot", {"data": {"config": str(evil), "csrf_token": csrf}}),
                        ("/actions/run", {"data": {"config": str(evil), "csrf_token": csrf}}),
                        ("/api/boots", {"json": {"config": str(evil)}, "headers": {"X-CSRF-Token": csrf}}),
                        ("/api/runs", {"json": {"config": str(evil)}, "headers": {"X-CSRF-Token": csrf}})):
            r = c.post(url, follow_redirects=False, **kw)
            assert r.status_code == 404, (url, r.status_code)
            assert "never read" in r.text
    assert procs.calls == [] and list_configs(cell) == []


def test_adding_a_config_from_the_web_and_label_moves_need_confirmation(settings, cell):
    from dynocell.runbooks.configs import label_target

    old = _add(cell, TINY, "tiny")
    other = TINY.replace("num_draft_tokens = 4", "num_draft_tokens = 3").replace("num_steps = 3", "num_steps = 2")
    with logged_in(_app(settings, cell)) as c:
        csrf = _csrf(c)
        page = c.get("/configs-add")
        assert page.status_code == 200 and 'name="toml"' in page.text
        r = c.post("/configs-add", data={"toml": other, "name": "tiny", "csrf_token": csrf}, follow_redirects=False)
        assert r.status_code == 409
        m = re.search(r"label tiny: (sha256:[0-9a-f]+)… → (sha256:[0-9a-f]+)…", r.text)
        assert m and old.startswith(m.group(1)), r.text[-2000:]
        assert label_target(cell, "tiny") == old  # nothing moved yet
        new = re.search(r'name="confirm" value="(sha256:[0-9a-f]+)"', r.text).group(1)
        api = c.post("/api/configs", json={"toml": other, "name": "tiny"}, headers={"X-CSRF-Token": csrf})
        assert api.status_code == 409 and api.json()["move"]["to"] == new and label_target(cell, "tiny") == old
        r = c.post("/configs-add", data={"toml": other, "name": "tiny", "confirm": new, "csrf_token": csrf},
                   follow_redirects=False)
        assert r.status_code == 303 and label_target(cell, "tiny") == new
        # uploading a file is the same visible action; a new label needs no confirmation
        r = c.post("/configs-add", data={"name": "tiny-up", "csrf_token": csrf},
                   files={"upload": ("tiny.toml", TINY.encode(), "application/toml")}, follow_redirects=False)
        assert r.status_code == 303 and label_target(cell, "tiny-up") == old


def test_an_uploaded_config_that_is_not_utf8_is_refused_not_stored_altered(settings, cell):
    """A Latin-1 file was decoded with replacement characters and stored (another text, another hash);
    `dynocell config add` of the same file says "not UTF-8 text" (newcomer pass)."""
    from dynocell.runbooks.configs import list_configs

    latin1 = ('served_model_name = "café"\n' + TINY).encode("latin-1")
    with logged_in(_app(settings, cell)) as c:
        csrf = _csrf(c)
        r = c.post("/configs-add", data={"name": "latin", "csrf_token": csrf},
                   files={"upload": ("latin.toml", latin1, "application/toml")}, follow_redirects=False)
        assert r.status_code == 400 and "not UTF-8 text" in r.text
    assert list_configs(cell) == []


# ---------------------------------------------------------------- item 2: injection env

def test_web_refuses_untrusted_injection_env_and_marks_it(settings, cell):
    from dynocell.runbooks.configs import trust

    text = TINY.replace("[meta]", '[env]\nLD_PRELOAD = "/opt/patch/libhook.so"\nPYTHONPATH = "/opt/patch"\n\n[meta]')
    h = _add(cell, text, "patched")
    procs = StubProcedures()
    with logged_in(_app(settings, cell, procs)) as c:
        csrf = _csrf(c)
        assert "⚠ env sets LD_PRELOAD, PYTHONPATH" in c.get("/configs").text
        assert "⚠ env sets LD_PRELOAD, PYTHONPATH" in c.get(f"/configs/{h}").text
        for url in ("/actions/boot", "/actions/run"):
            r = c.post(url, data={"config": "patched", "csrf_token": csrf}, follow_redirects=False)
            assert r.status_code == 403 and "dynocell config trust" in r.text, (url, r.status_code)
        assert procs.calls == []
        trust(cell, h, "ops@host")
        r = c.post("/actions/boot", data={"config": "patched", "csrf_token": csrf}, follow_redirects=False)
        assert r.status_code == 303
        assert "trusted by ops@host" in c.get(f"/configs/{h}").text
    deadline = time.monotonic() + 30
    while not procs.calls and time.monotonic() < deadline:
        time.sleep(0.05)
    assert procs.calls == [("boot", h)]  # the hash, never the request's string


# ---------------------------------------------------------------- item 4: secrets

def test_config_pages_and_api_redact_secret_env(settings, cell):
    from dynocell.engine.config import parse_config

    text = TINY.replace("[meta]", '[env]\nHF_TOKEN = "hf_s3cretvalue"\nDB_PASSWORD = "pw-s3cret"\n'
                        'OPENAI_API_KEY = "sk-s3cret"\nNCCL_DEBUG = "INFO"\n\n[meta]')
    h = _add(cell, text, "secret")
    plain = _add(cell, TINY, "tiny")
    assert h == parse_config(text).config_hash  # the hash covers the real values
    with logged_in(_app(settings, cell)) as c:
        for url in (f"/configs/{h}", f"/api/configs/{h}", "/api/configs", f"/configs-diff?a={plain}&b={h}",
                    f"/api/configs-diff?a={plain}&b={h}"):
            body = c.get(url).text
            assert "s3cret" not in body, url
        api = c.get(f"/api/configs/{h}").json()
        assert api["canonical"]["env"]["HF_TOKEN"] == "***" and api["canonical"]["env"]["NCCL_DEBUG"] == "INFO"
        assert api["config"]["config_hash"] == h


# ---------------------------------------------------------------- item 14: dead supervisors

def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_dashboard_and_api_reconcile_a_dead_supervisor(settings, cell):
    """A live-looking boot whose supervisor and engine are gone was shown live until a CLI `ps`."""
    import socket

    from dynocell.db import tables as m
    from tests.web_fill import add_boot

    h = _add(cell, TINY, "tiny")
    bid = add_boot(cell, h, state="stopped")
    with cell.store.session() as s:
        b = s.get(m.Boot, bid)
        b.state, b.ended_at, b.pid, b.supervisor_pid, b.hostname = "starting", None, _dead_pid(), _dead_pid(), \
            socket.gethostname()
        b.supervisor_create_time, b.engine_create_time = 1.0, 1.0
    with logged_in(_app(settings, cell)) as c:
        assert bid not in [b["id"] for b in c.get("/api/dashboard").json()["live_boots"]]
        assert c.get(f"/api/boots/{bid}").json()["boot"]["state"] == "lost"
        assert bid not in [b["id"] for b in c.get("/api/boots").json()]


@pytest.fixture
def hang_settings(monkeypatch, tmp_path, isolated_home):
    """Settings whose SGLang engine is fake_engine.py; on teardown, any supervisor or engine of this
    test still running (a failed assertion midway) is killed, so no test leaves processes behind."""
    from dynocell.settings import load_settings

    monkeypatch.setenv("DYNOCELL_ENGINE_PYTHON", str(write_shim(tmp_path / "fake-python")))
    monkeypatch.setenv("DYNOCELL_STOP_GRACE_S", "2")
    monkeypatch.setenv("DYNOCELL_BOOT_TIMEOUT_SGLANG_S", "900")
    yield load_settings()
    for p in psutil.process_iter(["cmdline", "environ"]):
        try:
            mine = str(tmp_path) in " ".join(p.info["cmdline"] or []) or \
                (p.info["environ"] or {}).get("DYNOCELL_HOME") == str(isolated_home)
            if mine and p.pid != os.getpid():
                p.kill()
        except (psutil.Error, TypeError):
            pass


def test_web_boot_job_fails_when_its_supervisor_dies(hang_settings, tmp_path):
    """Item 14: the job kept `running` (until timeout + 120 s) after `kill -9` of the detached
    supervisor, and every new boot of the config was de-duplicated onto it."""
    from dynocell.db import boots as db_boots
    from dynocell.runbooks.cell import open_cell

    cell = open_cell(hang_settings)
    model = tmp_path / "model"
    model.mkdir()
    h = _add(cell, f'engine = "sglang"\nmodel_path = "{model}"\n\n[env]\nFAKE_MODE = "hang"\n', "hang")
    from dynocell.runbooks.configs import trust
    from dynocell.web.app import create_app

    trust(cell, h, "tests")  # FAKE_MODE is off the [env] allow-list (issue 32 item 3): trusted from the CLI

    app = create_app(hang_settings, cell=cell, launch_token=LAUNCH)
    with logged_in(app) as c:
        csrf = _csrf(c)
        r = c.post("/actions/boot", data={"config": "hang", "csrf_token": csrf}, follow_redirects=False)
        job = r.headers["location"].rsplit("/", 1)[1]
        row = None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            rows = [db_boots.get_boot(cell.store, b["id"]) for b in c.get("/api/boots").json()
                    if b["config_hash"] == h]
            if rows and rows[0].pid and rows[0].supervisor_pid:
                row = rows[0]
                break
            time.sleep(0.2)
        assert row is not None, app.state.jobs.status(job)
        engine = psutil.Process(row.pid)
        os.kill(row.supervisor_pid, signal.SIGKILL)
        st = app.state.jobs.wait(job, 60)
        assert st["state"] == "failed" and "supervisor" in (st["error"] or ""), st
        assert not engine.is_running() or engine.status() == psutil.STATUS_ZOMBIE  # the orphan was stopped
        assert c.get(f"/api/boots/{row.id}").json()["boot"]["state"] in ("stopped", "lost")
        # a new boot of the config is a new job, not the dead one
        r2 = c.post("/actions/boot", data={"config": "hang", "csrf_token": csrf}, follow_redirects=False)
        job2 = r2.headers["location"].rsplit("/", 1)[1]
        assert job2 != job
        deadline = time.monotonic() + 120
        second = None
        while time.monotonic() < deadline and second is None:
            second = next((b for b in c.get("/api/boots").json() if b["config_hash"] == h and b["id"] != row.id
                           and b["pid"]), None)
            time.sleep(0.2)
        from dynocell.runbooks.boots import stop

        assert second is not None, app.state.jobs.status(job2)
        second_engine = psutil.Process(second["pid"])
        stopped = stop(cell, second["id"])
        print("second boot stopped:", stopped["state"], stopped.get("stop_how"), app.state.jobs.wait(job2, 60))
        assert stopped["state"] == "stopped" and not second_engine.is_running() or \
            second_engine.status() == psutil.STATUS_ZOMBIE


# ---------------------------------------------------------------- clear errors

def test_failed_boot_page_shows_the_failure_as_text_not_a_dict(settings, cell):
    from dynocell.db import tables as m
    from tests.web_fill import add_boot

    h = _add(cell, TINY, "tiny")
    bid = add_boot(cell, h, state="failed", signature="cuda-oom")
    with cell.store.session() as s:
        s.get(m.Boot, bid).failure_detail = {
            "reason": "engine exited (1) before ready", "title": "CUDA out of memory",
            "hint": "lower mem_fraction_static",
            "groups": {}, "last_phase": "load_weights", "tail": ["loading weights", "RuntimeError: CUDA out of memory"],
            "engine_create_time": 1.5}
    with logged_in(_app(settings, cell)) as c:
        html = c.get(f"/boots/{bid}").text
    failure = html[html.index('class="card failure"'):]
    failure = failure[:failure.index("</section>")]
    assert "{" not in failure and "&#39;" not in failure and "engine_create_time" not in failure, failure
    for text in ("engine exited (1) before ready", "CUDA out of memory", "lower mem_fraction_static", "load_weights",
                 "RuntimeError: CUDA out of memory"):
        assert text in failure, text
