"""A store whose migration stopped half-way (a full disk, an error, a kill -9) is left at the revision
it had, so the next command finishes it; before, a first migration stopped after its first tables
left a store every later command refused ("table configs already exists").

Found by the newcomer pass: `dynocell init` on a 300 KiB tmpfs (disk full at the first migration),
then every command, `init` included, failed even once space was freed. The full disk is made here
with SQLite's own `PRAGMA max_page_count` on the real bundled migrations.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import event, inspect
from sqlalchemy.exc import OperationalError

from dynocell.db.session import close_store, head_revision, make_engine, migrate, open_store

#: Pages a 4 KiB-page store may grow to: a few tables of the first migration fit, the rest do not.
FULL_AFTER_PAGES = 12


def _full_disk_engine(url: str):  # noqa: ANN202 - a SQLAlchemy Engine
    engine = make_engine(url)
    event.listen(engine, "connect", lambda dbapi, _rec: dbapi.execute(f"PRAGMA max_page_count={FULL_AFTER_PAGES}"))
    return engine


def test_a_first_migration_stopped_by_a_full_disk_leaves_no_half_store(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'dynocell.db'}"
    engine = _full_disk_engine(url)
    with pytest.raises(OperationalError, match="full"):
        migrate(engine)
    engine.dispose()

    plain = make_engine(url)
    assert [t for t in inspect(plain).get_table_names() if t != "alembic_version"] == []
    plain.dispose()

    try:
        store = open_store(url)  # space back: the next command migrates the store to head
        assert store.revision == head_revision()
        assert {"configs", "runs", "boots"} <= set(inspect(store.engine).get_table_names())
    finally:
        close_store(url)


def test_the_connection_of_a_migration_goes_back_to_the_pool_with_implicit_transactions(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'dynocell.db'}"
    try:
        store = open_store(url)
        with store.engine.connect() as conn:
            assert conn.connection.driver_connection.isolation_level == ""
    finally:
        close_store(url)


def test_a_store_with_tables_but_no_revision_is_named_with_the_fix(cli_env, isolated_home: Path):
    """A store an older dynocell left half-created (or another program's tables in the file): an
    `Error:` saying what it is and to move it aside; it said "make the directory writable"."""
    import shutil
    import sqlite3
    import subprocess
    import sys

    db = isolated_home / "dynocell.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE configs (hash TEXT PRIMARY KEY)")
    exe = shutil.which("dynocell", path=str(Path(sys.executable).parent))
    proc = subprocess.run([exe, "init"], env=cli_env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"Error: the store {db} is corrupt or not a dynocell store"), proc.stderr
    assert f"hint: move it aside (mv {db} {db}.corrupt)" in proc.stderr
    with sqlite3.connect(db) as conn:  # nothing of it was changed
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")] == ["configs"]
