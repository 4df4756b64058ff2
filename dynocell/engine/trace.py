"""Streaming Chrome-trace split by category (docs/DESIGN.md "Profiler split").

Input: a torch-profiler / Kineto Chrome trace (``*.trace.json.gz`` as SGLang's
``/start_profile`` writes it, or plain JSON), either the object form
``{"traceEvents": [...], ...}`` or the bare array form ``[...]``. It is read in
bounded memory whatever the file size (per event only a few numbers are kept;
per distinct name a small aggregate) by one of two readers feeding the same
accumulator (:class:`_Split`), so both give the same split to the last bit
(docs/trace.md): the fast reader (:mod:`dynocell.engine.trace_chunks`: msgspec
typed decode of only the needed fields over chunks of whole events, ~250 MiB of
JSON per CPU second) and, for any file it does not take, ``ijson`` (C backend
``yajl2_c`` when available) one event at a time under :class:`_Guard`.

What counts (complete events, ``"ph": "X"``, as Kineto writes them):
- GPU mode (any device event present): events with ``cat`` ``kernel``,
  ``gpu_memcpy`` or ``gpu_memset`` (case-insensitive). Their ``dur`` (µs) sums to
  ``device_ms``; the union of their intervals over the window [first start, last
  end] of device activity gives ``busy_pct``.
- CPU mode (no device event at all, e.g. the reference engine on CPU): ``cpu_op``
  events, by **self time** (duration minus direct children on the same thread,
  so ``aten::linear`` does not double count its ``aten::addmm``).
- ``graph_launches``: ``cudaGraphLaunch*`` runtime events (0 in an eager trace).

Categories come from ``trace_rules.toml`` (regex → category, first match wins).
Errors: :class:`TraceError` (a :class:`dynocell.errors.UserError`) naming the
file for a missing file, truncated gzip, invalid JSON, no ``traceEvents`` list,
and for a hostile file: one event over :data:`MAX_EVENT_BYTES`, one string or
number over :data:`MAX_VALUE_BYTES`, or nesting deeper than :data:`MAX_DEPTH` —
refused while streaming, in bounded memory and time.
"""

from __future__ import annotations

import gzip
import heapq
import math
import re
import tomllib
import zlib
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import accumulate
from pathlib import Path
from typing import Any, BinaryIO, cast

import ijson

from dynocell.engine.trace_chunks import Event, NotFast, event_chunks
from dynocell.errors import UserError
from dynocell.text import quoted_name

__all__ = [
    "CATEGORIES",
    "CategoryStat",
    "KernelStat",
    "RankedSplit",
    "Rules",
    "TraceError",
    "TraceSplit",
    "analyze_ranks",
    "analyze_trace",
    "load_rules",
    "per_token",
    "rank_of",
]

CATEGORIES: tuple[str, ...] = (
    "gemm", "attention", "moe", "router_topk", "elementwise", "norm",
    "communication", "memcpy_gather", "sampling", "other",
)
RULES_FILE = Path(__file__).with_name("trace_rules.toml")
DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
#: One trace event (or any stretch of the file between two events) larger than this is refused:
#: a real Kineto event is well under 1 MB, and ijson would hold a larger one whole in memory.
MAX_EVENT_BYTES = 8 << 20
#: One JSON string or number longer than this is refused: yajl re-reads a token that spans its
#: read buffers from the token's start, so its time grows with the square of the token's length.
MAX_VALUE_BYTES = 4 << 20
#: JSON nesting deeper than this is refused (a Chrome trace nests about 6 levels; ijson's
#: bookkeeping grows with the square of the depth, so 30 000 levels already take 2 GB).
MAX_DEPTH = 64
#: Kernel time, window or span (µs) beyond this is refused: 1e18 µs is 31,700 years, so no
#: profiler wrote it, and sums of such ``dur`` values overflow a float (inf, NaN percentages).
MAX_TRACE_US = 1e18

try:  # the C backend is ~10× faster than the pure-Python one
    _IJSON = ijson.get_backend("yajl2_c")
except Exception:  # pragma: no cover - depends on the wheel
    _IJSON = ijson


