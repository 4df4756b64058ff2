"""Trace split readers (issue 19): the fast reader (msgspec over whole-event chunks) and the ijson
reader give the same split to the last bit, and both agree with a plain-``json`` reference
computed here, on every real trace and on generated ones; odd files go to the ijson reader."""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynocell.engine import trace, trace_chunks
from dynocell.engine.trace import TraceError, analyze_trace

DATA = Path(__file__).parent / "data"
ARTIFACTS = Path("/work/shared/gpu/artifacts")  # the real engine artifacts, where this machine has them
_BROKEN = {"truncated.trace.json.gz", "not-json.trace.json.gz"}  # tests/data/traces: error cases
# Every real trace once (tests/data holds copies of some artifacts).
REAL = list({(p.name, p.stat().st_size): p for p in sorted(ARTIFACTS.rglob("*trace.json.gz")) +
             sorted(DATA.rglob("*trace.json.gz")) if "bad" not in p.parts and p.name not in _BROKEN}.values())
ALL = 10**6  # top: every name


def reference(path: Path) -> dict[str, Any]:
    """The GPU split computed the plain way: ``json`` loads the whole file, intervals merged after a sort."""
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    doc = json.loads(raw)
    events = doc if isinstance(doc, list) else doc["traceEvents"]
    per: dict[str, list[Any]] = {}
    spans, dev = [], []
    graph = neg = 0
    for ev in events:
        if not isinstance(ev, dict):
            continue
        name = ev.get("name")
        graph += isinstance(name, str) and name.startswith("cudaGraphLaunch")
        ts, dur = ev.get("ts"), ev.get("dur")
        if ev.get("ph") != "X" or type(ts) not in (int, float) or type(dur) not in (int, float):
            continue
        if dur < 0:
            neg += 1
            continue
        ts, dur = float(ts), float(dur)
        spans.append((ts, ts + dur))
        cat = ev.get("cat")
        if isinstance(cat, str) and cat.lower() in ("kernel", "gpu_memcpy", "gpu_memset"):
            a = per.setdefault(name if isinstance(name, str) else str(name), [0.0, 0])
            a[0] += dur
            a[1] += 1
            dev.append((ts, ts + dur))
    busy, cur = 0.0, None
    for s, e in sorted(dev):
        if cur is not None and s <= cur[1]:
            cur[1] = max(cur[1], e)
            continue
        if cur is not None:
            busy += cur[1] - cur[0]
        cur = [s, e]
    if cur is not None:
        busy += cur[1] - cur[0]
    lo, hi = min(s for s, _ in dev), max(e for _, e in dev)
    span = max(e for _, e in spans) - min(s for s, _ in spans)
    return {
        "events": len(events), "graph_launches": graph, "negative": neg,
        "kernels": {n: (d / 1000.0, k) for n, (d, k) in per.items()},
        "device_ms": math.fsum(d for d, _ in per.values()) / 1000.0,
        "window_ms": max(hi - lo, 0.0) / 1000.0, "busy_pct": 100.0 * busy / (hi - lo) if hi > lo else 0.0,
        "trace_span_ms": max(span, 0.0) / 1000.0,
    }


def as_reference(s: trace.TraceSplit) -> dict[str, Any]:
    neg = [w for w in s.warnings if "negative duration" in w]
    return {
        "events": s.events, "graph_launches": s.graph_launches,
        "negative": int(neg[0].split()[0]) if neg else 0,
        "kernels": {k.name: (k.ms, k.launches) for k in s.top},
        "device_ms": s.device_ms, "window_ms": s.window_ms, "busy_pct": s.busy_pct,
        "trace_span_ms": s.trace_span_ms,
    }


@contextmanager
def block(n: int) -> Iterator[None]:
    """Small blocks: many cuts per file, seams across block ends (a setting of the reader, not a stand-in)."""
    saved = trace_chunks.BLOCK_BYTES
    trace_chunks.BLOCK_BYTES = n
    try:
        yield
    finally:
        trace_chunks.BLOCK_BYTES = saved


def both(path: Path) -> dict[str, Any]:
    """The fast reader's split (which must take the file) and the ijson reader's: identical."""
    trace._read_fast(path)  # raises NotFast if the fast reader stepped aside
    fast = analyze_trace(path, top=ALL).as_dict()
    slow = analyze_trace(path, top=ALL, fast=False).as_dict()
    assert fast == slow
    return fast


def test_real_traces_are_there():
    assert len(REAL) >= 12, REAL


