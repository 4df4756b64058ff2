"""A bigger, randomised schemathesis fuzz of the web panel than CI's (issue 12, item 5).

Same passes and judges as tests/test_web_fuzz.py — the real panel served by uvicorn on
127.0.0.1 over a filled temporary store; its OpenAPI plus the hidden HTML pages and form
actions; anonymous (login required), logged in without CSRF token, logged in with a token
(session + CSRF header), Bearer token, /login with forged forwarding headers — with more cases per
operation and a fresh random seed each run (CI's test is derandomised). Prints, measured in this one
run: requests per pass, status classes, 5xx (goal 0), auth bypasses (goal 0), the first offending requests as curl
commands. Exit code 1 when any 5xx or bypass was seen.

    python benchmarks/web_fuzz.py [--examples 40] [--seed N]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.test_web_fuzz import report, run_passes  # noqa: E402
from tests.web_fill import fill_stand_in  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=40, help="positive (and as many negative) cases per operation")
    ap.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: a random one, printed)")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(2**32)

    from dynocell.runbooks import web_tokens
    from dynocell.runbooks.views import open_view_cell
    from dynocell.settings import load_settings

    with tempfile.TemporaryDirectory(prefix="dynocell-web-fuzz-") as home:
        settings = load_settings(home=Path(home), poll_interval_s=1.0)
        cell = open_view_cell(settings)
        ids = fill_stand_in(cell)
        token = web_tokens.create(cell, "fuzz")
        t0 = time.monotonic()
        passes, complete = run_passes((settings, cell, ids, token), args.examples, derandomize=False, seed=seed)
        errors, bypasses = report(passes, complete, args.examples, time.monotonic() - t0)
    print(f"  seed {seed} (rerun: python benchmarks/web_fuzz.py --examples {args.examples} --seed {seed})")
    return 1 if errors or bypasses else 0


if __name__ == "__main__":
    sys.exit(main())
