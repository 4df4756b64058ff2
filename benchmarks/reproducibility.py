"""Do dynocell's judgments reproduce? (issue 33) — the main job K times on one unchanged config.

    python benchmarks/reproducibility.py [--runs 10] [--config examples/tiny.toml] [--requests N]
                                         [--no-planted] [--planted-runs K] [--home DIR]

Runs ``dynocell run CONFIG --no-profile`` K times in one private store on the reference engine, every
other run with a CPU hog beside it (one busy process per core), and prints:

- per run: contended or not (and why), warn/error findings, the break-even verdict and its margin interval,
  τ and decode tok/s per request at c=1 with their 95 % intervals;
- warn/error findings in all (issue 33: 0 on an unchanged config), break-even flips (both "pays" and
  "does NOT pay" among the runs; "within noise" is allowed);
- containment: in how many runs each interval (τ; decode tok/s) contains the median of the other runs'
  values, over all runs and within the quiet and the contended runs (target ≥ 90 %).

Then, unless ``--no-planted``, a planted real effect on the same config through the reference engine's own
test instruments (``--step-slowdown 1.25``: every decode step 25 % longer, 20 % fewer tokens per second;
``--draft-corrupt 0.3``: 30 % of draft tokens replaced) and how many planted runs the statistics flag
against a baseline run (:func:`dynocell.engine.stats.compare_intervals` "lower"; target ≥ 9 of 10).

Real parts only: the console script, the reference engine, SQLite. Nothing is mocked. Wall time is long
(a few minutes per run on a laptop CPU); use a smaller ``--runs`` when short of time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dynocell.engine import stats  # noqa: E402

HOG = "import time\nwhile True:\n    sum(i * i for i in range(10000))\n"


def dynocell(env: dict[str, str], *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    """One ``python -m dynocell`` command (no shell)."""
    return subprocess.run([sys.executable, "-m", "dynocell", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def start_hog() -> list[subprocess.Popen]:
    """One busy Python process per core (killed by :func:`stop_hog`, by pid)."""
    return [subprocess.Popen([sys.executable, "-c", HOG], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for _ in range(os.cpu_count() or 1)]


def stop_hog(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def one_run(env: dict[str, str], config: str, requests: int | None, hog: bool) -> dict[str, Any]:
    """Run the main job once (with a CPU hog beside it when ``hog``) and read back what the run report says."""
    procs = start_hog() if hog else []
    try:
        args = ["run", config, "--no-profile"] + (["--requests", str(requests)] if requests else [])
        proc = dynocell(env, *args)
    finally:
        stop_hog(procs)
    runs = json.loads(dynocell(env, "runs", "--json").stdout)
    run_id = next(r["id"] for r in runs if r["kind"] == "run")  # newest first
    shown = json.loads(dynocell(env, "show", run_id, "--json").stdout)
    j = shown.get("judgment") or {}
    be = shown["run"].get("breakeven") or {}
    loud = [f for f in shown.get("findings") or [] if f["severity"] in ("warn", "error")]
    return {"id": run_id, "rc": proc.returncode, "hog": hog, "contended": j.get("contended"),
            "loud": [f"{f['rule']}[{f['severity']}]" for f in loud], "verdict": be.get("verdict"),
            "margin": be.get("margin"), "interval": be.get("interval"), "tau": j.get("tau"),
            "decode": j.get("decode_tok_s_c1")}


def _iv(d: dict[str, Any] | None) -> stats.Interval | None:
    if not d:
        return None
    return stats.Interval(d["value"], d["lo"], d["hi"], d["n"], d.get("level", 0.95))


def containment(rows: list[dict[str, Any]], key: str) -> tuple[int, int]:
    """(runs whose ``key`` interval contains the median of the other runs' values, runs judged)."""
    have = [r for r in rows if r.get(key)]
    hits = 0
    for r in have:
        others = [o[key]["value"] for o in have if o is not r]
        if others and r[key]["lo"] <= statistics.median(others) <= r[key]["hi"]:
            hits += 1
    return hits, len(have) if len(have) > 1 else 0


def fmt_iv(d: dict[str, Any] | None, digits: int = 3) -> str:
    if not d:
        return "n too small"
    return f"{d['value']:.{digits}f} [{d['lo']:.{digits}f}, {d['hi']:.{digits}f}] n={d['n']}"


def print_runs(title: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n{title}")
    for i, r in enumerate(rows, 1):
        iv = r["interval"]
        margin = (f"{r['margin'] * 100:+.1f} % [{iv[0] * 100:+.1f}, {iv[1] * 100:+.1f}]"
                  if r.get("margin") is not None and iv else "–")
        print(f"  {i:2d} {r['id']} {'hog ' if r['hog'] else 'quiet'} contended={'yes' if r['contended'] else 'no '}"
              f" loud={','.join(r['loud']) or '0'} break-even {r['verdict'] or '–'} {margin}"
              f" τ {fmt_iv(r['tau'])} decode {fmt_iv(r['decode'], 1)} tok/s")
        if r["contended"]:
            print(f"       contended: {r['contended']}")


def variant(config: str, flag: str, value: str, dest: Path) -> str:
    """``config`` with ``extra_args = [flag, value]`` (the reference engine's own planted-effect flags)."""
    text = Path(config).read_text()
    head, sep, rest = text.partition("\n[")
    name = f"{Path(config).stem}{flag.replace('--', '-')}-{value}"
    body = head + f'\nextra_args = ["{flag}", "{value}"]\n' + sep + rest
    body = body.replace('name = "tiny"', f'name = "{name}"')
    out = dest / f"{name}.toml"
    out.write_text(body)
    return str(out)


def detect(planted: list[dict[str, Any]], base: list[dict[str, Any]], key: str) -> tuple[int, int]:
    """(planted runs whose ``key`` is "lower" than a baseline run's beyond the interval, pairs judged), pairing
    planted run i with baseline run i (cycling)."""
    hits, n = 0, 0
    for i, p in enumerate(planted):
        b = base[i % len(base)] if base else None
        eff = stats.compare_intervals(_iv(p.get(key)), _iv((b or {}).get(key)))
        if eff is None:
            continue
        n += 1
        hits += eff.verdict == "lower"
    return hits, n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="runs of the unchanged config (half with a CPU hog)")
    ap.add_argument("--config", default=str(ROOT / "examples" / "tiny.toml"))
    ap.add_argument("--requests", type=int, default=None, help="run --requests N (requests per text class)")
    ap.add_argument("--planted-runs", type=int, default=None, help="runs per planted effect (default --runs)")
    ap.add_argument("--no-planted", action="store_true", help="skip the planted-effect phase")
    ap.add_argument("--home", default=None, help="data directory (default: a new temporary one)")
    a = ap.parse_args(argv)
    home = Path(a.home or tempfile.mkdtemp(prefix="dynocell-repro-"))
    env = dict(os.environ, DYNOCELL_HOME=str(home), PYTHONUNBUFFERED="1", COLUMNS="160")
    print(f"store {home}; config {a.config}; {a.runs} runs, every other one with a CPU hog of {os.cpu_count()} "
          f"process(es); load now {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    rows = [one_run(env, a.config, a.requests, hog=i % 2 == 1) for i in range(a.runs)]
    print_runs("unchanged config", rows)
    loud = sum(len(r["loud"]) for r in rows)
    verdicts = [r["verdict"] for r in rows if r["verdict"]]
    flips = "pays" in verdicts and "does NOT pay" in verdicts
    print(f"\nwarn/error findings: {loud}")
    print(f"break-even verdicts: {', '.join(verdicts) or 'none'} → {'FLIPS' if flips else 'no flip'}")
    print(f"contended runs: {sum(1 for r in rows if r['contended'])} of {len(rows)} "
          f"(hog runs: {sum(1 for r in rows if r['hog'])})")
    for key, label in (("tau", "τ"), ("decode", "decode tok/s c=1")):
        for name, sel in (("all", rows), ("quiet", [r for r in rows if not r["contended"]]),
                          ("contended", [r for r in rows if r["contended"]]),
                          ("no hog", [r for r in rows if not r["hog"]]), ("hog", [r for r in rows if r["hog"]])):
            h, n = containment(sel, key)
            if n:
                print(f"  {label} interval contains the median of the others ({name}): {h} of {n} "
                      f"({h / n * 100:.0f} %)")
    if a.no_planted:
        return 0
    k = a.planted_runs or a.runs
    tmp = Path(tempfile.mkdtemp(prefix="dynocell-planted-"))
    slow = variant(a.config, "--step-slowdown", "1.25", tmp)
    worse = variant(a.config, "--draft-corrupt", "0.3", tmp)
    base = [r for r in rows if not r["hog"]] or rows
    for cfg, key, what in ((slow, "decode", "an arm 20 % slower (--step-slowdown 1.25)"),
                           (worse, "tau", "a draft with 30 % of its tokens corrupted (--draft-corrupt 0.3)")):
        planted = [one_run(env, cfg, a.requests, hog=False) for _ in range(k)]
        print_runs(f"planted: {what}", planted)
        h, n = detect(planted, base, key)
        print(f"  detected ({'decode tok/s' if key == 'decode' else 'τ'} lower beyond the interval against a "
              f"no-hog baseline run): {h} of {n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
