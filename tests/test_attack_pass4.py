"""Issue 32, a third fresh attack pass (2026-12-02, by a helper who had read neither the issue nor the earlier
attack tests; loopback, a panel user and ``nobody`` as the neighbour): 19 attacks, 15 held, 4 broke. Each break
is a regression test here, written from the helper's reproduction before its fix.

1. The SGLang secrets file a boot writes beside its log (``boots/<id>/engine-secrets.yaml``, to keep
   ``--api-key`` out of ``ps``) was served to any panel user as a boot artifact; so was any file a boot row's
   ``log_path`` names under the secrets folder.
2. Unique prefixes of secret flags (``--api-ke KEY``, ``--admin-api=KEY``) were stored and shown in full:
   SGLang's and vLLM's argparse reads a unique prefix as the whole option.
3. A data directory owned by another user, or writable by one, was used: a neighbour could swap the store
   for one whose configs run their code and are marked trusted.
4. Engine options that run code the config names (``--trust-remote-code``, vLLM's ``--worker-extension-cls``
   …) were no trust concern, so the panel booted them from an untrusted config.

Held (not repeated here): open redirects, logged-out API docs, foreign Host headers, CSRF variants, oversized
bodies, login back-off, a hostile engine on ``attach``, ``kill -9`` mid-spawn, profile paths, terminal
escapes, ``ps`` as ``nobody``, CSV export, trust for ``[env]``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_bad_inputs import cli

KEY = "SEKRIT_FULL_9"


@pytest.fixture(scope="module")
def own_store(tmp_path_factory):
    """A panel store of this module's own (rows are changed below)."""
    from tests.test_web_routes import panel_store

    return panel_store(tmp_path_factory.mktemp("attack4-home"), real_run=False)


def test_the_panel_serves_no_secrets_file_of_a_boot(own_store):
    from tests.test_web_fuzz import login_session, serve

    import requests
    from sqlalchemy import text

    from dynocell.engine.adapters import SGLANG_SECRETS_FILE
    from dynocell.runbooks import web_tokens
    from dynocell.web.app import create_app

    settings, cell, ids = own_store
    boot = ids["boots"][0]
    folder = Path(settings.home) / "boots" / boot
    folder.mkdir(parents=True, exist_ok=True)
    (folder / SGLANG_SECRETS_FILE).write_text(json.dumps({"api-key": KEY}))
    settings.secrets_dir.mkdir(parents=True, exist_ok=True)
    stash = settings.secrets_dir / "0123abcd.json"
    stash.write_text(json.dumps({"env": {"HF_TOKEN": KEY}}))
    other = ids["boots"][1]
    with cell.store.session() as s:  # a row (another host's, say) that names a file in the secrets folder
        s.execute(text("update boots set log_path = :p where id = :b"), {"p": str(stash), "b": other})
    token = web_tokens.create(cell, "attack4")
    with serve(create_app(settings, cell=cell)) as base:
        cookies, _ = login_session(base, token)
        page = requests.get(f"{base}/boots/{boot}", cookies=cookies, timeout=30)
        assert page.status_code == 200 and SGLANG_SECRETS_FILE not in page.text
        for b, name in ((boot, SGLANG_SECRETS_FILE), (other, "log")):
            r = requests.get(f"{base}/boots/{b}/artifacts/{name}", cookies=cookies, timeout=30)
            assert r.status_code == 404 and KEY not in r.text, (b, name, r.status_code)
        for b in (other,):
            r = requests.get(f"{base}/boots/{b}", cookies=cookies, timeout=30)
            assert KEY not in r.text


@pytest.mark.parametrize("args", [["--api-ke", KEY], ["--admin-api=" + KEY], ["--api_k", KEY],
                                  ["--ssl-keyfile-pass", KEY], ["--hf-tok", KEY]], ids=lambda a: a[0])
def test_a_prefix_of_a_secret_flag_is_a_secret_flag(args, isolated_home, tmp_path):
    """`config add` then every face of the config: the value is *** wherever it is stored or shown."""
    cfg = tmp_path / "abbr.toml"
    items = ", ".join(json.dumps(a) for a in [*args, "--ssl-keyfile", "/certs/key.pem"])
    cfg.write_text(f'engine = "sglang"\nmodel_path = "/tmp/nomodel"\nextra_args = [{items}]\n\n'
                   '[meta]\nname = "abbr"\n')
    code, out, err = cli("config", "add", str(cfg))
    assert code == 0, err
    code, shown, err = cli("config", "show", "abbr", "--json")
    assert code == 0, err
    assert KEY not in shown and "***" in shown
    assert "/certs/key.pem" in shown  # --ssl-keyfile is an option of its own, no secret
    assert KEY.encode() not in (isolated_home / "dynocell.db").read_bytes()


def test_a_data_directory_another_user_can_write_is_refused(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNOCELL_")}
    home = tmp_path / "shared"
    env["DYNOCELL_HOME"] = str(home)
    init = subprocess.run([sys.executable, "-m", "dynocell", "init"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert init.returncode == 0, init.stderr
    os.chmod(home, 0o777)  # a shared folder: any local user may rename the store away and put theirs there
    r = subprocess.run([sys.executable, "-m", "dynocell", "runs"], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode != 0 and "writable by other users" in r.stderr and "Traceback" not in r.stderr, r.stderr
    os.chmod(home, 0o700)
    os.chmod(home / "dynocell.db", 0o666)
    r = subprocess.run([sys.executable, "-m", "dynocell", "runs"], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode != 0 and "dynocell.db is writable by other users" in r.stderr, r.stderr
    os.chmod(home / "dynocell.db", 0o600)
    if os.geteuid() == 0 and shutil.which("runuser"):
        os.chown(home, 65534, 65534)  # owned by nobody
        r = subprocess.run([sys.executable, "-m", "dynocell", "runs"], env=env, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode != 0 and "owned by uid 65534" in r.stderr, r.stderr
        os.chown(home, 0, 0)
    ok = subprocess.run([sys.executable, "-m", "dynocell", "runs", "--json"], env=env, capture_output=True,
                        text=True, timeout=300)
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize("flag", ["--trust-remote-code", "--trust_remote_code", "--trust-rem",
                                  "--worker-extension-cls=evil.Ext", "--enable-custom-logit-processor"])
def test_options_that_run_named_code_are_a_trust_concern(flag):
    from dynocell.engine.config import code_flags, parse_config, trust_concerns

    cfg = parse_config(f'engine = "vllm"\nmodel_path = "/tmp/m"\nextra_args = ["{flag}"]\n', "<t>")
    assert code_flags(cfg.extra_args), flag
    assert any("runs code the config names" in c for c in trust_concerns(cfg)), trust_concerns(cfg)
    plain = parse_config('engine = "vllm"\nmodel_path = "/tmp/m"\nextra_args = ["--seed", "0"]\n', "<t>")
    assert trust_concerns(plain) == []
