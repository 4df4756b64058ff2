"""The entries' full-text index in the store, search over it, and adding an operator entry file.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dynocell.errors import UserError
from dynocell.runbooks.knowledge.entry import Entry
from dynocell.runbooks.knowledge.lint import (
    md_files, lint_paths, operator_dir, parse_file,
)
from dynocell.runbooks.knowledge.loader import Knowledge, bundled_knowledge

if TYPE_CHECKING:
    from dynocell.db.knowledge import SearchHit  # noqa: F401 (annotations)

# ------------------------------------------------------------------ index and search

def sync_index(store: Any, knowledge: Knowledge) -> int:
    """Write every entry in effect into ``runbook_entries`` + the FTS5 table; drop stale rows. Returns the count."""
    from dynocell.db import knowledge as dbk

    return dbk.upsert_entries(store, [e.as_row() for e in knowledge.entries.values()], replace_all=True)


def search(store: Any, knowledge: Knowledge, query: str, limit: int = 10, *,
           any_word: bool = False) -> list[SearchHit]:
    """Full-text search (bm25, title weighted over tags over body) after syncing the index: entries with
    every word of ``query``, or any of them with ``any_word``.

    Returns ``db.knowledge.SearchHit`` records (slug, title, kind, relevance, snippet), best first.
    Raises UserError for an empty query.
    """
    from dynocell.db import knowledge as dbk

    if not query or not re.search(r"\w", query):
        raise UserError("empty search query", "give one or more words, e.g. dynocell runbook search cuda graph")
    sync_index(store, knowledge)
    hits = dbk.search_entries(store, query, limit=limit * 3, any_word=any_word)
    return rank_general_first(hits, knowledge, query)[:limit]


#: Relevance factor of an entry that applies to named models only (``applies_to`` matches a ``model_path``)
#: when the query names none of them: a general entry ranks above a one-model fix for general words.
MODEL_SPECIFIC_FACTOR = 0.5


def _model_words(node: Any) -> set[str]:
    """Lower-case words of every ``model_path`` condition inside an ``applies_to`` tree."""
    words: set[str] = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "model_path":
                words.update(re.findall(r"[^\W_]+", json.dumps(value).lower()))
            else:
                words |= _model_words(value)
    elif isinstance(node, list):
        for item in node:
            words |= _model_words(item)
    return words - {"contains", "in", "eq", "equals", "regex"}


def rank_general_first(hits: list[SearchHit], knowledge: Knowledge, query: str) -> list[SearchHit]:
    """``hits`` re-ranked so an entry that applies to named models only (its ``applies_to`` has a
    ``model_path`` condition) counts :data:`MODEL_SPECIFIC_FACTOR` of its relevance unless the query names
    one of those models; relevance renormalised so the best hit is 1.0. Order among equals is kept."""
    if not hits:
        return hits
    asked = set(re.findall(r"[^\W_]+", query.lower()))
    scored = []
    for h in hits:
        entry = knowledge.entries.get(h.slug)
        models = _model_words(entry.applies_to) if entry is not None else set()
        factor = MODEL_SPECIFIC_FACTOR if models and not (models & asked) else 1.0
        scored.append((h.relevance * factor, h))
    scored.sort(key=lambda x: -x[0])
    best = scored[0][0] or 1.0
    return [replace(h, relevance=round(r / best, 3)) for r, h in scored]


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