class TraceError(UserError):
    """A trace file that cannot be read: missing, truncated, not JSON, no ``traceEvents``."""


# --------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class Rules:
    """Ordered (compiled regex, category) pairs; :meth:`category` gives the first match or ``other``."""

    rules: tuple[tuple[re.Pattern[str], str], ...]

    def category(self, name: str) -> str:
        for rx, cat in self.rules:
            if rx.search(name):
                return cat
        return "other"


def load_rules(path: Path | None = None) -> Rules:
    """Load category rules from a TOML file (default: the bundled ``trace_rules.toml``).

    Format: ``[[rule]]`` tables with ``category`` (one of :data:`CATEGORIES`) and
    ``regex`` (Python syntax, matched case-insensitively with ``re.search``).
    Raises :class:`TraceError` naming the file and rule for a bad category or regex.
    """
    p = Path(path) if path is not None else RULES_FILE
    return _load_rules_cached(str(p))


@lru_cache(maxsize=8)
def _load_rules_cached(p: str) -> Rules:
    try:
        data = tomllib.loads(Path(p).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise TraceError(f"{quoted_name(p)}: cannot read trace category rules: {exc}") from None
    out = []
    for i, r in enumerate(data.get("rule", []), start=1):
        cat, rx = r.get("category"), r.get("regex")
        if cat not in CATEGORIES:
            raise TraceError(f"{quoted_name(p)}: rule {i}: category {cat!r} is not one of {', '.join(CATEGORIES)}")
        try:
            out.append((re.compile(rx, re.IGNORECASE), cat))
        except (re.error, TypeError) as exc:
            raise TraceError(f"{quoted_name(p)}: rule {i} ({cat}): bad regex {rx!r}: {exc}") from None
    return Rules(tuple(out))


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class CategoryStat:
    """One category of a split: ``ms`` (device or CPU self time), ``pct`` of the total, ``launches``."""

    category: str
    ms: float
    pct: float
    launches: int


@dataclass(frozen=True)
class KernelStat:
    """One kernel/op name: total ``ms``, ``pct`` of the total, ``launches``, ``category``, ``source``."""

    name: str
    category: str
    ms: float
    pct: float
    launches: int
    source: str


@dataclass(frozen=True)
class TraceSplit:
    """Category split of one trace.

    - ``source``: ``"kernel"`` (GPU device events) or ``"cpu_op"`` (CPU self time).
    - ``categories``: every category of :data:`CATEGORIES`, in that order (zeros kept).
    - ``device_ms``: Σ durations counted (GPU kernel + memcpy/memset time, or CPU self time), ms.
    - ``window_ms``: first start → last end of the counted events, ms.
    - ``busy_pct``: union of the counted intervals / window, % (overlapping
      kernels on several streams count once).
    - ``trace_span_ms``: first start → last end of every complete event (the
      whole profiler window, idle time included), ms.
    - ``launches``: counted events; ``graph_launches``: ``cudaGraphLaunch`` calls.
    - ``top``: the heaviest names (default 20); ``warnings``: skipped or odd events.
    """

    path: str
    source: str
    categories: tuple[CategoryStat, ...]
    device_ms: float
    window_ms: float
    busy_pct: float
    trace_span_ms: float
    launches: int
    graph_launches: int
    top: tuple[KernelStat, ...]
    events: int
    warnings: tuple[str, ...] = ()
    rank: int | None = None

    def category(self, name: str) -> CategoryStat:
        """The stat of category ``name`` (KeyError for an unknown category)."""
        for c in self.categories:
            if c.category == name:
                return c
        raise KeyError(name)

    def as_dict(self) -> dict[str, Any]:
        """Plain-JSON form."""
        return {
            "path": self.path, "source": self.source, "rank": self.rank,
            "categories": [c.__dict__ for c in self.categories],
            "device_ms": self.device_ms, "window_ms": self.window_ms, "busy_pct": self.busy_pct,
            "trace_span_ms": self.trace_span_ms, "launches": self.launches,
            "graph_launches": self.graph_launches, "events": self.events,
            "top": [k.__dict__ for k in self.top], "warnings": list(self.warnings),
        }


@dataclass(frozen=True)
class RankedSplit:
    """Per-rank splits of one profile window plus their combination.

    ``ranks``: splits sorted by rank; ``combined``: categories and top kernels
    summed over ranks (``device_ms`` summed, ``window_ms`` the longest,
    ``busy_pct`` the mean); ``rank_skew``: max / min ``device_ms`` over ranks
    (1.0 for one rank; ``inf`` when a rank has no device time).
    """

    ranks: tuple[TraceSplit, ...]
    combined: TraceSplit
    rank_skew: float


# --------------------------------------------------------------------------- reading


def _open(path: Path) -> BinaryIO:
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise TraceError(f"{quoted_name(path)}: cannot open trace: {exc.strerror or exc}") from None
    head = f.read(2)
    f.seek(0)
    if head == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=f, mode="rb")  # type: ignore[return-value]
    return f


