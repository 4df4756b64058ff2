"""Benchmark: streaming trace split on a generated large Chrome trace (issue 5, "Benchmarks").

Builds a ~1 GB (uncompressed; ``--size-mb``) Kineto-style Chrome trace by
repeating the real SGLang 0.5.17 H200 eager trace
(``tests/data/sglang-0.5.17/A.*-TP-0.trace.json.gz``) with shifted timestamps,
streamed to a temporary file (``--gzip`` to write it gzipped), then parses it
with ``dynocell.engine.trace.analyze_trace`` in a child process and prints the
throughput (MB/s of uncompressed JSON) and the child's peak RSS. Goal: peak RSS
under 300 MB whatever the size.

If Holistic Trace Analysis (PyPI ``HolisticTraceAnalysis``, import ``hta``) can be
imported by ``--hta-python`` (default: this interpreter), its GPU kernel
breakdown runs on the same trace in another child process (at most
``--hta-max-mb``, default 2048; it loads the whole trace in memory) and the time and RSS
ratios are printed; otherwise the script says it was not available. HTA 0.5.0
fails on pandas 3 (an int16 column upcast); give it a virtualenv with
``pandas<3``: ``python -m venv /tmp/hta && /tmp/hta/bin/pip install
HolisticTraceAnalysis "pandas<3"`` then ``--hta-python /tmp/hta/bin/python``.

Usage: ``python benchmarks/trace_parse.py [--size-mb 1024] [--gzip] [--keep DIR]
[--hta-python PATH] [--hta-max-mb 2048]``. Not a timed test.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = next((REPO / "tests" / "data" / "sglang-0.5.17").glob("A.*-TP-0.trace.json.gz"))

CHILD_DYNOCELL = r"""
import json, resource, sys, time

def peak_rss_mb():
    # VmHWM is this address space's peak (reset by exec, unlike ru_maxrss, which
    # would count the forking parent's pages).
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
from dynocell.engine.trace import analyze_trace
t = time.perf_counter()
c = time.process_time()
s = analyze_trace(sys.argv[1])
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "cpu_s": time.process_time() - c, "rss_mb": peak_rss_mb(),
                  "events": s.events, "launches": s.launches, "device_ms": s.device_ms,
                  "graph_launches": s.graph_launches,
                  "split": {c.category: round(c.pct, 1) for c in s.categories if c.ms}}))
"""

CHILD_HTA = r"""
import json, resource, sys, time, logging

