"""Issue 32, the panel's items 11, 14 and 15, each a reproduction of the attack pass over real HTTP: the panel
served by uvicorn on 127.0.0.1 (:func:`tests.test_web_fuzz.serve`) on a real SQLite store.

11. login back-off never locks out a right token; 14. no open redirect after a token-URL login;
15. every listed ``?fragment=`` renders, an unknown one is a 400 (``fragment=state`` was a 500).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import requests

from tests.test_refs import seeded_cell
from tests.test_web_fuzz import StubProcedures, serve
from tests.weblogin import LAUNCH

REPO = Path(__file__).resolve().parents[1]
CONFIG = "sha256:" + "ab" * 32
BOOT = "b00700000001"


def _http() -> requests.Session:
    s = requests.Session()
    s.trust_env = False  # loopback only: no proxies from the environment
    return s


@pytest.fixture
def cell(settings):
    return seeded_cell(settings, (CONFIG,), BOOT, ())


def _app(settings, cell, **kw):
    from dynocell.web.app import create_app

    return create_app(settings, cell=cell, launch_token=LAUNCH, procedures=StubProcedures(), **kw)


def _login(http: requests.Session, base: str, token: str) -> requests.Response:
    return http.post(base + "/login", data={"token": token, "next": "/"}, allow_redirects=False, timeout=30)


def test_a_right_token_gets_in_while_its_address_backs_off(settings, cell):
    """Item 11: wrong logins from one address (every local user shares 127.0.0.1) put it in back-off; a stored
    token the panel has never verified still logs in, by the form, by ``?token=`` and as a Bearer token, while
    wrong ones keep getting 429."""
    from dynocell.runbooks import web_tokens

    right = web_tokens.create(cell, "alice")
    other = web_tokens.create(cell, "bob")
    third = web_tokens.create(cell, "carol")
    with serve(_app(settings, cell, login_max_failures=2, login_backoff_s=60.0)) as base:
        attacker = _http()
        codes = [_login(attacker, base, "dcl_wrong-guess").status_code for _ in range(4)]
        assert codes[:2] == [401, 401] and codes[-1] == 429, codes
        r = _login(_http(), base, right)
        assert r.status_code == 303 and "dynocell_session" in r.cookies, (r.status_code, r.text[-400:])
        r = _http().get(f"{base}/?token={other}", allow_redirects=False, timeout=30)
        assert r.status_code == 303 and r.headers["location"] == "/", (r.status_code, r.text[-400:])
        r = _http().get(f"{base}/api/boots", headers={"Authorization": f"Bearer {third}"}, timeout=30)
        assert r.status_code == 200, (r.status_code, r.text[-400:])
        # the address's failures are not cleared by another user's success: wrong guesses still wait
        r = _login(attacker, base, "dcl_wrong-again")
        assert r.status_code == 429 and int(r.headers["Retry-After"]) > 0


@pytest.mark.parametrize("path", ["//evil.example/", "//evil.example/boots", "/\\evil.example/", "///evil.example"])
def test_token_url_login_never_redirects_off_site(settings, cell, path):
    """Item 14: ``GET //evil.example/?token=VALID`` logged in and answered ``Location: //evil.example/``."""
    from urllib.parse import urlsplit

    with serve(_app(settings, cell)) as base:
        r = _http().get(f"{base}{path}?token={LAUNCH}", allow_redirects=False, timeout=30)
        assert r.status_code == 303, (r.status_code, r.text[-400:])
        loc = r.headers["location"]
        assert loc.startswith("/") and not loc.startswith("//") and "\\" not in loc, loc
        assert not urlsplit(loc).netloc, loc
    # a path on the panel keeps its query (without the token)
    with serve(_app(settings, cell)) as base:
        r = _http().get(f"{base}/boots?all=true&token={LAUNCH}", allow_redirects=False, timeout=30)
        assert r.status_code == 303 and r.headers["location"] == "/boots?all=true", r.headers


def test_every_listed_fragment_renders_and_an_unknown_one_is_a_400(settings, cell):
    """Item 15: ``GET /boots/<id>?fragment=state`` was a 500 (listed in FRAGMENTS without its block)."""
    from dynocell.web.views.shared import FRAGMENTS

    templates = REPO / "dynocell" / "web" / "templates"
    for name, blocks in FRAGMENTS.items():
        text = (templates / name).read_text()
        for b in blocks:
            assert re.search(r"{%-?\s*block\s+" + b + r"\b", text), f"{name} lists fragment {b!r} without its block"
    pages = {"dashboard.html": "/", "boot.html": f"/boots/{BOOT}", "runbooks.html": "/runbooks"}
    with serve(_app(settings, cell)) as base:
        http = _http()
        assert http.get(f"{base}/?token={LAUNCH}", allow_redirects=False, timeout=30).status_code == 303
        for name, url in pages.items():
            for b in sorted(FRAGMENTS[name]):
                r = http.get(f"{base}{url}?fragment={b}", headers={"HX-Request": "true"}, timeout=30)
                assert r.status_code == 200 and "<html" not in r.text.lower(), (url, b, r.status_code)
            for bad in ("state", "nope", "content", "[/]\n<script>"):
                r = http.get(f"{base}{url}", params={"fragment": bad}, headers={"HX-Request": "true"}, timeout=30)
                assert r.status_code == 400, (url, bad, r.status_code, r.text[-300:])
                assert "fragment" in r.text and "<script>" not in r.text
        r = http.get(f"{base}/configs", params={"fragment": "state"}, timeout=30)
        assert r.status_code == 400 and "has no fragment" in r.text