class _Guard:
    """A read-only byte stream over a trace that refuses what would exhaust memory.

    ijson (yajl) keeps a whole value in memory until it ends, and its prefix
    bookkeeping grows with the square of the nesting depth. So, at C speed per
    chunk (regex and ``bytes.translate``, no per-byte Python): strings are cut
    out, the brackets left give the nesting depth (> :data:`MAX_DEPTH` is
    refused), one string or number longer than :data:`MAX_VALUE_BYTES` is
    refused, and more than :data:`MAX_EVENT_BYTES` read since the consumer's
    last :meth:`mark` (one event) is refused. Raises :class:`TraceError`.
    """

    _ESCAPE = re.compile(rb"\\.", re.S)  # a backslash and the byte it escapes (only valid inside strings)
    _NOT_SYNTAX = bytes(sorted(set(range(256)) - set(b'[]{}"')))
    _SIGN = bytes.maketrans(b"[]{}", b"\x01\xff\x01\xff")
    _DELIMITERS = tuple(bytes([c]) for c in b'"[]{},: \t\r\n')

    def __init__(self, f: BinaryIO, path: Path) -> None:
        self._f, self.path = f, path
        self.total = self.marked = self.depth = self.run = 0
        self.in_str = self.escaped = False

    def __enter__(self) -> "_Guard":
        return self

    def __exit__(self, *exc: Any) -> None:
        self._f.close()

    def mark(self) -> None:
        """An event ended: the byte budget of the next one starts here."""
        self.marked = self.total

    def read(self, n: int = -1) -> bytes:
        """Read like the wrapped file; raises TraceError past the size or depth limits."""
        chunk = self._f.read(n)
        if chunk:
            self.total += len(chunk)
            if self.total - self.marked > MAX_EVENT_BYTES:
                raise TraceError(
                    f"{self.path}: one trace event (or value) is larger than {MAX_EVENT_BYTES >> 20} MiB; "
                    "refused before it could fill memory",
                    "a real profiler event is under 1 MB: is this file a trace, and is it intact?")
            self._scan(chunk)
        return chunk

    def _scan(self, b: bytes) -> None:
        if self.escaped:  # the previous chunk ended in a lone backslash: it escapes this first byte
            b, self.escaped = b[1:], False
        if b"\\" in b:
            b = self._ESCAPE.sub(b"", b)  # escapes pair from the left, as JSON reads them
            if b.endswith(b"\\"):
                b, self.escaped = b[:-1], True
        # Now every quote opens or closes a string. Keep only quotes and brackets; two adjacent
        # quotes have no bracket between them, so dropping the pair changes nothing outside strings.
        k = b.translate(None, self._NOT_SYNTAX).replace(b'""', b"")
        if b'"' in k:
            parts = k.split(b'"')
            brackets = b"".join(parts[1::2] if self.in_str else parts[0::2])
            if len(parts) % 2 == 0:
                self.in_str = not self.in_str
        else:
            brackets = b"" if self.in_str else k
        # Bytes of the value still open at the end of the chunk (a string, or a number/literal).
        last = b.rfind(b'"') if self.in_str else max(b.rfind(d) for d in self._DELIMITERS)
        self.run = self.run + len(b) if last < 0 else len(b) - last - 1
        if self.run > MAX_VALUE_BYTES:
            raise TraceError(f"{self.path}: one JSON string or number is longer than {MAX_VALUE_BYTES >> 20} MiB; "
                             "not a profiler trace", "a real trace's names and values are short: is this file a trace?")
        if brackets:
            steps = array("b")
            steps.frombytes(brackets.translate(self._SIGN))
            peak = max(accumulate(steps, initial=self.depth))
            self.depth += sum(steps)
            if peak > MAX_DEPTH:
                raise TraceError(f"{self.path}: JSON nested more than {MAX_DEPTH} levels deep; not a Chrome trace",
                                 "a profiler trace nests about 6 levels: is this file a trace?")


