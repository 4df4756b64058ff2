"""Issue 39, data safety: read commands never migrate or write a store. A store at an older schema is read from
a migrated private copy with a note (``store at 0002; `dynocell init` upgrades it``), and ``dynocell --store
PATH`` reads any store file that way, so the shipped H200 stores under tests/data can be browsed untouched.

Real parts: the `dynocell` console script in subprocesses, the git-tracked SQLite stores themselves (their
sha256, mtime and folder checked before and after: nothing migrated, no ``.migrate.lock``, ``-wal`` or ``-shm``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STORES = {
    "0002 real run": REPO / "tests/data/stores/real-run/dynocell.db",
    "0006 vLLM H200": REPO / "tests/data/vllm-0.26.0/dynocell-h200/dynocell.db",
    "0009 SGLang H200 greedy text": REPO / "tests/data/sglang-0.5.17-eagle/dynocell-h200-greedy-text/dynocell.db",
}


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dynocell", *args], env=env, capture_output=True, text=True,
                          timeout=180)


def _fingerprint(db: Path) -> tuple[str, int, list[str]]:
    files = sorted(p.name for p in db.parent.iterdir())
    return hashlib.sha256(db.read_bytes()).hexdigest(), db.stat().st_mtime_ns, files


@pytest.mark.parametrize("name", list(STORES))
def test_store_option_reads_a_shipped_store_without_touching_it(cli_env, name):
    db = STORES[name]
    before = _fingerprint(db)
    runs = _cli(["--store", str(db), "runs", "--json"], cli_env)
    assert runs.returncode == 0, runs.stdout + runs.stderr
    listed = json.loads(runs.stdout)
    assert listed, "the shipped store has runs"
    for args in (["ps", "--all", "--json"], ["config", "list", "--json"], ["show", listed[0]["id"], "--json"]):
        r = _cli(["--store", str(db), *args], cli_env)
        assert r.returncode == 0, (args, r.stdout + r.stderr)
    assert json.loads(r.stdout)["run"]["id"] == listed[0]["id"]
    from dynocell.db.session import head_revision, peek_revision

    old = peek_revision(db) != head_revision()
    assert ("store at " + name[:4] in runs.stderr and "dynocell init` upgrades it" in runs.stderr) == old, runs.stderr
    # a write through --store is refused; the file stays as it was
    w = _cli(["--store", str(db), "config", "add", str(REPO / "examples" / "tiny.toml"), "--name", "x-new"], cli_env)
    assert w.returncode != 0 and "Error:" in w.stderr and "read-only" in w.stderr, w.stdout + w.stderr
    assert _fingerprint(db) == before


@pytest.mark.parametrize("name", list(STORES))
def test_diagnose_on_a_read_only_store_prints_findings_and_stores_none(cli_env, name):
    """`diagnose` through --store wrote its findings and died with "attempt to write a readonly database";
    it now diagnoses the newest run, prints the findings (the same as --json lists) and says they were
    not stored, and the shipped file is unchanged."""
    db = STORES[name]
    before = _fingerprint(db)
    r = _cli(["--store", str(db), "diagnose", "--json"], cli_env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert isinstance(json.loads(r.stdout), list)
    assert "findings not stored: the store is open read-only" in r.stderr, r.stderr
    assert "readonly database" not in r.stdout + r.stderr
    assert _fingerprint(db) == before


def test_read_commands_do_not_migrate_an_old_store_in_the_data_directory(cli_env, isolated_home):
    db = isolated_home / "dynocell.db"
    shutil.copyfile(STORES["0002 real run"], db)
    before = _fingerprint(db)
    for args in (["runs"], ["ps", "--all"], ["config", "list"]):
        r = _cli(args, cli_env)
        assert r.returncode == 0, (args, r.stdout + r.stderr)
        assert "note: store at 0002; `dynocell init` upgrades it" in r.stderr, r.stderr
        assert _fingerprint(db) == before, args
    r = _cli(["init"], cli_env)  # the one command that upgrades it
    assert r.returncode == 0, r.stdout + r.stderr
    assert _fingerprint(db)[0] != before[0]
    r = _cli(["runs"], cli_env)
    assert r.returncode == 0 and "note:" not in r.stderr, r.stderr
