"""A new user's first `dynocell run`: wall time on a fresh data directory, install excluded.

Goal (issue 20): ≤ 3 minutes on 2 CPU cores right after the README's install
command. Runs the installed `dynocell` console script (the one beside this
Python) with every ``DYNOCELL_*`` variable removed and ``DYNOCELL_HOME`` a new
empty folder, so nothing is cached: no store, no goldens, no model cache (the
reference pair must come from the package itself). Prints the wall time and
each step's seconds from the run record.

    .venv/bin/python benchmarks/first_run.py
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_S = 180.0


def _dynocell() -> list[str]:
    script = Path(sys.executable).with_name("dynocell")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "dynocell"]


def main() -> int:
    """Run the first `dynocell run` and print its wall time; returns its exit code."""
    home = Path(tempfile.mkdtemp(prefix="dynocell-first-run-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNOCELL_")}
    env.update(DYNOCELL_HOME=str(home), COLUMNS="120")
    try:
        t0 = time.perf_counter()
        proc = subprocess.run([*_dynocell(), "run", "--json"], env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        steps = []
        with contextlib.suppress(ValueError):
            steps = json.loads(proc.stdout).get("steps") or []
        for s in steps:
            secs = (s.get("detail") or {}).get("seconds")
            print(f"  {s.get('name', '?'):<11} {s.get('state', '?'):<10} "
                  + (f"{secs:7.1f} s" if isinstance(secs, (int, float)) else "      -"))
        print(f"first dynocell run (fresh data directory {home}, install excluded): exit {proc.returncode} "
              f"in {wall:.1f} s (goal ≤ {GOAL_S:.0f} s: {'met' if wall <= GOAL_S else 'NOT met'})")
        if proc.returncode != 0:
            print(proc.stderr[-2000:])
        return proc.returncode
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
