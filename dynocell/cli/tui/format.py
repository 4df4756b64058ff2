"""Pure text formatting for the terminal dashboard: glyph+word states, bars, durations, rates.

Nothing here touches Textual widgets, the store or an engine: input is the plain dicts of
:mod:`dynocell.runbooks.views`, output is ``rich.text.Text`` or ``str``. State is never
carried by colour alone: every state has a glyph (●/◐/○/✖) and a word, so the dashboard
reads the same under ``NO_COLOR`` and over a monochrome SSH session.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

from rich.text import Text

from dynocell.cli.render import bar
from dynocell.text import printable
from dynocell.clock import aware_utc, now_utc

Now = Callable[[], datetime]

# state → (glyph, style). The word is always printed next to the glyph.
STATE_GLYPHS: dict[str, tuple[str, str]] = {
    "ready": ("●", "green"),
    "starting": ("◐", "yellow"),
    "stopping": ("◐", "yellow"),
    "stopped": ("○", "dim"),
    "failed": ("✖", "red"),
    "crashed": ("✖", "bold red"),
    "lost": ("?", "red"),
}
HEALTH_GLYPHS: dict[str | None, tuple[str, str]] = {
    "healthy": ("●", "green"),
    "degraded": ("◐", "yellow"),
    "down": ("○", "red"),
    None: ("·", "dim"),
}
RUN_STYLES = {"completed": "green", "failed": "red", "interrupted": "yellow", "running": "cyan"}


utc_now = now_utc  # the dashboard's default ``now`` (dynocell.clock)
aware = aware_utc  # naive = UTC, ISO strings parsed (dynocell.clock)


def plain(value: Any, style: str = "") -> Text:
    """``value`` (any, ``str()``-ed) as a Rich cell shown literally: :func:`~dynocell.text.printable`, never
    parsed as markup (a stored ``[/]`` or ``[link=…]`` is text). Every cell of the TUI built from stored text
    goes through this or a ``Text(...)`` of its own."""
    return Text(printable("" if value is None else str(value)), style=style)

def duration(seconds: float | None) -> str:
    """Compact duration: ``"850ms"``, ``"42s"``, ``"7m05s"``, ``"3h12m"``, ``"4d03h"``; ``"-"`` for None."""
    if seconds is None:
        return "-"
    s = max(0.0, float(seconds))
    if s < 1:
        return f"{s * 1000:.0f}ms"
    if s < 60:
        return f"{s:.0f}s" if s >= 10 else f"{s:.1f}s"
    m, sec = divmod(int(s), 60)
    if m < 60:
        return f"{m}m{sec:02d}s"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d{h:02d}h"


def uptime_s(boot: dict[str, Any], now: Now) -> float | None:
    """Seconds since ready (else since start) until end (else ``now()``); None without a start time."""
    start = aware(boot.get("ready_at")) or aware(boot.get("started_at"))
    if start is None:
        return None
    end = aware(boot.get("ended_at")) or now()
    return max(0.0, (end - start).total_seconds())


def ago(when: datetime | str | None, now: Now) -> str:
    """``"3m05s ago"`` relative to ``now()``; ``"-"`` for None."""
    t = aware(when)
    return "-" if t is None else duration((now() - t).total_seconds()) + " ago"


def kind_word(boot: dict[str, Any]) -> str:
    """`` attached`` / `` imported`` for a boot dynocell did not start, else ``""``."""
    kind = boot.get("kind") or "started"
    return "" if kind == "started" else f" {kind}"


def port_or_kind(boot: dict[str, Any]) -> str:
    """The boots table's port cell: the port, or ``att``/``imp`` for an attached/imported boot."""
    kind = boot.get("kind") or "started"
    if kind != "started":
        return kind[:3]
    return str(boot.get("port") or "-")


def state_text(state: str | None, note: str | None = None) -> Text:
    """``● ready``-style glyph and word; ``note`` (e.g. ``unknown (host b last seen 2 h ago)``) follows, dimmed."""
    glyph, style = STATE_GLYPHS.get(state or "", ("·", ""))
    out = Text(f"{glyph} {state or '-'}", style=style)
    if note:
        out.append(f" {note}", style="dim")
    return out


def health_text(verdict: str | None) -> Text:
    """``● healthy`` / ``◐ degraded`` / ``○ down`` / ``· -`` (never probed)."""
    glyph, style = HEALTH_GLYPHS.get(verdict, HEALTH_GLYPHS[None])
    return Text(f"{glyph} {verdict or '-'}", style=style)


def num(v: float | None, fmt: str = ".1f") -> str:
    """A number with ``fmt`` or ``"-"`` for None."""
    return "-" if v is None else format(v, fmt)


def config_name(row: dict[str, Any]) -> str:
    """First label of the row's config, else the short hash (12 hex digits)."""
    labels = row.get("labels") or []
    if labels:
        return labels[0]
    h = str(row.get("config_hash") or "")
    return h.removeprefix("sha256:")[:12] or "-"


def hbar(fraction: float | None, width: int) -> str:
    """``bar()`` padded to exactly ``width`` cells (a light track ``·`` fills the rest)."""
    b = bar(fraction, width)
    return b + "·" * max(0, width - len(b))


def job_line(job: Any, width: int = 20) -> str:
    """``"⏵ run tiny · bench c=4: 3/8 [██████······]"`` — one line of the job bar for a
    :class:`dynocell.runbooks.jobs.Job` (its kind, label, latest message, done/total, stop asked)."""
    head = f"⏵ {job.kind} {job.label} · {job.message}"
    if job.done is not None and job.total:
        head += f" [{hbar(job.done / job.total, width)}]"
    if job.cancel.is_set() and job.state == "running":
        head += " (stopping…)"
    return head


