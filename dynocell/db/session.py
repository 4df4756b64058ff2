"""Engine, sessions and migrate-to-head for the store.

Two databases are supported: SQLite (the embedded default) and PostgreSQL
(``postgresql+psycopg://…``, psycopg 3) for a fleet sharing one store.
SQLite gets WAL, foreign keys and a busy timeout on every connection; the
schema is brought to Alembic head on first use (:func:`open_store`),
serialised between processes by a file lock (SQLite) or an advisory lock
(PostgreSQL).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, cast
from urllib.parse import quote

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.exc import DatabaseError, IntegrityError, InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from dynocell.errors import StoreUnavailable, UserError
from dynocell.fsmodes import private_dir, private_file
from dynocell.settings import redact_url  # a pure function; settings reads the environment only when built

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
BUSY_TIMEOUT_MS = 30_000
#: pg_advisory_lock key held while migrating a PostgreSQL store (any fixed bigint; "dynocell" in ASCII).
MIGRATE_LOCK_KEY = 0x64796E6F63656C6C
#: Seconds a PostgreSQL connection attempt may take before the store is reported unreachable.
PG_CONNECT_TIMEOUT_S = 10
#: Words of libpq / PostgreSQL messages that mean the server is not there (any more) or refuses us.
PG_GONE_WORDS = ("connection", "server closed", "terminating", "could not connect", "does not exist",
                 "authentication failed", "shutting down", "starting up", "timeout expired")
_lock = threading.Lock()
_stores: dict[str, "Store"] = {}
FTS_TABLES = ("runbook_fts",)


def include_object(obj, name, type_, reflected, compare_to) -> bool:  # noqa: ANN001 - Alembic hook
    """Alembic autogenerate filter: leave the FTS5 virtual table and its shadow tables out.

    They are created by raw SQL in the migrations (SQLAlchemy has no model for a
    virtual table), so autogenerate would otherwise propose dropping them.
    """
    return not (type_ == "table" and name and name.startswith(FTS_TABLES))


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
    if url.startswith("postgresql"):
        return create_engine(url, pool_pre_ping=True, connect_args={"connect_timeout": PG_CONNECT_TIMEOUT_S})
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
    _check_known(engine, before, head)
    if before is None:
        _refuse_foreign(engine)
    with _migration_lock(engine):
        before = current_revision(engine)
        if before != head:
            cfg = alembic_config(str(engine.url.render_as_string(hide_password=False)))
            with _schema_transaction(engine) as conn:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
    return before, head


@contextmanager
def _schema_transaction(engine: Engine) -> Iterator[Connection]:
    """One transaction around a whole upgrade, DDL included: an upgrade stopped half-way (a full
    disk, an error, a kill -9) leaves the store at the revision it had, never half-created.

    PostgreSQL's DDL is transactional as it is. Python's sqlite3 module (its legacy transaction
    control, "Transaction control" in its docs) runs CREATE/ALTER/DROP outside any transaction until
    an INSERT or UPDATE opens one, so a first migration stopped before its ``alembic_version`` row
    used to leave tables without a revision: a store every later command refused ("table configs
    already exists"). On this one connection the driver's own transaction handling is switched off
    and the upgrade runs in ``BEGIN IMMEDIATE`` … ``COMMIT`` (SQLAlchemy's pysqlite recipe
    "Serializable isolation / Savepoints / Transactional DDL"); the setting is restored before the
    connection goes back to the pool.
    """
    if engine.dialect.name != "sqlite":
        with engine.begin() as conn:
            yield conn
        return
    with engine.connect() as conn:
        # the pysqlite connection of a connection just opened: None only once it is closed or invalidated
        raw = cast(sqlite3.Connection, conn.connection.driver_connection)
        saved = raw.isolation_level
        raw.isolation_level = None
        try:
            conn.exec_driver_sql("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                _rollback(conn)
                raise
            conn.commit()
        finally:
            with contextlib.suppress(sqlite3.Error):
                raw.isolation_level = saved


def _where(url: str) -> str:
    return url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else url


def _check_known(engine: Engine, revision: str | None, head: str) -> None:
    """Refuse a store whose schema revision this dynocell does not know (written by a newer one)."""
    if revision is None:
        return
    try:
        known = ScriptDirectory.from_config(alembic_config("sqlite://")).get_revision(revision) is not None
    except Exception:  # noqa: BLE001 - alembic raises several kinds for an unknown id
        known = False
    if not known:
        where = _where(engine.url.render_as_string(hide_password=True))
        raise StoreUnavailable(
            f"the store {where} is at schema {revision}; this dynocell knows up to {head}: upgrade dynocell",
            "install the dynocell that wrote it (or newer); nothing in the store was changed",
        )


def _refuse_foreign(engine: Engine) -> None:
    """Refuse a database without a schema revision that already holds tables (another program's
    database, e.g. given through ``DYNOCELL_DATABASE_URL``, or a store an older dynocell left
    half-created): dynocell's tables are never added to it. An empty database is fine."""
    from sqlalchemy import inspect

    with engine.connect() as conn:
        tables = sorted(t for t in inspect(conn).get_table_names() if not t.startswith("sqlite_"))
    if tables:
        raise _foreign_error(_where(engine.url.render_as_string(hide_password=True)), tables)


def _refuse_foreign_file(url: str) -> None:
    """:func:`_refuse_foreign` for an existing SQLite file, read before dynocell's connection pragmas
    run (they would switch another program's database to WAL): a plain read-only sqlite3 look."""
    if not url.startswith("sqlite:///") or url.startswith("sqlite:///file:"):
        return
    path = Path(url.removeprefix("sqlite:///").split("?", 1)[0])
    if not path.is_file() or path.stat().st_size == 0:
        return
    try:
        con = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)
        try:
            names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        finally:
            con.close()
    except sqlite3.Error:
        return  # not readable this way (corrupt, read-only WAL): the store's own checks say why
    tables = sorted(n for n in names if not n.startswith("sqlite_"))
    if tables and "alembic_version" not in tables:
        raise _foreign_error(str(path), tables)


