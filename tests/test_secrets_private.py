"""Issue 32, items 1 and 2 of the second pass: a config's secrets never reach the store's text, and SGLang's
``--api-key`` never reaches the engine's command line.

- The store (every column of every table, the SQLite file and its WAL as bytes) holds ``***`` where a config
  had a secret (secret ``[env]`` values, a URL's password, ``--api-key``/``--admin-api-key`` values); the
  config hash is the real config's; the real canonical JSON sits in this host's 0600 secret file.
- A local boot gives the engine the real values: ``[env]`` in its environment, SGLang's keys in a 0600
  ``--config`` YAML file that SGLang 0.5.17's own ``ConfigArgumentMerger`` (from the released wheel) turns
  back into ``--api-key KEY``; ``/proc/PID/cmdline`` and the stored and shown argv carry no key.
- A host without the secret file (a fleet store's config added elsewhere) refuses to boot it as ``***``.

Real parts: the ``dynocell`` console script, a real SQLite store, a detached supervisor, a real engine process
(the fake SGLang engine behind an ``engine_python`` shim that records what it was started with).
"""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import sys
import zipfile
from pathlib import Path

from tests.test_boot_procedures import FAKE, dynocell, wait_for
from tests.test_builds import sglang_wheel

KEY, ADMIN = "sk-SECRET-api-0001", "sk-SECRET-admin-0002"
ENV_SECRETS = {"DB_PASSWD": "pw-SECRET-0003", "HF_TOKEN": "hf_SECRET0004", "MY_CREDENTIALS": "cred-SECRET-0005"}
URL_PW = "url-SECRET-0006"
ALL = (KEY, ADMIN, *ENV_SECRETS.values(), URL_PW)


def _shim(path: Path, probe: Path) -> Path:
    """An ``engine_python`` that writes its own ``/proc/self/cmdline`` and environment to ``probe``, then
    execs the fake SGLang engine on the port it was given."""
    path.write_text(f"""#!{sys.executable}
import json, os, sys
rest = sys.argv[3:]
with open({str(probe)!r}, "w") as f:
    json.dump({{"cmdline": open("/proc/self/cmdline").read().split("\\0"), "env": dict(os.environ)}}, f)
port = rest[rest.index("--port") + 1]
model = rest[rest.index("--model-path") + 1]
os.execv(sys.executable, [sys.executable, {str(FAKE)!r}, "--port", port, "--mode", "graceful", "--model-path", model])
""")
    path.chmod(0o755)
    return path


def _config(tmp_path: Path, name: str = "keyed") -> Path:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    env = "\n".join(f"{k} = {json.dumps(v)}" for k, v in ENV_SECRETS.items())
    p = tmp_path / f"{name}.toml"
    p.write_text(f'engine = "sglang"\nmodel_path = "{model}"\n'
                 f'extra_args = ["--api-key", "{KEY}", "--admin-api-key={ADMIN}", "--log-level", "info"]\n'
                 f'[env]\n{env}\nDATABASE_URL = "postgresql://app:{URL_PW}@db.lan/app"\nNCCL_DEBUG = "INFO"\n'
                 f'[meta]\nname = "{name}"\nnotes = "kept notes"\n', encoding="utf-8")
    return p


def _store_bytes(home: Path) -> bytes:
    """Every byte of the SQLite store: the file, its WAL and shared memory, and a dump of every row."""
    import sqlite3

    out = b"".join(p.read_bytes() for p in sorted(home.glob("dynocell.db*")))
    with sqlite3.connect(home / "dynocell.db") as c:
        out += "\n".join(c.iterdump()).encode()
    return out


def _no_secret(blob: bytes | str, where: str) -> None:
    data = blob if isinstance(blob, bytes) else blob.encode()
    for s in ALL:
        assert s.encode() not in data, (where, s)


