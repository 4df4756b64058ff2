"""Server-side SVG charts (no JavaScript): acceptance curves, profile split, boot phase timeline.

Each function returns ``markupsafe.Markup`` SVG with axis labels and units. Every text is
escaped. Chart elements carry stable classes and data attributes so tests (and people with
dev tools) can count them: ``<g class="series" data-name="p">``, ``<rect class="bar"
data-category="gemm">``, ``<rect class="phase" data-name="load_weights">``,
``<g class="tau-marker" data-tau="3.36">``.
"""

from __future__ import annotations

from typing import Any, Iterable

from markupsafe import Markup, escape

PALETTE = ["#2563eb", "#ea580c", "#16a34a", "#9333ea", "#dc2626", "#0891b2", "#ca8a04", "#db2777",
           "#4b5563", "#65a30d", "#7c3aed", "#0d9488"]
CATEGORY_COLORS = {
    "gemm": "#2563eb", "attention": "#ea580c", "moe": "#9333ea", "router/topk": "#db2777",
    "elementwise": "#ca8a04", "norm": "#16a34a", "communication": "#dc2626", "memcpy/gather": "#0891b2",
    "sampling": "#65a30d", "other": "#9ca3af",
}
# The trace rules name them with underscores (engine/trace_rules.toml): the same colours.
CATEGORY_COLORS.update({"router_topk": CATEGORY_COLORS["router/topk"],
                        "memcpy_gather": CATEGORY_COLORS["memcpy/gather"]})
#: Colours for categories not listed above, none of them a listed category's.
EXTRA_COLORS = ["#7c3aed", "#0d9488", "#b45309", "#be123c", "#4d7c0f", "#1e3a8a", "#a21caf", "#374151"]
FONT = "font-family='system-ui, sans-serif'"


def _e(x: Any) -> str:
    return str(escape(x))


def _f(x: float) -> str:
    return f"{x:.1f}"


def category_color(cat: str, i: int = 0) -> str:
    """Stable colour of a profile category; an unlisted one gets ``EXTRA_COLORS[i]`` (never a listed
    category's colour, so two categories of one chart never share a colour below 9 unlisted ones)."""
    return CATEGORY_COLORS.get(cat, EXTRA_COLORS[i % len(EXTRA_COLORS)])


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10 ** len(str(int(raw))) / 10 if raw >= 1 else 1
    for step in (0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10, 20, 25, 50, 100, 200, 500, 1000):
        if step * mag >= raw:
            step = step * mag
            break
    else:
        step = raw
    ticks, t = [], lo
    while t <= hi + 1e-9:
        ticks.append(round(t, 6))
        t += step
    return ticks


def _series(out: list[str], name: str, pts: list[tuple[Any, float]], x: Any, y: Any, color: str, dash: str,
            title: Any) -> None:
    """Append one series to an SVG: a ``<g class='series'>`` holding the line through ``pts`` (data
    coordinates, mapped by ``x``/``y``) and a circle with a ``title(px, py)`` tooltip per point."""
    path = " ".join(f"{'M' if j == 0 else 'L'}{_f(x(px))},{_f(y(py))}" for j, (px, py) in enumerate(pts))
    out.append(f"<g class='series' data-name='{_e(name)}'>")
    if path:
        out.append(f"<path d='{path}' fill='none' stroke='{color}' stroke-width='2.2'{dash}/>")
    for px, py in pts:
        out.append(f"<circle class='point' cx='{_f(x(px))}' cy='{_f(y(py))}' r='3.5' fill='{color}'>"
                   f"<title>{title(px, py)}</title></circle>")
    out.append("</g>")