@pytest.mark.parametrize("path", REAL, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_real_trace_same_split_from_both_readers_and_the_reference(path):
    fast = analyze_trace(path, top=ALL)
    trace._read_fast(path)  # the fast reader takes every real trace
    assert fast.as_dict() == analyze_trace(path, top=ALL, fast=False).as_dict()
    if fast.as_dict()["source"] == "cpu_op":  # a CPU-only torch trace: no device split to recompute here
        return  # (its CPU split has its own plain reference: test_trace.py::test_real_torch_cpu_trace)
    assert as_reference(fast) == reference(path)  # exact floats: same additions, same order


def test_small_blocks_cut_a_real_trace_the_same(tmp_path):
    path = DATA / "sglang-0.5.17" / "A.1796009075.4916983-TP-0.trace.json.gz"
    want = analyze_trace(path, top=ALL).as_dict()
    with block(1000):  # smaller than some events: blocks end inside events and inside seams
        got = analyze_trace(path, top=ALL).as_dict()
    assert got == want
    minified = tmp_path / "A-TP-0.json"  # no whitespace at all: seams are "},{"
    minified.write_text(json.dumps(json.loads(gzip.decompress(path.read_bytes())), separators=(",", ":")))
    with block(777):
        got = both(minified)
    assert {k: v for k, v in got.items() if k != "path"} == {k: v for k, v in want.items() if k != "path"}


def kernel(name: Any = "gemm_kernel", ts: Any = 10, dur: Any = 5, **kw: Any) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur, "pid": 0, "tid": 7,
            "args": {"grid": [1, 2, 3]}, **kw}


def write(tmp_path: Path, doc: Any, name: str = "t.json", text: str | None = None) -> Path:
    p = tmp_path / name
    p.write_text(text if text is not None else json.dumps(doc, indent=1), encoding="utf-8")
    return p


def test_seam_lookalikes_inside_events(tmp_path):
    """``}, {`` inside strings and inside nested args is no event boundary; neither are ``}]``."""
    evs = [kernel(name="a}, {b", ts=i * 10, args={"x": [{"a": 1}, {"b": "}, {"}], "y": "}]"}) for i in range(50)]
    doc = {"deviceProperties": [{"id": 0}], "traceEvents": evs, "distributedInfo": {"pg": [{"r": [0]}, {"r": [1]}]}}
    with block(64):
        s = both(write(tmp_path, doc))
    assert s["launches"] == 50 and s["top"][0]["name"] == "a}, {b"


def test_keys_around_trace_events_and_array_form(tmp_path):
    evs = [kernel(ts=i) for i in range(20)] + [{"ph": "M", "name": "thread_name", "args": {"name": "é ✓"}}]
    for i, doc in enumerate([{"traceEvents": evs}, {"a": {"traceEvents": 1}, "traceEvents": evs, "z": [{}]}, evs]):
        s = both(write(tmp_path, doc, f"{i}.json"))
        assert s["launches"] == 20 and s["events"] == 21


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param({"traceEvents": [kernel(), kernel(ts="20")]}, id="numeric-string-ts"),
        pytest.param({"traceEvents": [kernel(), 7, [1], kernel(ts=30)]}, id="non-object-events"),
        pytest.param({"traceEvents": [kernel(), kernel(dur=True)]}, id="boolean-dur"),
        pytest.param({"traceEvents": [kernel(name=None), kernel(name=3), kernel(ph=["X"])]}, id="odd-names"),
        pytest.param({"traceEvents": [kernel()], "x": {"traceEvents": []}}, id="nested-trace-events-after"),
        pytest.param({"traceEvents": [kernel()], "traceEvents ": [], "y": 1}, id="near-duplicate-key"),
    ],
)
def test_odd_events_give_the_same_split(tmp_path, doc):
    p = write(tmp_path, doc)
    assert analyze_trace(p, top=ALL).as_dict() == analyze_trace(p, top=ALL, fast=False).as_dict()


def test_fast_reader_steps_aside_for_what_it_does_not_take(tmp_path):
    cases = {
        "dup.json": '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "a", "ts": 0, "dur": 1}], '
                    '"traceEvents": [{"ph": "X", "cat": "kernel", "name": "b", "ts": 0, "dur": 2}]}',
        "bom.json": '\ufeff{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "a", "ts": 0, "dur": 1}]}',
        "inf.json": '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "a", "ts": 0, "dur": 1e999}]}',
        "empty.json": '{"traceEvents": []}',
    }
    for name, text in cases.items():
        p = write(tmp_path, None, name, text)
        with pytest.raises(trace_chunks.NotFast):
            trace._read_fast(p)
        try:
            want: Any = analyze_trace(p, top=ALL, fast=False).as_dict()
        except TraceError as exc:
            want = exc.message
        try:
            got: Any = analyze_trace(p, top=ALL).as_dict()
        except TraceError as exc:
            got = exc.message
        assert got == want, name
    dup = analyze_trace(tmp_path / "dup.json")
    assert dup.launches == 2  # ijson reads both lists, as before