def _first_byte(path: Path) -> bytes:
    """The first significant byte of the (decompressed) document: ``{``, ``[``, other, or ``b""`` if empty."""
    with _open(path) as f:
        head = f.read(4096)
    return head.lstrip(b" \t\r\n\xef\xbb\xbf")[:1]


_JSON_KINDS = {"start_map": "an object", "number": "a number", "string": "a string", "null": "null",
               "boolean": "a boolean"}


def iter_events(path: Path) -> Iterator[dict[str, Any]]:
    """Events of ``traceEvents`` (object form) or of the top-level array, streamed under a :class:`_Guard`."""
    first = _first_byte(path)
    if not first:
        raise TraceError(f"{quoted_name(path)}: trace file is empty",
                         "re-collect the trace; the profiler may not have written it yet")
    prefix = "item" if first == b"[" else "traceEvents.item"
    found = False
    with _Guard(_open(path), path) as g:
        for ev in _IJSON.items(g, prefix, use_float=True):
            found = True
            g.mark()
            yield ev
    if found or prefix == "item":
        return
    # Object form and not one event: an empty traceEvents list is fine; anything else is not a trace.
    with _Guard(_open(path), path) as g:
        events = _IJSON.parse(g)
        for pfx, event, value in events:
            g.mark()
            if pfx == "" and event == "map_key" and value == "traceEvents":
                kind = next(events, ("", "end", None))[1]
                if kind == "start_array":
                    return
                raise TraceError(f"{quoted_name(path)}: 'traceEvents' is {_JSON_KINDS.get(kind, kind)}, "
                                 "not a list of events",
                                 "expected a torch profiler / Kineto trace (*.trace.json[.gz])")
    raise TraceError(
        f"{quoted_name(path)}: not a Chrome trace: no 'traceEvents' list",
        "expected a torch profiler / Kineto trace (*.trace.json[.gz])",
    )


def rank_of(path: str | Path) -> int | None:
    """Rank from a trace file name, else ``None``: SGLang writes ``…-TP-<n>…``, vLLM 0.26's
    ``--profiler-config`` torch profiler ``rank<n>.<id>.pt.trace.json.gz`` (real files:
    tests/data/vllm-0.26.0/*.rank0.*.pt.trace.json.gz)."""
    name = Path(path).name
    m = re.search(r"(?:^|[-._])TP-(\d+)", name) or re.search(r"(?:^|[-._])rank(\d+)\.\d+\.pt\.trace\.json", name)
    return int(m.group(1)) if m else None


class _Union:
    """Union length of intervals arriving nearly sorted, in bounded memory.

    Intervals wait in a min-heap of at most ``horizon`` entries; the earliest
    leaves the heap into a running merged interval. An interval that starts
    before the already-emitted frontier (more than ``horizon`` events out of
    order) is clipped to the frontier and counted in ``late`` (the union is then
    approximate, and the split says so).
    """

    def __init__(self, horizon: int = 65536) -> None:
        self.heap: list[tuple[float, float]] = []
        self.horizon = horizon
        self.cur_s: float | None = None
        self.cur_e = -math.inf
        self.total = 0.0
        self.late = 0

    def add(self, s: float, e: float) -> None:
        heapq.heappush(self.heap, (s, e))
        if len(self.heap) > self.horizon:
            self._emit(*heapq.heappop(self.heap))

    def _emit(self, s: float, e: float) -> None:
        if self.cur_s is None:
            self.cur_s, self.cur_e = s, e
            return
        if s < self.cur_s:  # earlier than something already emitted
            self.late += 1
            s = self.cur_s
            if e <= s:
                return
        if s <= self.cur_e:
            if e > self.cur_e:
                self.cur_e = e
        else:
            self.total += self.cur_e - self.cur_s
            self.cur_s, self.cur_e = s, e

    def finish(self) -> float:
        while self.heap:
            self._emit(*heapq.heappop(self.heap))
        if self.cur_s is not None:
            self.total += self.cur_e - self.cur_s
            self.cur_s = None
        return self.total


