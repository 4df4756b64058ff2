"""Where a speculative step's time goes: draft forward, draft extend, target verify, sampling / accept,
glue — from a torch-profiler trace's CPU-side ranges and the kernels they launched (issue 24 item 7).

The range names and the kernel patterns live in ``spec_phases.toml`` (data, not code; sources there:
SGLang 0.5.17 ``spec_stage_span`` / ``profile_range`` / ``scheduler_nvtx_method``). A kernel belongs
to the innermost phase range that contains its launch (the ``cuda_runtime`` / ``cuda_driver`` event
with the same ``args.correlation``) on the launching thread; a kernel outside every phase range is
``sampling`` when its name matches the sampling patterns, else ``glue`` when launched inside a step
envelope (``scheduler.run_batch``) or with no envelope in the trace at all, else ``outside``. GPU time
is the kernels' summed duration. A trace with no kernels (CPU only, the reference engine on CPU) is
split the same way over its CPU ops (``cat`` ``cpu_op``): the summed durations of each thread's
outermost ops, so nested ops are not counted twice.

This is what HTA and trace viewers lack: the step's time per speculative phase, next to the kernel
categories of :mod:`dynocell.engine.trace`.

What a run's report stores is :func:`phase_report`: the split of every rank's trace, combined (summed
over ranks, like the kernel categories), with kernels per output token per phase — or, for a
speculative run whose trace has no phase ranges, the reason the split is unavailable (the engine's
own reason from the table's ``[[unavailable]]`` entries, e.g. vLLM 0.26.0, else the missing ranges).

Public API: :class:`PhaseSplit`, :func:`split_phases`, :func:`load_phase_table`, :func:`combine`,
:func:`phase_report`, :data:`LABELS`.
"""

from __future__ import annotations

import bisect
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dynocell.engine.trace import TraceError, iter_events

TABLE = Path(__file__).with_name("spec_phases.toml")
#: Phases in report order; ``glue`` and ``outside`` are what no range or pattern claims.
ORDER = ("draft_forward", "draft_extend", "target_verify", "sampling", "glue", "outside")
#: The phases' names in reports (``verify 58 %, draft 27 %, …``).
LABELS = {"draft_forward": "draft", "draft_extend": "draft extend", "target_verify": "verify",
          "sampling": "sampling", "glue": "glue", "outside": "outside the steps"}


@dataclass(frozen=True)
class PhaseTable:
    """Compiled ``spec_phases.toml``: ``ranges`` [(phase, regex)], ``kernels`` [(phase, regex)], ``envelope``;
    ``unavailable`` [(engine, signature regex, reason)]: engines whose traces carry no phase ranges."""

    ranges: tuple[tuple[str, re.Pattern[str]], ...]
    kernels: tuple[tuple[str, re.Pattern[str]], ...]
    envelope: tuple[re.Pattern[str], ...]
    unavailable: tuple[tuple[str, re.Pattern[str], str], ...] = ()

    def reason_for(self, engine: str | None) -> str | None:
        """The table's reason why ``engine``'s traces give no phase split, or None."""
        return next((why for eng, _, why in self.unavailable if eng == engine), None)


def load_phase_table(path: Path | None = None) -> PhaseTable:
    """Read a phase table (default: the bundled ``spec_phases.toml``). Raises :class:`TraceError` if malformed."""
    p = path or TABLE
    try:
        data = tomllib.loads(p.read_text())
        ranges = tuple((ph["name"], re.compile(rx)) for ph in data["phase"] for rx in ph.get("ranges", []))
        kernels = tuple((ph["name"], re.compile(rx)) for ph in data["phase"] for rx in ph.get("kernels", []))
        env = tuple(re.compile(rx) for rx in data.get("envelope", []))
        unavailable = tuple((u["engine"], re.compile(u["signature"]), " ".join(u["reason"].split()))
                            for u in data.get("unavailable", []))
    except (OSError, KeyError, TypeError, AttributeError, re.error, tomllib.TOMLDecodeError) as exc:
        raise TraceError(f"{p}: bad phase table: {exc}", "fix spec_phases.toml (see its header)") from None
    return PhaseTable(ranges, kernels, env, unavailable)


