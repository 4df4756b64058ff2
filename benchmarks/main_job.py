"""Wall time of the default `dynocell run` (the embedded reference config) on this machine.

Goal (issue 5): ≤ 3 minutes on 2 CPU cores. Runs the real console script in a
fresh data directory; the model pair is taken from DYNOCELL_MODEL_CACHE when
set (otherwise it is made first, and that time is reported separately).

    python benchmarks/main_job.py [--no-profile] [--no-lossless-check]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

GOAL_S = 180.0


def main() -> int:
    extra = sys.argv[1:]
    with tempfile.TemporaryDirectory(prefix="dynocell-bench-") as home:
        env = dict(os.environ, DYNOCELL_HOME=home)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "dynocell", "model", "make-tiny", "--json"], env=env,
                       check=True, capture_output=True)
        model_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "dynocell", "run", *extra], env=env,
                              capture_output=True, text=True)
        run_s = time.perf_counter() - t1
    print(f"model pair ready in {model_s:.1f} s (cached: {model_s < 10})")
    print(f"dynocell run {' '.join(extra)} → exit {proc.returncode} in {run_s:.1f} s "
          f"(goal ≤ {GOAL_S:.0f} s: {'met' if run_s <= GOAL_S else 'NOT met'}; ratio {run_s / GOAL_S:.2f})")
    if proc.returncode != 0:
        print(proc.stderr[-2000:])
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
