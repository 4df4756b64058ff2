"""Rich renderings of stored records: the run report, the boot timeline, small text charts.

Input is the face-neutral data of :mod:`dynocell.runbooks.views` (plain dicts);
output is a list of rich renderables. Bars are drawn with block characters so
the report reads in a terminal, a log file or a CI transcript.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.panel import Panel
from rich.text import Text

from dynocell.cli.common import human_duration
from dynocell.cli.fit import FitTable
from dynocell.runbooks.views import interval_basis, percentile_shown
from dynocell.text import printable, shorten

BAR_WIDTH = 30
#: Kernel names (C++ templates run to hundreds of characters) are cut to this, ending in "…".
KERNEL_NAME_MAX = 90


def bar(fraction: float | None, width: int = BAR_WIDTH) -> str:
    """A horizontal bar of ``fraction`` (0..1) of ``width`` cells, eighth-cell resolution."""
    if fraction is None:
        return ""
    f = max(0.0, min(1.0, fraction))
    eighths = round(f * width * 8)
    full, rest = divmod(eighths, 8)
    return "█" * full + ("" if rest == 0 else " ▏▎▍▌▋▊▉"[rest])


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v:.1f}"


def _tbl(title: str, *cols: str) -> FitTable:
    return FitTable(*cols, title=title)


def judgment_text(j: dict[str, Any] | None) -> Text | None:
    """What the run's numbers can support (issue 33, ``views.judgment_of``): the workload's identity (name, sha,
    temperature, requests per class), τ with its interval over requests, the host's contention during the
    window, and whether the run is left out of verdicts."""
    if not j:
        return None
    ctx = j.get("context") or {}
    wl = ctx.get("workload") or {}
    t = Text("context: ", style="bold")
    parts = []
    if wl:
        parts.append(f"workload {wl.get('name')} {str(wl.get('sha256') or '')[:12]}")
    if j.get("temperature") is not None:
        parts.append(f"temperature {j['temperature']}")
    if j.get("requests_per_class") is not None:
        parts.append(f"{j['requests_per_class']} requests per class")
    for k in ("engine", "engine_version", "dtype", "host"):
        if ctx.get(k):
            parts.append(f"{k.replace('_', ' ')} {ctx[k]}")
    t.append(printable(", ".join(parts)) if parts else
             "not recorded (the run ended before it measured, or dynocell recorded no context then)")
    tau = j.get("tau")
    between = j.get("between_runs") or {}

    def spread(key: str) -> str:
        b = between.get(key)
        return (f"; widened to ±{b['sd_log'] * 100:.1f} % between {b['runs']} runs of this experiment" if b
                else "; run-to-run spread not measured")

    if tau:
        t.append(f"\n  τ {tau['value']:.3f} [{tau['lo']:.3f}, {tau['hi']:.3f}] (95 % over n={tau['n']} requests"
                 f"{spread('tau')})")
    dec = j.get("decode_tok_s_c1")
    if dec:
        t.append(f"\n  decode {dec['value']:.1f} tok/s per request at c=1 [{dec['lo']:.1f}, {dec['hi']:.1f}] "
                 f"(95 % bootstrap of the median within this run's window, n={dec['n']}, seed {dec['seed']}"
                 f"{spread('decode_tok_s_c1')})")
    if between.get("note"):
        t.append(f"\n  {between['note']}", style="dim")
    c = ctx.get("contention") or {}
    if c:
        load = c.get("load_per_core")
        steal = c.get("steal")
        gpu = c.get("gpu_util_pct")
        t.append("\n  host during the window: "
                 + (f"load {load:.2f} per core ({c.get('cores')} cores)" if isinstance(load, (int, float))
                    else "load ?")
                 + (f", CPU steal {steal * 100:.1f} %" if isinstance(steal, (int, float)) else ", steal unknown")
                 + (f", GPU {'/'.join(map(str, gpu))} % busy" if gpu else "")
                 + f", {c.get('other_boots') or 0} other live boot(s)")
    if j.get("contended"):
        t.append(f"\n  ⚠ contended ({printable(j['contended'])}): "
                 + ("judged anyway (--allow-contended)" if j.get("allow_contended")
                    else "left out of verdicts (rerun on a quiet host, or --allow-contended)"), style="yellow")
    return t


def run_header(run: dict[str, Any], boot: dict[str, Any] | None) -> Text:
    """Config name + hash, run state and step, host, boot id, ready time."""
    r = run
    t = Text()
    t.append(f"run {r['id']}", style="bold")
    style = {"completed": "green", "failed": "red", "interrupted": "yellow"}.get(r["state"], "")
    t.append(f"  [{r['state']}]", style=style)
    t.append(f"\nconfig {', '.join(r.get('labels') or []) or '-'}  {r.get('config_hash', '')}")
    if r.get("host_label"):
        t.append(f"\nhost   {r['host_label']}")
    if r.get("build_hash"):
        t.append(f"\nbuild  {r['build_hash']}")
    if r.get("error"):
        t.append(f"\nerror  {r['error']}", style="red")
    if (r.get("summary") or {}).get("env_warning"):
        t.append(f"\n{r['summary']['env_warning']}", style="yellow")
    for w in (r.get("summary") or {}).get("concurrent_boots") or []:
        t.append(f"\n⚠ {w}", style="yellow")
    if boot:
        b = boot.get("boot", boot)
        t.append(f"\nboot   {b.get('id')}  {b.get('engine')}  port {b.get('port')}  "
                 + ("attached (ready time unknown)" if b.get("kind") == "attached"
                    else f"ready {_ms(b['ready_s'])} s" if b.get("ready_s") is not None else "not ready")
                 + f"  [{b.get('state')}]")
        if b.get("failure_signature"):
            t.append(f"\nfailure signature: {b['failure_signature']}", style="red")
    return t


def phases_table(boot_detail: dict[str, Any]) -> FitTable | None:
    """Phase timeline: each phase's offset from spawn (s) with a bar."""
    phases = [e for e in boot_detail.get("events", []) if e.get("kind") == "phase"]
    if not phases:
        return None
    total = max((e["offset_s"] for e in phases), default=1.0) or 1.0
    t = _tbl("boot phases", "phase", "at (s)", "")
    for e in phases:
        name = f"{e['name']} ({e['model']})" if e.get("model") else e["name"]
        t.add_row(name, f"{e['offset_s']:.2f}", bar(e["offset_s"] / total, 24))
    return t


