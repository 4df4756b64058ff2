"""Record ``tests/data/stores/real-run/``: a dynocell store filled by REAL runs on the reference engine.

The TUI snapshot tests render screens from this store (issue 9: "a store filled by a
real `dynocell run`"). A live run differs from one recording to the next (latencies,
acceptance draws, pids, ports, timestamps), so the store is recorded once, committed,
and replayed; re-record it with this script whenever the schema or the reference
model recipe changes, then refresh the snapshots
(``pytest tests/test_tui.py --snapshot-update``).

What it runs, each as a real ``python -m dynocell`` subprocess over a fresh
``DYNOCELL_HOME`` (TZ=UTC):

1. ``dynocell run`` — the embedded default (reference engine, the made-locally
   pair, STANDALONE, 3 steps): boot, health, bench, acceptance, lossless, profile, stop;
2. ``dynocell run examples/tiny-ngram.toml --no-lossless-check`` — a second run to compare;
3. ``dynocell boot`` of ``examples/tiny-plain.toml`` on a port another process already
   holds — a real failed boot with its failure signature (``port_in_use``).

Then it copies ``dynocell.db`` and each boot's ``engine.log`` (traces are left out to keep
the folder small) into the output folder and replaces the recording home's path by the
placeholder ``@HOME@`` in every text column, so :func:`install` can put the store under any
home. Usage: ``python tests/data/stores/record.py [OUT]`` (default: ``real-run`` beside
this file).
"""

from __future__ import annotations

import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
PLACEHOLDER = "@HOME@"


def _text_columns(db: sqlite3.Connection) -> list[tuple[str, str]]:
    """(table, column) of every TEXT/JSON column of the store's ordinary tables."""
    out = []
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' AND sql NOT LIKE "
                                       "'%VIRTUAL%' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '%_fts%'")]
    for t in tables:
        for _cid, col, typ, *_ in db.execute(f'PRAGMA table_info("{t}")'):
            if typ.upper() in ("TEXT", "JSON", "VARCHAR") or typ.upper().startswith("VARCHAR"):
                out.append((t, col))
    return out


def rewrite_paths(db_file: Path, old: str, new: str) -> int:
    """Replace ``old`` by ``new`` in every text column of the SQLite file; returns rows changed."""
    db = sqlite3.connect(db_file)
    try:
        n = 0
        for t, c in _text_columns(db):
            cur = db.execute(f'UPDATE "{t}" SET "{c}" = replace("{c}", ?, ?) WHERE instr("{c}", ?) > 0',
                             (old, new, old))
            n += cur.rowcount
        db.commit()
        return n
    finally:
        db.close()


def install(recorded: Path, home: Path) -> Path:
    """Copy a recorded store folder into ``home`` (the store, the boots' logs) and point its paths there.

    Returns the store file. ``home`` must exist and hold no ``dynocell.db`` yet.
    """
    home = Path(home)
    shutil.copy2(recorded / "dynocell.db", home / "dynocell.db")
    if (recorded / "boots").is_dir():
        shutil.copytree(recorded / "boots", home / "boots", dirs_exist_ok=True)
    rewrite_paths(home / "dynocell.db", PLACEHOLDER, str(home))
    return home / "dynocell.db"


def _dynocell(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess:
    print("$ dynocell", " ".join(args), flush=True)
    p = subprocess.run([sys.executable, "-m", "dynocell", *args], env=env, cwd=REPO, text=True,
                       capture_output=True, timeout=900)
    print(p.stdout[-1500:], p.stderr[-1500:], sep="\n", flush=True)
    if check and p.returncode != 0:
        raise SystemExit(f"dynocell {' '.join(args)} exited {p.returncode}")
    return p


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "real-run"
    home = Path(tempfile.mkdtemp(prefix="dynocell-record-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNOCELL_")}
    env.update(DYNOCELL_HOME=str(home), TZ="UTC", NO_COLOR="1", COLUMNS="120")
    t0 = time.monotonic()
    _dynocell(env, "init")
    _dynocell(env, "run")
    _dynocell(env, "run", str(REPO / "examples" / "tiny-ngram.toml"), "--no-lossless-check")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        cfg = home / "plain-taken-port.toml"
        cfg.write_text((REPO / "examples" / "tiny-plain.toml").read_text().replace("port = 0", f"port = {port}"))
        _dynocell(env, "boot", str(cfg), check=False)
    _dynocell(env, "ps", "--all", check=False)
    if out.exists():
        shutil.rmtree(out)
    (out / "boots").mkdir(parents=True)
    src = sqlite3.connect(home / "dynocell.db")
    dst = sqlite3.connect(out / "dynocell.db")
    src.backup(dst)  # a consistent copy without the WAL side files
    src.close()
    dst.execute("VACUUM")
    dst.close()
    for log in sorted((home / "boots").glob("*/engine.log")):
        (out / "boots" / log.parent.name).mkdir()
        shutil.copy2(log, out / "boots" / log.parent.name / "engine.log")
    n = rewrite_paths(out / "dynocell.db", str(home), PLACEHOLDER)
    print(f"recorded into {out} in {time.monotonic() - t0:.0f} s ({n} path values rewritten to {PLACEHOLDER})")
    shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
