"""Issue 33: `run --requests N` and `dynocell bench --num-prompts/--concurrency/--warmup/--requests` resize the
workload; its identity hash changes with them (another request count is another experiment), and a bad value
is an Error: naming the flag."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dynocell.engine.workloads import load_workload
from dynocell.errors import UserError
from dynocell.runbooks.run.job import sized_workload


def test_sized_workload_changes_the_counts_and_the_identity():
    w = load_workload(None)
    assert sized_workload(w) is w
    s = sized_workload(w, 12, num_prompts=7, concurrency=[1, 2, 8], warmup=3)
    assert (s.acceptance.requests_per_class, s.throughput.requests_per_level, s.throughput.concurrency, s.warmup) == (
        12, 7, [1, 2, 8], 3)
    assert s.sha256 != w.sha256 and s.temperature == w.temperature
    assert [lv.num_requests for lv in s.levels() if lv.purpose == "acceptance"] == [12 * len(w.classes)]


@pytest.mark.parametrize("kw,flag", [({"requests": 0}, "--requests"), ({"concurrency": [0]}, "--concurrency"),
                                     ({"num_prompts": -1}, "--num-prompts")])
def test_sized_workload_bad_values_name_the_flag(kw, flag):
    with pytest.raises(UserError, match=flag):
        sized_workload(load_workload(None), **kw)


def test_bench_bad_concurrency_is_an_error_naming_the_flag(cli_env):
    proc = subprocess.run([sys.executable, "-m", "dynocell", "bench", "abcd", "--concurrency", "1,x"], env=cli_env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "Error: --concurrency '1,x' is not a comma-separated list" in " ".join(proc.stderr.split())
