"""Issue 32 item 8: secrets the name rule missed — ``DB_PASSWD``, a ``DATABASE_URL`` with a password,
``GH_PAT``, ``MY_CREDENTIALS``, ``extra_args = ["--api-key", …]`` — are ``***`` in every face (config
show text/JSON/TOML, plan, diff, the panel's pages and API, the stored boot row), the config hash still
covers the real values, and vLLM gets its key through ``VLLM_API_KEY`` rather than its argv (which every
local user reads in ``/proc/PID/cmdline``).

Real parts: the ``dynocell`` console script, a real SQLite store, the panel over real HTTP on 127.0.0.1,
a real process started from the rendered launch.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.test_cli_config import run
from tests.test_trust_concerns import _panel
from tests.test_web_fuzz import StubProcedures

SECRETS = {"DB_PASSWD": "pw-SECRET1", "GH_PAT": "ghp_SECRET2", "MY_CREDENTIALS": "cred-SECRET3",
           "DB_PASS": "pw-SECRET5"}
URL = "postgresql://app:url-SECRET4@db.lan:5432/app"
KEY = "sk-SECRET6"


def _text(engine: str = "reference", key: str = KEY) -> str:
    env = "\n".join(f"{k} = {json.dumps(v)}" for k, v in SECRETS.items())
    return (f'engine = "{engine}"\nmodel_path = "/models/m"\nextra_args = ["--api-key", "{key}", "--seed", "0"]\n'
            f'[env]\n{env}\nDATABASE_URL = "{URL}"\nNCCL_DEBUG = "INFO"\n')


def _no_secret(text: str, where: str) -> None:
    for s in (*SECRETS.values(), "url-SECRET4", KEY):
        assert s not in text, (where, s)


def test_cli_faces_redact_the_missed_secrets(cli_env, isolated_home: Path, tmp_path: Path):
    from dynocell.engine.config import parse_config

    p = tmp_path / "s.toml"
    p.write_text(_text() + '[meta]\nname = "s"\n', encoding="utf-8")
    q = tmp_path / "t.toml"
    q.write_text(_text(key="sk-SECRET7").replace("pw-SECRET1", "pw-SECRET8") + '[meta]\nname = "t"\n',
                 encoding="utf-8")
    h = json.loads(run(cli_env, "config", "add", str(p), "--json").stdout)["hash"]
    run(cli_env, "config", "add", str(q))
    assert h == parse_config(p.read_text(encoding="utf-8")).config_hash  # the hash covers the real values
    for args in (("config", "show", "s"), ("config", "show", "s", "--json"), ("config", "show", "s", "--toml"),
                 ("plan", "s"), ("plan", "s", "--json"), ("config", "diff", "s", "t"),
                 ("config", "diff", "s", "t", "--json")):
        shown = run(cli_env, *args).stdout
        _no_secret(shown, args)
        assert "SECRET7" not in shown and "SECRET8" not in shown, args
    shown = json.loads(run(cli_env, "config", "show", "s", "--json").stdout)
    assert shown["canonical"]["env"]["DATABASE_URL"] == "postgresql://app:***@db.lan:5432/app"
    assert shown["canonical"]["extra_args"] == ["--api-key", "***", "--seed", "0"]
    assert shown["source_toml"] is not None and "***" in shown["source_toml"]


def test_panel_redacts_the_missed_secrets(settings):
    from dynocell.runbooks.cell import open_cell
    from dynocell.runbooks.configs import add_config_text

    cell = open_cell(settings)
    h = add_config_text(cell, _text(), "s").hash
    other = add_config_text(cell, _text(key="sk-SECRET7"), "t").hash
    with _panel(settings, cell, StubProcedures()) as (s, base, _):
        for url in (f"/configs/{h}", f"/api/configs/{h}", "/api/configs", "/configs",
                    f"/configs-diff?a={other}&b={h}", f"/api/configs-diff?a={other}&b={h}"):
            r = s.get(base + url, timeout=30)
            assert r.status_code == 200, (url, r.status_code)
            _no_secret(r.text, url)
            assert "SECRET7" not in r.text, url


def test_vllm_api_key_goes_through_the_environment_not_argv(tmp_path: Path):
    from dynocell.engine.adapters import render
    from dynocell.engine.config import parse_config

    for args in (["--api-key", KEY], [f"--api-key={KEY}"], ["--api_key", KEY]):
        cfg = parse_config('engine = "vllm"\nmodel_path = "/models/m"\n'
                           f'extra_args = {json.dumps(["--seed", "0", *args])}\n')
        spec = render(cfg, python=sys.executable, port=8000, base_env={})
        assert KEY not in " ".join(spec.argv) and spec.env["VLLM_API_KEY"] == KEY, spec.argv
        assert "--seed" in spec.argv and KEY not in spec.argv_string
    # a real process started from the launch: its /proc cmdline has no key, its environment has it
    seen = tmp_path / "seen.json"
    probe = ("import json, os, sys; json.dump({'cmdline': open('/proc/self/cmdline').read(), "
             f"'key': os.environ.get('VLLM_API_KEY')}}, open({str(seen)!r}, 'w'))")
    argv = [sys.executable, "-c", probe, *spec.argv[1:]]
    subprocess.run(argv, env=spec.env, check=True, timeout=60)
    got = json.loads(seen.read_text())
    assert KEY not in got["cmdline"] and got["key"] == KEY


def test_stored_boot_row_never_holds_the_key(cli_env, isolated_home: Path, tmp_path: Path):
    p = tmp_path / "b.toml"
    p.write_text('engine = "reference"\nmodel_path = "dynocell:tiny"\n'
                 f'extra_args = ["--api-key", "{KEY}"]\n[env]\nDB_PASSWD = "pw-SECRET1"\n', encoding="utf-8")
    run(cli_env, "boot", str(p), "--timeout", "120", ok=False)  # the reference engine refuses --api-key
    with sqlite3.connect(isolated_home / "dynocell.db") as c:
        rows = c.execute("SELECT argv, env FROM boots").fetchall()
    assert rows, "the boot was recorded"
    for argv, env in rows:
        assert KEY not in argv and "--api-key '***'" in argv
        assert "pw-SECRET1" not in env