class _Agg:
    __slots__ = ("dur", "n")

    def __init__(self) -> None:
        self.dur = 0.0
        self.n = 0


def _num(v: Any) -> float | None:
    """A finite float from a number or numeric string, else None (NaN and ±inf included)."""
    if isinstance(v, bool) or v is None:
        return None
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) else None


def _event(ev: dict[str, Any], ph_x: bool) -> tuple[Event, bool]:
    """One ijson-decoded event in the fast reader's typed shape, and whether its ts/dur are unusable.

    The shape keeps what the split reads: a ``name`` that is not a string becomes
    ``str(name)`` (``None`` stays ``None``), a ``ph``/``cat`` that is not a string
    becomes ``None``, ``ts``/``dur`` go through :func:`_num`. ``unusable``: an
    ``X`` event whose ``ts`` and ``dur`` are both given but one is not a finite number.
    """
    name = ev.get("name")
    ph = ev.get("ph")
    cat = ev.get("cat")
    ts, dur = _num(ev.get("ts")), _num(ev.get("dur"))
    unusable = ph_x and (ts is None or dur is None) and ev.get("ts") is not None and ev.get("dur") is not None
    return Event(
        name=name if name is None or isinstance(name, str) else str(name),
        ph=ph if isinstance(ph, str) else None,
        cat=cat if isinstance(cat, str) else None,
        ts=None if unusable else ts,
        dur=None if unusable else dur,
        pid=ev.get("pid"),
        tid=ev.get("tid"),
    ), unusable


