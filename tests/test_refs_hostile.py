"""Hostile references through every face: the CLI as a subprocess and the web panel served by uvicorn
on 127.0.0.1, on a real SQLite store. Found by the newcomer/attacker pass over issue 23's resolver
(branch n7check).
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import requests

from tests.test_refs import seeded_cell
from tests.test_web_fuzz import serve
from tests.weblogin import LAUNCH

CONFIG = "sha256:" + "c0ffee12" + "0" * 56
RUN = "5e5e00000001"
BOOT = "b00700000001"
LONG = "a" * 60_000  # past SQLite's 50,000-byte LIKE pattern limit


@pytest.fixture
def cell(settings):
    return seeded_cell(settings, (CONFIG,), BOOT, (RUN,))


@pytest.fixture
def panel(settings, cell):
    """The panel served over real HTTP on 127.0.0.1, logged in through its token URL:
    (base, a session carrying its CSRF header)."""
    from dynocell.web.app import create_app

    app = create_app(settings, cell=cell, launch_token=LAUNCH)
    with serve(app) as base:
        http = requests.Session()
        http.trust_env = False
        r = http.get(f"{base}/?token={LAUNCH}", allow_redirects=False, timeout=60)
        assert r.status_code == 303, r.text
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', http.get(base + "/", timeout=60).text).group(1)
        http.headers["X-CSRF-Token"] = csrf
        yield base, http


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dynocell", *args], env=env, capture_output=True, text=True,
                          timeout=300)


def test_a_reference_longer_than_any_key_is_a_clear_not_found_in_the_cli(cell, cli_env):
    """Before: `dynocell show <60,000 characters>` said "internal error: OperationalError … LIKE or GLOB
    pattern too complex" (the resolver sent it to SQLite as a prefix)."""
    for args in (["show", LONG], ["diagnose", LONG], ["config", "show", LONG], ["note", f"run:{LONG}", "x"],
                 ["compare", LONG, RUN], ["stop", LONG]):
        r = _cli(args, cli_env)
        out = r.stdout + r.stderr
        assert r.returncode == 2, (args[0], out[-2000:])
        assert "internal error" not in out and "Traceback" not in out, (args[0], out[-2000:])
        assert "at most 200 characters" in out, (args[0], out[-2000:])
        assert len(out) < 2000, (args[0], len(out))  # the reference is quoted cut, not 60,000 characters


def test_a_reference_longer_than_any_key_is_a_404_not_a_500_on_the_web(panel):
    """Before: 500 Internal Server Error on every route that resolves a reference."""
    base, http = panel
    for method, path, kw in [
        ("GET", f"/api/runs/{LONG}", {}),
        ("GET", f"/api/boots/{LONG}", {}),
        ("GET", f"/api/configs/{LONG}", {}),
        ("GET", "/api/compare", {"params": {"runs": [LONG, RUN]}}),
        ("POST", "/api/notes", {"json": {"kind": "run", "target": LONG, "text": "x"}}),
    ]:
        r = http.request(method, base + path, timeout=120, **kw)
        assert r.status_code == 404, (path, r.status_code, r.text[:500])
        assert "at most 200 characters" in r.json()["error"], (path, r.text[:500])
    # nothing recorded was lost: the short references still resolve
    assert http.get(f"{base}/api/runs/{RUN[:4]}", timeout=60).json()["run"]["id"] == RUN


def test_starting_a_run_or_boot_from_the_web_gives_the_resolvers_reason_as_the_cli_does(panel, cli_env):
    """Before: the panel's start-run/boot said "no stored config named '9' and no hash starting with it"
    for a 1-character reference (and for a 60,000-character one) where `dynocell run 9` says a prefix needs
    at least 4 characters: runbooks.configs.resolve_stored replaced the resolver's message with its own."""
    base, http = panel
    for ref, words in (("9", "a prefix needs at least 4 characters"), (LONG, "at most 200 characters"),
                       ("zzzz9999", "no config named 'zzzz9999'")):
        cli = _cli(["boot", ref], cli_env)
        assert cli.returncode == 2 and words in cli.stdout + cli.stderr, (ref[:10], cli.stderr[-500:])
        for path in ("/api/runs", "/api/boots"):
            r = http.post(base + path, json={"config": ref}, timeout=120)
            assert r.status_code == 404 and words in r.json()["error"], (path, ref[:10], r.text[:300])
            assert "a file path is never read from a request" in r.json()["hint"]


ENTRY = "dummy-weights-make-drafts-agree"  # a bundled entry; "dummy" names only it


