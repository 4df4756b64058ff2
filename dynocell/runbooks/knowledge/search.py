"""The entries' full-text index in the store, search over it, and adding an operator entry file.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dynocell.errors import UserError
from dynocell.runbooks.knowledge.entry import Entry
from dynocell.runbooks.knowledge.lint import (
    md_files, lint_paths, operator_dir, parse_file,
)
from dynocell.runbooks.knowledge.loader import Knowledge, bundled_knowledge

if TYPE_CHECKING:
    from dynocell.db.knowledge import SearchHit

# ------------------------------------------------------------------ index and search

def sync_index(store: Any, knowledge: Knowledge) -> int:
    """Write every entry in effect into ``runbook_entries`` + the FTS5 table; drop stale rows. Returns the count."""
    from dynocell.db import knowledge as dbk

    return dbk.upsert_entries(store, [e.as_row() for e in knowledge.entries.values()], replace_all=True)


def search(store: Any, knowledge: Knowledge, query: str, limit: int = 10) -> list[SearchHit]:
    """Full-text search (bm25, title weighted over tags over body) after syncing the index.

    Returns ``db.knowledge.SearchHit`` records (slug, title, kind, score, snippet), best first (lower score =
    better).
    Raises UserError for an empty query.
    """
    from dynocell.db import knowledge as dbk

    if not query or not re.search(r"\w", query):
        raise UserError("empty search query", "give one or more words, e.g. dynocell runbook search cuda graph")
    sync_index(store, knowledge)
    return dbk.search_entries(store, query, limit=limit)


def add_entry_file(settings: Any, source: Path) -> tuple[Entry, Path, bool]:
    """Lint ``source`` (timed regex check) and copy it into the operator directory as ``<slug>.md``.

    Returns ``(entry, destination, overrides_bundled)``. Raises UserError with the
    lint errors when the file is not a valid entry.
    """
    entries, errors = lint_paths([Path(source)])
    if errors or not entries:
        raise UserError("not a valid runbook entry:\n  " + "\n  ".join(str(e) for e in errors),
                        "fix the fields named above and run dynocell runbook lint FILE")
    entry = entries[0]
    dest_dir = operator_dir(settings)
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / f"{entry.slug}.md"
    for other in md_files(dest_dir):  # one file per slug in the operator directory
        if other != dest:
            e, _ = parse_file(other, "operator")
            if e is not None and e.slug == entry.slug:
                other.unlink()
    dest.write_bytes(Path(source).read_bytes())
    return entry, dest, entry.slug in bundled_knowledge().entries