def acceptance_lines(curves: list[dict[str, Any]], width: int = 20) -> list[Text]:
    """Per text class: a head line (τ, accept rate, steps, D) then one line per draft position
    with a bar of p_i (unconditional) and a bar of a_i (conditional), both 0..1 (docs/DESIGN.md,
    "Acceptance math")."""
    out: list[Text] = []
    for c in curves:
        head = Text(f"{c['text_class']}", style="bold")
        head.append(f"  τ {num(c.get('tau'), '.3f')}  rate {num(c.get('accept_rate'), '.3f')}"
                    f"  steps {c.get('steps')}  D {c.get('num_drafts')}")
        if c.get("engine_tau") is not None:
            head.append(f"  engine τ {num(c['engine_tau'], '.3f')}")
        out.append(head)
        if c.get("warning"):
            out.append(Text(f"  ⚠ {c['warning']}", style="yellow"))
        for p in c.get("points") or []:
            i = p["position"]
            line = Text(f"  {i:>2} p ")
            line.append(hbar(p["p"], width), style="cyan")
            line.append(f" {p['p']:.3f}  a ")
            line.append(hbar(p["a"], width), style="magenta")
            line.append(f" {p['a']:.3f}")
            out.append(line)
    return out


def split_lines(splits: list[dict[str, Any]], width: int = 30) -> list[Text]:
    """Profile split as horizontal bars: ``category  pct %  bar  ms  launches``."""
    out = []
    for sp in splits:
        line = Text(f"{sp['category'][:14]:<14} {sp['pct']:5.1f} % ")
        line.append(hbar(sp["pct"] / 100.0, width), style="blue")
        line.append(f" {sp['ms']:9.2f} ms {sp.get('launches') or 0:>6}")
        out.append(line)
    return out


def phase_lines(phases: list[dict[str, Any]], width: int = 30) -> list[Text]:
    """Phase timeline: each phase as a bar placed at its start offset, sized by its duration
    (offsets in s from spawn, as :func:`dynocell.runbooks.views.boot_detail` gives them). A phase's
    ``label`` (``weights_begin (draft)``) is shown when present; the track gives up the room it needs."""
    if not phases:
        return []
    total = max((p["end_s"] for p in phases), default=0.0) or 1.0
    namew = min(27, max(18, max(len(p.get("label") or p["name"]) for p in phases)))
    width = max(6, width - (namew - 18))
    out = []
    for p in phases:
        start = int(round(p["start_s"] / total * width))
        length = max(1, int(round(p["duration_s"] / total * width)))
        length = min(length, max(1, width - start))
        track = "·" * start + "█" * length
        track = track[:width] + "·" * max(0, width - len(track))
        line = Text(f"{(p.get('label') or p['name'])[:namew]:<{namew}} {p['start_s']:7.2f}s ")
        line.append(track, style="green")
        line.append(f" {duration(p['duration_s'])}")
        out.append(line)
    return out


def health_lines(health: dict[str, Any] | None, now: Now) -> list[Text]:
    """The verdict (glyph + word + when) and one line per check (ok/FAIL, latency ms, reason)."""
    if not health:
        return [Text("health: never probed (press h)", style="dim")]
    head = Text("health: ")
    head.append_text(health_text(health.get("verdict")))
    if health.get("failed"):
        head.append(f" (failed: {health['failed']})")
    head.append(f"  {ago(health.get('ts'), now)}", style="dim")
    out = [head]
    for c in health.get("checks") or []:
        if str(c.get("name", "")).startswith("_"):  # internal samples (e.g. the progress counters)
            continue
        ok = bool(c.get("ok"))
        line = Text("  ")
        line.append("✔ ok  " if ok else "✖ FAIL", style="green" if ok else "red")
        line.append(f" {str(c.get('name'))[:16]:<16} {num(c.get('latency_ms'), '7.1f')} ms  ")
        line.append(str(c.get("reason") or ""))
        out.append(line)
    return out


@dataclass
class RateMeter:
    """Rate of a monotonic counter from successive samples (units of the counter per second).

    The first sample is only a baseline (no rate); a counter that goes DOWN is a reset
    (engine restart, counter wrap): the sample becomes the new baseline and no rate is
    reported for that interval. Samples with non-increasing time are ignored.
    """

    last_t: float | None = None
    last_v: float | None = None
    rate: float | None = None

    def add(self, t: float, value: float) -> float | None:
        """Feed one sample at time ``t`` (s); returns the current rate or None."""
        if self.last_t is None or self.last_v is None:
            self.last_t, self.last_v, self.rate = t, value, None
            return None
        if t <= self.last_t:
            return self.rate
        if value < self.last_v:  # reset: new baseline
            self.last_t, self.last_v, self.rate = t, value, None
            return None
        self.rate = (value - self.last_v) / (t - self.last_t)
        self.last_t, self.last_v = t, value
        return self.rate


def generation_rate(health_rows: list[dict[str, Any]]) -> float | None:
    """Generated tok/s between the health probes that carried a ``progress`` sample (oldest
    first, as :func:`dynocell.runbooks.views.boot_detail` gives them); None without two samples
    of the same engine process. Uses the probe timestamps (``ts``) as the clock."""
    meter = RateMeter()
    rate = None
    for h in health_rows:
        sample = None
        for c in h.get("checks") or []:
            if c.get("name") == "progress" and isinstance(c.get("sample"), dict):
                sample = c["sample"]
        ts = aware(h.get("ts"))
        if sample is None or ts is None or sample.get("generated") is None:
            continue
        rate = meter.add(ts.timestamp(), float(sample["generated"]))
    return rate