def test_an_entry_reference_means_the_same_in_the_cli_and_the_web(panel, cli_env):
    """Before: runbook entries had two rules. `dynocell note entry:dummy` and `/runbooks/dummy` took any
    unique prefix (even 1 character), while the panel's note form (db/refs: entries never abbreviated,
    and only once the search index was synced) said "no entry matches 'dummy'" — even for the full slug
    on a store nobody had searched yet. Now one rule: exact slug, else a unique prefix of ≥ 4 characters."""
    base, http = panel
    for ref in (ENTRY, "dummy"):
        cli = _cli(["note", f"entry:{ref}", "seen with --load-format dummy"], cli_env)
        assert cli.returncode == 0 and f"entry:{ENTRY}" in cli.stdout, (ref, cli.stdout + cli.stderr)
        web = http.post(base + "/api/notes", json={"kind": "entry", "target": ref, "text": "seen on the web"},
                        timeout=120)
        assert web.status_code == 200, (ref, web.text)
        page = http.get(f"{base}/api/runbooks/{ref}", timeout=60)
        assert page.status_code == 200 and page.json()["slug"] == ENTRY
    notes = http.get(f"{base}/api/runbooks/{ENTRY}", timeout=60).json()["notes"]
    assert [n["text"] for n in notes].count("seen on the web") == 2, notes
    # a 3-character prefix is too short on every face, as for ids and hashes
    cli = _cli(["runbook", "show", "dum"], cli_env)
    assert cli.returncode == 2 and "a prefix needs at least 4 characters" in cli.stdout + cli.stderr
    for r in (http.get(f"{base}/api/runbooks/dum", timeout=60),
              http.post(base + "/api/notes", json={"kind": "entry", "target": "dum", "text": "x"}, timeout=60)):
        assert r.status_code == 404 and "a prefix needs at least 4 characters" in r.json()["error"], r.text
    # a prefix several entries share is refused on both, listing them with their kind
    cli = _cli(["note", "entry:spec", "x"], cli_env)
    web = http.post(base + "/api/notes", json={"kind": "entry", "target": "spec", "text": "x"}, timeout=60)
    assert cli.returncode == 2 and "ambiguous" in cli.stderr and "entry spec" in cli.stderr, cli.stderr
    assert web.status_code == 404 and "ambiguous" in web.json()["error"] and "entry spec" in web.json()["error"]


def test_the_log_api_names_the_boot_by_its_id_not_by_the_prefix_it_was_asked_with(panel, settings):
    """Before: GET /api/boots/b007/log answered {"boot_id": "b007", …} — the prefix the request gave."""
    base, http = panel
    (settings.home / "none.log").write_text("INFO ready\n")
    r = http.get(f"{base}/api/boots/{BOOT[:4]}/log", timeout=60)
    assert r.status_code == 200 and r.json()["boot_id"] == BOOT, r.text
    assert r.json()["lines"] == ["INFO ready"]


def test_the_store_resolver_abbreviates_entry_slugs_as_knowledge_does(cell):
    """Before: db/refs never abbreviated an entry slug while Knowledge.get (CLI `runbook show`, the entry
    page) did; now both take a unique prefix of >= 4 characters and refuse a shared one."""
    from dynocell.db import refs
    from dynocell.errors import NotFound
    from dynocell.runbooks.knowledge import bundled_knowledge, sync_index

    k = bundled_knowledge()
    sync_index(cell.store, k)
    assert k.get("dummy").slug == ENTRY
    assert refs.resolve(cell.store, "dummy", "entry") == refs.Ref("entry", ENTRY)
    with pytest.raises(refs.AmbiguousRef) as amb:
        refs.resolve(cell.store, "spec", "entry")
    assert {c.key for c in amb.value.candidates} == {s for s in k.entries if s.startswith("spec")}
    with pytest.raises(NotFound, match="at least 4 characters"):
        refs.resolve(cell.store, "dum", "entry")


def test_a_bare_note_target_that_names_nothing_says_why_as_the_resolver_does(cell, cli_env):
    """Before: `dynocell note 9 x` said only "nothing matches '9'" where every other command (and the
    panel's note form) says a prefix needs at least 4 characters; a 60,000-character target was echoed whole."""
    r = _cli(["note", "9", "x"], cli_env)
    out = r.stdout + r.stderr
    assert r.returncode == 2 and "a prefix needs at least 4 characters" in out and "KIND:ID" in out, out
    r = _cli(["note", LONG, "x"], cli_env)
    out = r.stdout + r.stderr
    assert r.returncode == 2 and "at most 200 characters" in out and len(out) < 2000, out[-1000:]
    r = _cli(["note", "zzzz9999", "x"], cli_env)
    assert r.returncode == 2 and "zzzz9999" in r.stderr and "KIND:ID" in r.stderr, r.stderr