def _foreign_error(where: str, tables: list[str]) -> StoreUnavailable:
    shown = ", ".join(tables[:5]) + (f" and {len(tables) - 5} more" if len(tables) > 5 else "")
    return StoreUnavailable(
        f"the store {where} is corrupt or not a dynocell store: it holds {len(tables)} table(s) ({shown}) "
        "but no dynocell schema revision (alembic_version); nothing was written to it",
        f"move it aside (mv {where} {where}.corrupt) and run `dynocell init` if it is a store dynocell left "
        "half-made; if it is another program's database, point DYNOCELL_DATABASE_URL at an empty database or "
        "a dynocell store, or unset it to use the store in the data directory",
    )


def corrupt_store_error(url: str, exc: DatabaseError | InterfaceError) -> StoreUnavailable | None:
    """A :class:`~dynocell.errors.StoreUnavailable` for a store file SQLite cannot read as a
    database (not a database, malformed, truncated) or as a dynocell store (its tables there but no
    schema revision); None for any other error."""
    if isinstance(exc, IntegrityError):
        # a constraint (e.g. PostgreSQL's "Key (config_hash)=(…) already exists" when a concurrent writer
        # stored the same content-addressed row first): the caller's business, never a corrupt store
        return None
    text = str(getattr(exc, "orig", None) or exc)
    low = text.lower()
    # "table … already exists": tables without a schema revision (another program's database, or a first
    # migration an older dynocell left half-done)
    if not any(k in low for k in ("file is not a database", "malformed", "file is encrypted")) and not (
            "table" in low and "already exists" in low):
        return None
    where = _where(url)
    return StoreUnavailable(
        f"the store {where} is corrupt or not a dynocell store: SQLite says {text!r}",
        f"move it aside (mv {where} {where}.corrupt) and run `dynocell init` for a new store, or restore "
        "a backup; or point DYNOCELL_HOME (or DYNOCELL_DATABASE_URL) at another store",
    )


