"""Jinja filters of the panel: numbers with units, times, sanitised markdown.

Markdown (runbook entries, notes) is rendered by markdown-it-py with raw HTML disabled, then
cleaned by nh3 (an allow-list HTML sanitiser) — a ``<script>`` in an entry renders as text.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import nh3
from markdown_it import MarkdownIt
from markupsafe import Markup

_md = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table")
_ALLOWED_TAGS = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "li", "code", "pre", "em", "strong", "a",
                 "blockquote", "table", "thead", "tbody", "tr", "th", "td", "hr", "br"}


def markdown(text: str | None) -> Markup:
    """Markdown → sanitised HTML (no raw HTML, no scripts, links get rel=noopener noreferrer)."""
    html = _md.render(text or "")
    return Markup(nh3.clean(html, tags=_ALLOWED_TAGS, attributes={"a": {"href", "title"}},
                            url_schemes={"http", "https", "mailto"}, link_rel="noopener noreferrer"))


def num(v: Any, digits: int = 1) -> str:
    """A number with ``digits`` decimals and thousands separators; ``–`` for None."""
    if v is None:
        return "–"
    try:
        return f"{float(v):,.{digits}f}"
    except (TypeError, ValueError):
        return str(v)


def pct(v: Any, digits: int = 1) -> str:
    """A percentage value (already in %) with a sign for deltas."""
    if v is None:
        return "–"
    return f"{float(v):+.{digits}f}"


def when(v: datetime | None) -> str:
    """UTC time ``YYYY-MM-DD HH:MM:SS``."""
    if v is None:
        return "–"
    if v.tzinfo is None:
        v = v.replace(tzinfo=timezone.utc)
    return v.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def duration(s: float | None) -> str:
    """Seconds as ``1h 02m``, ``3m 05s`` or ``4.2 s``."""
    if s is None:
        return "–"
    s = float(s)
    if s < 60:
        return f"{s:.1f} s"
    m, sec = divmod(int(s), 60)
    if m < 60:
        return f"{m}m {sec:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h {m:02d}m"


def short(h: str | None, n: int = 12) -> str:
    """A hash shortened for display (``sha256:`` prefix dropped)."""
    if not h:
        return "–"
    return h.removeprefix("sha256:")[:n]


def pq(d: dict | None, key: str = "p50") -> str:
    """A latency percentile (ms) from a ``{p50, p90, p99}`` dict."""
    if not d:
        return "–"
    v = d.get(key)
    return num(v, 1) if v is not None else "–"


def install(env) -> None:  # noqa: ANN001 - jinja2 Environment
    """Register the filters on a Jinja environment."""
    env.filters.update({"markdown": markdown, "num": num, "pct": pct, "when": when, "duration": duration,
                        "short": short, "pq": pq})
