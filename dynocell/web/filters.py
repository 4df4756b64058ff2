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

from dynocell.clock import aware_utc
from dynocell.text import printable
from dynocell.runbooks.views import interval_basis

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
    return aware_utc(v).astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


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
    """A latency percentile (ms) from a ``{p50, p90, p99, n}`` dict; ``n too small`` where the sample does not
    support it (issue 33: p99 needs ≥ 100 requests, :func:`dynocell.runbooks.views.percentile_shown`)."""
    from dynocell.runbooks.views import percentile_shown

    if not d:
        return "–"
    q = {"p50": 0.5, "p90": 0.9, "p99": 0.99}.get(key)
    if q is not None and not percentile_shown(q, d.get("n")):
        return "n too small"
    v = d.get(key)
    return num(v, 1) if v is not None else "–"


def _signed(v: float, digits: int = 1) -> str:
    return f"{v:+.{digits}f}".replace("-", "−")


def breakeven_sentence(be: dict | None) -> str:
    """A stored break-even (``runs.breakeven``) as one sentence, e.g.
    ``does NOT pay: margin −3.0 % (τ 1.70 must exceed 1.76) …`` (τ must exceed spec step / plain step)."""
    if not be:
        return "not computed"
    tau, spec, plain = be.get("tau"), be.get("spec_step_ms"), be.get("plain_step_ms")
    margin = be.get("margin")
    if margin is None and be.get("margin_pct") is not None:
        margin = be["margin_pct"] / 100
    if margin is None and tau and spec and plain:
        margin = tau * plain / spec - 1
    if margin is None:
        return "; ".join(f"{k} {v}" for k, v in be.items())
    pays = be.get("pays", margin > 0)
    verdict = be.get("verdict") or ("pays" if pays else "does NOT pay")
    out = f"{verdict}: margin {_signed(margin * 100)} %"
    if tau and spec and plain:
        out += f" (τ {tau:.2f} must exceed {spec / plain:.2f})"
    if be.get("noise_band") is not None and not be.get("interval"):
        out += f", noise band ±{be['noise_band'] * 100:.1f} %"
    if tau and spec and plain:
        out += (f"; a speculative step costs {spec:.2f} ms against τ × plain step "
                f"{tau:.2f} × {plain:.2f} = {tau * plain:.2f} ms")
    if be.get("interval"):
        lo, hi = be["interval"]
        out += f"; 95 % interval of the margin [{_signed(lo * 100)} %, {_signed(hi * 100)} %]"
        out += f" ({interval_basis(be)})"
        out += f"; {be['decide']}" if be.get("decide") else ""
    if be.get("plain_source"):
        age = be.get("plain_age_s")
        out += f"; plain step from {be['plain_source']}"
        out += f", measured {duration(age)} ago" if age and age >= 60 else ""
        out += " (reused: comparable host, load, version, workload)" if be.get("plain_reused") else ""
        out += f"; measured fresh: {be['plain_fresh_why']}" if be.get("plain_fresh_why") else ""
    return out + "."


def lossless_sentence(run: dict | None) -> str:
    """``runs.lossless`` + ``lossless_detail`` as one sentence with the mismatch count."""
    run = run or {}
    verdict, d = run.get("lossless"), run.get("lossless_detail") or {}
    if not verdict:
        return "not checked"
    n, tokens = d.get("prompts"), d.get("max_new_tokens")
    what = f"{n} prompt(s)" + (f" × {tokens} greedy tokens" if tokens else "")
    mm = d.get("mismatches") or []
    count = mm if isinstance(mm, int) else len(mm)
    if verdict == "near-tie":
        return (f"lossless: near-tie (margin {d.get('max_margin', 0):.3f}) — {count} of {n} prompt(s) diverge from the "
                f"plain twin ({what}), each only where its top two tokens are within rounding.")
    if verdict != "no":
        return f"lossless: the speculative outputs equal the plain twin's on {what} ({count} mismatches)."
    out = f"NOT lossless: {count} of {n} prompt(s) diverge from the plain twin ({what})"
    if mm and isinstance(mm, list):
        first = mm[0]
        out += (f"; the first at {first.get('unit', 'token')} {first.get('first_diverging_index')}: speculative "
                f"{str(first.get('speculative', ''))[:60]!r} vs plain {str(first.get('plain', ''))[:60]!r}")
        if first.get("margin") is not None:
            out += f", top-2 margin {first['margin']:.3f} nats"
        elif first.get("margin_unknown"):
            out += f", margin unknown: {first['margin_unknown']}"
    return out + "."


def inert(value: Any) -> Any:
    """Every ``{{ … }}`` output's last step (Jinja's ``finalize``): a string (or sanitised Markup) with
    terminal escape sequences removed and control characters as ``?`` (:func:`dynocell.text.printable`,
    newlines kept) — a stored string from another host, a log line or an engine cannot carry ESC, BEL or
    NUL into a page (a page fetched with ``curl`` to a terminal cannot retitle it or write its clipboard).
    Escaping HTML stays Jinja's autoescape; other values pass through."""
    if isinstance(value, Markup):
        return Markup(printable(str(value), keep_newlines=True))
    if isinstance(value, str):
        return printable(value, keep_newlines=True)
    return value


def install(env) -> None:  # noqa: ANN001 - jinja2 Environment
    """Register the filters on a Jinja environment, and :func:`inert` as its ``finalize``."""
    env.finalize = inert
    env.filters.update({"markdown": markdown, "num": num, "pct": pct, "when": when, "duration": duration,
                        "short": short, "pq": pq, "breakeven": breakeven_sentence, "lossless": lossless_sentence})