@contextmanager
def _migration_lock(engine: Engine) -> Iterator[None]:
    db = engine.url.database if engine.url.get_backend_name() == "sqlite" else None
    if engine.url.get_backend_name() == "postgresql":
        # A session-level advisory lock (PostgreSQL manual, "Advisory Locks"): every dynocell
        # process migrating this database waits here for the first one.
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": MIGRATE_LOCK_KEY})
            conn.commit()
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATE_LOCK_KEY})
                conn.commit()
        return
    if not db or db == ":memory:":
        yield
        return
    import fcntl

    with open(f"{db}.migrate.lock", "a+") as f:
        private_file(Path(f.name))
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def store_error(url: str, exc: OperationalError | InterfaceError) -> StoreUnavailable | None:
    """A :class:`~dynocell.errors.StoreUnavailable` naming the store and the fix for an error a
    person can act on: SQLite read-only, disk full, locked too long; PostgreSQL unreachable or gone
    away (server down, connection refused or cut). None for anything else. Passwords are redacted."""
    msg = str(getattr(exc, "orig", None) or exc)
    low = msg.lower()
    where = url.removeprefix("sqlite:///") if url.startswith("sqlite:///") else redact_url(url)
    if url.startswith("postgresql"):
        if not (exc.connection_invalidated or any(w in low for w in PG_GONE_WORDS)):
            return None
        first = msg.strip().splitlines()[0] if msg.strip() else type(exc).__name__
        return StoreUnavailable(
            f"the PostgreSQL store {where} is unreachable or went away: {first}",
            "check that the server runs and DYNOCELL_DATABASE_URL (host, port, database, user) is right; "
            "the transaction in progress was rolled back, so nothing was written half")
    if "readonly" in low or "read-only" in low:
        if "mode=ro" in url:
            return StoreUnavailable(f"the store {where} is opened read-only (mode=ro in the URL): {msg}",
                                    "drop mode=ro from DYNOCELL_DATABASE_URL for commands that write")
        folder = Path(where).parent if url.startswith("sqlite:///") else None
        return StoreUnavailable(f"the store {where} is read-only: {msg}",
                                f"make {where}" + (f" and its directory {folder}" if folder else "")
                                + " writable by this user, or point DYNOCELL_HOME (or DYNOCELL_DATABASE_URL)"
                                " at a writable location")
    if "disk is full" in low or "disk full" in low:
        return StoreUnavailable(f"the disk holding the store {where} is full: {msg}",
                                "free space on that disk (df -h), or point DYNOCELL_HOME at another disk")
    if "database is locked" in low:
        return StoreUnavailable(f"the store {where} stayed locked by another process for "
                                f"{BUSY_TIMEOUT_MS // 1000} s: {msg}",
                                "another process holds a long write transaction on it; retry when it is done")
    return None


def read_only_urls(url: str, *, force: bool = False) -> list[str]:
    """The URLs to open a SQLite store file this user cannot write (the file or its folder read-only:
    read-only media, ``chattr +i``, another user's store) for reading; empty for any other URL.

    A WAL store needs its ``-shm`` file: ``mode=ro`` opens it while ``-shm`` exists or can be made
    (another process has the store open); else only ``immutable=1`` does (SQLite "URI filenames"),
    which reads the database file alone — right on read-only media, where nothing can write it. ``force``: these
    URLs for any existing SQLite file (a store opened read-only on purpose)."""
    if not url.startswith("sqlite:///") or url.startswith("sqlite:///file:") or "?" in url:
        return []
    path = Path(url.removeprefix("sqlite:///"))
    if not path.is_file() or (not force and os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)):
        return []
    uri = f"sqlite:///file:{quote(str(path.resolve()))}"
    return [f"{uri}?mode=ro&uri=true", f"{uri}?mode=ro&immutable=1&uri=true"]