class _Split:
    """Running state of one trace's split, fed events in file order (one pass, bounded memory).

    Both readers feed it :class:`~dynocell.engine.trace_chunks.Event` lists, so
    they count alike to the last bit (same float additions in the same order).
    """

    def __init__(self) -> None:
        self.dev: dict[str, _Agg] = {}
        self.cpu: dict[str, _Agg] = {}
        self.dev_union = _Union()
        self.cpu_union = _Union()
        self.dev_lo = self.cpu_lo = self.span_lo = math.inf
        self.dev_hi = self.cpu_hi = self.span_hi = -math.inf
        self.graph_launches = self.events = self.neg = self.unusable = self.cpu_unordered = 0
        # per-thread stacks of open cpu ops: [end, name, dur, child_dur]
        self.stacks: dict[Any, list[list[Any]]] = {}
        self.last_ts: dict[Any, float] = {}
        self.kinds: dict[str, int] = {}  # cat → 1 device, 2 cpu_op, 0 neither (case-insensitive)

    def _close_cpu(self, item: list[Any]) -> None:
        a = self.cpu.get(item[1])
        if a is None:
            a = self.cpu[item[1]] = _Agg()
        a.dur += max(0.0, item[2] - item[3])
        a.n += 1

    def feed(self, evs: Sequence[Event]) -> None:
        """Count ``evs`` (``ts``/``dur`` finite or ``None``). The hot loop: one pass, locals only."""
        dev, kinds = self.dev, self.kinds
        graph, neg = self.graph_launches, self.neg
        span_lo, span_hi = self.span_lo, self.span_hi
        for e in evs:
            name = e.name
            if name is not None and name.startswith("cudaGraphLaunch"):
                graph += 1
            if e.ph != "X":
                continue
            ts = e.ts
            dur = e.dur
            if ts is None or dur is None:
                continue
            if dur < 0:
                neg += 1
                continue
            end = ts + dur
            if ts < span_lo:
                span_lo = ts
            if end > span_hi:
                span_hi = end
            cat = e.cat
            if cat is None:
                continue
            kind = kinds.get(cat)
            if kind is None:
                kind = self._kind(cat)
            if kind == 1:
                name = "None" if name is None else name
                a = dev.get(name)
                if a is None:
                    a = dev[name] = _Agg()
                a.dur += dur
                a.n += 1
                self.dev_union.add(ts, end)
                if ts < self.dev_lo:
                    self.dev_lo = ts
                if end > self.dev_hi:
                    self.dev_hi = end
            elif kind == 2 and not dev:  # CPU ops only matter while no device event has been seen
                self._cpu_op("None" if name is None else name, ts, dur, end, (e.pid, e.tid))
        self.graph_launches, self.neg = graph, neg
        self.span_lo, self.span_hi = span_lo, span_hi

    def _kind(self, cat: str) -> int:
        """1 for a device category, 2 for ``cpu_op``, 0 for neither (case-insensitive); remembered."""
        lcat = cat.lower()
        kind = 1 if lcat in DEVICE_CATS else 2 if lcat == "cpu_op" else 0
        if len(self.kinds) < 256:  # a trace has a dozen categories; bounded whatever the file holds
            self.kinds[cat] = kind
        return kind

    def _cpu_op(self, name: str, ts: float, dur: float, end: float, tid: Any) -> None:
        stack = self.stacks.setdefault(tid, [])
        if ts < self.last_ts.get(tid, -math.inf):
            self.cpu_unordered += 1
        self.last_ts[tid] = ts
        while stack and stack[-1][0] <= ts:
            self._close_cpu(stack.pop())
        if stack:
            stack[-1][3] += dur
        stack.append([end, name, dur, 0.0])
        self.cpu_union.add(ts, end)
        if ts < self.cpu_lo:
            self.cpu_lo = ts
        if end > self.cpu_hi:
            self.cpu_hi = end

    def feed_items(self, items: Iterable[Any], batch: int = 4096) -> None:
        """Count JSON values as the ijson reader yields them (objects are events; others only count)."""
        evs: list[Event] = []
        for ev in items:
            self.events += 1
            if not isinstance(ev, dict):
                continue
            e, unusable = _event(ev, ev.get("ph") == "X")
            self.unusable += unusable
            evs.append(e)
            if len(evs) >= batch:
                self.feed(evs)
                evs = []
        self.feed(evs)

    def result(self, p: Path, top: int, rules: Rules) -> TraceSplit:
        """The split of everything fed (see :class:`TraceSplit`)."""
        warnings: list[str] = []
        if self.neg:
            warnings.append(f"{self.neg} event(s) with negative duration skipped")
        if self.unusable:
            warnings.append(f"{self.unusable} event(s) with a non-numeric or non-finite ts/dur skipped")
        if self.dev:
            source, aggs, union, lo, hi = "kernel", self.dev, self.dev_union, self.dev_lo, self.dev_hi
            for stack in self.stacks.values():
                stack.clear()
        else:
            for stack in self.stacks.values():
                while stack:
                    self._close_cpu(stack.pop())
            source, aggs, union, lo, hi = "cpu_op", self.cpu, self.cpu_union, self.cpu_lo, self.cpu_hi
            if self.cpu_unordered:
                warnings.append(f"{self.cpu_unordered} CPU op(s) out of time order on their thread; "
                                "self times approximate")
            if not self.cpu:
                warnings.append("trace holds neither GPU kernels nor CPU ops")
        busy_us = union.finish()
        if union.late:
            warnings.append(f"{union.late} event(s) far out of time order; busy % approximate")

        by_cat: dict[str, _Agg] = {c: _Agg() for c in CATEGORIES}
        cat_of: dict[str, str] = {}
        for nm, a in aggs.items():
            c = cat_of[nm] = rules.category(nm)
            by_cat[c].dur += a.dur
            by_cat[c].n += a.n
        try:
            total_us = math.fsum(a.dur for a in aggs.values())
        except OverflowError:  # the exact sum is past the float range
            total_us = math.inf
        launches = sum(a.n for a in aggs.values())
        window_us = hi - lo if hi > lo else 0.0
        span_lo, span_hi = self.span_lo, self.span_hi
        span_us = span_hi - span_lo if span_hi > span_lo else 0.0
        if not max(total_us, window_us, span_us) <= MAX_TRACE_US:
            raise TraceError(f"{quoted_name(p)}: event times add up to more than {MAX_TRACE_US:.0e} µs (31,700 years); "
                             "not a profiler trace", "a ts or dur in the file is corrupt: is it the trace "
                             "the profiler wrote?")

        def pct(x: float) -> float:
            return 100.0 * x / total_us if total_us > 0 else 0.0

        cats = tuple(CategoryStat(c, by_cat[c].dur / 1000.0, pct(by_cat[c].dur), by_cat[c].n) for c in CATEGORIES)
        heavy = heapq.nlargest(max(0, top), aggs.items(), key=lambda kv: kv[1].dur)
        tops = tuple(KernelStat(nm, cat_of[nm], a.dur / 1000.0, pct(a.dur), a.n, source) for nm, a in heavy)
        return TraceSplit(
            path=str(p),
            source=source,
            categories=cats,
            device_ms=total_us / 1000.0,
            window_ms=window_us / 1000.0,
            busy_pct=100.0 * busy_us / window_us if window_us > 0 else 0.0,
            trace_span_ms=span_us / 1000.0,
            launches=launches,
            graph_launches=self.graph_launches,
            top=tops,
            events=self.events,
            warnings=tuple(warnings),
            rank=rank_of(p),
        )


