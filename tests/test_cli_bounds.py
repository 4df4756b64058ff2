"""Numbers on the command line that no operator means: each is refused by the option's own check
(exit 2, the option named, nothing run or stored), never an internal error or a silent no-op.

Before: ``runs --limit 99999999999999999999999`` was "internal error: OverflowError"; ``runs --limit
-3`` listed everything; ``boot --timeout -5`` said "boot timed out: -5 s were spent making the
reference model pair"; ``--timeout nan`` booted with no limit at all (Click's FloatRange lets NaN
through); ``stop --grace nan``, ``health --watch 0``, ``plan --port 99999999`` (a plan with that
port), ``web --port 99999999`` (a login URL on that port) and ``experiment create -n 0`` went on;
``model make-tiny --seed 99999999999999999999999`` trained for a while, then "internal error:
ValueError: Overflow when unpacking long long" (so did ``DYNOCELL_MODEL_SEED`` that large).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TINY = str(Path(__file__).parent.parent / "examples" / "tiny.toml")

CASES = [
    (["runs", "--limit", "99999999999999999999999"], "--limit"),
    (["runs", "--limit", "-3"], "--limit"),
    (["boot", TINY, "--timeout", "-5"], "--timeout"),
    (["boot", TINY, "--detach", "--timeout", "nan"], "--timeout"),
    (["run", TINY, "--timeout", "inf"], "--timeout"),
    (["stop", "abcd1234", "--grace", "nan"], "--grace"),
    (["health", "abcd1234", "--watch", "0"], "--watch"),
    (["plan", TINY, "--port", "99999999"], "--port"),
    (["web", "--port", "99999999"], "--port"),
    (["experiment", "create", "x", "--incumbent", TINY, "--arm", TINY, "-n", "0"], "--repeats"),
    (["model", "make-tiny", "pair", "--seed", "99999999999999999999999"], "--seed"),  # was OverflowError
    (["model", "make-eagle", "head", "--seed", "-1"], "--seed"),
]


@pytest.mark.parametrize(("args", "option"), CASES, ids=[" ".join(a[:1] + a[-2:]) for a, _ in CASES])
def test_impossible_number_is_refused_naming_the_option(args, option, cli_env, isolated_home, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "dynocell", *args], env=cli_env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL, cwd=tmp_path)  # relative output dirs land there
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr[-2000:])
    assert option in proc.stderr and "Invalid value" in proc.stderr, proc.stderr
    assert "internal error" not in proc.stderr and not proc.stdout.strip(), proc.stdout
    assert not (isolated_home / "boots").exists() or not any((isolated_home / "boots").iterdir()), "nothing booted"


def test_model_seed_setting_out_of_range_is_refused(cli_env):
    env = dict(cli_env, DYNOCELL_MODEL_SEED="99999999999999999999999")
    proc = subprocess.run([sys.executable, "-m", "dynocell", "settings"], env=env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stderr.startswith("Error: invalid setting in the environment: DYNOCELL_MODEL_SEED="), proc.stderr