def health_table(boot_detail: dict[str, Any]) -> FitTable | None:
    """The newest health verdict with each check."""
    hist = boot_detail.get("health") or []
    if not hist:
        return None
    h = hist[-1]
    t = _tbl(f"health: {h['verdict']}" + (f" ({h['failed']})" if h.get("failed") else ""), "check", "ok", "latency ms",
             "reason")
    for c in (c for c in h.get("checks", []) if not str(c.get("name", "")).startswith("_")):
        t.add_row(str(c.get("name")), "yes" if c.get("ok") else "NO", _ms(c.get("latency_ms")),
                  Text(str(c.get("reason") or "")))
    return t


def bench_table(bench: list[dict[str, Any]]) -> FitTable | None:
    """Throughput and latency per level (ms percentiles p50/p90/p99). The title names the best whole-workload
    level (its concurrency and aggregate output tok/s — the run summary's ``best_output_tok_s``); ``decode
    tok/s/req`` is the mean per-request decode rate, not an aggregate."""
    if not bench:
        return None
    levels = [b for b in bench if not b.get("text_class")]
    best = max(levels, key=lambda b: b["output_tok_s"], default=None)
    title = "throughput and latency" + (f" (best: {best['output_tok_s']:.1f} out tok/s at c={best['concurrency']})"
                                        if best else "")
    t = _tbl(title, "level", "req", "fail", "out tok/s", "req/s", "TTFT p50/p90/p99 ms",
             "TPOT p50/p90/p99 ms", "ITL p50 ms", "e2e p50 ms", "prefill tok/s", "decode tok/s/req")

    def pct(d: dict[str, Any] | None) -> str:
        d = d or {}
        # issue 33: a percentile only where the sample supports it (p99 of 5 requests is their maximum)
        return "/".join(_ms(d.get(k)) if percentile_shown(q, d.get("n")) else "–"
                        for k, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)))

    for b in bench:
        label = f"c={b['concurrency']}" + (f" {b['text_class']}" if b.get("text_class") else "")
        t.add_row(label, str(b["num_requests"]), str(b.get("num_failed") or 0), f"{b['output_tok_s']:.1f}",
                  f"{b['request_throughput']:.2f}", pct(b.get("ttft_ms")), pct(b.get("tpot_ms")),
                  _ms((b.get("itl_ms") or {}).get("p50")), _ms((b.get("e2e_ms") or {}).get("p50")),
                  _ms(b.get("prefill_tok_s")), _ms(b.get("decode_tok_s")))
    return t