def _read_fast(p: Path) -> _Split:
    """Split ``p`` with the fast reader (:mod:`dynocell.engine.trace_chunks`); :class:`NotFast` if it does not
    take it."""
    split = _Split()
    try:
        with _open(p) as f:
            for evs in event_chunks(f, MAX_EVENT_BYTES):
                split.events += len(evs)
                split.feed(evs)
    except (EOFError, zlib.error, gzip.BadGzipFile, OSError) as exc:
        raise NotFast(f"read error: {exc}") from None  # the ijson reader words it
    return split


def _read_ijson(p: Path) -> _Split:
    """Split ``p`` with the ijson reader under :class:`_Guard` (exact errors and limits; ~4× slower)."""
    split = _Split()
    try:
        split.feed_items(iter_events(p))
    except TraceError:
        raise
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise TraceError(f"{quoted_name(p)}: trace is truncated or not valid gzip: {exc}",
                         "the profiler may still be writing it, or the copy was cut short") from None
    except ijson.JSONError as exc:
        raw = exc.args[0] if exc.args else ""
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(exc)
        msg = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
        if "premature EOF" in msg or "Incomplete JSON" in msg:
            raise TraceError(f"{quoted_name(p)}: trace is not complete JSON (truncated?): {msg}",
                             "re-collect the trace; a profile window still being written looks like this") from None
        raise TraceError(f"{quoted_name(p)}: trace is not valid JSON: {msg}",
                         "expected a torch profiler / Kineto trace (*.trace.json[.gz])") from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"{quoted_name(p)}: trace is not UTF-8 JSON text: {exc}") from None
    except OSError as exc:
        raise TraceError(f"{quoted_name(p)}: cannot read trace: {exc}") from None
    return split


def analyze_trace(path: str | Path, top: int = 20, rules: Rules | None = None, *, fast: bool = True) -> TraceSplit:
    """Category split of one Chrome trace file (gzipped or plain), streamed.

    ``top``: how many heaviest kernels/ops to list. ``rules``: category rules
    (default :func:`load_rules`). Times in the result are ms; the trace's ``ts``
    and ``dur`` are µs (Chrome trace format). Events with negative or missing
    durations are skipped and counted in ``warnings``.

    Read with the fast reader (msgspec over chunks of whole events, ~3-4× the
    ijson reader) when it takes the file, else (``fast=False`` too) with the
    ijson reader; both give the same split to the last bit.

    Raises :class:`TraceError` naming the file for a missing/unreadable file, a
    truncated gzip, invalid JSON, or a JSON document without ``traceEvents``.
    """
    p = Path(path)
    rules = rules or load_rules()
    if fast:
        try:
            return _read_fast(p).result(p, top, rules)
        except NotFast:
            pass
    return _read_ijson(p).result(p, top, rules)


