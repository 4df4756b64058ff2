"""Web fuzz with hostile STORED strings (issue 32, second pass, item 3): rows another host or an engine wrote
— config labels, names, notes, model paths, boot hosts, argv, env, failure details, engine log lines,
phase names, health reasons, run errors, finding texts, kernel names, text classes, host names, entry
titles and tags — hold HTML/JS, control characters, ANSI/OSC escapes and a 200 kB string. The panel is
crawled as a logged-in user over real HTTP (every GET route with the hostile rows' ids, then every
same-site link, ``hx-get`` and form action the pages name, fragments included): no page answers 5xx, no
page carries markup of a stored string (a ``<script>`` that is not the panel's own, an event-handler
attribute, a ``javascript:`` URL), no page carries a raw escape or control byte, and every API answer is
JSON. ``test_the_crawl_fails_when_escaping_is_removed`` proves the checks bite: the same crawl of a panel
whose templates stop escaping fails.

Rows are written through the ORM tables (as another host's dynocell or an older version would), so no
validation of this host's faces stands between them and the pages.
"""

from __future__ import annotations

import html as html_lib
import json
import re
import urllib.parse
import uuid
from html.parser import HTMLParser
from datetime import datetime, timezone
from typing import Any

import pytest
import requests
from tests.test_web_fuzz import StubProcedures, _app, filled_store, login_session, serve
from tests.web_fill import add_boot, add_config, add_run

from dynocell.db import tables as m

MARK = "pwn" + uuid.uuid4().hex[:6]
SCRIPT = f"<script>window.__{MARK}=1</script>"
IMG = f'"><img src=x onerror=alert("{MARK}")>'
SVG = f"'><svg onload=alert(2)>{MARK}"
JS_URL = f"javascript:alert('{MARK}')"
ESCAPES = "\x1b]52;c;aGVsbG8=\x07\x1b[2J\x1b[31mred\x9b2J\x00\x08\u202etxt"
HOSTILE = f"{SCRIPT} {IMG} {SVG} {ESCAPES} {{{{7*7}}}} [/] [link=https://evil.example]x[/link]"
HUGE = HOSTILE + " " + "A" * 200_000
TOML = (f'engine = "reference"\nmodel_path = "dynocell:tiny"\nserved_model_name = {json.dumps(MARK)}\n'
        f'[meta]\nname = "hostile"\nnotes = {json.dumps(HOSTILE)}\n')  # a config file holds no NUL: set below


