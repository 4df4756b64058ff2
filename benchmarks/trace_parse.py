"""Benchmark: the trace split against HTA and against the parser floors (issues 5 and 19).

Builds scaled copies of the real SGLang 0.5.17 H200 eager trace
(``tests/data/sglang-0.5.17/A.*-TP-0.trace.json.gz``, 13.6 MiB of JSON) by
repeating its events with shifted timestamps: by default ≈157 MiB and ≈1 GiB of
JSON, written gzipped (as SGLang's ``/start_profile`` writes traces) into a
temporary folder that is removed at the end. Each tool then reads each copy in
its own child process, one at a time:

- ``dynocell``: :func:`dynocell.engine.trace.analyze_trace` (the fast reader:
  msgspec typed decode of whole-event chunks);
- ``dynocell ijson``: the same with ``fast=False`` (the ijson reader, i.e. the
  reader before issue 19);
- ``HTA``: Holistic Trace Analysis ``TraceAnalysis(...).get_gpu_kernel_breakdown``
  (every kernel kept: ``duration_ratio=1``, memory kernels included), with its
  default sub-µs rounding and with ``HTA_DISABLE_NS_ROUNDING=1``;
- floors: ``zcat | wc -c`` (decompression alone) and a msgspec typed decode of
  only the five fields the split needs (``name ph cat ts dur``) over the whole
  file held in memory.

Units: MiB are MiB of **uncompressed** JSON (the issue's "13.6 MiB real trace"
is the uncompressed size of a 0.9 MiB ``.gz``; per compressed MiB the old reader
would do ~5 MiB/s, not the 44–50 it reported); MiB/s is per CPU second of the
child (user + sys, so a busy shared machine does not skew it), wall time shown
too. Peak RSS: the child's ``VmHWM`` (``ru_maxrss`` of ``wait4`` for zcat).

It asserts that dynocell's kernel time agrees with HTA's without rounding, in
total and kernel by kernel (launch counts exact, times to 1e-9 relative: pandas
sums in another order), and prints how far HTA's default falls short.

HTA holds the whole trace in memory (~7 GiB for the 1 GiB copy), so it only runs
on copies up to ``--hta-max-mib`` (default 200). HTA 0.5.0 needs ``pandas<3``;
install the ``bench`` extra (``pip install -e '.[bench]'``) or give it its own
virtualenv and pass ``--hta-python``.

Usage: ``python benchmarks/trace_parse.py [--sizes 157,1029] [--plain]
[--hta-python PATH] [--hta-max-mib 200] [--keep DIR]``. A script, not a test.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = next((REPO / "tests" / "data" / "sglang-0.5.17").glob("A.*-TP-0.trace.json.gz"))
GOAL_MIBS, GOAL_RSS_MB = 150.0, 300.0

_PEAK = r"""
import json, resource, sys, time
def report(t0, c0, **kw):
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")]
    rss = int(hwm[0].split()[1]) / 1024 if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "rss_mb": rss, **kw}))
"""

CHILD = {
    "dynocell": _PEAK + r"""
from dynocell.engine.trace import analyze_trace
t0, c0 = time.perf_counter(), time.process_time()
s = analyze_trace(sys.argv[1], top=10**6, fast=sys.argv[2] == "fast")
report(t0, c0, kernels={k.name: [k.ms * 1000.0, k.launches] for k in s.top}, device_us=s.device_ms * 1000.0,
       events=s.events)
""",
    "hta": _PEAK + r"""
import logging
logging.disable(logging.CRITICAL)
from hta.trace_analysis import TraceAnalysis
t0, c0 = time.perf_counter(), time.process_time()
a = TraceAnalysis(trace_dir=sys.argv[1])
types, kernels = a.get_gpu_kernel_breakdown(visualize=False, duration_ratio=1.0, num_kernels=10**9,
                                            include_memory_kernels=True)
