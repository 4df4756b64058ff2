"""Print one config's headline from `dynocell show RUN --json` (stdin): run, state, boot s, tok/s per
concurrency, TTFT / TPOT p50 at the lowest concurrency, mean τ and p_1..p_3 over the classes, lossless,
break-even verdict, profile busy %, and the GPU utilisation that gpu/h200_run.sh sampled with
nvidia-smi during the run (CSV named as argv[1], columns timestamp, utilization.gpu, memory.used MiB,
power.draw W, clocks.sm MHz; no header). Used by gpu/h200_run.sh after each config; prints one block.

usage: dynocell show RUN --json | python3 gpu/headline.py NAME [GPU_CSV]
"""

import json
import statistics
import sys


def gpu_util(path: str) -> str:
    """``util mean/max %, mem max MiB, power max W, n samples`` from the nvidia-smi CSV, or ``-``."""
    util, mem, power = [], [], []
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                f = [x.strip() for x in line.split(",")]
                try:
                    u, m, w = float(f[1]), float(f[2]), float(f[3])
                except (IndexError, ValueError):
                    continue
                util.append(u)
                mem.append(m)
                power.append(w)
    except OSError:
        return "-"
    if not util:
        return "-"
    busy = [u for u in util if u > 0]
    busy_mean = statistics.fmean(busy) if busy else 0.0
    return (f"util mean {statistics.fmean(util):.0f} % (mean {busy_mean:.0f} % while > 0), "
            f"max {max(util):.0f} %; memory max {max(mem):.0f} MiB; power max {max(power):.0f} W; n {len(util)}")


def main() -> None:
    name = sys.argv[1]
    try:
        d = json.load(sys.stdin)
    except ValueError:
        print(f"---- {name}: no run record")
        return
    run = d.get("run") or {}
    steps = {s["name"]: s.get("detail") or {} for s in d.get("steps") or []}
    boot_s = steps.get("boot", {}).get("ready_s")
    bench = [b for b in d.get("bench") or [] if b.get("text_class") is None]
    tps = ", ".join(f"c={b['concurrency']} {b['output_tok_s']:.0f}" for b in bench) or "-"
    low = bench[0] if bench else None
    lat = (f"TTFT p50 {low['ttft_ms']['p50']:.1f} ms, TPOT p50 {low['tpot_ms']['p50']:.2f} ms (c={low['concurrency']})"
           if low and low.get("ttft_ms") and low.get("tpot_ms") else "-")
    curves = d.get("curves") or []
    if curves:
        taus = [c["tau"] for c in curves if c.get("tau") is not None]
        pts = [c.get("points") or [] for c in curves]
        depth = max((len(p) for p in pts), default=0)
        ps = []
        for i in range(min(depth, 3)):
            vals = [p[i].get("p") if isinstance(p[i], dict) else p[i] for p in pts if len(p) > i]
            vals = [v for v in vals if isinstance(v, (int, float))]
            ps.append(f"{statistics.fmean(vals):.2f}" if vals else "?")
        tau = (f"τ mean {statistics.fmean(taus):.3f} over {len(taus)} classes "
               f"(min {min(taus):.2f}, max {max(taus):.2f}); p1..p3 {'/'.join(ps)}")
    else:
        tau = "τ -"
    be = run.get("breakeven") or {}
    verdict = f"{be.get('verdict')} (margin {be['margin'] * 100:+.1f} %)" if be.get("margin") is not None else "-"
    busy = steps.get("profile", {}).get("busy_pct")
    err = f" ({str(run.get('error'))[:120]})" if run.get("error") else ""
    print(f"---- {name}: run {run.get('id')} {run.get('state')}{err}")
    print(f"  boot {boot_s:.1f} s" if isinstance(boot_s, (int, float)) else "  boot -")
    print(f"  tok/s {tps}; {lat}")
    print(f"  {tau}; lossless {run.get('lossless') or '-'}; break-even {verdict}")
    busy_s = f"{busy:.1f}" if isinstance(busy, (int, float)) else "-"
    gpu = gpu_util(sys.argv[2]) if len(sys.argv) > 2 else "-"
    print(f"  profile busy {busy_s} %; GPU (nvidia-smi): {gpu}")


if __name__ == "__main__":
    main()