def _hostile_rows(cell) -> dict[str, Any]:
    """Hostile strings in every stored string field the panel shows; returns the rows' ids."""
    h = add_config(cell, TOML, "hostile")
    with cell.store.session() as s:
        s.add(m.ConfigLabel(name=f"{SCRIPT[:120]}", config_hash=h))
        c = s.get(m.Config, h)
        c.model_path = f"/models/{HOSTILE}"
        data = json.loads(c.canonical_json)
        data["model_path"], data["served_model_name"] = c.model_path, HOSTILE
        data["env"] = {"NCCL_DEBUG": HOSTILE, f"X_{MARK}": JS_URL}
        data["extra_args"] = [HOSTILE, JS_URL]
        c.canonical_json = json.dumps(data, sort_keys=True)
    boot = add_boot(cell, h, state="failed", signature="cuda-oom",
                    log_lines=[f"[reference] {HOSTILE}", HUGE, f"\x1b[2J\x1b]0;{MARK}\x07 title", JS_URL])
    run = add_run(cell, h, boot)
    with cell.store.session() as s:
        b = s.get(m.Boot, boot)
        b.hostname, b.host, b.argv = HOSTILE[:250], HOSTILE[:250], f"python -m x {HUGE}"
        b.env = {"A": HOSTILE, "B": JS_URL}
        b.failure_signature = HOSTILE[:200]
        b.failure_detail = {"line": HOSTILE, "reason": HUGE, "error": HOSTILE}
        s.add(m.BootEvent(boot_id=boot, offset_s=1.0, kind="phase", name=HOSTILE[:200],
                          ts=datetime.now(timezone.utc), detail={"x": HOSTILE}))
        s.add(m.HealthCheck(boot_id=boot, verdict="unhealthy", failed=HOSTILE, ts=datetime.now(timezone.utc),
                            checks=[{"name": HOSTILE, "ok": False, "latency_ms": 1.0, "reason": HOSTILE}]))
        r = s.get(m.Run, run)
        r.state, r.step, r.error, r.workload = "failed", HOSTILE[:30], HUGE, HOSTILE
        r.lossless_detail = {"prompts": 1, "mismatches": 1, "first": HOSTILE}
        s.add(m.Finding(run_id=run, rule=HOSTILE[:60], severity="warn", message=HOSTILE, evidence={"e": HOSTILE},
                        entries=[HOSTILE[:100]]))
        s.add(m.Note(target_kind="run", target_id=run, text=HUGE))
        s.add(m.Note(target_kind="boot", target_id=boot, text=HOSTILE))
        s.add(m.Note(target_kind="config", target_id=h, text=HOSTILE))
        for curve in s.query(m.AcceptanceCurve).filter_by(run_id=run):
            curve.text_class = f"{curve.text_class}{SVG}"[:60]
        for k in s.query(m.ProfileKernel).join(m.ProfileRun).filter(m.ProfileRun.run_id == run):
            k.name = f"{k.name} {HOSTILE}"
        s.add(m.Host(id=f"host-{MARK}", hostname=HOSTILE[:250], os=HOSTILE, cpu=HUGE, cpu_count=1, memory_bytes=1,
                     gpus=[{"index": 0, "name": HOSTILE, "memory_mib": 1, "driver": HOSTILE, "uuid": JS_URL}],
                     engine_versions={HOSTILE[:50]: HOSTILE}))
        other = s.get(m.Run, run)
        other.host_id = f"host-{MARK}"
        s.add(m.RunbookEntry(slug=f"hostile-{MARK}", title=HOSTILE, kind="trap", tags=[HOSTILE, JS_URL],
                             origin="operator", source_path=HOSTILE, sha256="0" * 64,
                             front_matter={"title": HOSTILE, "links": [JS_URL]},
                             body=f"# {HOSTILE}\n\n[click]({JS_URL}) <a href=\"{JS_URL}\">x</a> {HUGE[:5000]}\n"))
    return {"config": h, "boot": boot, "run": run, "entry": f"hostile-{MARK}"}


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory):
    return filled_store(tmp_path_factory, "hostile", _hostile_rows)