out = {}
for name, group in kernels.groupby("name"):
    total = float(group["sum (us)"].sum())
    out[name] = [total, int(sum(round(r["sum (us)"] / r["mean (us)"]) if r["mean (us)"] else 0
                                for _, r in group.iterrows()))]
report(t0, c0, kernels=out, types={r["kernel_type"]: float(r["sum"]) for _, r in types.iterrows()})
""",
    "msgspec": _PEAK + r"""
import gzip, msgspec
class Event(msgspec.Struct, gc=False):
    name: str | None = None
    ph: str | None = None
    cat: str | None = None
    ts: float | None = None
    dur: float | None = None
class Trace(msgspec.Struct):
    traceEvents: list[Event]
t0, c0 = time.perf_counter(), time.process_time()
with open(sys.argv[1], "rb") as f:
    data = f.read()
if data[:2] == b"\x1f\x8b":
    data = gzip.decompress(data)
n = len(msgspec.json.decode(data, type=Trace).traceEvents)
report(t0, c0, events=n)
""",
}


def generate(path: Path, size_mib: float, gz: bool) -> tuple[int, int]:
    """Write a trace of about ``size_mib`` MiB of JSON (gzipped if ``gz``); returns (JSON bytes, events)."""
    src = json.loads(gzip.decompress(TEMPLATE.read_bytes()))
    events = src.pop("traceEvents")
    xs = [e for e in events if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in xs)
    span = max(e["ts"] + e.get("dur", 0) for e in xs) - t0 + 1000.0
    header = json.dumps({k: v for k, v in src.items()})[:-1]
    target = int(size_mib * 1024 * 1024)
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


def run_child(python: str, kind: str, *args: str, env: dict[str, str] | None = None,
              timeout: float = 900) -> dict | None:
    """Run one tool's child process; its JSON report, or ``None`` (and a line saying why) if it failed."""
    e = dict(os.environ, **(env or {}))
    e["PYTHONPATH"] = str(REPO) + os.pathsep + e.get("PYTHONPATH", "")
    try:
        p = subprocess.run([python, "-c", CHILD[kind], *args], capture_output=True, text=True, env=e,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"  {kind}: stopped after {timeout:.0f} s")
        return None
    if p.returncode != 0:
        print(f"  {kind} failed ({python}): {p.stderr.strip().splitlines()[-1:] or p.returncode}")
        return None
    return json.loads(p.stdout.strip().splitlines()[-1])


def zcat_floor(path: Path) -> dict:
    """CPU time and peak RSS of ``zcat PATH | wc -c`` (``cat`` for plain JSON), measured by GNU time.

    (``wait4`` on a child forked from this process would report this process's RSS as the
    child's peak; ``/usr/bin/time`` is a small parent.) Without GNU time: ``wait4``, RSS unknown.
    """
    tool = "zcat" if path.suffix == ".gz" else "cat"
    gnu_time = shutil.which("time") or ("/usr/bin/time" if Path("/usr/bin/time").exists() else None)
    t0 = time.perf_counter()
    argv = [gnu_time, "-f", "%U %S %M", tool, str(path)] if gnu_time else [tool, str(path)]
    z = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    w = subprocess.Popen(["wc", "-c"], stdin=z.stdout, stdout=subprocess.PIPE)
    assert z.stdout is not None and z.stderr is not None
    z.stdout.close()
    err = z.stderr.read().decode()
    _, _, zr = os.wait4(z.pid, 0)
    z.returncode = 0  # reaped by wait4
    out = w.communicate()[0]
    if gnu_time:
        user, system, rss_kb = err.split()[-3:]
        cpu, rss = float(user) + float(system), int(rss_kb) / 1024
    else:
        cpu, rss = zr.ru_utime + zr.ru_stime, math.nan
    return {"wall_s": time.perf_counter() - t0, "cpu_s": cpu, "rss_mb": rss, "bytes": int(out.split()[0]),
            "tool": f"{tool} | wc -c"}