class Items:
    """Label–value items (``accept rate 0.374``, ``engine τ 2.144``) on a line, two spaces apart, wrapped
    at the width they are printed at *between* items, never inside one: a label stays with its value.
    Continuation lines are indented by ``indent``; an item wider than the whole line is folded."""

    def __init__(self, items: list[str], indent: int = 2) -> None:
        self.items = items
        self.indent = indent

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.cells import cell_len

        width, line = options.max_width, ""
        for item in self.items:
            joined = f"{line}  {item}" if line else item
            if line and cell_len(joined) > width:
                yield Text(line, overflow="fold")
                joined = " " * self.indent + item
            line = joined
        yield Text(line, overflow="fold")


def acceptance_panel(curves: list[dict[str, Any]]) -> Group | None:
    """Per text class: τ, accept rate, and bars of p_i (unconditional) and a_i (conditional)."""
    if not curves:
        return None
    parts: list[Any] = [Text("acceptance per text class (p_i unconditional, a_i conditional)", style="bold")]
    if any(str(c.get("engine_source") or "").startswith("vLLM") for c in curves):
        parts.append(Text("  vLLM: from /metrics counter deltas per class; vLLM's per-position acceptance rate is "
                          "unconditional (p_i = drafts with positions 1..i all accepted / drafts), engine τ from "
                          "its SpecDecoding log lines"))
    for c in curves:
        iv = c.get("tau_interval")
        items = [f"{c['text_class']}: τ {c['tau']:.3f}"
                 + (f" [{iv['lo']:.2f}, {iv['hi']:.2f}] n={iv['n']}" if iv else ""),
                 f"accept rate {c['accept_rate']:.3f}",
                 f"steps {c['steps']}", f"D {c['num_drafts']}"]
        if c.get("histogram"):  # an imported curve (counters, log lines) has none: not "histogram []"
            items.append(f"histogram [{','.join(map(str, c['histogram']))}]")
        if c.get("engine_tau") is not None:
            items.append(f"engine τ {c['engine_tau']:.3f}")
        parts.append(Items(items))
        if c.get("warning"):
            parts.append(Text(f"  warning: {c['warning']}", style="yellow"))
        for p in c.get("points", []):
            parts.append(Text(f"  p{p['position']} {p['p']:.3f} {bar(p['p'], 20):<20}  "
                              f"a{p['position']} {p['a']:.3f} {bar(p['a'], 20)}"))
    return Group(*parts)


def length_panel(by_length: dict[str, Any] | None) -> Group | None:
    """Acceptance by context length (issue 22, shape 5): per input-length bucket τ, p_i, the verify step, the
    break-even τ and the speed-up, then where speculation stops paying (the length to gate it from)."""
    if not by_length or not by_length.get("buckets"):
        return None
    t = FitTable("input tok", "prompt tok", "τ", "p_1..p_D", "verify ms", "τ break-even", "speed-up", "pays",
                 title="acceptance by context length (all classes per length)")
    for b in by_length["buckets"]:
        t.add_row(str(b["input_tokens"]), _ms(b.get("prompt_tokens")), f"{b['tau']:.2f}",
                  "/".join(f"{x:.2f}" for x in b.get("p") or []), _ms(b.get("verify_step_ms")),
                  "-" if b.get("breakeven_tau") is None else f"{b['breakeven_tau']:.2f}",
                  "-" if b.get("speedup") is None else f"{b['speedup']:.2f}×",
                  "-" if b.get("pays") is None else ("yes" if b["pays"] else "NO"))
    cross = by_length.get("crossover_tokens")
    if cross is not None and cross == by_length["buckets"][0]["input_tokens"]:
        line = Text("speculation pays at no length measured (see break-even)", style="red")
    elif cross is not None:
        line = Text(f"speculation stops paying from {cross} input tokens: gate it by length", style="red")
    elif by_length.get("plain_step_ms"):
        line = Text("speculation pays at every length measured", style="green")
    else:
        line = Text("speed-up unknown: no plain step time", style="yellow")
    return Group(t, line, Text(f"  {by_length.get('note')}"))