def refuse_empty_file(url: str) -> None:
    """Raise StoreUnavailable when ``url`` names a SQLite file of 0 bytes: dynocell never leaves one (a new store
    file is made non-empty before it gets its name, :func:`_make_file`), so a 0-byte store is a truncated file or
    another program's, and opening it would silently start a new, empty store in its place (issue 32, item 17).
    ``dynocell init`` (the one command that makes a store on purpose) does not call this."""
    path = sqlite_file(url)
    if path is not None and path.is_file() and path.stat().st_size == 0:
        raise StoreUnavailable(f"the store file {path} is empty (0 bytes): not a dynocell store (truncated, or "
                               "made by another program), so nothing is read from it or written to it",
                               "restore it from a backup; or, to start a new store there, run `dynocell init` "
                               "(or remove the file)")


def _make_file(path: Path) -> None:
    """Create the SQLite file ``path`` when it does not exist, already non-empty: a database in WAL mode (its
    header page written) made under a private name and linked into place, so no process ever sees a 0-byte
    store file of dynocell's (:func:`refuse_empty_file`); a file another process linked first is kept."""
    if path.exists():
        return
    import secrets

    tmp = path.with_name(f".{path.name}.new-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        con = sqlite3.connect(tmp)
        try:
            con.execute("PRAGMA journal_mode=WAL")
        finally:
            con.close()
        private_file(tmp)  # 0600 before it is linked into place: configs in it carry environment values
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    except (OSError, sqlite3.Error):
        return  # a filesystem without hard links (or a folder we cannot write): SQLite makes the file as before
    finally:
        for p in (tmp, tmp.with_name(tmp.name + "-wal"), tmp.with_name(tmp.name + "-shm")):
            with contextlib.suppress(OSError):
                p.unlink()


def sqlite_file(url: str) -> Path | None:
    """The file of a plain SQLite URL (``sqlite:///PATH``), None for any other URL (PostgreSQL, a SQLite URI)."""
    if not url.startswith("sqlite:///") or url.startswith("sqlite:///file:") or "?" in url:
        return None
    return Path(url.removeprefix("sqlite:///"))


def peek_revision(path: Path) -> str | None:
    """The Alembic revision recorded in the SQLite file at ``path``, read with ``immutable=1`` (SQLite "URI
    filenames": no lock taken, no ``-wal``/``-shm`` made, nothing written, even in a WAL store); None when
    the file has no ``alembic_version`` table (a new, empty or foreign database) or cannot be read as one."""
    try:
        con = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro&immutable=1", uri=True)
        try:
            row = con.execute("SELECT version_num FROM alembic_version").fetchone()
        finally:
            con.close()
    except sqlite3.Error:
        return None
    return row[0] if row else None


def short_revision(revision: str | None) -> str:
    """A revision as notes name it: its number (``0008_s24phase_phases`` → ``0008``); ``none`` for None."""
    return revision.split("_", 1)[0] if revision else "none"


def open_snapshot(url: str) -> "Store":
    """A read-only :class:`Store` over a private copy of the SQLite store file of ``url``, migrated to head there.

    The file itself is only read, byte for byte: its contents, mtime and folder stay as they were (no
    ``-wal``, ``-shm`` or ``.migrate.lock`` next to it, which even a read-only SQLite open of a WAL store
    makes). The copy lives in a private temporary directory (0700) removed when the process exits; its
    ``-wal``, when the store has one, is copied with it. ``store.source_url`` is ``url`` and
    ``store.source_revision`` the revision the file is at. Writes are refused (the store is read-only).
    Raises UserError when ``url`` is no SQLite file or the file is missing or empty.
    """
    import atexit
    import shutil
    import tempfile

    src = sqlite_file(url)
    if src is None:
        raise UserError(f"--store: {redact_url(url)} is not a SQLite store file",
                        "give the path of a dynocell.db (a PostgreSQL store is read through DYNOCELL_DATABASE_URL)")
    if not src.is_file():
        from dynocell.errors import not_a_file

        raise UserError(f"--store: {src}: {not_a_file(src, 'store file')}", "give the path of a dynocell.db")
    if src.stat().st_size == 0:
        raise UserError(f"--store: {src} is empty (0 bytes): not a dynocell store", "give the path of a dynocell.db")
    work = Path(tempfile.mkdtemp(prefix="dynocell-snapshot-"))
    atexit.register(shutil.rmtree, work, True)
    copy = work / "dynocell.db"
    shutil.copyfile(src, copy)
    wal = src.with_name(src.name + "-wal")
    if wal.is_file():
        shutil.copyfile(wal, copy.with_name(copy.name + "-wal"))
    revision = peek_revision(copy)
    copy_url = f"sqlite:///{copy}"
    Store(copy_url).engine.dispose()  # migrate the copy to head
    store = Store(copy_url, read_only=True)
    store.url = url  # errors name the file the user gave
    store.source_url, store.source_revision = url, revision
    return store


class Store:
    """A migrated database: ``store.session()`` gives a short write transaction.

    A SQLite store file this user cannot write is opened read-only (:func:`read_only_urls`;
    ``read_only`` True): reading commands work, a write is refused naming the store and the fix.
    ``read_only=True`` opens a SQLite store file that way whoever may write it, and never migrates it
    (UserError when it is not at head; :func:`open_snapshot` reads any revision)."""

    source_url: str | None = None
    source_revision: str | None = None

    def __init__(self, url: str, *, read_only: bool = False) -> None:
        if url.startswith("sqlite:///"):
            private_dir(Path(url.removeprefix("sqlite:///")).parent)
        self.url = url
        if (path := sqlite_file(url)) is not None and not read_only:
            _make_file(path)
        _refuse_foreign_file(url)
        tries = read_only_urls(url, force=read_only) or [url]
        self.read_only = tries[0] != url
        for n, engine_url in enumerate(tries, 1):
            self.engine = make_engine(engine_url)
            try:
                if read_only:
                    self.revision_before = self.revision = current_revision(self.engine)
                    if self.revision != head_revision():
                        self.engine.dispose()
                        raise UserError(f"the store at {redact_url(url)} is at {short_revision(self.revision)}, "
                                        f"not {short_revision(head_revision())}, and is opened read-only",
                                        "`dynocell init` upgrades it (or read it with --store PATH)")
                elif self.read_only:  # a file this user cannot write: read it as it is, never migrate
                    self.revision_before = self.revision = current_revision(self.engine)
                    if self.revision != head_revision():
                        self.engine.dispose()
                        folder = Path(url.removeprefix("sqlite:///")).parent
                        raise StoreUnavailable(
                            f"the store {Path(url.removeprefix('sqlite:///'))} is at "
                            f"{short_revision(self.revision)}, not {short_revision(head_revision())}, and "
                            "this user cannot write it (its file or folder is read-only)",
                            f"make {folder} and its dynocell.db* files writable, then `dynocell init` "
                            "upgrades it; reading commands work as they are")
                else:
                    self.revision_before, self.revision = migrate(self.engine)
                break
            except OperationalError as exc:
                if n < len(tries) and "unable to open" in str(exc).lower():
                    self.engine.dispose()  # mode=ro cannot make -shm: open it immutable
                    continue
                raise self._translated(exc) from exc
            except DatabaseError as exc:
                raise self._translated(exc) from exc
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    def _translated(self, exc: DatabaseError) -> BaseException:
        """The clear error for a store that cannot be opened or migrated, or ``exc`` itself."""
        translated = corrupt_store_error(self.url, exc) or (
            store_error(self.url, exc) if isinstance(exc, OperationalError) else None)
        return translated or exc

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session committed on success and rolled back on error.

        Errors a person can act on (a read-only SQLite store, a full disk, a lock
        held past the busy timeout, a PostgreSQL server gone away mid-transaction) are raised as
        :class:`~dynocell.errors.StoreUnavailable` naming the store and the fix.
        """
        with self._sessions() as s:
            try:
                yield s
                s.commit()
            except (DatabaseError, InterfaceError) as exc:
                _rollback(s)
                translated = corrupt_store_error(self.url, exc) or (
                    store_error(self.url, exc) if isinstance(exc, (OperationalError, InterfaceError)) else None)
                if translated is None:
                    raise
                raise translated from exc
            except BaseException:
                s.rollback()
                raise


def _rollback(s: Session | Connection) -> None:
    # the connection may be unusable (read-only, disk full); the error being raised says why
    with contextlib.suppress(OperationalError, InterfaceError):
        s.rollback()


def open_store(url: str) -> Store:
    """The process-wide :class:`Store` for ``url``, migrated to head on first use."""
    with _lock:
        store = _stores.get(url)
        if store is None:
            store = _stores[url] = Store(url)
        return store


def close_store(url: str) -> None:
    """Forget the process-wide :class:`Store` for ``url`` and close its connections (no-op if none)."""
    with _lock:
        store = _stores.pop(url, None)
    if store is not None:
        store.engine.dispose()


POSTGRES_URL_SHAPE = "postgresql+psycopg://USER:PASSWORD@HOST:5432/DB"


def open_store_checked(url: str, home: Path) -> Store:
    """:func:`open_store` with every failure a person can act on raised as
    :class:`~dynocell.errors.UserError` / :class:`~dynocell.errors.StoreUnavailable` naming the fix:
    an unsupported scheme, a malformed URL, an unreadable or unwritable SQLite file (``home``: the data
    directory named in the hint), a missing driver, an unusable directory."""
    from sqlalchemy.exc import ArgumentError

    scheme = url.split("://", 1)[0] if "://" in url else None
    if scheme is not None and scheme.split("+", 1)[0] not in ("sqlite", "postgresql"):
        raise UserError(f"database_url: {scheme}:// is not a store dynocell supports (SQLite or PostgreSQL)",
                        f"set DYNOCELL_DATABASE_URL={POSTGRES_URL_SHAPE}, or unset it to use the SQLite "
                        "file in the data directory")
    try:
        return open_store(url)
    except ArgumentError as exc:
        raise UserError(f"database_url is not a valid SQLAlchemy URL: {redact_url(url)!r} ({exc})",
                        "fix DYNOCELL_DATABASE_URL, or unset it to use the SQLite file in the data directory") from exc
    except OperationalError as exc:
        translated = store_error(url, exc)
        if translated is not None:
            raise translated from exc
        folder = Path(url.removeprefix("sqlite:///")).parent if url.startswith("sqlite:///") else home
        raise StoreUnavailable(f"cannot open the store at {redact_url(url)}: {exc.orig}",
                               f"make {folder} writable by this user, or set DYNOCELL_HOME to a writable "
                               "directory (dynocell settings shows where the store lives)") from exc
    except ModuleNotFoundError as exc:
        if scheme is not None and scheme.startswith("postgresql"):
            raise UserError(f"the database driver for {scheme}:// is not installed ({exc.name})",
                            f"write the URL as {POSTGRES_URL_SHAPE} (psycopg 3 comes with dynocell)") from exc
        raise UserError(f"the database driver for {url.split(':', 1)[0]} is not installed ({exc.name})",
                        f"pip install {exc.name} (or a driver matching the URL), "
                        "or unset DYNOCELL_DATABASE_URL") from exc
    except OSError as exc:
        raise UserError(f"cannot use the data directory {home}: {exc.strerror or exc}",
                        "set DYNOCELL_HOME to a writable directory (then: dynocell init)") from exc