def line(label: str, r: dict, mib: float) -> None:
    print(f"  {label:<34} {r['cpu_s']:7.2f} s CPU {r['wall_s']:7.2f} s wall {mib / r['cpu_s']:7.1f} MiB/s "
          f"({mib / r['wall_s']:6.1f} wall) peak RSS {r['rss_mb']:7.0f} MB")


def agreement(d: dict, h: dict, label: str) -> tuple[float, list[str]]:
    """Kernel-time agreement of dynocell and one HTA run: (HTA total / dynocell total, mismatching kernels)."""
    dk, hk = d["kernels"], h["kernels"]
    bad = []
    for name in sorted(set(dk) | set(hk)):
        a, b = dk.get(name), hk.get(name)
        if a is None or b is None or a[1] != b[1] or not math.isclose(a[0], b[0], rel_tol=1e-9, abs_tol=1e-6):
            bad.append(f"{name[:60]}: dynocell {a}, HTA {label} {b}")
    dt = math.fsum(v[0] for v in dk.values())
    ht = math.fsum(v[0] for v in hk.values())
    return (ht / dt if dt else math.nan), bad


def run_hta(args: argparse.Namespace, hta_ok: bool, folder: Path, mib: float) -> dict[str, dict]:
    """HTA's kernel breakdown of the copy in ``folder``, without and with its ns rounding (by label);
    {} when HTA is not importable or the copy is larger than ``--hta-max-mib``."""
    hta = {}
    if not hta_ok:
        print("  HTA: not importable by --hta-python (pip name HolisticTraceAnalysis, needs pandas<3)")
    elif mib > args.hta_max_mib:
        print(f"  HTA: skipped, {mib:,.0f} MiB > --hta-max-mib {args.hta_max_mib:,.0f} (memory)")
    else:
        for label, env in (("no rounding", {"HTA_DISABLE_NS_ROUNDING": "1"}), ("default", {})):
            h = run_child(args.hta_python, "hta", str(folder), env=env)
            if h:
                hta[label] = h
                line(f"HTA get_gpu_kernel_breakdown, {label}", h, mib)
    return hta


