"""Issue 32 item 17 (its third part): a config saved "UTF-8 with BOM" (as Windows editors do) is read; it was
refused with a cryptic "Invalid statement (at line 1, column 1)". Real parts: the `dynocell` CLI in a
subprocess on a real store.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dynocell", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def test_a_config_with_a_utf8_bom_is_read_as_without(cli_env, tmp_path):
    text = (REPO / "examples" / "tiny.toml").read_text()
    bom = tmp_path / "bom.toml"
    bom.write_bytes(b"\xef\xbb\xbf" + text.encode())
    plain = tmp_path / "plain.toml"
    plain.write_text(text)
    r = _cli(["config", "add", str(bom), "--name", "with-bom", "--json"], cli_env)
    assert r.returncode == 0, r.stdout + r.stderr
    with_bom = json.loads(r.stdout)["hash"]
    r = _cli(["config", "add", str(plain), "--name", "no-bom", "--json"], cli_env)
    assert r.returncode == 0 and json.loads(r.stdout)["hash"] == with_bom  # the same config, the same hash
    r = _cli(["config", "show", "with-bom", "--json"], cli_env)
    assert r.returncode == 0 and "\ufeff" not in r.stdout and "\\ufeff" not in r.stdout, r.stdout
