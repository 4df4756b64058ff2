"""``dynocell import metrics BEFORE AFTER`` on a real vLLM 0.26 scrape pair (H200, tests/data/vllm-0.26.0/)
with one counter edited to what no engine exports.

Before: ``num_drafts_total`` 1.7e308 ended in "Error: internal error: OverflowError: Python int too
large to convert to SQLite INTEGER"; a NaN per-position count passed the range check and surfaced
later as "p_2 = nan is outside [0, 1]" without a hint. Now each is a clear Error naming the counter.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRAPES = Path(__file__).parent / "data" / "vllm-0.26.0" / "dynocell-h200" / "boots" / "538cd7c8806c" / "scrapes"
TINY = Path(__file__).parent.parent / "examples" / "tiny.toml"


@pytest.mark.parametrize(("series", "value", "expected"), [
    (r'vllm:spec_decode_num_drafts_total\{[^}]*\}', "1.7e308",
     "vllm:spec_decode_num_drafts_total = 1.7e+308 is not a count"),
    (r'vllm:spec_decode_num_accepted_tokens_per_pos_total\{[^}]*position="1"\}', "NaN",
     'vllm:spec_decode_num_accepted_tokens_per_pos_total{position="1"} = nan is outside'),
])
def test_import_metrics_refuses_a_counter_no_engine_exports(series, value, expected, cli_env, tmp_path):
    after = tmp_path / "code.after.prom"
    text, n = re.subn(rf"^({series}) \S+$", rf"\g<1> {value}", (SCRAPES / "code.after.prom").read_text(),
                      count=1, flags=re.M)
    assert n == 1
    after.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "dynocell", "import", "metrics", str(SCRAPES / "code.before.prom"),
                           str(after), "--config", str(TINY)], env=cli_env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    # 2: an imported file is the operator's input (a live engine's bad /metrics answer stays an EngineError, 3)
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr)
    assert proc.stderr.startswith(f"Error: {after}: {expected}"), proc.stderr
    assert "\nhint: " in proc.stderr and "internal error" not in proc.stderr