def peak_rss_mb():
    # VmHWM is this address space's peak (reset by exec, unlike ru_maxrss, which
    # would count the forking parent's pages).
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
t = time.perf_counter()
c = time.process_time()
a = TraceAnalysis(trace_dir=sys.argv[1])
df = a.get_gpu_kernel_breakdown(visualize=False)
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "cpu_s": time.process_time() - c, "rss_mb": peak_rss_mb()}))
"""


def generate(path: Path, size_mb: float, gz: bool) -> tuple[int, int]:
    """Write a trace of about ``size_mb`` MB uncompressed; returns (bytes, events)."""
    src = json.loads(gzip.decompress(TEMPLATE.read_bytes()))
    events = src.pop("traceEvents")
    xs = [e for e in events if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in xs)
    span = max(e["ts"] + e.get("dur", 0) for e in xs) - t0 + 1000.0
    header = json.dumps({k: v for k, v in src.items()})[:-1]
    target = int(size_mb * 1024 * 1024)
    # Serialise every event once without its "ts"; each repetition only prints the shifted ts.
    timed = []
    meta = []
    for e in events:
        if isinstance(e.get("ts"), (int, float)):
            rest = {k: v for k, v in e.items() if k != "ts"}
            timed.append((e["ts"], json.dumps(rest, separators=(", ", ": "))[1:]))
        else:
            meta.append(json.dumps(e, separators=(", ", ": ")))
    del events, xs
    raw = gzip.open(path, "wb", compresslevel=1) if gz else open(path, "wb", buffering=1 << 20)
    written = 0
    count = 0
    with raw as f:
        head = (header + ', "traceEvents": [\n' + ",\n".join(meta)).encode()
        f.write(head)
        written += len(head)
        count += len(meta)
        rep = 0
        while written < target:
            shift = rep * span
            text = "".join([f',\n{{"ts": {ts + shift!r}, {rest}' for ts, rest in timed])
            if count == 0:
                text = text[1:]  # no leading comma before the first event
            b = text.encode()
            f.write(b)
            written += len(b)
            count += len(timed)
            rep += 1
        tail = b"\n]}\n"
        f.write(tail)
        written += len(tail)
    return written, count


def run_child(python: str, code: str, arg: str) -> dict | None:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run([python, "-c", code, arg], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        print(f"  child failed ({python}): {p.stderr.strip().splitlines()[-1:] or p.returncode}")
        return None
    return json.loads(p.stdout.strip().splitlines()[-1])


def hta_available(python: str) -> bool:
    p = subprocess.run([python, "-c", "import hta.trace_analysis"], capture_output=True)
    return p.returncode == 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=float, default=1024.0, help="uncompressed trace size (MB), default 1024")
    ap.add_argument("--gzip", action="store_true", help="write the generated trace gzipped")
    ap.add_argument("--keep", type=Path, help="write the trace into this folder and keep it")
    ap.add_argument("--hta-python", default=sys.executable, help="Python that can import hta")
    ap.add_argument("--hta-max-mb", type=float, default=2048.0, help="skip HTA above this size (MB)")
    args = ap.parse_args()

    tmp = tempfile.TemporaryDirectory(prefix="dynocell-trace-bench-")
    folder = args.keep or Path(tmp.name)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ("bench-TP-0.pt.trace.json" + (".gz" if args.gzip else ""))
    t = time.perf_counter()
    nbytes, nevents = generate(path, args.size_mb, args.gzip)
    gen_s = time.perf_counter() - t
    mb = nbytes / 1024 / 1024
    disk = path.stat().st_size / 1024 / 1024
    print(f"trace: {mb:,.0f} MB uncompressed ({disk:,.0f} MB on disk{', gzip' if args.gzip else ''}), "
          f"{nevents:,} events, generated in {gen_s:.1f} s")

    r = run_child(sys.executable, CHILD_DYNOCELL, str(path))
    if r is None:
        sys.exit(1)
    print(f"dynocell analyze_trace: {r['seconds']:.1f} s wall ({r['cpu_s']:.1f} s CPU), "
          f"{mb / r['seconds']:.1f} MB/s wall, {mb / r['cpu_s']:.1f} MB/s per CPU second, "
          f"peak RSS {r['rss_mb']:.0f} MB (goal < 300 MB: {'met' if r['rss_mb'] < 300 else 'NOT met'})")
    print(f"  {r['launches']:,} device events, {r['graph_launches']} graph launches, "
          f"{r['device_ms']:.1f} ms device time; split %: {r['split']}")

    if not hta_available(args.hta_python):
        print("Holistic Trace Analysis: not available (pip name HolisticTraceAnalysis; import hta failed) "
              "— no comparison")
    elif mb > args.hta_max_mb:
        print(f"Holistic Trace Analysis: skipped, trace {mb:,.0f} MB > --hta-max-mb {args.hta_max_mb:,.0f}")
    else:
        h = run_child(args.hta_python, CHILD_HTA, str(folder))
        if h is None:
            print("Holistic Trace Analysis: available but failed on this trace — no comparison")
        else:
            print(f"HTA get_gpu_kernel_breakdown: {h['seconds']:.1f} s wall ({h['cpu_s']:.1f} s CPU), "
                  f"{mb / h['seconds']:.1f} MB/s wall, peak RSS {h['rss_mb']:.0f} MB")
            print(f"ratio dynocell/HTA: speed {h['cpu_s'] / r['cpu_s']:.2f}× by CPU time, "
                  f"{h['seconds'] / r['seconds']:.2f}× by wall time "
                  f"(>1 = dynocell faster), peak RSS {r['rss_mb'] / h['rss_mb']:.3f}×")
    tmp.cleanup()


if __name__ == "__main__":
    main()