@dataclass
class PhaseSplit:
    """Time per phase of the speculative steps in one trace.

    ``ms``: {phase: milliseconds} (GPU kernel time, or CPU op time when ``source`` is ``"cpu"``);
    ``launches``: {phase: kernels (or CPU ops) counted}; ``ranges``: {phase: number of CPU ranges seen};
    ``source``: ``"gpu"`` | ``"cpu"``; ``engines``: {engine: ranges seen matching an ``[[unavailable]]``
    signature of the table} (e.g. ``{"vllm": 47}`` for a vLLM 0.26.0 trace).
    """

    ms: dict[str, float] = field(default_factory=dict)
    launches: dict[str, int] = field(default_factory=dict)
    ranges: dict[str, int] = field(default_factory=dict)
    source: str = "gpu"
    engines: dict[str, int] = field(default_factory=dict)

    @property
    def total_ms(self) -> float:
        """Time of the speculative steps: every phase but ``outside``."""
        return sum(v for k, v in self.ms.items() if k != "outside")

    def percent(self) -> dict[str, float]:
        """{phase: % of :attr:`total_ms`} for the phases inside the steps."""
        t = self.total_ms
        return {k: (100.0 * v / t if t else 0.0) for k, v in self.ms.items() if k != "outside"}

    def line(self) -> str:
        """One line for a report, e.g. ``verify 58 %, draft 27 %, sampling 9 %, glue 6 %``."""
        pct = self.percent()
        return ", ".join(f"{LABELS[k]} {pct[k]:.0f} %" for k in ORDER if k in pct and self.ms.get(k))


class _Ranges:
    """Phase ranges of one thread, searchable by time (innermost = shortest containing)."""

    def __init__(self) -> None:
        self.items: list[tuple[float, float, str]] = []
        self.starts: list[float] = []

    def finish(self) -> None:
        self.items.sort()
        self.starts = [s for s, _, _ in self.items]

    def phase_at(self, t: float) -> str | None:
        best = None
        i = bisect.bisect_right(self.starts, t)
        for s, e, ph in reversed(self.items[:i]):
            if s <= t <= e and (best is None or e - s < best[1] - best[0]):
                best = (s, e, ph)
        return best[2] if best else None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


@dataclass
class _TraceEvents:
    """The events of one trace that the split needs, gathered in one pass.

    ``ranges`` / ``envelopes``: {thread: phase ranges / step envelopes}; ``launches``: {correlation: (thread, ts)};
    ``kernels``: [(correlation, dur, name)]; ``ops``: [(thread, ts, dur, name)] (CPU ops);
    ``seen``: {phase: number of ranges}.
    """

    ranges: dict[Any, _Ranges] = field(default_factory=dict)
    envelopes: dict[Any, _Ranges] = field(default_factory=dict)
    launches: dict[Any, tuple[Any, float]] = field(default_factory=dict)
    kernels: list[tuple[Any, float, str]] = field(default_factory=list)
    ops: list[tuple[Any, float, float, str]] = field(default_factory=list)
    seen: dict[str, int] = field(default_factory=dict)
    engines: dict[str, int] = field(default_factory=dict)

    def add_annotation(self, tb: PhaseTable, tid: Any, ts: float, dur: float, name: str) -> None:
        """Record a CPU-side ``user_annotation`` range: a phase range, a step envelope, or nothing."""
        phase = next((ph for ph, rx in tb.ranges if rx.search(name)), None)
        if phase is not None:
            self.ranges.setdefault(tid, _Ranges()).items.append((ts, ts + dur, phase))
            self.seen[phase] = self.seen.get(phase, 0) + 1
        elif any(rx.search(name) for rx in tb.envelope):
            self.envelopes.setdefault(tid, _Ranges()).items.append((ts, ts + dur, "envelope"))
        else:
            engine = next((eng for eng, rx, _ in tb.unavailable if rx.search(name)), None)
            if engine is not None:
                self.engines[engine] = self.engines.get(engine, 0) + 1

    def add(self, tb: PhaseTable, ev: Any) -> None:
        """Record one trace event if it is a complete (``ph`` ``X``) event the split uses; ignore it otherwise."""
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            return
        ts, dur = _num(ev.get("ts")), _num(ev.get("dur"))
        if ts is None or dur is None:
            return
        cat, name, tid = str(ev.get("cat", "")), str(ev.get("name", "")), (ev.get("pid"), ev.get("tid"))
        args = ev.get("args")
        args = args if isinstance(args, dict) else {}
        if cat == "user_annotation":
            self.add_annotation(tb, tid, ts, dur, name)
        elif cat in ("cuda_runtime", "cuda_driver"):
            corr = args.get("correlation")
            if corr is not None:
                self.launches[corr] = (tid, ts)
        elif cat == "kernel":
            self.kernels.append((args.get("correlation"), dur, name))
        elif cat == "cpu_op":
            self.ops.append((tid, ts, dur, name))

    def finish(self) -> None:
        """Sort every thread's ranges and envelopes for the time look-ups."""
        for r in (*self.ranges.values(), *self.envelopes.values()):
            r.finish()