class _Tags(HTMLParser):
    """The elements of a page as a browser parses them: what runs script (a ``<script>`` that is not one of the
    panel's own files, an ``on…`` event attribute, a ``javascript:`` URL) or an element a stored string made."""

    URL_ATTRS = {"href", "src", "action", "formaction", "hx-get", "hx-post", "xlink:href", "data"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "script" and not re.fullmatch(r"/static/[\w.\-]+\.js", a.get("src") or ""):
            self.found.append(f"a script element {attrs!r}")
        for name, value in attrs:
            if name.startswith("on"):
                self.found.append(f"an event handler <{tag} {name}={value!r}>")
            if name in self.URL_ATTRS and (value or "").strip().lower().startswith(("javascript:", "vbscript:")):
                self.found.append(f"a script URL <{tag} {name}={value!r}>")
            if MARK in name:
                self.found.append(f"an attribute from a stored string <{tag} {name}>")
        if MARK in tag:
            self.found.append(f"an element from a stored string <{tag}>")


def _active_markup(body: str) -> list[str]:
    """What in an HTML page would run or was made by a stored string (:class:`_Tags`)."""
    parser = _Tags()
    parser.feed(body)
    parser.close()
    return parser.found


def problems(url: str, r: requests.Response) -> list[str]:
    """What in one answer lets a stored string act: a 5xx, markup or a URL scheme that runs script, a raw
    escape or control byte, an API answer that is not JSON."""
    out = []
    if r.status_code >= 500:
        out.append(f"{url}: {r.status_code}")
    kind = r.headers.get("content-type", "")
    body = r.text
    if kind.startswith("application/json"):
        try:
            json.loads(body)
        except ValueError:
            out.append(f"{url}: not JSON")
        return out
    if not kind.startswith("text/html"):
        return out
    out += [f"{url}: {what}" for what in _active_markup(body)]
    for ch, name in (("\x1b", "ESC"), ("\x00", "NUL"), ("\x9b", "CSI"), ("\x07", "BEL"), ("\x08", "BS")):
        if ch in body:
            out.append(f"{url}: a raw {name} byte")
    return out


def _start_urls(ids: dict[str, Any]) -> list[str]:
    hb = ids["hostile"]
    q = urllib.parse.quote
    urls = ["/", "/configs", "/configs-add", "/boots", "/runs", "/compare", "/runbooks", "/api/dashboard",
            "/api/configs", "/api/boots", "/api/runs", "/api/runbooks", "/api/jobs", "/api/compare",
            f"/configs/{hb['config']}", f"/api/configs/{hb['config']}", "/configs/hostile",
            f"/configs/{q(SCRIPT[:120], safe='')}", f"/configs-diff?a={ids['configs'][0]}&b={hb['config']}",
            f"/api/configs-diff?a={ids['configs'][0]}&b={hb['config']}",
            f"/boots/{hb['boot']}", f"/api/boots/{hb['boot']}", f"/api/boots/{hb['boot']}/log",
            f"/boots/{hb['boot']}/artifacts/engine.log", f"/runs/{hb['run']}", f"/api/runs/{hb['run']}",
            f"/compare?runs={hb['run']},{ids['runs'][0]}", f"/api/compare?runs={hb['run']},{ids['runs'][0]}",
            f"/runbooks/{hb['entry']}", f"/api/runbooks/{hb['entry']}", f"/runbooks?q={q(HOSTILE)}",
            f"/boots?host={q(HOSTILE[:40])}", f"/runs?host={q(HOSTILE[:40])}"]
    for frag in ("state", "log", "health", "events", "timeline"):
        urls.append(f"/boots/{hb['boot']}?fragment={frag}")
    return urls


def crawl(base: str, cookies: dict[str, str], ids: dict[str, Any], limit: int = 400) -> tuple[list[str], int]:
    """GET the start URLs and every same-site link the pages name (href, hx-get, src, form action), at most
    ``limit`` URLs; returns (problems, URLs fetched)."""
    http = requests.Session()
    http.trust_env = False
    http.cookies.update(cookies)
    todo, seen, found = list(_start_urls(ids)), set(), []
    while todo and len(seen) < limit:
        url = todo.pop(0)
        if url in seen:
            continue
        seen.add(url)
        r = http.get(base + url, allow_redirects=False, timeout=60)
        found += problems(url, r)
        if not r.headers.get("content-type", "").startswith("text/html"):
            continue
        for attr in re.findall(r"""(?:href|hx-get|src|action)="([^"]+)\"""", r.text):
            link = html_lib.unescape(attr)
            if link.startswith("/") and not link.startswith("//") and not link.startswith("/static/") \
                    and "/logout" not in link and link not in seen:
                todo.append(link)
    return found, len(seen)


def _panel(hostile_store):
    settings, cell, ids, token = hostile_store
    return _app((settings, cell, ids, token), StubProcedures()), ids, token


def test_every_page_renders_hostile_stored_strings_inert(hostile_store):
    app, ids, token = _panel(hostile_store)
    with serve(app) as base:
        cookies, _ = login_session(base, token)
        found, fetched = crawl(base, cookies, ids)
    assert fetched >= 40, fetched  # the crawl reached the pages, not only the start URLs
    assert not found, "\n".join(found[:40])


def test_the_crawl_fails_when_escaping_is_removed(hostile_store):
    """The same crawl of a panel whose templates stop escaping (Jinja's autoescape off) finds the stored
    script: the checks above would fail if the panel's escaping were removed."""
    app, ids, token = _panel(hostile_store)
    app.state.templates.env.autoescape = False
    with serve(app) as base:
        cookies, _ = login_session(base, token)
        found, _ = crawl(base, cookies, ids, limit=12)
    assert any("a script element" in f for f in found) and any("event handler" in f for f in found), found[:10]