def acceptance_chart(series: list[dict[str, Any]], *, title: str, num_drafts: int | None = None,
                     taus: Iterable[dict[str, Any]] = (), width: int = 560, height: int = 300,
                     css_class: str = "acceptance-chart") -> Markup:
    """Per-position acceptance lines.

    ``series``: ``[{name, label, points: [(position, value 0..1)]}]`` (p_i or a_i per draft
    position 1..D). ``taus``: ``[{label, tau, engine_tau}]`` written as an annotation, one line each
    between the title and the plot (τ is tokens per verify step, not a draft position, so it is not
    drawn on the position axis; one line per run, so labels of several runs never overlap).
    """
    taus = list(taus)
    ml, mr, mt, mb = 56, 16, 34 + 14 * len(taus), 64
    height += 14 * len(taus)
    pw, ph = width - ml - mr, height - mt - mb
    d_max = num_drafts or max((p[0] for s in series for p in s["points"]), default=1)
    d_max = max(1, int(d_max))

    def x(v: float) -> float:
        return ml + (v / d_max) * pw

    def y(v: float) -> float:
        return mt + (1 - max(0.0, min(1.0, v))) * ph

    out = [f"<svg class='chart {_e(css_class)}' viewBox='0 0 {width} {height}' width='{width}' height='{height}' "
           f"role='img' aria-label='{_e(title)}' xmlns='http://www.w3.org/2000/svg' {FONT}>",
           f"<text x='{ml}' y='20' font-size='14' font-weight='600' fill='#111827'>{_e(title)}</text>"]
    for t in (0, 0.25, 0.5, 0.75, 1.0):
        out.append(f"<line x1='{ml}' x2='{ml + pw}' y1='{_f(y(t))}' y2='{_f(y(t))}' stroke='#e5e7eb'/>")
        out.append(f"<text x='{ml - 6}' y='{_f(y(t) + 4)}' font-size='11' text-anchor='end' fill='#374151'>"
                   f"{t:.2f}</text>")
    for i in range(0, d_max + 1):
        out.append(f"<line x1='{_f(x(i))}' x2='{_f(x(i))}' y1='{mt + ph}' y2='{mt + ph + 4}' stroke='#6b7280'/>")
        out.append(f"<text x='{_f(x(i))}' y='{mt + ph + 17}' font-size='11' text-anchor='middle' "
                   f"fill='#374151'>{i}</text>")
    out.append(f"<line x1='{ml}' x2='{ml + pw}' y1='{mt + ph}' y2='{mt + ph}' stroke='#6b7280'/>")
    out.append(f"<line x1='{ml}' x2='{ml}' y1='{mt}' y2='{mt + ph}' stroke='#6b7280'/>")
    out.append(f"<text x='{ml + pw / 2}' y='{height - 30}' font-size='12' text-anchor='middle' fill='#111827'>"
               "draft position i (tokens after the verified one)</text>")
    out.append(f"<text transform='translate(14 {mt + ph / 2}) rotate(-90)' font-size='12' text-anchor='middle' "
               "fill='#111827'>acceptance (fraction)</text>")
    for k, tm in enumerate(taus):
        tau = float(tm["tau"])
        eng = tm.get("engine_tau")
        label = (f"τ = {tau:.2f} tokens per verify step" + (f" (engine {float(eng):.2f})" if eng is not None else "")
                 + f", {tau - 1:.2f} accepted drafts")
        if tm.get("label"):
            label = f"{tm['label']}: {label}"
        out.append(f"<g class='tau-marker' data-tau='{tau:.4f}'>"
                   f"<text x='{ml}' y='{40 + 14 * k}' font-size='11' fill='#111827'>{_e(label)}</text></g>")
    legend_y = height - 10
    lx: float = ml
    for i, s in enumerate(series):
        color = s.get("color") or PALETTE[i % len(PALETTE)]
        dash = " stroke-dasharray='6 3'" if s.get("dashed") else ""
        label = s.get("label", s["name"])
        _series(out, s["name"], sorted(s["points"]), x, y, color, dash,
                lambda px, py, label=label: f"{_e(label)} at i={px}: {py:.3f}")
        out.append(f"<g class='legend'><line x1='{lx}' x2='{lx + 18}' y1='{legend_y - 4}' y2='{legend_y - 4}' "
                   f"stroke='{color}' stroke-width='3'{dash}/><text x='{lx + 22}' y='{legend_y}' font-size='11' "
                   f"fill='#111827'>{_e(label)}</text></g>")
        lx += 30 + 6.5 * len(str(label))
    out.append("</svg>")
    return Markup("".join(out))


