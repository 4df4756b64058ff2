"""``dynocell logs BOOT --tail N`` at the edges of N, on the real SGLang 0.5.17 server log of run A
(tests/data/sglang-0.5.17/A.server.log, 152 lines), imported as a boot.

Before: ``-n 99999999999999999999999`` ended in "Error: internal error: OverflowError: Python int too
large to convert to C ssize_t"; ``-n -5`` printed nothing and exited 0. Now a tail past the log gives
the whole log, and a negative one is refused (exit 2, naming --tail).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from dynocell.text import printable

LOG = Path(__file__).parent / "data" / "sglang-0.5.17" / "A.server.log"


def dynocell(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dynocell", *args], env=env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


def test_logs_tail_past_the_log_or_negative(cli_env):
    imported = dynocell(cli_env, "import", "log", str(LOG), "--json")
    assert imported.returncode == 0, imported.stderr
    boot = json.loads(dynocell(cli_env, "ps", "--all", "--json").stdout)[0]["id"]
    lines = [printable(line) for line in LOG.read_text().splitlines()]  # escapes removed, as `logs` shows them

    huge = dynocell(cli_env, "logs", boot, "--tail", "99999999999999999999999")
    assert huge.returncode == 0, huge.stderr
    assert huge.stdout.splitlines() == lines

    assert dynocell(cli_env, "logs", boot, "-n", "2").stdout.splitlines() == lines[-2:]

    negative = dynocell(cli_env, "logs", boot, "--tail", "-5")
    assert negative.returncode == 2 and "--tail" in negative.stderr, (negative.returncode, negative.stderr)