def _place(tb: PhaseTable, evs: _TraceEvents, tid: Any, t: float, name: str) -> str:
    """The phase of a kernel (or CPU op) ``name`` launched at ``t`` on thread ``tid``.

    The innermost phase range containing the launch; else a kernel pattern's phase; else ``glue`` inside a
    step envelope (or when the trace has no envelope at all), ``outside`` otherwise.
    """
    r = evs.ranges.get(tid)
    ph = r.phase_at(t) if r else None
    if ph is not None:
        return ph
    if any(rx.search(name) for _, rx in tb.kernels):
        return next(p for p, rx in tb.kernels if rx.search(name))
    env = evs.envelopes.get(tid)
    return "glue" if (not evs.envelopes or (env and env.phase_at(t))) else "outside"


def _add(out: PhaseSplit, ph: str, dur_us: float) -> None:
    """Count one kernel (or CPU op) of ``dur_us`` microseconds in phase ``ph``."""
    out.ms[ph] = out.ms.get(ph, 0.0) + dur_us / 1000.0
    out.launches[ph] = out.launches.get(ph, 0) + 1


def _split_kernels(tb: PhaseTable, evs: _TraceEvents, out: PhaseSplit) -> None:
    """GPU split: each kernel in the phase of its launch (``outside`` when its launch is not in the trace)."""
    for corr, dur, name in evs.kernels:
        tid, t = evs.launches.get(corr, (None, -1.0))
        _add(out, _place(tb, evs, tid, t, name) if tid is not None else "outside", dur)


def _split_cpu_ops(tb: PhaseTable, evs: _TraceEvents, out: PhaseSplit) -> None:
    """CPU-only split: the outermost ops of each thread (an op inside another op is the parent's time)."""
    by_tid: dict[Any, list[tuple[float, float, str]]] = {}
    for tid, ts, dur, name in evs.ops:
        by_tid.setdefault(tid, []).append((ts, dur, name))
    for tid, lst in by_tid.items():
        lst.sort(key=lambda x: (x[0], -x[1]))
        end = -1.0
        for ts, dur, name in lst:
            if ts < end:
                continue
            end = ts + dur
            _add(out, _place(tb, evs, tid, ts, name), dur)


def split_phases(path: str | Path, table: PhaseTable | None = None) -> PhaseSplit:
    """Split the speculative steps of the trace at ``path`` (Chrome trace JSON, gzipped or not) by phase.

    Raises :class:`TraceError` for a file that is not a trace (see :mod:`dynocell.engine.trace`).
    """
    tb = table or load_phase_table()
    evs = _TraceEvents()
    for ev in iter_events(Path(path)):
        evs.add(tb, ev)
    evs.finish()
    out = PhaseSplit(ranges=evs.seen, engines=evs.engines)
    if evs.kernels:
        _split_kernels(tb, evs, out)
        return out
    out.source = "cpu"
    _split_cpu_ops(tb, evs, out)
    return out


