"""Engine, sessions and migrate-to-head for the store.

SQLite gets WAL, foreign keys and a busy timeout on every connection; the
schema is brought to Alembic head on first use (:func:`open_store`). Any
SQLAlchemy URL works; the pragmas apply only to SQLite.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
BUSY_TIMEOUT_MS = 30_000
_lock = threading.Lock()
_stores: dict[str, "Store"] = {}
FTS_TABLES = ("runbook_fts",)


def include_object(obj, name, type_, reflected, compare_to) -> bool:  # noqa: ANN001 - Alembic hook
    """Alembic autogenerate filter: leave the FTS5 virtual table and its shadow tables out.

    They are created by raw SQL in the migrations (SQLAlchemy has no model for a
    virtual table), so autogenerate would otherwise propose dropping them.
    """
    if type_ == "table" and name and name.startswith(FTS_TABLES):
        return False
    return True


def _sqlite_pragmas(dbapi_conn, _record) -> None:  # noqa: ANN001 - DBAPI types
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def make_engine(url: str) -> Engine:
    """A SQLAlchemy engine for ``url``; for SQLite, pragmas are set on each connection."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_MS / 1000, "check_same_thread": False})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True)


def alembic_config(url: str) -> AlembicConfig:
    """An Alembic config pointing at the bundled migrations and ``url``."""
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def current_revision(engine: Engine) -> str | None:
    """The store's Alembic revision (None for an empty database)."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision() -> str:
    """The newest bundled migration's revision id."""
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head() or ""


def migrate(engine: Engine) -> tuple[str | None, str]:
    """Upgrade the database behind ``engine`` to head; returns (revision before, revision after).

    For a SQLite file, concurrent first uses (a CLI, the web panel and a
    supervisor process starting together) are serialised with an exclusive
    lock on ``<db>.migrate.lock`` and the revision is re-read under it, so two
    processes never both create the schema.
    """
    head = head_revision()
    before = current_revision(engine)
    if before == head:
        return before, head
    with _migration_lock(engine):
        before = current_revision(engine)
        if before != head:
            cfg = alembic_config(str(engine.url.render_as_string(hide_password=False)))
            with engine.begin() as conn:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
    return before, head


@contextmanager
def _migration_lock(engine: Engine) -> Iterator[None]:
    db = engine.url.database if engine.url.get_backend_name() == "sqlite" else None
    if not db or db == ":memory:":
        yield
        return
    import fcntl

    with open(f"{db}.migrate.lock", "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class Store:
    """A migrated database: ``store.session()`` gives a short write transaction."""

    def __init__(self, url: str) -> None:
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self.url = url
        self.engine = make_engine(url)
        self.revision_before, self.revision = migrate(self.engine)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session committed on success and rolled back on error."""
        with self._sessions() as s:
            try:
                yield s
                s.commit()
            except BaseException:
                s.rollback()
                raise


def open_store(url: str) -> Store:
    """The process-wide :class:`Store` for ``url``, migrated to head on first use."""
    with _lock:
        store = _stores.get(url)
        if store is None:
            store = _stores[url] = Store(url)
        return store
