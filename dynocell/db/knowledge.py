"""Small read/write functions for runbook entries, their FTS5 index, notes (the one writer) and findings.

Every function takes a :class:`~dynocell.db.session.Store` and plain values and returns records
(:class:`EntryRow`, :class:`NoteRow`, :class:`FindingRow`, :class:`SearchHit`, frozen
:class:`~dynocell.db.rows.Record`), never ORM objects or plain dicts. The doctor reads a run's rows where
every other caller does: :mod:`dynocell.db.runs` (runs, curves, bench rows, goldens) and
:mod:`dynocell.db.configs`. The full-text index ``runbook_fts(slug, title, tags, body)`` (SQLite FTS5 or
PostgreSQL ``tsvector``) is kept and queried through :mod:`dynocell.db.fulltext`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select

from dynocell.db import fulltext
from dynocell.db.rows import Record, get_as
from dynocell.db.tables import Finding, Note, RunbookEntry, utcnow
from dynocell.errors import UserError

# ------------------------------------------------------------------ entries

def upsert_entries(store: Any, rows: list[dict[str, Any]], replace_all: bool = False) -> int:
    """Insert or update entries by slug and mirror them into ``runbook_fts``.

    ``rows``: dicts with slug, title, kind, tags (list), origin, source_path,
    sha256, front_matter (dict), body. With ``replace_all`` rows whose slug is
    not in ``rows`` are deleted. Unchanged rows (same sha256 and origin) are
    left as they are. Returns the number of rows given.
    """
    with store.session() as s:
        existing = {e.slug: e for e in s.scalars(select(RunbookEntry))}
        wanted = {r["slug"] for r in rows}
        changed: list[dict[str, Any]] = []
        for r in rows:
            cur = existing.get(r["slug"])
            if cur is not None and cur.sha256 == r["sha256"] and cur.origin == r["origin"] \
                    and cur.source_path == r["source_path"]:
                continue
            if cur is None:
                s.add(RunbookEntry(**r, indexed_at=utcnow()))
            else:
                for k, v in r.items():
                    setattr(cur, k, v)
                cur.indexed_at = utcnow()
            changed.append(r)
        stale = [slug for slug in existing if slug not in wanted] if replace_all else []
        if stale:
            s.execute(delete(RunbookEntry).where(RunbookEntry.slug.in_(stale)))
        fts_slugs = fulltext.indexed_slugs(s)
        final = (set(existing) - set(stale)) | wanted
        changed_slugs = {r["slug"] for r in changed}
        # Rows missing from the index (e.g. a crash between writes) are re-indexed too.
        to_index = changed + [r for r in rows if r["slug"] not in fts_slugs and r["slug"] not in changed_slugs]
        fulltext.reindex(s, (fts_slugs - final) | {r["slug"] for r in to_index},
                         [{"slug": r["slug"], "title": r["title"], "tags": " ".join(r.get("tags") or []),
                           "body": r["body"] + "\n" + _front_matter_text(r.get("front_matter") or {})}
                          for r in to_index])
    return len(rows)


def _front_matter_text(fm: dict[str, Any]) -> str:
    """Evidence and fix lines (searchable) from front matter."""
    parts: list[str] = []
    for key in ("evidence", "fix"):
        val = fm.get(key)
        if isinstance(val, list):  # evidence items are {fact, source} maps: index the fact's words
            parts.extend(str(v["fact"]) if isinstance(v, dict) and "fact" in v else str(v) for v in val)
        elif isinstance(val, str):
            parts.append(val)
    return "\n".join(parts)


@dataclass(frozen=True)
class EntryRow(Record):
    """One row of ``runbook_entries``: a runbook entry as indexed (``tags`` a list, ``front_matter`` the
    parsed YAML mapping, ``origin`` bundled | operator, ``sha256`` of its file, ``indexed_at`` UTC)."""

    slug: str
    title: str
    kind: str
    tags: list[Any]
    origin: str
    source_path: str
    sha256: str
    front_matter: dict[str, Any]
    body: str
    indexed_at: datetime


@dataclass(frozen=True)
class NoteRow(Record):
    """One row of ``notes``: ``text`` attached to ``(target_kind, target_id)`` at ``created_at`` (UTC)."""

    id: int
    target_kind: str
    target_id: str
    text: str
    created_at: datetime


@dataclass(frozen=True)
class FindingRow(Record):
    """One row of ``findings``: a doctor finding (``rule``, ``severity`` error | warning | info,
    ``message``, ``evidence`` dict, ``entries`` runbook slugs) on a run and/or boot, ``created_at`` UTC."""

    id: int
    run_id: str | None
    boot_id: str | None
    rule: str
    severity: str
    message: str
    evidence: dict[str, Any]
    entries: list[Any]
    created_at: datetime


@dataclass(frozen=True)
class SearchHit(Record):
    """One full-text hit over ``runbook_fts``: the entry's ``slug``, ``title`` and ``kind``, its ``relevance``
    (1.0 for the best hit of the search, smaller for less relevant ones: SQLite FTS5 ``bm25`` or PostgreSQL
    ``ts_rank_cd`` over the best hit's, :mod:`dynocell.db.fulltext`) and a ``snippet`` of its body cut at words,
    with the matched words in ``[`` ``]``."""

    slug: str
    title: str
    kind: str
    relevance: float
    snippet: str


def get_entry(store: Any, slug: str) -> EntryRow | None:
    """The stored entry ``slug``, or None."""
    return get_as(store, RunbookEntry, slug, EntryRow.of)


def list_entries(store: Any) -> list[EntryRow]:
    """Every stored entry, by slug."""
    with store.session() as s:
        return [EntryRow.of(e) for e in s.scalars(select(RunbookEntry).order_by(RunbookEntry.slug))]


def search_entries(store: Any, query: str, limit: int = 10, *, any_word: bool = False) -> list[SearchHit]:
    """Search the index for entries holding every word of ``query`` (or any of them with ``any_word``).

    Returns :class:`SearchHit` records, best first. No hit is no hit: an all-words search never falls back to
    any-word (``zzzz nothing`` finding ten unrelated entries read as an answer). Query words are reduced to
    letters and digits, so search syntax characters in ``query`` are inert.
    """
    if not fulltext.terms(query):
        return []
    with store.session() as s:
        return [SearchHit(**h) for h in fulltext.search(s, store.engine.dialect.name, query, any_word, limit)]


# ------------------------------------------------------------------ notes

NOTE_KINDS = ("config", "boot", "run", "entry", "experiment")
"""What a note can be attached to."""

MAX_NOTE_CHARS = 20_000


def add_note(store: Any, target_kind: str, target_id: str, note_text: str) -> NoteRow:
    """Store a note on ``(target_kind, target_id)`` with the current UTC time; returns it.
    The one writer of notes (CLI, web, bisect).

    Raises UserError for an unknown kind, an empty text (after stripping) or more than
    :data:`MAX_NOTE_CHARS` characters; nothing is written then.
    """
    text = (note_text or "").strip()
    if target_kind not in NOTE_KINDS:
        raise UserError(f"note target kind {target_kind!r} is unknown", "use " + ", ".join(NOTE_KINDS))
    if not text:
        raise UserError("note text is empty", "write something")
    if len(text) > MAX_NOTE_CHARS:
        raise UserError(f"note is longer than {MAX_NOTE_CHARS} characters", "shorten it or link a file")
    with store.session() as s:
        n = Note(target_kind=target_kind, target_id=target_id, text=text, created_at=utcnow())
        s.add(n)
        s.flush()
        return NoteRow.of(n)


def list_notes(store: Any, target_kind: str | None = None, target_id: str | None = None) -> list[NoteRow]:
    """Notes, oldest first, optionally of one target."""
    with store.session() as s:
        q = select(Note).order_by(Note.created_at, Note.id)
        if target_kind:
            q = q.where(Note.target_kind == target_kind)
        if target_id:
            q = q.where(Note.target_id == target_id)
        return [NoteRow.of(n) for n in s.scalars(q)]


# ------------------------------------------------------------------ findings

def save_findings(store: Any, findings: list[dict[str, Any]], run_id: str | None = None,
                  boot_id: str | None = None, replace: bool = True) -> list[int]:
    """Store doctor findings (dicts with rule, severity, message, evidence, entries) on a run and/or boot.

    With ``replace`` earlier findings of the same run (or, without a run, the
    same boot) are deleted first, so re-diagnosing does not duplicate. Returns the new ids.
    """
    with store.session() as s:
        if replace:
            if run_id is not None:
                s.execute(delete(Finding).where(Finding.run_id == run_id))
            elif boot_id is not None:
                s.execute(delete(Finding).where(Finding.boot_id == boot_id, Finding.run_id.is_(None)))
        rows = [Finding(run_id=run_id, boot_id=boot_id, rule=f["rule"], severity=f["severity"],
                        message=f["message"], evidence=f.get("evidence") or {}, entries=list(f.get("entries") or []),
                        created_at=utcnow()) for f in findings]
        s.add_all(rows)
        s.flush()
        return [r.id for r in rows]


def list_findings(store: Any, run_id: str | None = None, boot_id: str | None = None) -> list[FindingRow]:
    """Stored findings of a run or boot (or all), in insertion order."""
    with store.session() as s:
        q = select(Finding).order_by(Finding.id)
        if run_id is not None:
            q = q.where(Finding.run_id == run_id)
        if boot_id is not None:
            q = q.where(Finding.boot_id == boot_id)
        return [FindingRow.of(f) for f in s.scalars(q)]


def timestamp(dt: datetime | None) -> str:
    """ISO-8601 text of a stored time ('' for None)."""
    return dt.isoformat(timespec="seconds") if dt else ""