def report_hta_agreement(d: dict, hta: dict[str, dict], mib: float) -> list[str]:
    """Print how dynocell's kernel times agree with each HTA run; the failures (any kernel that
    differs from HTA without rounding)."""
    failures = []
    if "no rounding" in hta:
        share, bad = agreement(d, hta["no rounding"], "no rounding")
        print(f"  agreement with HTA (HTA_DISABLE_NS_ROUNDING=1): {len(d['kernels']) - len(bad)} of "
              f"{len(set(d['kernels']) | set(hta['no rounding']['kernels']))} kernels equal (launches exact, "
              f"time to 1e-9); total kernel time HTA/dynocell = {share:.12f}")
        for b in bad[:10]:
            print(f"    differs: {b}")
        if bad or not math.isclose(share, 1.0, rel_tol=1e-9):
            failures.append(f"{mib:.0f} MiB: {len(bad)} kernel(s) differ from HTA without rounding")
        print(f"  HTA communication (nccl…Kernel only): {hta['no rounding']['types'].get('COMMUNICATION', 0):.0f}"
              f" µs; by type: { {k: round(v) for k, v in hta['no rounding']['types'].items()} }")
    if "default" in hta:
        share, bad = agreement(d, hta["default"], "default")
        print(f"  HTA default (sub-µs rounding inward): {100 * (1 - share):.1f} % less kernel time than the "
              f"trace holds; {len(bad)} kernels differ")
    return failures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="157,1029", help="MiB of JSON of each scaled copy (default 157,1029)")
    ap.add_argument("--plain", action="store_true", help="write the copies as plain JSON instead of gzip")
    ap.add_argument("--keep", type=Path, help="write the copies into this folder and keep them")
    ap.add_argument("--hta-python", default=sys.executable, help="Python that can import hta (HolisticTraceAnalysis)")
    ap.add_argument("--hta-max-mib", type=float, default=200.0,
                    help="run HTA only on copies up to this many MiB of JSON (it holds the whole trace; "
                         "~7 GiB RAM for 1 GiB)")
    ap.add_argument("--no-old", action="store_true", help="skip the ijson reader (the slow path)")
    args = ap.parse_args()

    tmp = tempfile.TemporaryDirectory(prefix="dynocell-trace-bench-")
    root = args.keep or Path(tmp.name)
    hta_ok = subprocess.run([args.hta_python, "-c", "import hta.trace_analysis"], capture_output=True).returncode == 0
    failures: list[str] = []
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; MiB = MiB of uncompressed JSON; "
          "MiB/s per CPU second of the child (wall in brackets)")
    for size in (float(s) for s in args.sizes.split(",")):
        folder = root / f"{size:.0f}MiB"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / ("bench-TP-0.pt.trace.json" + ("" if args.plain else ".gz"))
        t = time.perf_counter()
        nbytes, nevents = generate(path, size, not args.plain)
        mib = nbytes / 2**20
        print(f"\ntrace: {mib:,.1f} MiB JSON ({path.stat().st_size / 2**20:,.1f} MiB on disk"
              f"{'' if args.plain else ', gzip'}), {nevents:,} events, generated in {time.perf_counter() - t:.1f} s")
        floor = zcat_floor(path)
        assert floor["bytes"] == nbytes, floor
        line(f"floor: {floor['tool']}", floor, mib)
        ms = run_child(sys.executable, "msgspec", str(path))
        if ms:
            line("floor: msgspec typed, 5 fields", ms, mib)
        d = run_child(sys.executable, "dynocell", str(path), "fast")
        if d is None:
            sys.exit("dynocell failed")
        line("dynocell (fast reader)", d, mib)
        old = None if args.no_old else run_child(sys.executable, "dynocell", str(path), "ijson")
        if old:
            line("dynocell (ijson reader, old path)", old, mib)
            disk = path.stat().st_size / 2**20
            print(f"    (issue 19's 44–50 MiB/s baseline is this line; by compressed MiB it would read "
                  f"{disk / old['cpu_s']:.1f} MiB/s: the issue's MiB are MiB of uncompressed JSON)")
            if old["kernels"] != d["kernels"] or old["device_us"] != d["device_us"] or old["events"] != d["events"]:
                failures.append(f"{mib:.0f} MiB: fast and ijson readers differ")
        hta = run_hta(args, hta_ok, folder, mib)
        print(f"  goal on this copy: {mib / d['cpu_s']:.0f} MiB/s (≥ {GOAL_MIBS:.0f}: "
              f"{'met' if mib / d['cpu_s'] >= GOAL_MIBS else 'NOT met'}), peak RSS {d['rss_mb']:.0f} MB "
              f"(< {GOAL_RSS_MB:.0f}: {'met' if d['rss_mb'] < GOAL_RSS_MB else 'NOT met'})")
        ratios = [f"{d['cpu_s'] / floor['cpu_s']:.2f}× {floor['tool']}"]
        if ms:
            ratios.append(f"{d['cpu_s'] / ms['cpu_s']:.2f}× msgspec floor")
        if old:
            ratios.append(f"{old['cpu_s'] / d['cpu_s']:.2f}× faster than the ijson reader")
        for label, h in hta.items():
            ratios.append(f"{h['cpu_s'] / d['cpu_s']:.1f}× faster and {h['rss_mb'] / d['rss_mb']:.0f}× less RSS "
                          f"than HTA {label}")
        print("  dynocell CPU time = " + "; ".join(ratios))
        failures.extend(report_hta_agreement(d, hta, mib))
    tmp.cleanup()
    if failures:
        sys.exit("FAILED: " + "; ".join(failures))
    print("\nall assertions hold")


if __name__ == "__main__":
    main()
