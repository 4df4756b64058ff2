"""Fuzz of the web panel with schemathesis (issue 12, item 5): no 5xx, no auth bypass.

The real panel (``create_app`` served by uvicorn on 127.0.0.1, a free port) over a filled
temporary store (tests/web_fill.py stand-in rows). Its OpenAPI (``/openapi.json``, the JSON
API; behind the login like every page) is loaded over HTTP and extended with the HTML pages
and form actions the published schema hides (``include_in_schema=False``), so every route is
fuzzed: positive and negative (schema-violating) cases, plus positive cases on real ids
(boots, runs, configs, entries), a bounded number per operation. Five passes:

- ``anonymous`` — login required (a web token exists), no credentials, every operation: any
  non-public route answering 2xx (or redirecting anywhere but /login) is an auth bypass;
- ``no-csrf`` — logged in (session cookie) but no CSRF token, every state-changing operation:
  any answer 2xx/3xx is a bypass (a state change needs session + CSRF token, or a Bearer token);
- ``session`` — logged in with a valid token through /login (cookie + ``X-CSRF-Token``),
  every operation: anything may pass, nothing may 5xx;
- ``bearer`` — ``Authorization: Bearer <valid token>``, every operation with a quarter of the
  cases (each request costs a scrypt check): nothing may 5xx;
- ``login`` — ``/login`` (form and page) with fuzzed tokens and forged forwarding headers
  (``X-Forwarded-For``, ``Forwarded``, ``X-Real-IP``…): no session cookie, no redirect, no 5xx.

Procedures behind actions are stubs that count their calls (the fuzz must not boot engines);
a stub called, or a note written, in the first two passes is a bypass too. Figures (requests,
status classes, 5xx, bypasses per pass) are printed (``pytest -s``); 5xx == 0 and bypasses ==
0 are asserted. Derandomised for CI; ``DYNOCELL_FUZZ_EXAMPLES`` (default 6 per operation,
positive and as many negative) scales it; ``benchmarks/web_fuzz.py`` runs a bigger, randomised
one. The checks of the web issue itself live in tests/test_web_security.py.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator
from urllib.parse import unquote, urlsplit

import pytest

from tests.web_fill import fill_stand_in

PUBLIC_PREFIXES = ("/static/",)
PUBLIC_PATHS = ("/login", "/healthz")
EXAMPLES = int(os.environ.get("DYNOCELL_FUZZ_EXAMPLES", "6"))
FORGED_FORWARDING = {"X-Forwarded-For": "203.0.113.7, 127.0.0.1", "Forwarded": "for=198.51.100.9;proto=https",
                     "X-Real-IP": "192.0.2.1", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "evil.example"}


# ---------------------------------------------------------------- the panel, served

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn on 127.0.0.1 (a free port) in a thread, with the forwarding-header
    options `dynocell web` uses (:func:`dynocell.web.app.uvicorn_options`); yields the base URL."""
    import uvicorn

    from dynocell.web.app import uvicorn_options

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical",
                                           access_log=False, **uvicorn_options(app.state.settings)))
    thread = threading.Thread(target=server.run, name=f"panel-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class StubProcedures(dict):
    """Stand-ins for the runbooks procedures behind actions: record calls, start nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str]] = []
        for name in ("run", "boot", "stop", "health", "bench", "profile"):
            self[name] = self._make(name)

    def _make(self, name: str) -> Callable[..., str]:
        def proc(cell: Any, ref: str, progress: Any = None) -> str:
            self.calls.append((name, ref))
            return f"stub-{name}"

        return proc


def full_schema(app: Any) -> tuple[dict[str, Any], bool]:
    """The app's OpenAPI with the hidden HTML pages and form actions included.

    Flips ``include_in_schema`` on every route for the time it takes to build the schema.
    Returns ``(schema, complete)``; ``complete`` is False when this FastAPI's route objects
    could not be flipped (the published schema is then returned).
    """
    from fastapi import routing
    from fastapi.openapi.utils import get_openapi

    flipped = []
    try:
        for ctx in routing.iter_route_contexts(app.routes):
            for obj in (ctx.original_route, getattr(ctx, "_route_context", None), ctx._effective_route):
                if obj is not None and getattr(obj, "include_in_schema", None) is False:
                    object.__setattr__(obj, "include_in_schema", True)
                    flipped.append(obj)
        schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
        return schema, bool(flipped)
    except Exception:  # noqa: BLE001 - another FastAPI's internals: fall back to the published schema
        return app.openapi(), False
    finally:
        for obj in flipped:
            object.__setattr__(obj, "include_in_schema", False)


# ---------------------------------------------------------------- fuzzing and figures

@dataclass
class Figures:
    """What one pass saw."""

    name: str
    requests: int = 0
    statuses: Counter = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)
    bypasses: list[str] = field(default_factory=list)
    transport_errors: list[str] = field(default_factory=list)
    operations: int = 0
    seconds: dict[str, float] = field(default_factory=dict)  # per operation

    def line(self) -> str:
        classes = Counter(f"{s // 100}xx" for s in self.statuses.elements())
        return (f"{self.name:<10} operations {self.operations:3d}  requests {self.requests:5d}  "
                f"{dict(sorted(classes.items()))}  5xx {len(self.server_errors)}  "
                f"bypasses {len(self.bypasses)}  transport errors {len(self.transport_errors)}")


def is_public(path: str) -> bool:
    return path.startswith(PUBLIC_PREFIXES) or path in PUBLIC_PATHS


Judge = Callable[[str, str, int, dict[str, str]], str | None]


def fuzz(schema_dict: dict[str, Any], base_url: str, figures: Figures, judge: Judge, *,
         headers: dict[str, str] | None = None, cookies: dict[str, str] | None = None,
         examples: int = EXAMPLES, methods: tuple[str, ...] | None = None, derandomize: bool = True,
         seed: int | None = None, known: dict[str, list[str]] | None = None) -> None:
    """Every operation of ``schema_dict`` (only ``methods`` when given): ``examples`` positive and
    ``examples`` negative (schema-violating) cases, each sent with ``headers`` and ``cookies`` only.

    ``judge(method, path, status, response_headers)`` returns a bypass description or None.
    ``POST /logout`` goes last (it ends the session the other operations use). ``known``: real
    values of path parameters (boot ids, run ids…); operations with such parameters also get
    positive cases that use them (the other parameters still generated), so fuzzed query strings,
    artifact names and bodies reach real rows, not only 404s.
    """
    import requests
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_dict(schema_dict)
    http = requests.Session()
    http.trust_env = False  # loopback only: no proxies from the environment

    ops = [r.ok() for r in schema.get_all_operations()]
    ops = [op for op in ops if methods is None or op.method.upper() in methods]
    ops.sort(key=lambda op: op.path == "/logout")
    for op in ops:
        figures.operations += 1
        options = [op.as_strategy(GenerationMode.POSITIVE), op.as_strategy(GenerationMode.NEGATIVE)]
        names = [n for n in re.findall(r"{(\w+)}", op.path) if n in (known or {})]
        if names:
            options.append(st.fixed_dictionaries({n: st.sampled_from(known[n]) for n in names}).flatmap(
                lambda pp, op=op: op.as_strategy(GenerationMode.POSITIVE, path_parameters=pp)))
        strategy = st.one_of(options)

        @settings(max_examples=2 * examples, deadline=None, database=None, derandomize=derandomize,
                  phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck),
                  print_blob=False)
        @given(case=strategy)
        def one(case: Any) -> None:
            http.cookies.clear()  # every case starts without a session
            try:
                resp = case.call(base_url=base_url, session=http, headers=dict(headers or {}),
                                 cookies=dict(cookies or {}), timeout=30, allow_redirects=False)
            except Exception as exc:  # noqa: BLE001 - counted, never hides a status
                what = f"{case.method} {case.formatted_path}: {type(exc).__name__}: {exc}"
                figures.transport_errors.append(what[:300])
                return
            figures.requests += 1
            figures.statuses[resp.status_code] += 1
            path = unquote(urlsplit(resp.request.url).path)  # as the panel sees it (decoded)
            if resp.status_code >= 500:
                figures.server_errors.append(
                    f"{case.method} {path} → {resp.status_code}: {resp.content[:200]!r}\n    {case.as_curl_command()}")
            hdrs = {k.lower(): (v[0] if isinstance(v, list) and v else str(v)) for k, v in resp.headers.items()}
            verdict = judge(case.method.upper(), path, resp.status_code, hdrs)
            if verdict:
                figures.bypasses.append(f"{case.method} {path}: {verdict}")

        if seed is not None:
            one = hseed(seed)(one)
        t0 = time.perf_counter()
        one()
        figures.seconds[f"{op.method.upper()} {op.path}"] = time.perf_counter() - t0


def judge_anonymous(method: str, path: str, status: int, headers: dict[str, str]) -> str | None:
    """Login required, no credentials: only public routes may succeed."""
    if is_public(path):
        return None
    if 200 <= status < 300:
        return f"answered {status} without credentials"
    if 300 <= status < 400 and not headers.get("location", "").startswith("/login"):
        return f"redirected to {headers.get('location')!r} without credentials"
    return None


def judge_no_csrf(method: str, path: str, status: int, headers: dict[str, str]) -> str | None:
    """A session but no CSRF token: no state-changing request may succeed."""
    if method in ("GET", "HEAD", "OPTIONS") or path == "/login":
        return None
    if 200 <= status < 400:
        return f"state-changing {method} answered {status} without session/CSRF token"
    return None


def judge_login(method: str, path: str, status: int, headers: dict[str, str]) -> str | None:
    """Fuzzed tokens (and forged forwarding headers) at /login: no session may ever be issued."""
    if "dynocell_session" in headers.get("set-cookie", ""):
        return f"{method} {path} issued a session cookie to a fuzzed token ({status})"
    if method == "POST" and 300 <= status < 400:
        return f"login with a fuzzed token redirected ({status})"
    return None


def judge_none(method: str, path: str, status: int, headers: dict[str, str]) -> str | None:
    return None


# ---------------------------------------------------------------- fixtures and tests

def filled_store(tmp_path_factory, name: str, more: Callable[[Any], Any] | None = None) -> tuple:
    """``(settings, cell, ids, token)`` of a fresh store filled with the stand-in rows (and ``more(cell)``'s,
    as ``ids[name]``), with a web token made for it."""
    from dynocell.runbooks import web_tokens
    from dynocell.runbooks.views import open_view_cell
    from dynocell.settings import load_settings

    home = tmp_path_factory.mktemp(f"{name}-home")
    settings = load_settings(home=home, poll_interval_s=1.0)
    cell = open_view_cell(settings)
    ids = fill_stand_in(cell)
    if more is not None:
        ids[name] = more(cell)
    return settings, cell, ids, web_tokens.create(cell, name)


@pytest.fixture(scope="module")
def fuzz_store(tmp_path_factory):
    return filled_store(tmp_path_factory, "fuzz")


def _notes(cell) -> int:
    from dynocell.db import tables as m

    with cell.store.session() as s:
        return s.query(m.Note).count()


def _app(fuzz_store, procs: StubProcedures, **kwargs: Any) -> Any:
    from dynocell.web.app import create_app

    settings, cell, _, _ = fuzz_store
    # No login rate limit here: the fuzz posts wrong tokens to /login by the hundred, and a
    # blocked client would turn the Bearer pass into 429s (test_web_security checks the limit).
    return create_app(settings, cell=cell, procedures=procs, login_max_failures=10**9, **kwargs)


def login_session(base: str, token: str) -> tuple[dict[str, str], str]:
    """Log in with ``token`` through the form: (session cookie, its CSRF token)."""
    import requests

    http = requests.Session()
    http.trust_env = False
    r = http.post(base + "/login", data={"token": token, "next": "/"}, allow_redirects=False, timeout=10)
    assert r.status_code == 303, r.status_code
    page = http.get(base + "/", timeout=10)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
    return dict(http.cookies), csrf


def run_passes(fuzz_store, examples: int = EXAMPLES, *, derandomize: bool = True,
               seed: int | None = None) -> tuple[list[Figures], bool]:
    """The four passes (module docstring); returns their figures and whether the schema was complete."""
    import requests

    settings, cell, ids, token = fuzz_store
    known = {"boot_id": [*ids["boots"], ids["failed_boot"], ids["live_boot"]], "run_id": list(ids["runs"]),
             "ref": [*ids["configs"], "tiny", ids["configs"][0][:14]], "slug": ["test-xss-entry",
                                                                                "acceptance-definitions"],
             "name": ["log", "engine.log", "traces/rank0.trace.json.gz"]}
    kw = {"examples": examples, "derandomize": derandomize, "seed": seed, "known": known}
    passes: list[Figures] = []

    # 1. login required (a token exists), no credentials — every operation
    procs, notes0 = StubProcedures(), _notes(cell)
    app = _app(fuzz_store, procs, bind_host="127.0.0.1")
    with serve(app) as base:
        anonymous = requests.get(base + "/openapi.json", timeout=10, allow_redirects=False)
        assert anonymous.status_code == 303, "the OpenAPI document needs a login"
        published = requests.get(base + "/openapi.json", timeout=10, headers={"Authorization": f"Bearer {token}"})
        assert published.status_code == 200
        schema, complete = full_schema(app)
        assert set(published.json()["paths"]) <= set(schema["paths"])
        anon = Figures("anonymous")
        fuzz(schema, base, anon, judge_anonymous, **kw)
    if procs.calls:
        anon.bypasses.append(f"procedures called without credentials: {procs.calls[:5]}")
    if _notes(cell) != notes0:
        anon.bypasses.append(f"{_notes(cell) - notes0} note(s) written without credentials")
    passes.append(anon)

    # 2. logged in (session cookie) but no CSRF token — the state-changing operations
    procs, notes0 = StubProcedures(), _notes(cell)
    app = _app(fuzz_store, procs, bind_host="127.0.0.1")
    with serve(app) as base:
        cookies, _ = login_session(base, token)
        csrf = Figures("no-csrf")
        fuzz(full_schema(app)[0], base, csrf, judge_no_csrf, methods=("POST", "PUT", "PATCH", "DELETE"),
             cookies=cookies, **kw)
    if procs.calls:
        csrf.bypasses.append(f"procedures called without a CSRF token: {procs.calls[:5]}")
    if _notes(cell) != notes0:
        csrf.bypasses.append(f"{_notes(cell) - notes0} note(s) written without a CSRF token")
    passes.append(csrf)

    # 3 + 4. a valid token: logged in through /login (session cookie + CSRF header) for every
    # operation, then as `Authorization: Bearer` (a scrypt check per request: fewer cases)
    procs = StubProcedures()
    app = _app(fuzz_store, procs, bind_host="127.0.0.1")
    with serve(app) as base:
        cookies, csrf_token = login_session(base, token)
        session = Figures("session")
        fuzz(full_schema(app)[0], base, session, judge_none, cookies=cookies,
             headers={"X-CSRF-Token": csrf_token}, **kw)
        bearer = Figures("bearer")
        fuzz(full_schema(app)[0], base, bearer, judge_none, headers={"Authorization": f"Bearer {token}"},
             **{**kw, "examples": max(1, examples // 4)})
        # the token really authenticated (the passes were not a fuzz of 401s)
        assert requests.get(base + "/api/runs", headers={"Authorization": f"Bearer {token}"},
                            timeout=10).status_code == 200
    assert session.statuses[200] and bearer.statuses[200] and procs.calls, "authenticated passes reached handlers"
    passes += [session, bearer]

    # 5. the login routes with fuzzed tokens and forged forwarding headers: no session, no 5xx
    app = _app(fuzz_store, StubProcedures(), bind_host="127.0.0.1")
    with serve(app) as base:
        schema = full_schema(app)[0]
        schema = {**schema, "paths": {p: schema["paths"][p] for p in ("/login",)}}
        login = Figures("login")
        fuzz(schema, base, login, judge_login, headers=FORGED_FORWARDING, **{**kw, "examples": 2 * examples})
    passes.append(login)
    return passes, complete


def report(passes: list[Figures], complete: bool, examples: int, seconds: float) -> tuple[list[str], list[str]]:
    """Print the figures; returns (5xx, bypasses)."""
    total = sum(p.requests for p in passes)
    errors = [e for p in passes for e in p.server_errors]
    bypasses = [b for p in passes for b in p.bypasses]
    print()
    print(f"web fuzz: schema {'published + hidden pages/actions' if complete else 'published only'}, "
          f"up to {examples} positive + {examples} negative cases per operation and pass, {seconds:.1f} s")
    for p in passes:
        print("  " + p.line())
        slow = sorted(p.seconds.items(), key=lambda kv: -kv[1])[:3]
        print("      slowest: " + ", ".join(f"{k} {v:.1f} s" for k, v in slow))
    print(f"  total requests {total}, 5xx {len(errors)} (goal 0), auth bypasses {len(bypasses)} (goal 0)")
    for e in (errors + bypasses)[:10]:
        print("   ", e)
    return errors, bypasses


def test_fuzz_panel_no_5xx_no_auth_bypass(fuzz_store):
    t0 = time.monotonic()
    passes, complete = run_passes(fuzz_store)
    errors, bypasses = report(passes, complete, EXAMPLES, time.monotonic() - t0)
    assert complete, "the hidden pages and actions could not be added to the schema"
    assert all(p.requests >= p.operations for p in passes), [p.line() for p in passes]
    assert not [e for p in passes for e in p.transport_errors], [p.transport_errors[:3] for p in passes]
    assert not errors, errors[:5]
    assert not bypasses, bypasses[:5]


@pytest.mark.parametrize("raw_path", [
    "/login/../api/runs", "/login/..%2Fapi%2Fruns", "/loginx", "/login%2F..%2Fapi%2Fruns",
    "/healthz/../api/dashboard", "/static/../api/dashboard", "/static/%2e%2e/api/dashboard",
    "/openapi.json/../api/runs", "//api/runs", "/api//runs", "/API/runs", "/api/runs/", "/api/runs;x",
    "/api/runs%00", "/%61pi/runs",
])
def test_public_prefix_tricks_do_not_bypass_login(fuzz_store, raw_path):
    """Raw paths (no client-side normalisation) that start like a public route must not reach data."""
    procs = StubProcedures()
    with serve(_app(fuzz_store, procs, bind_host="127.0.0.1")) as base:
        host, port = base.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        for method in ("GET", "POST"):
            conn.request(method, raw_path, body=b"" if method == "POST" else None)
            resp = conn.getresponse()
            body = resp.read()
            assert resp.status < 500, (method, raw_path, resp.status, body[:200])
            assert not 200 <= resp.status < 300, (method, raw_path, resp.status, body[:200])
            location = resp.getheader("location") or ""
            assert not 300 <= resp.status < 400 or location.startswith("/login"), (raw_path, location)
        conn.close()
    assert not procs.calls


def test_out_of_range_integers_are_a_clear_400_not_a_500(fuzz_store):
    """Found by the fuzz: ``/api/runs?limit=-10**25`` reached SQLite and answered 500."""
    from fastapi.testclient import TestClient

    _, _, ids, token = fuzz_store
    auth = {"Authorization": f"Bearer {token}"}
    with TestClient(_app(fuzz_store, StubProcedures(), bind_host="127.0.0.1"), raise_server_exceptions=False) as c:
        for value in (-10**25, 10**25, 0, -1):
            r = c.get(f"/api/runs?limit={value}", headers=auth)
            assert r.status_code == 400 and "limit" in r.json()["error"], (value, r.status_code, r.text[:200])
        assert c.get("/api/runs?limit=1", headers=auth).json()[0]["id"] in ids["runs"]
        for n in (-10**25, 10**25):
            assert c.get(f"/api/boots/{ids['boots'][0]}/log?n={n}", headers=auth).status_code == 200
            assert c.get(f"/boots/{ids['boots'][0]}?n={n}", headers=auth).status_code == 200


def test_forwarding_headers_do_not_choose_the_login_client(fuzz_store):
    """Issue 16 item 7: uvicorn trusts X-Forwarded-For from 127.0.0.1 by default, so rotating it
    dodged the login limit (and a chosen one locked the real user out). Served as `dynocell web`
    serves (no proxy named): the back-off counts the TCP peer, whatever the headers say."""
    import requests

    from dynocell.web.app import create_app

    settings, cell, _, token = fuzz_store
    app = create_app(settings, cell=cell, procedures=StubProcedures(), bind_host="127.0.0.1",
                     login_max_failures=3, login_backoff_s=600)
    http = requests.Session()
    http.trust_env = False
    with serve(app) as base:
        bearer = {"Authorization": f"Bearer {token}"}
        assert http.get(base + "/api/runs", headers=bearer, timeout=30).status_code == 200  # a script at work
        codes = []
        for i in range(8):
            forged = {"X-Forwarded-For": f"10.0.{i}.{i + 1}", "Forwarded": f"for=10.1.{i}.1",
                      "X-Real-IP": f"10.2.{i}.1"}
            codes.append(http.post(base + "/login", data={"token": f"wrong-{i}"}, headers=forged,
                                   allow_redirects=False, timeout=30).status_code)
        assert codes == [401] * 3 + [429] * 5, codes
        # backing off is not a lockout of the script that holds the right token (item 10)
        assert http.get(base + "/api/runs", headers=bearer, timeout=30).status_code == 200
