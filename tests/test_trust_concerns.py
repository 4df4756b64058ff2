"""Issue 32 items 1, 3 and 6: what in a config is a trust decision — ``[env]`` names off the allow-list,
patch folders outside the bundled set, a ``host`` that is not loopback — is marked by every CLI face
(config add/show, plan, boot, run) and refused by the web panel until ``dynocell config trust``.

Real parts: the ``dynocell`` console script in subprocesses, a real SQLite store, the panel served by
uvicorn on 127.0.0.1 and driven over real HTTP.
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

import pytest
import requests

from tests.test_cli_config import run
from tests.test_web_fuzz import StubProcedures, serve
from tests.test_web_routes import LAUNCH

BASE = 'engine = "reference"\nmodel_path = "dynocell:tiny"\n'
#: The names the attack pass found unmarked (issue 32 item 3), each able to run code in the engine.
MISSED = ["LD_AUDIT", "PYTHONUSERBASE", "PYTHONWARNINGS", "PYTHONBREAKPOINT", "GCONV_PATH", "NODE_OPTIONS",
          "CC", "CXX", "TRITON_PTXAS_PATH", "CUDA_HOME", "TORCHINDUCTOR_CACHE_DIR", "HF_HOME"]


def _write(tmp_path: Path, name: str, body: str) -> Path:
    p = tmp_path / f"{name}.toml"
    p.write_text(BASE + body + f'\n[meta]\nname = "{name}"\n', encoding="utf-8")
    return p


@contextlib.contextmanager
def _panel(settings, cell, procs):
    """The panel over real HTTP: ``(session, base_url, csrf)``, logged in through the token URL."""
    from dynocell.web.app import create_app

    app = create_app(settings, cell=cell, launch_token=LAUNCH, procedures=procs)
    with serve(app) as base:
        s = requests.Session()
        s.trust_env = False
        r = s.get(f"{base}/?token={LAUNCH}", allow_redirects=False, timeout=30)
        assert r.status_code == 303, r.text
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', s.get(f"{base}/", timeout=30).text).group(1)
        yield s, base, csrf


def _post(s, base: str, csrf: str, url: str, config: str) -> requests.Response:
    return s.post(f"{base}{url}", data={"config": config, "csrf_token": csrf}, allow_redirects=False,
                  headers={"Origin": base}, timeout=30)


def test_env_off_the_allow_list_is_marked_in_the_cli(cli_env, tmp_path: Path):
    env = "\n".join(f'{k} = "/tmp/x"' for k in MISSED)
    p = _write(tmp_path, "missed", f"[env]\n{env}\nNCCL_DEBUG = \"INFO\"\n")
    added = json.loads(run(cli_env, "config", "add", str(p), "--json").stdout)
    assert sorted(added["injection_env"]) == sorted(MISSED)  # NCCL_DEBUG is on the allow-list
    human = run(cli_env, "config", "show", "missed").stdout
    plan = run(cli_env, "plan", "missed").stdout
    for k in MISSED:
        assert k in human.split("⚠", 1)[1] and k in plan.split("⚠", 1)[1], k
    # a name nobody listed is marked too: the allow-list decides, not a deny-list
    q = _write(tmp_path, "novel", '[env]\nSOME_NEW_LOADER_HOOK = "/tmp/evil"\n')
    assert "⚠ env sets SOME_NEW_LOADER_HOOK" in run(cli_env, "config", "add", str(q)).stdout


def test_injection_env_keys_defined_once():
    import dynocell.engine.config as config_mod

    source = Path(config_mod.__file__).read_text(encoding="utf-8")
    assert source.count("INJECTION_ENV_KEYS = ") == 1
    assert set(MISSED) <= set(config_mod.INJECTION_ENV_KEYS)
    assert not set(config_mod.INJECTION_ENV_KEYS) & config_mod.WEB_SAFE_ENV_KEYS


@pytest.mark.parametrize("key", MISSED)
def test_web_refuses_env_off_the_allow_list_until_trusted(settings, key: str):
    from dynocell.runbooks.cell import open_cell
    from dynocell.runbooks.configs import add_config_text, trust

    cell = open_cell(settings)
    h = add_config_text(cell, BASE + f'[env]\n{key} = "/tmp/planted"\n', "hook").hash
    procs = StubProcedures()
    with _panel(settings, cell, procs) as (s, base, csrf):
        assert f"⚠ env sets {key}" in s.get(f"{base}/configs", timeout=30).text
        for url in ("/actions/boot", "/actions/run"):
            r = _post(s, base, csrf, url, "hook")
            assert r.status_code == 403 and "dynocell config trust" in r.text, (url, r.status_code)
        assert procs.calls == []
        trust(cell, h, "ops")
        assert _post(s, base, csrf, "/actions/boot", "hook").status_code == 303


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20", "example.org"])
def test_non_loopback_host_is_a_trust_decision(settings, cli_env, tmp_path: Path, host: str):
    from dynocell.runbooks.cell import open_cell
    from dynocell.runbooks.configs import trust

    p = _write(tmp_path, "wide", f'host = "{host}"\n')
    added = run(cli_env, "config", "add", str(p)).stdout
    assert f"host {host} is not loopback" in added
    assert f"host {host} is not loopback" in run(cli_env, "config", "show", "wide").stdout
    assert f"host {host} is not loopback" in run(cli_env, "plan", "wide").stdout
    cell = open_cell(settings)
    h = json.loads(run(cli_env, "config", "show", "wide", "--json").stdout)["hash"]
    procs = StubProcedures()
    with _panel(settings, cell, procs) as (s, base, csrf):
        r = _post(s, base, csrf, "/actions/boot", "wide")
        assert r.status_code == 403 and "not loopback" in r.text
        assert procs.calls == []
        trust(cell, h, "ops")
        assert _post(s, base, csrf, "/actions/boot", "wide").status_code == 303


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_hosts_need_no_trust(cli_env, tmp_path: Path, host: str):
    p = _write(tmp_path, "local", f'host = "{host}"\n')
    assert "⚠" not in run(cli_env, "config", "add", str(p)).stdout


def test_boot_warns_of_a_non_loopback_host(cli_env, tmp_path: Path):
    # the warning comes before anything is spawned: a model path that does not exist stops the boot there
    p = tmp_path / "wide.toml"
    p.write_text(f'engine = "reference"\nmodel_path = "{tmp_path / "absent"}"\nhost = "0.0.0.0"\n', encoding="utf-8")
    proc = run(cli_env, "boot", str(p), ok=False)
    assert "host 0.0.0.0 is not loopback" in proc.stdout + proc.stderr


def test_patch_folder_outside_the_bundled_set_is_marked_and_refused_by_the_web(settings, cli_env, tmp_path: Path):
    from dynocell.runbooks.cell import open_cell
    from dynocell.runbooks.configs import add_config_text, trust

    folder = tmp_path / "mypatch"
    folder.mkdir()
    body = BASE.replace("reference", "sglang") + f'patches = ["{folder}"]\n'
    p = tmp_path / "patched.toml"
    p.write_text(body + '[meta]\nname = "patched"\n', encoding="utf-8")
    for out in (run(cli_env, "config", "add", str(p)).stdout, run(cli_env, "config", "show", "patched").stdout,
                run(cli_env, "plan", "patched").stdout):
        assert f"patches from outside the bundled set: {folder}" in out, out
    cell = open_cell(settings)
    h = add_config_text(cell, body, "patched").hash
    bundled = add_config_text(cell, BASE.replace("reference", "sglang") + 'patches = ["spec-graph-switches"]\n',
                              "bundled").hash
    procs = StubProcedures()
    with _panel(settings, cell, procs) as (s, base, csrf):
        assert "patches from outside the bundled set" in s.get(f"{base}/configs/{h}", timeout=30).text
        r = _post(s, base, csrf, "/actions/run", "patched")
        assert r.status_code == 403 and "patches from outside the bundled set" in r.text
        assert procs.calls == []
        assert _post(s, base, csrf, "/actions/run", "bundled").status_code == 303  # bundled: no trust needed
        trust(cell, h, "ops")
        assert _post(s, base, csrf, "/actions/run", "patched").status_code == 303
    assert bundled


def test_boot_applies_patches_as_run_does(cli_env, tmp_path: Path):
    """``dynocell boot`` ignored ``patches`` (the engine ran unpatched) while ``dynocell run`` built them:
    both now make the build first, and refuse the same config the same way before any engine starts."""
    p = _write(tmp_path, "patchref", 'patches = ["spec-graph-switches"]\n')
    run(cli_env, "config", "add", str(p))
    booted = run(cli_env, "boot", "patchref", "--timeout", "60", ok=False)
    assert booted.returncode != 0, booted.stdout
    assert "engine builds patch SGLang or vLLM" in booted.stderr.replace("\n", " "), booted.stderr
    ps = json.loads(run(cli_env, "ps", "--json").stdout)
    assert ps == [] or all(b.get("state") != "ready" for b in (ps if isinstance(ps, list) else ps.get("boots", [])))