def profile_panel(profile: dict[str, Any] | None, phases_hint: str | None = None) -> Group | None:
    """Profile split as bars with %, totals, the speculative step's phases (:func:`phases_text`; ``phases_hint``
    when none is stored), and top kernels."""
    if not profile:
        return None
    if profile.get("state") == "failed":
        return Group(Text(f"profile failed: {profile.get('error')}", style="red"))
    parts: list[Any] = []
    head = (f"profile split ({profile.get('source')}; device {_ms(profile.get('device_ms'))} ms over "
            f"{_ms(profile.get('window_ms'))} ms window, busy {_ms(profile.get('busy_pct'))} %, "
            f"{profile.get('launches')} launches, {_ms(profile.get('ms_per_token'))} ms/token, "
            f"{_ms(profile.get('launches_per_token'))} launches/token, graph launches {profile.get('graph_launches')}")
    if profile.get("num_ranks") and profile["num_ranks"] > 1:
        head += f", {profile['num_ranks']} ranks, skew {_ms(profile.get('rank_skew'))}×"
    parts.append(Text(head + ")", style="bold"))
    for w in profile.get("warnings") or []:
        parts.append(Text(f"  warning: {w}", style="yellow"))
    if profile.get("splits"):
        busy = [sp for sp in profile["splits"] if sp.get("launches") or sp.get("ms")]
        parts.append(SplitLines(busy))
        idle = [sp["category"] for sp in profile["splits"] if sp not in busy]
        if idle:  # four all-zero lines on every CPU profile said nothing
            parts.append(Text(f"  no time in: {', '.join(idle)}", style="dim"))
    ph = phases_text(profile.get("phases"), hint=phases_hint)
    if ph is not None:
        parts.append(ph)
    ranks = profile.get("rank_splits") or []
    if len(ranks) > 1:
        t = _tbl("per rank (ms, % of the rank's device time)", "category",
                 *[f"rank {r['rank']}" for r in ranks])
        cats = [sp["category"] for sp in profile.get("splits", []) if sp.get("ms")]
        for cat in cats:
            cells = []
            for r in ranks:
                sp = next((x for x in r["splits"] if x["category"] == cat), None)
                cells.append(f"{sp['ms']:.2f} ({sp['pct']:.1f} %)" if sp else "-")
            t.add_row(cat, *cells)
        t.add_row(Text("device total", style="bold"), *[f"{r['device_ms']:.2f}" for r in ranks])
        parts.append(t)
    kernels = profile.get("kernels") or []
    if kernels:
        t = FitTable("kernel", "category", "ms", "launches", title="top kernels", shorten=("kernel",))
        for k in kernels[:20]:
            t.add_row(Text(shorten(k["name"], KERNEL_NAME_MAX)), k["category"], f"{k['ms']:.3f}", str(k["launches"]))
        parts.append(t)
    return Group(*parts)