def combine(splits: list[PhaseSplit]) -> PhaseSplit:
    """The splits of one window's ranks summed phase by phase (ms, launches, ranges, engines), as the kernel
    categories are combined (:func:`dynocell.engine.trace.analyze_ranks`). ``source``: the ranks' source,
    ``"mixed"`` when they differ."""
    out = PhaseSplit()
    for sp in splits:
        for attr in ("ms", "launches", "ranges", "engines"):
            acc = getattr(out, attr)
            for k, v in getattr(sp, attr).items():
                acc[k] = acc.get(k, 0) + v
    sources = {sp.source for sp in splits}
    out.source = sources.pop() if len(sources) == 1 else "mixed"
    return out


def _rows(sp: PhaseSplit, output_tokens: int | None) -> list[dict[str, Any]]:
    """One dict per phase present, in :data:`ORDER`: ``{phase, label, ms, pct, launches, launches_per_token,
    ranges}``; ``pct`` is None for ``outside`` (not part of the steps), ``launches_per_token`` None without
    output tokens."""
    pct = sp.percent()
    return [{"phase": ph, "label": LABELS[ph], "ms": sp.ms[ph], "pct": pct.get(ph),
             "launches": sp.launches.get(ph, 0),
             "launches_per_token": sp.launches.get(ph, 0) / output_tokens if output_tokens else None,
             "ranges": sp.ranges.get(ph, 0)}
            for ph in ORDER if ph in sp.ms]


def _missing_ranges(tb: PhaseTable) -> str:
    names = ", ".join(dict.fromkeys(rx.pattern for _, rx in tb.ranges))
    return ("the trace holds none of the speculative-phase ranges spec_phases.toml names (regexes "
            f"{names}; SGLang 0.5.17 records them under the torch profiler), so there is no phase split to give")


def phase_report(paths: list[Path], *, engine: str | None = None, speculative: bool | None = None,
                 output_tokens: int | None = None, table: PhaseTable | None = None) -> dict[str, Any] | None:
    """The phase split of one profile window's traces (one file per rank), as stored with the profile.

    Returns ``{state, source, total_ms, phases, reason, ranks}``: ``state`` ``"split"`` when any phase range
    is in the traces (``phases``: :func:`_rows` of the ranks combined, ``total_ms`` the steps' time,
    ``ranks``: ``[{rank, total_ms, phases}]`` when there are several files), or ``"unavailable"`` with
    ``reason`` when the run is speculative (``speculative`` True), or unknown but the traces carry another
    engine's step signature (``[[unavailable]]``), and no phase range is there. Returns None for a run
    known not to be speculative, or an unknown one whose trace has neither: nothing to say. ``engine``:
    the config's engine kind (``sglang``, ``vllm``, ``reference``) when known. ``output_tokens``: the
    window's completion tokens (kernels per output token per phase). Raises :class:`TraceError` for a
    file that is not a trace.
    """
    from dynocell.engine.trace import rank_of

    tb = table or load_phase_table()
    per = [(rank_of(p) if rank_of(p) is not None else i, split_phases(p, tb)) for i, p in enumerate(paths)]
    both = combine([sp for _, sp in per])
    head: dict[str, Any] = {"source": both.source, "total_ms": None, "phases": [], "reason": None, "ranks": []}
    if any(both.ranges.values()):
        ranks = [{"rank": rk, "total_ms": sp.total_ms, "phases": _rows(sp, None)} for rk, sp in per] \
            if len(per) > 1 else []
        return {**head, "state": "split", "total_ms": both.total_ms, "phases": _rows(both, output_tokens),
                "ranks": ranks}
    seen = next(iter(both.engines), None)
    if speculative is False or (speculative is None and seen is None):
        return None
    reason = tb.reason_for(engine) or tb.reason_for(seen) or _missing_ranges(tb)
    return {**head, "state": "unavailable", "reason": reason}
