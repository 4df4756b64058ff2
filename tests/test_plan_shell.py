"""Issue 32 item 4: ``dynocell plan … | sh`` runs only the plan's commands.

A newline in ``[[nodes]] host`` made the comment line ``# node 0 on <host>`` a second command. Host
names are validated (a config error naming the field), and everything printed is quoted — comment
lines included. The real ``dynocell`` console script prints the plan; a real ``sh`` runs it, with the
engine interpreter set to ``true`` so each planned command is a no-op.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.test_cli_config import run

TWO_NODES = '''engine = "sglang"
model_path = "/models/m"
dist_init_addr = "10.0.0.1:5000"
{extra}
[parallel]
tp_size = 2

[[nodes]]
host = {host0}
node_rank = 0
gpus = 1

[[nodes]]
host = "node-1.lan"
node_rank = 1
gpus = 1
'''


def _config(tmp_path: Path, host0: str, extra: str = "") -> Path:
    p = tmp_path / "two.toml"
    p.write_text(TWO_NODES.format(host0=json.dumps(host0), extra=extra), encoding="utf-8")
    return p


@pytest.mark.parametrize("host", ["n0\ntouch PWNED", "n0; touch PWNED", "$(touch PWNED)", "n0 touch", ""])
def test_a_host_that_is_not_a_host_name_is_a_config_error(cli_env, tmp_path: Path, host: str):
    proc = run(cli_env, "plan", str(_config(tmp_path, host)), ok=False, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout
    assert "Error:" in proc.stderr and "nodes[0].host" in proc.stderr, proc.stderr
    assert not (tmp_path / "PWNED").exists() and "touch" not in proc.stdout


def test_a_top_level_host_is_validated_too(cli_env, tmp_path: Path):
    p = tmp_path / "h.toml"
    p.write_text('engine = "reference"\nmodel_path = "dynocell:tiny"\nhost = "127.0.0.1\\nid"\n', encoding="utf-8")
    proc = run(cli_env, "config", "add", str(p), ok=False)
    assert proc.returncode == 2 and "host" in proc.stderr and "IP address" in proc.stderr, proc.stderr


@pytest.mark.skipif(shutil.which("sh") is None, reason="no POSIX sh")
def test_plan_piped_to_sh_runs_only_the_planned_commands(cli_env, tmp_path: Path):
    hostile = ('served_model_name = "m; touch PWNED1"\nextra_args = ["--log-level", "`touch PWNED2`"]\n'
               'patches = ["/tmp/p$(touch PWNED3)", "./q\'; touch PWNED4; \'"]\n'
               '[env]\nNCCL_DEBUG = "$(touch PWNED5)"\nNCCL_ALGO = "x\\ntouch PWNED6"\n')
    p = _config(tmp_path, "::1", extra=hostile)
    env = {**cli_env, "DYNOCELL_ENGINE_PYTHON": shutil.which("true") or "/bin/true"}
    printed = run(env, "plan", str(p), cwd=tmp_path).stdout
    assert printed.count("\n# node ") + printed.startswith("# node ") == 2, printed
    done = subprocess.run(["sh", "-eu"], input=printed, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert sorted(x.name for x in tmp_path.iterdir() if x.name.startswith("PWNED")) == []
    # every comment line stays one line: the warning names the outside patches on it
    comments = [ln for ln in printed.splitlines() if ln.startswith("#")]
    assert any("patches from outside the bundled set" in ln for ln in comments), comments
