"""What dynocell keeps is private to its user (issue 32, item 7): `dynocell init` makes the data directory and
its folders 0700 and the SQLite store 0600, says so, and tightens an existing data directory this user owns;
a boot's engine log is created 0600. Real console script, real SQLite, a real stand-in engine."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX modes")


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def _init(home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DYNOCELL_HOME": str(home)}
    env.pop("DYNOCELL_DATABASE_URL", None)
    return subprocess.run([sys.executable, "-m", "dynocell", "init"], env=env, capture_output=True, text=True,
                          timeout=120)


def test_init_creates_everything_private_and_says_so(tmp_path):
    old = os.umask(0o022)  # the usual umask: without dynocell's modes the store would be 0644
    try:
        res = _init(tmp_path / "new" / "home")
    finally:
        os.umask(old)
    assert res.returncode == 0, res.stderr
    home = tmp_path / "new" / "home"
    assert "0700 (only you can read it)" in res.stdout
    for d in (tmp_path / "new", home, home / "boots"):
        assert _mode(d) == 0o700, (d, oct(_mode(d)))
    for f in home.glob("dynocell.db*"):
        assert _mode(f) & 0o077 == 0, (f, oct(_mode(f)))


def test_init_tightens_an_existing_open_data_directory(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o755)
    res = _init(home)
    assert res.returncode == 0, res.stderr
    assert _mode(home) == 0o700 and "group and other access removed" in res.stdout


def test_an_engine_log_is_created_0600(tmp_path):
    from dynocell.engine.adapters import LaunchSpec
    from dynocell.engine.supervisor import Supervisor

    fake = Path(__file__).parent / "engines" / "fake_engine.py"
    log = tmp_path / "boots" / "b1" / "engine.log"
    sup = Supervisor("sglang")
    old = os.umask(0o022)
    spec = LaunchSpec(argv=[sys.executable, str(fake), "--port", "9", "--mode", "crash"], env=dict(os.environ),
                      port=9, host="127.0.0.1")
    try:
        sup.start(spec, log)
    finally:
        sup.stop()
        os.umask(old)
    assert _mode(log) == 0o600 and _mode(log.parent) == 0o700