def phases_text(phases: dict[str, Any] | None, *, hint: str | None = None) -> Group | Text | None:
    """The speculative step's phase split (``profile["phases"]``): a headline ``phases: verify 58 %, draft
    27 %, …``, then per phase % with a bar, ms, kernel launches and launches per output token, and one
    line per rank for several ranks; or why it is unavailable. With no split stored, ``hint`` (when
    given) is printed instead."""
    if not phases:
        return Text(f"phases: {hint}", style="yellow") if hint else None
    if phases.get("state") != "split":
        return Text(f"phases: unavailable: {phases.get('reason') or '-'}", style="yellow")
    rows = [p for p in phases.get("phases") or [] if p.get("pct") is not None and p.get("ms")]
    parts: list[Any] = [
        Text("phases: " + ", ".join(f"{p['label']} {p['pct']:.0f} %" for p in rows), style="bold"),
        Text(f"  ({phases.get('source')} time in steps {_ms(phases.get('total_ms'))} ms"
             + (f", {len(phases['ranks'])} ranks summed" if phases.get("ranks") else "")
             + "; per phase: ms, launches, per output token)"),
        PhaseLines([{"category": p["label"], "pct": p["pct"], "ms": p["ms"], "launches": p["launches"],
                     "per_token": p.get("launches_per_token")} for p in rows]),
    ]
    for r in phases.get("ranks") or []:
        parts.append(Text(f"  rank {r['rank']}: " + ", ".join(
            f"{p['label']} {p['pct']:.0f} %" for p in r["phases"] if p.get("pct") is not None and p.get("ms"))))
    return Group(*parts)


class SplitLines:
    """Profile split lines ``category  pct %  bar  ms  launches``, one per category.

    The bar takes what the console width leaves (up to :data:`BAR_WIDTH`, none below 4 cells), so
    a line never wraps ``launches`` onto a line of its own; below even that, ``key: value`` text.
    """

    def __init__(self, splits: list[dict[str, Any]]) -> None:
        self.splits = splits

    @staticmethod
    def _line(sp: dict[str, Any], bar_w: int) -> str:
        b = f"{bar(sp['pct'] / 100, bar_w):<{bar_w}} " if bar_w else ""
        return f"  {sp['category']:<14} {sp['pct']:5.1f} % {b}{sp['ms']:9.2f} ms {sp['launches']:6d} launches"

    def __rich_console__(self, console: Any, options: Any) -> Any:
        width = options.max_width
        fixed = max(len(self._line(sp, 0)) for sp in self.splits)
        bar_w = min(BAR_WIDTH, width - fixed - 1)
        for sp in self.splits:
            if bar_w >= 4:
                yield Text(self._line(sp, bar_w))
            elif fixed <= width:
                yield Text(self._line(sp, 0))
            else:
                yield Text(f"  {sp['category']}: {sp['pct']:.1f} %, {sp['ms']:.2f} ms, {sp['launches']} launches")


class PhaseLines(SplitLines):
    """:class:`SplitLines` of the phase split, each line ending in launches per output token."""

    @staticmethod
    def _line(sp: dict[str, Any], bar_w: int) -> str:
        per = "" if sp.get("per_token") is None else f" {sp['per_token']:6.1f}/tok"
        return SplitLines._line(sp, bar_w).replace(" launches", "") + per


def lossless_text(run: dict[str, Any]) -> Text | None:
    """``lossless: yes`` or the first divergence with both continuations."""
    if not run.get("lossless"):
        return None
    t = Text("lossless: ", style="bold")
    detail = run.get("lossless_detail") or {}
    if run["lossless"] == "near-tie" and detail.get("max_margin") is not None:
        t.append(f"near-tie (margin {detail['max_margin']:.3f})", style="yellow")
    else:
        t.append(run["lossless"], style="green" if run["lossless"] == "yes" else "red")
    for mm in detail.get("mismatches", [])[:3]:
        margin = (f" (top-2 margin {mm['margin']:.3f} nats)" if mm.get("margin") is not None
                  else f" (margin unknown: {mm['margin_unknown']})" if mm.get("margin_unknown") else "")
        t.append(f"\n  first diverging {mm['unit']} {mm['first_diverging_index']}{margin}: "
                 f"speculative {mm['speculative'][:60]!r} vs plain {mm['plain'][:60]!r}")
    return t


