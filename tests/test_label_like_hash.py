"""Issue 32 item 5: a label that looks like a hash (or a hash prefix) cannot impersonate one; issue 38 survivor 8:
a hash prefix typed in upper case still resolves.

Real parts: the `dynocell` CLI in a subprocess on a real SQLite store, the web panel served by uvicorn on
127.0.0.1 and reached over real HTTP.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.test_web_fuzz import StubProcedures, login_session, serve
from tests.weblogin import LAUNCH

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "examples" / "tiny.toml"
PLAIN = REPO / "examples" / "tiny-plain.toml"


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dynocell", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def _add(env: dict[str, str], path: Path, name: str) -> str:
    r = _cli(["config", "add", str(path), "--name", name, "--json"], env)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)["hash"]


def test_cli_refuses_labels_that_read_as_a_hash(cli_env):
    victim = _add(cli_env, TINY, "tiny")
    hexes = victim.removeprefix("sha256:")
    for label in (hexes[:12], hexes, "sha256:" + hexes, hexes[:4], hexes[:12].upper(), "deadbeef"):
        r = _cli(["config", "add", str(PLAIN), "--name", label], cli_env)
        out = r.stdout + r.stderr
        assert r.returncode == 2, (label, out)
        assert "Error:" in out and "reads as a hash" in out, (label, out)
    # nothing took the hash over: the 12-hex reference still names the victim
    r = _cli(["config", "show", hexes[:12], "--json"], cli_env)
    assert r.returncode == 0 and json.loads(r.stdout)["hash"] == victim, r.stdout + r.stderr
    # a name with a letter outside a-f is a label as before
    assert _add(cli_env, PLAIN, "cafe-2") != victim


def test_meta_name_that_reads_as_a_hash_is_refused(cli_env, tmp_path):
    f = tmp_path / "cfg.toml"
    f.write_text(TINY.read_text().replace('name = "tiny"', 'name = "c0ffee12"'))
    r = _cli(["config", "add", str(f)], cli_env)
    assert r.returncode == 2 and "meta.name" in r.stdout + r.stderr, r.stdout + r.stderr


def test_web_refuses_a_label_that_reads_as_a_hash(settings):
    from dynocell.runbooks.cell import open_cell
    from dynocell.runbooks.configs import add_config, label_target
    from dynocell.web.app import create_app

    cell = open_cell(settings)
    victim = add_config(cell, TINY, "tiny").hash
    app = create_app(settings, cell=cell, launch_token=LAUNCH, procedures=StubProcedures())
    with serve(app) as base:
        cookies, csrf = login_session(base, LAUNCH)
        http = requests.Session()
        http.trust_env = False
        for label in (victim.removeprefix("sha256:")[:12], victim):
            r = http.post(f"{base}/api/configs", json={"toml": PLAIN.read_text(), "name": label},
                          headers={"X-CSRF-Token": csrf, "Origin": base}, cookies=cookies, timeout=30)
            assert r.status_code == 400, (label, r.status_code, r.text)
            assert "reads as a hash" in r.json()["error"], r.text
            assert label_target(cell, label) is None


@pytest.mark.parametrize("typed", ["upper prefix", "upper full hash", "upper sha256: prefix"])
def test_hash_typed_in_upper_case_resolves(cli_env, typed):
    """Issue 38 survivor 8: the resolver lowers a hash before comparing it (hashes are stored in lower case and
    compared exactly on both backends), so an upper-case prefix or full hash names its config."""
    victim = _add(cli_env, TINY, "tiny")
    _add(cli_env, PLAIN, "plain")
    hexes = victim.removeprefix("sha256:")
    ref = {"upper prefix": hexes[:8].upper(), "upper full hash": hexes.upper(),
           "upper sha256: prefix": "SHA256:" + hexes[:10].upper()}[typed]
    r = _cli(["config", "show", ref, "--json"], cli_env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["hash"] == victim
