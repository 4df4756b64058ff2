"""Issue 32, the second pass's fresh attack pass (a neighbour on the host, a panel user on loopback, a hostile
engine): each attack that broke, as the regression test written before its fix.

1. An engine's answers carry its secrets: SGLang 0.5.17's ``/server_info`` (``/get_server_info``) returns
   ``dataclasses.asdict(server_args)`` — ``admin_api_key``, ``api_key``, ``ssl_keyfile_password`` as set —
   and ``dynocell attach`` kept them whole in the boot's ``attach.json``, which ``dynocell logs`` and the
   panel's boot page show. They are ``***`` there now, and the file is 0600.
2. An oversized body: Starlette's form parser caps one field at 1 MiB but keeps up to 1,000 of them, and the
   JSON config API read any body; 16 MiB POSTed to ``/login`` without a token was read whole before the 401.
   Every body is capped at 4 MiB as it streams (413).

The pass (2026-12-02, loopback): 11 attacks, 8 held, 3 broke — these two and raw escape bytes in pages
(``tests/test_web_fuzz_rows.py``). Held: artifact paths with encoded ``..``/``\\``/NUL/double encoding, static
and slug traversal, out-of-range log ``lines``/``offset``, ten open-redirect spellings of ``next`` (form and
token URL), CSRF without token / with ``Origin: null``, a foreign Origin or Referer, ``text/plain`` JSON, a
method override, GET on an action; foreign and rebinding ``Host`` headers; cross-origin login; escapes in
stored strings on every TUI screen (``tests/test_tui_markup.py``).
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

from tests.test_attach_hostile_port import _server
from tests.test_bad_inputs import cli
from tests.test_web_routes import web_store  # noqa: F401 - a fixture

ADMIN, KEY, PW = "sk-ADMIN-LEAK-01", "sk-API-LEAK-02", "pw-SSL-LEAK-03"


def test_attach_keeps_no_secret_an_engine_reveals(isolated_home: Path):
    server = _server(30000, admin_api_key=ADMIN, api_key=KEY, ssl_keyfile_password=PW,
                     hf_token="hf_LEAK04", nested={"dsn": "postgresql://u:url-LEAK05@db/x"})
    try:
        code, out, err = cli("attach", f"http://127.0.0.1:{server.server_address[1]}", "--json")
        assert code == 0, (out, err)
    finally:
        server.shutdown()
        server.server_close()
    boot_id = json.loads(out)["boot_id"]
    answers = isolated_home / "boots" / boot_id / "attach.json"
    text = answers.read_text()
    code, logs, err = cli("logs", boot_id)
    assert code == 0, err
    for shown, where in ((text, "attach.json"), (logs, "dynocell logs")):
        for secret in (ADMIN, KEY, PW, "hf_LEAK04", "url-LEAK05"):
            assert secret not in shown, (where, secret)
    assert json.loads(text)["get_server_info"]["admin_api_key"] == "***"
    assert stat.S_IMODE(answers.stat().st_mode) == 0o600
    assert stat.S_IMODE(answers.parent.stat().st_mode) == 0o700


# ---------------------------------------------------------------- 2. an oversized body to any route

def _chunked_post(base: str, path: str, total: int, headers: dict[str, str]) -> int:
    """POST ``total`` bytes of form fields (``f0=xxx…&f1=…``, 512 KiB each) to ``path`` in chunks (no
    Content-Length, as a script can),
    stopping when the panel answers before the end; the status it answered."""
    import http.client
    import urllib.parse

    u = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    conn.putrequest("POST", path)
    for k, v in {"Content-Type": "application/x-www-form-urlencoded", "Transfer-Encoding": "chunked",
                 **headers}.items():
        conn.putheader(k, v)
    conn.endheaders()
    try:
        conn.send(b"%x\r\na=\r\n" % 2)
        for i in range(total >> 19):  # fields of 512 KiB: each under the form parser's 1 MiB per field
            chunk = b"&f%d=" % i + b"x" * (1 << 19)
            conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        conn.send(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass  # the panel answered and closed: read what it said
    status = conn.getresponse().status
    conn.close()
    return status


def test_no_route_reads_an_oversized_body(web_store):  # noqa: F811
    """A neighbour without a token POSTs 16 MiB of form fields to /login, a panel user 16 MiB to the config form
    and the JSON API: each is refused with 413 while it streams. Before, Starlette's form parser held every
    field (1 MiB each, up to 1,000 of them) in the panel's memory and only then did the route answer."""
    from tests.test_web_fuzz import StubProcedures, login_session, serve
    from dynocell.runbooks import web_tokens
    from dynocell.web.app import create_app

    settings, cell, _ = web_store
    token = web_tokens.create(cell, "big")
    app = create_app(settings, cell=cell, procedures=StubProcedures())
    with serve(app) as base:
        cookies, csrf = login_session(base, token)
        session = {"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items()), "X-CSRF-Token": csrf}
        assert _chunked_post(base, "/login", 16 << 20, {}) == 413
        assert _chunked_post(base, "/configs-add", 16 << 20, session) == 413
        assert _chunked_post(base, "/api/configs", 16 << 20, {**session, "Content-Type": "application/json"}) == 413
        # a config of normal size still goes in through the form
        import requests

        r = requests.post(base + "/configs-add", data={"toml": 'engine = "reference"\nmodel_path = "dynocell:tiny"\n',
                                                       "name": "small", "csrf_token": csrf},
                          cookies=cookies, allow_redirects=False, timeout=30)
        assert r.status_code == 303, (r.status_code, r.text[:300])
