"""The test cell: settings plus the store, handed as first argument to every procedure.

Faces build one :class:`Cell` at their edge (``open_cell(load_settings())``)
and pass it down; procedures never read the environment or open their own
store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dynocell.db.session import (
    Store,
    head_revision,
    open_snapshot,
    open_store_checked,
    peek_revision,
    refuse_empty_file,
    short_revision,
    sqlite_file,
)
from dynocell.errors import UserError
from dynocell.fsmodes import foreign_control, mode_of, private_dir, tighten
from dynocell.settings import Settings, redact_url


@dataclass
class Cell:
    """One dynocell data directory and its store.

    ``store`` is opened (and migrated to head) lazily on first access, so
    commands that do not touch the database never create it. ``read_only``
    (set by commands that only read: ``runs``, ``show``, ``ps``, ``logs``): a
    store named by ``DYNOCELL_DATABASE_URL`` in a directory that does not exist
    is an error, not a directory made on the spot, and a SQLite store at an older schema is never migrated:
    it is read from a migrated private copy (:func:`~dynocell.db.session.open_snapshot`) with a note in
    ``notes`` (``store at 0002; `dynocell init` upgrades it``). ``snapshot`` (``dynocell --store PATH``):
    the store is always read that way, whatever its schema, and never written.

    ``notes``: what a face should tell the person about how the store was opened (one sentence each).
    ``creating`` (set by :func:`init`): a 0-byte SQLite file may become the store; any other opening refuses
    one (:func:`~dynocell.db.session.refuse_empty_file`).
    """

    settings: Settings
    read_only: bool = False
    snapshot: bool = False
    creating: bool = False
    notes: list[str] = field(default_factory=list)
    _store: Store | None = field(default=None, repr=False)

    @property
    def store(self) -> Store:
        """The migrated :class:`~dynocell.db.session.Store` at ``settings.db_url``.

        Raises :class:`~dynocell.errors.UserError` when the URL is invalid or the
        database cannot be opened.
        """
        if self._store is None:
            if self.read_only:
                _refuse_missing_folder(self.settings)
            self._store = self._open()
        return self._store

    def _open(self) -> Store:
        url = self.settings.db_url
        if not self.creating:
            refuse_empty_file(url)
        path = sqlite_file(url)
        if path is not None and not self.snapshot and self.read_only and path.is_file():
            revision = peek_revision(path)
            if revision is None or revision == head_revision():
                return _open(self.settings)  # new, foreign or current: opened as every command opens it
        elif not self.snapshot:
            return _open(self.settings)
        store = open_snapshot(url)
        rev = store.source_revision
        if rev != head_revision():
            self.notes.append(f"store at {short_revision(rev)}; `dynocell init` upgrades it (read here from a "
                              "migrated copy: the file is not changed)")
        return store


def _refuse_missing_folder(settings: Settings) -> None:
    """UserError when ``database_url`` (set explicitly) is a SQLite file whose directory does not exist:
    a read-only command must not create ``/nonexistent/...`` for a mistyped URL."""
    url = settings.database_url or ""
    if not url.startswith("sqlite:///") or url.startswith("sqlite:///file:"):
        return  # the default store in the data directory, another backend, or a SQLite URI
    path = Path(url.removeprefix("sqlite:///").split("?", 1)[0])
    if not path.parent.is_dir():
        raise UserError(f"database_url: no store at {path}: its directory {path.parent} does not exist",
                        "fix DYNOCELL_DATABASE_URL (or unset it to use the store in the data directory); "
                        "`dynocell init` creates a new store at that URL")


def refuse_foreign_home(settings: Settings) -> None:
    """UserError when another local user controls the data directory, its secrets folder or the SQLite store
    file (:func:`dynocell.fsmodes.foreign_control`): they could swap in a store whose configs run their code.
    ``dynocell init`` first takes group and other bits off a data directory this user owns."""
    store = sqlite_file(settings.db_url)
    for path in (settings.home, settings.secrets_dir, store):
        why = foreign_control(path) if path is not None else None
        if why:
            raise UserError(f"data directory: {why}; another user could replace the store",
                            f"point DYNOCELL_HOME at a folder only you can write (or unset it: the default is yours), "
                            f"or `chmod go-w {path}` if you own it")


def _open(settings: Settings) -> Store:
    refuse_foreign_home(settings)
    return open_store_checked(settings.db_url, settings.home)


def open_cell(settings: Settings) -> Cell:
    """A :class:`Cell` over ``settings`` (nothing is opened until used)."""
    return Cell(settings=settings)


def init(cell: Cell) -> dict[str, Any]:
    """Create the data directory tree and migrate the store to head.

    The data directory and its folders are created 0700 and the SQLite store 0600 (:mod:`dynocell.fsmodes`);
    an existing data directory this user owns loses its group and other bits (``home_tightened``).

    Returns ``{home, home_mode, home_tightened, db_url (password hidden), store (sqlite | postgresql),
    boots_dir, models_dir, builds_dir, revision_before,
    revision, head, migrated}`` (``revision_before`` None for a new store).
    Raises UserError when a directory cannot be created or the store opened.
    """
    s = cell.settings
    try:
        existed = s.home.exists()
        for d in (s.home, s.boots_dir, s.models_dir, s.builds_dir):
            private_dir(d)
        tightened = existed and tighten(s.home)
    except OSError as exc:
        raise UserError(
            f"cannot create the data directory {s.home}: {exc.strerror}", "set DYNOCELL_HOME to a writable directory"
        ) from exc
    cell.creating = True  # the one opening that may make a store of an empty file
    store = cell.store
    return {
        "home": str(s.home),
        "home_mode": mode_of(s.home),
        "home_tightened": tightened,
        "db_url": redact_url(s.db_url),
        "store": s.store_kind,
        "boots_dir": str(s.boots_dir),
        "models_dir": str(s.models_dir),
        "builds_dir": str(s.builds_dir),
        "revision_before": store.revision_before,
        "revision": store.revision,
        "head": head_revision(),
        "migrated": store.revision_before != store.revision,
    }
