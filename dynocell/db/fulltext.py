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
and both rank "lower is better" (bm25 is negative; the PostgreSQL rank is
negated) so callers sort one way; hits carry ``relevance`` relative to the best.
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


_NO_TAGS = str.maketrans("<>", "  ")


def reindex(s: Session, drop: set[str], rows: list[dict[str, Any]]) -> None:
    """In the open transaction ``s``: delete index rows of ``drop`` slugs, then insert ``rows``.

    ``rows``: dicts with slug, title, tags (space-joined str), body. Same SQL on both databases
    (PostgreSQL computes ``doc`` itself). On PostgreSQL ``<`` and ``>`` are stored as spaces: its default
    text-search parser reads ``<defunct>`` as an XML tag and indexes no word of it (PostgreSQL manual,
    "Parsers": token type ``tag``), so a search for ``defunct`` missed the entry that shows it.
    """
    if s.get_bind().dialect.name == "postgresql":
        rows = [{**r, **{k: str(r[k]).translate(_NO_TAGS) for k in ("title", "tags", "body")}} for r in rows]
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

    Returns ``[{slug, title, kind, relevance, snippet}]``: ``relevance`` is the hit's rank score over the
    best hit's (1.0 = the best, smaller = less relevant; bm25 or ts_rank_cd, both reported lower-is-better
    by the databases); ``snippet`` from :func:`snippet`. ``dialect`` is ``sqlite`` or ``postgresql``;
    anything else raises ValueError.
    """
    words = terms(query)
    if not words:
        return []
    if dialect == "sqlite":
        joiner = " OR " if any_word else " AND "
        w = ", ".join(str(x) for x in BM25_WEIGHTS)
        sql = text(
            f"SELECT f.slug, f.title, e.kind, bm25(runbook_fts, {w}) AS score, f.body AS snip "
            "FROM runbook_fts f JOIN runbook_entries e ON e.slug = f.slug "
            "WHERE runbook_fts MATCH :q ORDER BY score LIMIT :limit"
        )
        q = joiner.join(f'"{t}"' for t in words)
    elif dialect == "postgresql":
        joiner = " | " if any_word else " & "
        weights = "{" + ",".join(str(x) for x in TS_RANK_WEIGHTS) + "}"
        sql = text(
            "SELECT f.slug, f.title, e.kind, -ts_rank_cd(CAST(:weights AS float4[]), f.doc, q) AS score, "
            "f.body AS snip "
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
    best = min((float(r[3]) for r in rows), default=0.0)
    return [{"slug": r[0], "title": r[1], "kind": r[2],
             "relevance": round(float(r[3]) / best, 3) if best < 0 else 1.0,
             "snippet": snippet(str(r[4]), words)} for r in rows]


#: Characters of body text a snippet shows around its first matched word.
SNIPPET_CHARS = 160


def snippet(body: str, words: list[str], width: int = SNIPPET_CHARS) -> str:
    """About ``width`` characters of ``body`` around the first word matching one of ``words`` (a word
    matches when it starts with the query word, or with its first letters for a stemmed form: ``collapse``
    finds ``collapsing``), cut at spaces — never inside a word or a number — with the matched words in
    ``[`` ``]`` and ``…`` where text was cut. Markdown ``#`` are dropped and whitespace joined."""
    text = " ".join(body.replace("#", " ").split())
    stems = [w[: max(4, len(w) - 2)] if len(w) > 4 else w for w in words]
    pattern = re.compile(r"(?<![\w])(?:" + "|".join(re.escape(t) for t in stems) + r")[\w.-]*", re.IGNORECASE)
    m = pattern.search(text)
    centre = m.start() if m else 0
    start = max(0, centre - width // 3)
    end = min(len(text), start + width)
    if start > 0:  # move to the next space so the first word is whole
        sp = text.find(" ", start)
        start = sp + 1 if 0 <= sp < centre else start
    if end < len(text):
        sp = text.rfind(" ", start, end)
        end = sp if sp > centre else end
    piece = pattern.sub(lambda x: f"[{x.group(0)}]", text[start:end])
    return ("…" if start > 0 else "") + piece + ("…" if end < len(text) else "")
