"""Issue 32 item 17 (its second part): a 0-byte store file is refused with a clear error instead of silently
becoming a new, empty store (a truncated dynocell.db looked like a store with nothing in it). ``dynocell init``
still makes a store of it on purpose, and dynocell itself never leaves a 0-byte store file: processes starting
together on a missing store all get it. Real parts: the `dynocell` CLI in subprocesses, real SQLite files.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dynocell", *args], env=env, capture_output=True, text=True,
                          timeout=180)


def test_a_zero_byte_store_is_refused_until_init(cli_env, isolated_home):
    db = isolated_home / "dynocell.db"
    db.write_bytes(b"")
    for args in (["runs"], ["config", "list"], ["config", "add", str(REPO / "examples" / "tiny.toml")]):
        r = _cli(args, cli_env)
        assert r.returncode != 0, (args, r.stdout)
        assert r.stderr.startswith(f"Error: the store file {db} is empty (0 bytes)"), r.stderr
        assert "dynocell init" in r.stderr
        assert db.stat().st_size == 0
    r = _cli(["init"], cli_env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert db.stat().st_size > 0
    assert _cli(["config", "add", str(REPO / "examples" / "tiny.toml")], cli_env).returncode == 0


def test_processes_starting_together_on_a_missing_store_all_get_it(cli_env, isolated_home):
    """The new store file is made non-empty before it gets its name, so none of them sees a 0-byte store."""
    procs = [subprocess.Popen([sys.executable, "-m", "dynocell", "config", "list"], env=cli_env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    results = [(p.wait(timeout=180), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    assert all(code == 0 for code, _ in results), results
    assert (isolated_home / "dynocell.db").stat().st_size > 0
    assert not [p.name for p in isolated_home.iterdir() if ".new-" in p.name]