def _combine(splits: Sequence[TraceSplit], top: int) -> TraceSplit:
    total = math.fsum(s.device_ms for s in splits)

    def pct(x: float) -> float:
        return 100.0 * x / total if total > 0 else 0.0

    cats = []
    for c in CATEGORIES:
        ms = math.fsum(s.category(c).ms for s in splits)
        cats.append(CategoryStat(c, ms, pct(ms), sum(s.category(c).launches for s in splits)))
    kern: dict[tuple[str, str], list[Any]] = {}
    for s in splits:
        for k in s.top:
            e = kern.setdefault((k.name, k.source), [k.category, 0.0, 0])
            e[1] += k.ms
            e[2] += k.launches
    heavy = heapq.nlargest(top, kern.items(), key=lambda kv: kv[1][1])
    sources = {s.source for s in splits}
    return TraceSplit(
        path=", ".join(s.path for s in splits),
        source=sources.pop() if len(sources) == 1 else "mixed",
        categories=tuple(cats),
        device_ms=total,
        window_ms=max((s.window_ms for s in splits), default=0.0),
        busy_pct=math.fsum(s.busy_pct for s in splits) / len(splits) if splits else 0.0,
        trace_span_ms=max((s.trace_span_ms for s in splits), default=0.0),
        launches=sum(s.launches for s in splits),
        graph_launches=sum(s.graph_launches for s in splits),
        top=tuple(KernelStat(n, v[0], v[1], pct(v[1]), v[2], src) for (n, src), v in heavy),
        events=sum(s.events for s in splits),
        warnings=tuple(f"rank {s.rank}: {w}" for s in splits for w in s.warnings),
        rank=None,
    )


def analyze_ranks(paths: Iterable[str | Path], top: int = 20, rules: Rules | None = None) -> RankedSplit:
    """Split each rank's trace and combine them (issue 11 "Per-rank profiles").

    Rank = ``-TP-<n>`` in the file name; files without one get the next free
    rank in the given order (with a warning). The combined top list is built from
    each rank's top ``top`` (a name outside every rank's top is not counted there).
    Raises :class:`TraceError` for no paths, duplicate ranks or any unreadable trace.
    """
    ps = [Path(x) for x in paths]
    if not ps:
        raise TraceError("no trace files given", "a profile window writes one trace per rank")
    splits = [analyze_trace(x, top=top, rules=rules) for x in ps]
    used = {s.rank for s in splits if s.rank is not None}
    fixed = []
    nxt = 0
    for s in splits:
        if s.rank is None:
            while nxt in used:
                nxt += 1
            used.add(nxt)
            s = replace(s, rank=nxt, warnings=s.warnings + (f"no -TP-<n> in file name; rank {nxt} assumed",))
        fixed.append(s)
    ranks = [s.rank for s in fixed if s.rank is not None]  # all of them: the loop above gave each a rank
    if len(set(ranks)) != len(ranks):
        dup = sorted({r for r in ranks if ranks.count(r) > 1})
        raise TraceError(
            f"traces of the same rank given twice: rank(s) {dup} in {', '.join(map(str, ps))}",
            "pass one trace per rank of one profile window",
        )
    fixed.sort(key=lambda s: cast(int, s.rank))  # every rank is set by the loop above
    dms = [s.device_ms for s in fixed]
    skew = 1.0 if len(dms) == 1 else (max(dms) / min(dms) if min(dms) > 0 else math.inf)
    return RankedSplit(tuple(fixed), _combine(fixed, top), skew)


def per_token(split: TraceSplit, output_tokens: int) -> dict[str, float]:
    """Cost per output token of a profile window.

    Returns ``{"ms_per_token": device_ms / tokens, "launches_per_token":
    launches / tokens, "window_ms_per_token": window_ms / tokens}``. Raises
    :class:`UserError` when ``output_tokens`` ≤ 0 (no tokens in the window).
    """
    if output_tokens <= 0:
        raise UserError(
            f"output tokens in the profile window must be > 0, got {output_tokens}",
            "the profile window saw no decode steps; profile under load",
        )
    return {
        "ms_per_token": split.device_ms / output_tokens,
        "launches_per_token": split.launches / output_tokens,
        "window_ms_per_token": split.window_ms / output_tokens,
    }