def breakeven_text(run: dict[str, Any]) -> Text | None:
    """Break-even: speculation pays while a speculative step < τ × plain step."""
    be = run.get("breakeven")
    if not be:
        return None
    pays = be.get("pays")
    verdict = be.get("verdict") or ("pays" if pays else "does NOT pay")
    t = Text("break-even: ", style="bold")
    # the interval (below) is the judgment; a bare "± band" read as run-to-run noise when it was not (issue 33)
    band = (f" ± {be['noise_band'] * 100:.1f} % noise" if be.get("noise_band") is not None and not be.get("interval")
            else "")
    t.append(f"spec step {be['spec_step_ms']:.2f} ms vs τ × plain step = {be['tau']:.3f} × {be['plain_step_ms']:.2f} "
             f"= {be['budget_ms']:.2f} ms → margin {be['margin'] * 100:+.1f} %{band} ")
    style = {"pays": "green", "does NOT pay": "red"}.get(verdict, "yellow")
    t.append(f"(speculation {verdict})" if verdict != "within noise" else "(within noise: neither pays nor loses)",
             style=style)
    if be.get("interval"):
        lo, hi = be["interval"]
        t.append(f"\n  margin interval [{lo * 100:+.1f} %, {hi * 100:+.1f} %] (95 %: {interval_basis(be)})")
        if be.get("decide"):
            t.append(f"; {be['decide']}", style="yellow")
    if be.get("plain_source"):
        age = be.get("plain_age_s")
        t.append(f"\n  plain step from: {be['plain_source']}"
                 + (f", measured {human_duration(age)} ago" if age is not None and age >= 60 else "")
                 + (" (reused: comparable host, load, version, workload)" if be.get("plain_reused") else ""))
        if be.get("plain_fresh_why"):
            t.append(f"\n  measured fresh: no comparable stored plain step ({be['plain_fresh_why']})")
    return t


def findings_table(findings: list[dict[str, Any]]) -> FitTable | None:
    """Doctor findings with evidence and linked entries."""
    if not findings:
        return None
    t = _tbl("doctor findings", "rule", "severity", "message", "entries")
    for f in findings:
        t.add_row(f["rule"], f["severity"], Text(f["message"]), ", ".join(f.get("entries") or []))
    return t


def steps_table(steps: list[dict[str, Any]]) -> FitTable:
    """Each step's state, seconds and error."""
    t = _tbl("steps", "step", "state", "s", "note")
    for s in steps:
        d = s.get("detail") or {}
        t.add_row(s["name"], s["state"], _ms(d.get("seconds")), Text(str(s.get("error") or "")))
    return t


def phases_hint(detail: dict[str, Any], ref: str | None = None) -> str | None:
    """For a speculative run (it has acceptance curves) whose profile has no phase split stored: how to get one
    (``dynocell reanalyze REF``; ``ref``: how the face names the run, its id by default)."""
    if not detail.get("curves"):
        return None
    return f"not computed for this profile: dynocell reanalyze {ref or detail['run']['id']}"


def run_report(detail: dict[str, Any], boot: dict[str, Any] | None) -> list[Any]:
    """The whole report of a run, as renderables in reading order."""
    run = detail["run"]
    items: list[Any] = [Panel(run_header(run, boot), expand=False)]
    jt = judgment_text(detail.get("judgment"))
    if jt is not None:
        items.append(jt)
    if boot:
        for x in (phases_table(boot), health_table(boot)):
            if x is not None:
                items.append(x)
    for part in (bench_table(detail.get("bench") or []), acceptance_panel(detail.get("curves") or []),
              length_panel(detail.get("by_length")), lossless_text(run),
              profile_panel(detail.get("profile"), phases_hint(detail)), breakeven_text(run),
              findings_table(detail.get("findings") or [])):
        if part is not None:
            items.append(part)
    items.append(steps_table(detail.get("steps") or []))
    return items


def command_lines(argv: str, width: int) -> str:
    """A stored engine command line (``argv``: the shell-quoted string a boot records) laid out for a
    terminal ``width`` columns wide: one line when it fits, else a new line before each option (its value
    stays beside it) joined with `` \\`` continuations, so the block still pastes into a shell as one command.
    """
    if len(argv) <= width:
        return argv
    lines: list[str] = []
    for word in argv.split(" "):
        if lines and not word.startswith("-"):
            lines[-1] += " " + word
        else:
            lines.append(("    " if lines else "") + word)
    return " \\\n".join(lines)