def length_chart(buckets: list[dict[str, Any]], *, crossover: int | None = None, width: int = 560,
                 height: int = 300) -> Markup:
    """Acceptance by context length (issue 22, shape 5): τ per input-length bucket and, where known, the
    bucket's break-even τ (verify step / plain step) as a dashed line; speculation pays where τ is above it.

    ``buckets``: :func:`dynocell.engine.length_curve.with_breakeven` rows (``input_tokens``, ``tau``,
    ``breakeven_tau``). Buckets are spaced evenly (a ladder is roughly geometric) and labelled with their
    input tokens; ``crossover``: the bucket from which speculation stops paying, marked
    ``<g class='crossover' data-tokens=…>``. Series are ``<g class='series' data-name='tau'|'breakeven'>``.
    """
    title = "τ by context length (tokens per verify step)"
    ml, mr, mt, mb = 56, 16, 34, 64
    pw, ph = width - ml - mr, height - mt - mb
    n = max(1, len(buckets))
    vals = [b["tau"] for b in buckets] + [b["breakeven_tau"] for b in buckets if b.get("breakeven_tau") is not None]
    hi = max([2.0, *vals]) * 1.1

    def x(i: int) -> float:
        return ml + (i + 0.5) * pw / n

    def y(v: float) -> float:
        return mt + (1 - (max(1.0, min(hi, v)) - 1.0) / (hi - 1.0)) * ph

    out = [f"<svg class='chart length-chart' viewBox='0 0 {width} {height}' width='{width}' height='{height}' "
           f"role='img' aria-label='{_e(title)}' xmlns='http://www.w3.org/2000/svg' {FONT}>",
           f"<text x='{ml}' y='20' font-size='14' font-weight='600' fill='#111827'>{_e(title)}</text>"]
    for t in _nice_ticks(1.0, hi, 4):
        out.append(f"<line x1='{ml}' x2='{ml + pw}' y1='{_f(y(t))}' y2='{_f(y(t))}' stroke='#e5e7eb'/>"
                   f"<text x='{ml - 6}' y='{_f(y(t) + 4)}' font-size='11' text-anchor='end' fill='#374151'>"
                   f"{t:.2f}</text>")
    for i, b in enumerate(buckets):
        out.append(f"<text x='{_f(x(i))}' y='{mt + ph + 17}' font-size='11' text-anchor='middle' fill='#374151'>"
                   f"{_e(b['input_tokens'])}</text>")
    out.append(f"<line x1='{ml}' x2='{ml + pw}' y1='{mt + ph}' y2='{mt + ph}' stroke='#6b7280'/>"
               f"<line x1='{ml}' x2='{ml}' y1='{mt}' y2='{mt + ph}' stroke='#6b7280'/>"
               f"<text x='{ml + pw / 2}' y='{height - 30}' font-size='12' text-anchor='middle' fill='#111827'>"
               "input tokens (length bucket)</text>"
               f"<text transform='translate(14 {mt + ph / 2}) rotate(-90)' font-size='12' text-anchor='middle' "
               "fill='#111827'>τ</text>")
    if crossover is not None:
        at = next((k for k, b in enumerate(buckets) if b["input_tokens"] == crossover), None)
        if at is not None:
            x0 = x(at) - pw / n / 2
            out.append(f"<g class='crossover' data-tokens='{_e(crossover)}'><rect x='{_f(x0)}' y='{mt}' "
                       f"width='{_f(ml + pw - x0)}' height='{ph}' fill='#fee2e2' opacity='0.6'/>"
                       f"<text x='{_f(x0 + 4)}' y='{mt + 12}' font-size='11' fill='#991b1b'>does not pay</text></g>")
    lx: float = ml
    for name, label, color, dash in (("tau", "τ measured", PALETTE[0], ""),
                                     ("breakeven", "break-even τ (verify / plain step)", PALETTE[4],
                                      " stroke-dasharray='6 3'")):
        key = "tau" if name == "tau" else "breakeven_tau"
        pts = [(i, b[key]) for i, b in enumerate(buckets) if b.get(key) is not None]
        _series(out, name, pts, x, y, color, dash,
                lambda i, v, label=label: f"{_e(label)} at {_e(buckets[i]['input_tokens'])} tokens: {v:.3f}")
        if pts:
            out.append(f"<g class='legend'><line x1='{lx}' x2='{lx + 18}' y1='{height - 14}' y2='{height - 14}' "
                       f"stroke='{color}' stroke-width='3'{dash}/><text x='{lx + 22}' y='{height - 10}' "
                       f"font-size='11' fill='#111827'>{_e(label)}</text></g>")
            lx += 30 + 6.5 * len(label)
    out.append("</svg>")
    return Markup("".join(out))