def test_invalid_utf8_in_a_skipped_field_is_still_an_error(tmp_path):
    """msgspec does not check the strings it skips; the fast reader does, so the error stays."""
    p = tmp_path / "bad.json"
    p.write_bytes(b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "a", "ts": 0, "dur": 1, '
                  b'"args": {"s": "\xff\xfe"}}]}')
    with pytest.raises(TraceError, match="invalid bytes in UTF8"):
        analyze_trace(p)


def test_deep_nesting_inside_a_valid_trace_is_refused(tmp_path):
    ev = '{"ph": "X", "cat": "kernel", "name": "a", "ts": 0, "dur": 1, "args": %s}' % ("[" * 5000 + "]" * 5000)
    p = write(tmp_path, None, "deep.json", '{"traceEvents": [%s, %s]}' % (ev, ev))
    with pytest.raises(TraceError, match="nested more than 64 levels"):
        analyze_trace(p)


def test_giant_event_after_a_good_one_is_refused(tmp_path):
    """No seam within MAX_EVENT_BYTES: the fast reader stops buffering and the ijson guard words it."""
    p = tmp_path / "giant.trace.json.gz"
    with gzip.open(p, "wb", compresslevel=1) as f:
        f.write(b'{"traceEvents": [' + json.dumps(kernel()).encode() + b', {"ph": "X", "args": {"b": [')
        f.write(b"1, " * ((trace.MAX_EVENT_BYTES + (1 << 20)) // 3))
        f.write(b"1]}}]}")
    with pytest.raises(TraceError, match="larger than 8 MiB"):
        analyze_trace(p)


def event_strategy(odd: bool) -> st.SearchStrategy[dict[str, Any]]:
    """Chrome-trace events; ``odd``: also values of other JSON types (the fast reader steps aside)."""
    cat = st.sampled_from(["kernel", "Kernel", "gpu_memcpy", "gpu_memset", "cpu_op", "cuda_runtime", None])
    name = st.one_of(st.sampled_from(["gemm", "attn}, {x", "cudaGraphLaunch", "é", "nccl"]), st.none())
    ts = st.one_of(st.integers(0, 10**12), st.floats(0, 1e13, allow_nan=False), st.none())
    dur = st.one_of(st.integers(-2, 10**4), st.floats(-1, 1e4, allow_nan=False), st.none())
    if odd:
        cat, name = cat | st.just(3), name | st.integers(-3, 3)
        ts = ts | st.sampled_from(["12", "x", True])
    # (integers past 64 bits: yajl refuses them, msgspec reads them; the fast reader is the more lenient)
    args = st.recursive(st.none() | st.integers(-2**63, 2**63 - 1) | st.text(max_size=5),
                        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
                        max_leaves=6)
    return st.fixed_dictionaries(
        {"ph": st.sampled_from(["X", "X", "X", "i", "M"]), "ts": ts, "dur": dur, "cat": cat},
        optional={"name": name, "tid": st.integers(0, 2), "args": args},
    ) | st.fixed_dictionaries({}, optional={"ph": st.just("X"), "cat": cat, "ts": ts, "dur": dur})  # keys missing


traces = st.lists(event_strategy(False), max_size=40) | st.lists(event_strategy(True) | st.just(1), max_size=40)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(evs=traces, indent=st.sampled_from([None, 0, 2]),
       bare=st.booleans(), size=st.sampled_from([16, 100, 4096]))
def test_generated_traces_same_split_from_both_readers(tmp_path, evs, indent, bare, size):
    doc: Any = evs if bare else {"schemaVersion": 1, "traceEvents": evs, "traceName": "x"}
    p = write(tmp_path, None, "g.json", json.dumps(doc, indent=indent))
    with block(size):
        try:
            got: Any = analyze_trace(p, top=ALL).as_dict()
        except TraceError as exc:
            got = exc.message
    try:
        want: Any = analyze_trace(p, top=ALL, fast=False).as_dict()
    except TraceError as exc:
        want = exc.message
    assert got == want
    clean = all(isinstance(e, dict) and all(type(e.get(k)) in (int, float, type(None)) for k in ("ts", "dur"))
                and type(e.get("name")) in (str, type(None)) for e in evs)
    if clean and isinstance(got, dict) and got["source"] == "kernel":  # the accumulator itself, against json
        assert as_reference(analyze_trace(p, top=ALL)) == reference(p)