def _sglang_merger(tmp_path: Path):
    """SGLang 0.5.17's ``ConfigArgumentMerger``, loaded from the released wheel's own source file."""
    src = tmp_path / "server_args_config_parser.py"
    with zipfile.ZipFile(sglang_wheel()) as z:
        src.write_bytes(z.read("sglang/srt/server_args_config_parser.py"))
    spec = importlib.util.spec_from_file_location("sglang_config_parser_0_5_17", src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.ConfigArgumentMerger


def test_the_store_keeps_no_secret_and_the_hash_is_the_real_configs(cli_env, isolated_home: Path, tmp_path: Path):
    from dynocell.engine.config import parse_config

    p = _config(tmp_path)
    added = json.loads(dynocell(cli_env, "config", "add", str(p), "--json").stdout)
    assert added["hash"] == parse_config(p.read_text(encoding="utf-8")).config_hash  # the hash is stable
    _no_secret(_store_bytes(isolated_home), "the store")
    secret_dir = isolated_home / "secrets"
    secret_file = secret_dir / (added["hash"].removeprefix("sha256:") + ".json")
    assert stat.S_IMODE(secret_dir.stat().st_mode) == 0o700 and stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    assert KEY in secret_file.read_text() and ENV_SECRETS["DB_PASSWD"] in secret_file.read_text()
    shown = json.loads(dynocell(cli_env, "config", "show", "keyed", "--json").stdout)
    assert shown["hash"] == added["hash"] and shown["meta"].get("notes") == "kept notes"
    assert shown["source_toml"] is not None and '"--api-key", "***"' in shown["source_toml"]
    for args in (("config", "show", "keyed"), ("config", "show", "keyed", "--toml"), ("config", "list", "--json"),
                 ("plan", "keyed"), ("plan", "keyed", "--json")):
        _no_secret(dynocell(cli_env, *args).stdout, " ".join(args))
    # the same file again: nothing new is stored, nothing leaks, no "other file" warning
    again = dynocell(cli_env, "config", "add", str(p), "--json").stdout
    assert "already stored from another file" not in again
    _no_secret(_store_bytes(isolated_home), "the store after a second add")


def test_a_local_boot_gets_the_real_secrets_and_no_key_on_its_command_line(cli_env, isolated_home: Path,
                                                                          tmp_path: Path):
    probe = tmp_path / "probe.json"
    env = dict(cli_env, DYNOCELL_ENGINE_PYTHON=str(_shim(tmp_path / "python", probe)), DYNOCELL_STOP_GRACE_S="2",
               DYNOCELL_BOOT_TIMEOUT_SGLANG_S="60")
    p = _config(tmp_path)
    dynocell(env, "config", "add", str(p))
    boot = json.loads(dynocell(env, "boot", "keyed", "--detach", "--json").stdout)
    try:
        wait_for(lambda: probe.is_file() and probe.stat().st_size, timeout=60)
        seen = json.loads(probe.read_text())
        cmdline = seen["cmdline"]
        _no_secret(" ".join(cmdline), "/proc/PID/cmdline")
        for k, v in ENV_SECRETS.items():
            assert seen["env"][k] == v, k  # the engine gets the real values
        assert seen["env"]["DATABASE_URL"] == f"postgresql://app:{URL_PW}@db.lan/app"
        config_file = Path(cmdline[cmdline.index("--config") + 1])
        assert config_file.parent.parent == isolated_home / "boots"
        assert stat.S_IMODE(config_file.stat().st_mode) == 0o600 and config_file.stat().st_uid == os.getuid()
        # SGLang 0.5.17's own merger reads the keys back from the file the argv names
        import argparse

        parser = argparse.ArgumentParser(prog="sglang serve")
        for flag in ("--model-path", "--port", "--host", "--api-key", "--admin-api-key", "--log-level", "--config"):
            parser.add_argument(flag)
        parser.add_argument("--enable-metrics", action="store_true")
        engine_args = cmdline[cmdline.index("sglang.launch_server") + 1:]
        merged = _sglang_merger(tmp_path)(parser).merge_config_with_args([a for a in engine_args if a])
        got = parser.parse_args(merged)
        assert (got.api_key, got.admin_api_key, got.log_level) == (KEY, ADMIN, "info")
        assert boot["state"] == "ready"
        for args in (("ps", "--json"), ("ps",), ("ps", "--all", "--json"), ("logs", boot["id"])):
            _no_secret(dynocell(env, *args).stdout, " ".join(args))
        _no_secret(_store_bytes(isolated_home), "the store while booted")
    finally:
        dynocell(env, "stop", boot["id"], check=False)


def test_a_host_without_the_secret_file_refuses_to_boot_it(cli_env, isolated_home: Path, tmp_path: Path):
    p = _config(tmp_path)
    h = json.loads(dynocell(cli_env, "config", "add", str(p), "--json").stdout)["hash"]
    (isolated_home / "secrets" / (h.removeprefix("sha256:") + ".json")).unlink()  # as on another host
    proc = dynocell(cli_env, "boot", "keyed", check=False)
    assert proc.returncode != 0 and "secrets that are not on this host" in proc.stderr, proc.stderr
    assert "dynocell config add FILE" in " ".join(proc.stderr.split())
    rows = json.loads(dynocell(cli_env, "ps", "--all", "--json").stdout)
    assert rows == [], rows  # refused before any boot row or engine
    dynocell(cli_env, "config", "add", str(p))  # the file added here brings the secrets back
    assert (isolated_home / "secrets" / (h.removeprefix("sha256:") + ".json")).is_file()