def profile_title(source: str | None) -> str:
    """Profile chart title by what the trace held: GPU kernels, or CPU ops when it had none (docs/DESIGN.md)."""
    if source and "kernel" in source:
        return "GPU time by kernel category (GPU kernels)"
    if source and "cpu" in source:
        return "CPU time by op category (CPU ops: the trace has no GPU kernels)"
    return "Time by category"


def profile_split_chart(rows: list[dict[str, Any]], *, title: str = "GPU time by kernel category",
                        width: int = 900) -> Markup:
    """Stacked horizontal bars, one per profile: ``rows`` = ``[{label, splits: [{category, ms, pct}]}]``.

    The x axis is the share of device time (%); each segment is ``<rect class="bar"
    data-category=…>`` with its ms in a tooltip.
    """
    # Zero categories (no time, no launches) are left out of the bars and the legend.
    rows = [{**r, "splits": [sp for sp in r["splits"] if sp.get("pct") or sp.get("ms")]} for r in rows]
    cats: list[str] = []
    for r in rows:
        for sp in r["splits"]:
            if sp["category"] not in cats:
                cats.append(sp["category"])
    extra = [c for c in cats if c not in CATEGORY_COLORS]
    ml, mr, mt = 110, 20, 34
    bar_h, gap = 26, 12
    ph = max(1, len(rows)) * (bar_h + gap)
    legend_rows = (len(cats) + 4) // 5
    height = mt + ph + 44 + 18 * legend_rows
    pw = width - ml - mr
    out = [f"<svg class='chart profile-chart' viewBox='0 0 {width} {height}' width='{width}' height='{height}' "
           f"role='img' aria-label='{_e(title)}' xmlns='http://www.w3.org/2000/svg' {FONT}>",
           f"<text x='{ml}' y='20' font-size='14' font-weight='600' fill='#111827'>{_e(title)}</text>"]
    for t in (0, 25, 50, 75, 100):
        xv = ml + pw * t / 100
        out.append(f"<line x1='{_f(xv)}' x2='{_f(xv)}' y1='{mt}' y2='{mt + ph}' stroke='#e5e7eb'/>"
                   f"<text x='{_f(xv)}' y='{mt + ph + 14}' font-size='11' text-anchor='middle' "
                   f"fill='#374151'>{t}</text>")
    out.append(f"<text x='{ml + pw / 2}' y='{mt + ph + 30}' font-size='12' text-anchor='middle' fill='#111827'>"
               "share of device time (%)</text>")
    for i, r in enumerate(rows):
        y0 = mt + i * (bar_h + gap) + gap / 2
        total = sum(max(0.0, sp["pct"]) for sp in r["splits"]) or 100.0
        scale = 100.0 / total if total > 100.0 else 1.0
        out.append(f"<g class='stack' data-label='{_e(r['label'])}'>"
                   f"<text x='{ml - 8}' y='{_f(y0 + bar_h / 2 + 4)}' font-size='12' text-anchor='end' "
                   f"fill='#111827'>{_e(r['label'])}</text>")
        xv = ml
        for sp in r["splits"]:
            w = pw * max(0.0, sp["pct"]) * scale / 100
            color = category_color(sp["category"], extra.index(sp["category"]) if sp["category"] in extra else 0)
            out.append(f"<rect class='bar' data-category='{_e(sp['category'])}' x='{_f(xv)}' y='{_f(y0)}' "
                       f"width='{_f(w)}' height='{bar_h}' fill='{color}'><title>{_e(sp['category'])}: "
                       f"{sp['pct']:.1f} % ({sp['ms']:.2f} ms)</title></rect>")
            if w > 34:
                out.append(f"<text x='{_f(xv + w / 2)}' y='{_f(y0 + bar_h / 2 + 4)}' font-size='10' "
                           f"text-anchor='middle' fill='#fff'>{sp['pct']:.0f}%</text>")
            xv += w
        out.append("</g>")
    ly = mt + ph + 48
    for i, c in enumerate(cats):
        lx = ml + (i % 5) * 130
        yy = ly + (i // 5) * 18
        color = category_color(c, extra.index(c) if c in extra else 0)
        out.append(f"<g class='legend'><rect x='{lx}' y='{yy - 9}' width='11' height='11' "
                   f"fill='{color}'/><text x='{lx + 15}' y='{yy}' font-size='11' "
                   f"fill='#111827'>{_e(c)}</text></g>")
    out.append("</svg>")
    return Markup("".join(out))


def phase_timeline(phases: list[dict[str, Any]], *, title: str = "Boot phases", width: int = 640) -> Markup:
    """Horizontal bars of boot phases: ``[{name, label?, start_s, end_s, duration_s}]`` on a seconds axis
    (``label``, e.g. ``weights_begin (draft)``, is written when given)."""
    ml, mr, mt = 180, 20, 34
    bar_h, gap = 18, 6
    n = max(1, len(phases))
    ph = n * (bar_h + gap)
    height = mt + ph + 40
    pw = width - ml - mr
    t_max = max((p["end_s"] for p in phases), default=1.0) or 1.0
    ticks = _nice_ticks(0, t_max)
    t_max = max(t_max, ticks[-1])
    out = [f"<svg class='chart phase-chart' viewBox='0 0 {width} {height}' width='{width}' height='{height}' "
           f"role='img' aria-label='{_e(title)}' xmlns='http://www.w3.org/2000/svg' {FONT}>",
           f"<text x='{ml}' y='20' font-size='14' font-weight='600' fill='#111827'>{_e(title)}</text>"]
    for t in ticks:
        xv = ml + pw * t / t_max
        out.append(f"<line x1='{_f(xv)}' x2='{_f(xv)}' y1='{mt}' y2='{mt + ph}' stroke='#e5e7eb'/>"
                   f"<text x='{_f(xv)}' y='{mt + ph + 14}' font-size='11' text-anchor='middle' "
                   f"fill='#374151'>{t:g}</text>")
    out.append(f"<text x='{ml + pw / 2}' y='{mt + ph + 32}' font-size='12' text-anchor='middle' fill='#111827'>"
               "seconds since spawn (s)</text>")
    for i, p in enumerate(phases):
        y0 = mt + i * (bar_h + gap) + gap / 2
        x0 = ml + pw * p["start_s"] / t_max
        w = max(2.0, pw * p["duration_s"] / t_max)
        color = PALETTE[i % len(PALETTE)]
        out.append(f"<text x='{ml - 8}' y='{_f(y0 + bar_h - 5)}' font-size='11' text-anchor='end' "
                   f"fill='#111827'>{_e(p.get('label') or p['name'])}</text>"
                   f"<rect class='phase' data-name='{_e(p['name'])}' x='{_f(x0)}' y='{_f(y0)}' width='{_f(w)}' "
                   f"height='{bar_h}' fill='{color}' rx='2'><title>{_e(p['name'])}: {p['start_s']:.2f}–"
                   f"{p['end_s']:.2f} s ({p['duration_s']:.2f} s)</title></rect>")
    out.append("</svg>")
    return Markup("".join(out))
