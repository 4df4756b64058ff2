"""Issue 32 item 17 (its first part): web tokens can expire. ``dynocell web token create --expires 7d`` makes a
token that stops logging in after that long (``list`` shows its expiry); an expired token is refused by the panel
and its open sessions end. Real parts: the CLI in subprocesses, the panel served by uvicorn on 127.0.0.1, a real
SQLite store (the passage of time is simulated by moving the stored expiry into the past: no sleeping).
"""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone

import requests

from dynocell.db import tables as m
from tests.test_web_fuzz import StubProcedures, serve


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dynocell", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def _http() -> requests.Session:
    s = requests.Session()
    s.trust_env = False
    return s


def test_tokens_expire(settings, cli_env):
    from dynocell.runbooks.cell import open_cell
    from dynocell.web.app import create_app

    r = _cli(["web", "token", "create", "--label", "week", "--expires", "7d"], cli_env)
    assert r.returncode == 0 and "expires" in r.stderr, r.stdout + r.stderr
    week = r.stdout.strip()
    r = _cli(["web", "token", "create", "--label", "forever"], cli_env)
    forever = r.stdout.strip()
    listed = _cli(["web", "token", "list"], cli_env).stdout
    assert "live until" in listed and "never expires" in listed, listed
    for bad in ("0d", "7", "1.5h", "-3d", "99999999d"):
        r = _cli(["web", "token", "create", "--expires", bad], cli_env)
        assert r.returncode == 2 and "Error: --expires" in r.stderr, (bad, r.stderr)

    cell = open_cell(settings)
    app = create_app(settings, cell=cell, procedures=StubProcedures())
    with serve(app) as base:
        user = _http()
        assert user.post(f"{base}/login", data={"token": week, "next": "/"}, allow_redirects=False,
                         timeout=30).status_code == 303
        assert user.get(f"{base}/api/boots", timeout=30).status_code == 200
        with cell.store.session() as s:  # a week later
            row = s.query(m.WebToken).filter(m.WebToken.label == "week").one()
            row.expires_at = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(seconds=1)
        assert user.get(f"{base}/api/boots", timeout=30).status_code == 401  # its session ended
        r = _http().post(f"{base}/login", data={"token": week, "next": "/"}, allow_redirects=False, timeout=30)
        assert r.status_code == 401, r.status_code
        r = _http().get(f"{base}/api/boots", headers={"Authorization": f"Bearer {week}"}, timeout=30)
        assert r.status_code == 401
        r = _http().get(f"{base}/api/boots", headers={"Authorization": f"Bearer {forever}"}, timeout=30)
        assert r.status_code == 200
    assert "expired" in _cli(["web", "token", "list"], cli_env).stdout
