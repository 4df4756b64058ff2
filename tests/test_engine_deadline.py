"""Issue 32 item 10: every engine HTTP call has a total deadline. A real server on 127.0.0.1 that dribbles a byte
every 0.2 s (``tests/servers/dribble.py``: each read stays under its timeout, the answer never ends) used to hold
``ps``, ``attach``, ``health`` and the panel for good; now each call ends at its deadline as a ``timeout``.

No assertion on wall time: the dribbler never finishes an answer, so a client without a total deadline never
returns (the guards below only keep a broken build from hanging the suite).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any, Callable

import pytest
import requests

from servers import dribble

GUARD_S = 120  # a hang guard for a broken build, far above any deadline below


@pytest.fixture(params=["headers", "body"])
def dribbler(request):
    proc, url = dribble.start(request.param, every=0.2)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _within_guard(fn: Callable[[], Any]) -> Any:
    """``fn()`` in a daemon thread; fails the test when it has not returned after :data:`GUARD_S`."""
    out: dict[str, Any] = {}

    def call() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            out["error"] = exc

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(GUARD_S)
    assert not t.is_alive(), "the engine call did not end: no total deadline"
    if "error" in out:
        return out["error"]
    return out["value"]


def test_sync_and_async_clients_end_at_the_deadline(dribbler):
    from dynocell.engine.client import AsyncEngineClient, EngineClient, EngineUnreachable

    def sync_call():
        with EngineClient(dribbler, timeout_s=1.0) as c:
            return c.health()

    def async_call():
        async def go():
            async with AsyncEngineClient(dribbler, timeout_s=1.0) as c:
                return await c.health()
        return asyncio.run(go())

    for fn in (sync_call, async_call):
        err = _within_guard(fn)
        assert isinstance(err, EngineUnreachable), err
        assert err.kind == "timeout" and "deadline" in err.message, err.message


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dynocell", *args], env=env, capture_output=True, text=True,
                          timeout=GUARD_S)


def _attached_boot(settings, url: str) -> str:
    """A ready attached boot of the dribbling server in the store, as ``dynocell attach`` records one."""
    from dynocell.db import boots as db_boots, configs as db_configs
    from dynocell.runbooks.cell import open_cell

    port = int(url.rsplit(":", 1)[1])
    cell = open_cell(settings)
    h = "sha256:" + "d1" * 32
    db_configs.insert_config(cell.store, h, "sglang", "/models/x", '{"model_path": "/models/x"}', "")
    now = datetime.now(timezone.utc)
    log = settings.home / "attach.json"
    log.write_text("{}")
    db_boots.create_boot(cell.store, id="a77ac4ed0001", config_hash=h, engine="sglang", hostname="127.0.0.1",
                         host="127.0.0.1", port=port, argv=f"(attached: {url})", env={}, state="ready",
                         last_phase="ready", log_path=str(log), started_at=now, ready_at=now, kind="attached")
    return "a77ac4ed0001"


def test_attach_ps_and_health_end_at_their_deadline(settings, cli_env, dribbler):
    r = _cli(["attach", dribbler], cli_env)
    assert r.returncode != 0 and "Error:" in r.stderr and "timeout" in r.stderr, r.stdout + r.stderr
    boot = _attached_boot(settings, dribbler)
    r = _cli(["ps", "--json"], cli_env)
    assert r.returncode == 0 and boot in r.stdout, r.stdout + r.stderr
    r = _cli(["health", boot], cli_env)
    assert "timeout" in r.stdout + r.stderr or "down" in r.stdout + r.stderr, r.stdout + r.stderr


def test_panel_answers_healthz_while_probes_of_a_dribbling_engine_run(settings, dribbler):
    """The panel's pages probe attached engines (``reconcile_live``); with many of them in flight on a dribbling
    engine, ``/healthz`` still answers (it runs on the event loop, never behind the worker threads), and every
    page answers once its probes reach their deadline."""
    from dynocell.runbooks.cell import open_cell
    from dynocell.web.app import create_app
    from tests.test_web_fuzz import StubProcedures, serve
    from tests.weblogin import LAUNCH

    boot = _attached_boot(settings, dribbler)
    app = create_app(settings, cell=open_cell(settings), launch_token=LAUNCH, procedures=StubProcedures())
    with serve(app) as base:
        http = requests.Session()
        http.trust_env = False
        headers = {"Authorization": f"Bearer {LAUNCH}"}
        pages = 60  # more than the worker threads (40)
        with ThreadPoolExecutor(pages) as pool:
            futures = [pool.submit(http.get, f"{base}/api/boots", headers=headers, timeout=GUARD_S)
                       for _ in range(pages)]
            health = http.get(f"{base}/healthz", timeout=GUARD_S)
            done_first = sum(f.done() for f in futures)
            assert health.status_code == 200 and health.json() == {"status": "ok"}
            answers = [f.result() for f in futures]
        # every page waits for its probe's deadline; /healthz did not wait behind them (it used to queue for a
        # worker thread until the first pages had given up on the engine)
        assert done_first == 0, f"{done_first} pages answered before /healthz"
        assert all(a.status_code == 200 for a in answers), [a.status_code for a in answers][:5]
        assert all(any(b["id"] == boot for b in a.json()) for a in answers), answers[0].text[:300]
