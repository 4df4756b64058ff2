"""A database that is not a dynocell store, given through DYNOCELL_DATABASE_URL (left-over defects, item 9).

Before: `dynocell runs` with DYNOCELL_DATABASE_URL pointing at another program's SQLite database (its own
tables and rows) added dynocell's 30-odd tables to it and switched it to WAL. Now every command refuses it
with an ``Error:`` naming DYNOCELL_DATABASE_URL and the fix, and the file is left byte for byte as it was
(no -wal, -shm or lock file beside it). An empty database still becomes a store.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _dynocell(env, *args) -> subprocess.CompletedProcess:
    exe = shutil.which("dynocell", path=str(Path(sys.executable).parent))
    return subprocess.run([exe, *args], env={k: v for k, v in env.items() if k != "COLUMNS"}, capture_output=True,
                          text=True, timeout=180, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("args", [("runs",), ("init",), ("config", "add", str(REPO / "examples" / "tiny.toml"))],
                         ids=["runs", "init", "config-add"])
def test_another_programs_database_is_refused_and_left_alone(cli_env, tmp_path, args):
    db = tmp_path / "inventory.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT)")
        con.execute("INSERT INTO items (name) VALUES ('bolt')")
    con.close()
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    proc = _dynocell({**cli_env, "DYNOCELL_DATABASE_URL": f"sqlite:///{db}"}, *args)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    err, hint = proc.stderr.strip().splitlines()
    assert err.startswith(f"Error: the store {db} is corrupt or not a dynocell store: it holds 1 table(s) (items)")
    assert hint.startswith("hint: ") and "point DYNOCELL_DATABASE_URL at an empty database" in hint
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inventory.db"]


def test_an_empty_database_becomes_a_store(cli_env, tmp_path):
    db = tmp_path / "new.db"
    sqlite3.connect(db).close()  # an empty file
    env = {**cli_env, "DYNOCELL_DATABASE_URL": f"sqlite:///{db}"}
    # a 0-byte file becomes a store only through `dynocell init` (issue 32 item 17: any other command refuses it)
    assert _dynocell(env, "init").returncode == 0
    assert _dynocell(env, "config", "add", str(REPO / "examples" / "tiny.toml")).returncode == 0
    proc = _dynocell(env, "config", "list")
    assert proc.returncode == 0 and "tiny" in proc.stdout
