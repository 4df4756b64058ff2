"""Full-text search over runbook entries, one interface over two databases.

The index table is ``runbook_fts(slug, title, tags, body)`` on both:

- **SQLite**: an FTS5 virtual table (``tokenize='porter unicode61'``), ranked by
  ``bm25`` with :data:`BM25_WEIGHTS` (migration 0001).
- **PostgreSQL**: a plain table with a stored generated ``tsvector`` column
  ``doc`` (title weight A, tags B, body D, ``english`` configuration, so the
  Snowball stemmer plays the part of FTS5's porter tokenizer) and a GIN index
  (migration ``0005_pgsearch``), ranked by ``ts_rank_cd`` with
  :data:`TS_RANK_WEIGHTS` (PostgreSQL manual, "Ranking Search Results": the
  weight array is ``{D, C, B, A}``).

Both mirror the same relative column weights (title 10×, tags 5×, body 1×),
and both report ``score`` as "lower is better" (bm25 is negative; the
PostgreSQL rank is negated) so callers sort one way.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

#: bm25 column weights (slug, title, tags, body): a word in the title counts 10×, in tags 5×.
BM25_WEIGHTS = (0.0, 10.0, 5.0, 1.0)
#: ts_rank_cd weights {D (body), C (unused), B (tags), A (title)}: the same 1 : 5 : 10 ratios.
TS_RANK_WEIGHTS = (0.1, 0.0, 0.5, 1.0)


#: Most distinct words of a query that are searched; the rest are dropped.
MAX_TERMS = 32


def terms(query: str) -> list[str]:
    """The searchable words of ``query``: lower case, letters and digits only (syntax characters are
    dropped), each once, the first :data:`MAX_TERMS`. Without the bound a hostile query of 30,000 words
    (``ab OR ab OR …``) kept SQLite's FTS5 busy for minutes: its cost grows with the square of the number
    of phrases (2,000 repeated words: 4.7 s; 1,000: 1.3 s)."""
    return list(dict.fromkeys(re.findall(r"[^\W_]+", query.lower())))[:MAX_TERMS]


def reindex(s: Session, drop: set[str], rows: list[dict[str, Any]]) -> None:
    """In the open transaction ``s``: delete index rows of ``drop`` slugs, then insert ``rows``.

    ``rows``: dicts with slug, title, tags (space-joined str), body. Same SQL on both databases
    (PostgreSQL computes ``doc`` itself).
    """
    for slug in drop:
        s.execute(text("DELETE FROM runbook_fts WHERE slug = :slug"), {"slug": slug})
    for r in rows:
        s.execute(text("INSERT INTO runbook_fts (slug, title, tags, body) VALUES (:slug, :title, :tags, :body)"),
                  {"slug": r["slug"], "title": r["title"], "tags": r["tags"], "body": r["body"]})


def indexed_slugs(s: Session) -> set[str]:
    """Slugs present in the index."""
    return set(s.execute(text("SELECT slug FROM runbook_fts")).scalars())


def search(s: Session, dialect: str, query: str, any_word: bool, limit: int) -> list[dict[str, Any]]:
    """Entries matching all words of ``query`` (or any word with ``any_word``), best first.

    Returns ``[{slug, title, kind, score, snippet}]``; ``score`` lower is better. ``dialect`` is
    ``sqlite`` or ``postgresql``; anything else raises ValueError.
    """
    words = terms(query)
    if not words:
        return []
    if dialect == "sqlite":
        joiner = " OR " if any_word else " AND "
        w = ", ".join(str(x) for x in BM25_WEIGHTS)
        sql = text(
            f"SELECT f.slug, f.title, e.kind, bm25(runbook_fts, {w}) AS score, "
            "snippet(runbook_fts, 3, '[', ']', '…', 12) AS snip "
            "FROM runbook_fts f JOIN runbook_entries e ON e.slug = f.slug "
            "WHERE runbook_fts MATCH :q ORDER BY score LIMIT :limit"
        )
        q = joiner.join(f'"{t}"' for t in words)
    elif dialect == "postgresql":
        joiner = " | " if any_word else " & "
        weights = "{" + ",".join(str(x) for x in TS_RANK_WEIGHTS) + "}"
        sql = text(
            "SELECT f.slug, f.title, e.kind, -ts_rank_cd(CAST(:weights AS float4[]), f.doc, q) AS score, "
            "ts_headline('english', f.body, q, 'StartSel=[, StopSel=], MaxWords=12, MinWords=4') AS snip "
            "FROM runbook_fts f JOIN runbook_entries e ON e.slug = f.slug, "
            "to_tsquery('english', :q) AS q "
            "WHERE f.doc @@ q ORDER BY score, f.slug LIMIT :limit"
        )
        q = joiner.join(words)
    else:
        raise ValueError(f"full-text search is not available on {dialect}")
    params: dict[str, Any] = {"q": q, "limit": limit}
    if dialect == "postgresql":
        params["weights"] = weights
    rows = s.execute(sql, params).all()
    return [{"slug": r[0], "title": r[1], "kind": r[2], "score": float(r[3]),
             "snippet": " ".join(str(r[4]).replace("#", " ").split())} for r in rows]
