"""Replay of dynocell's own TP=2 runs on SGLang 0.5.17 / two H200s
(tests/data/sglang-0.5.17-tp2/dynocell-2xh200, issue 11).

CPU-only: the store, engine logs and per-rank traces brought back from the GPU host go
through the same parsers and the same report the main job uses.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dynocell.engine.trace import analyze_ranks

DATA = Path(__file__).parent / "data" / "sglang-0.5.17-tp2" / "dynocell-2xh200"
RUNS = {"h200-tp2-plain-graph": ("be0cc48f3c27", "2b4cb42aaee9"),
        "h200-tp2-standalone-pair": ("e74f634ecd56", "8e9d340ddfd1")}


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    h = tmp_path_factory.mktemp("tp2-home")
    shutil.copy2(DATA / "dynocell.db", h / "dynocell.db")
    return h


def dynocell(home: Path, *args: str) -> str:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNOCELL_")}
    env.update(DYNOCELL_HOME=str(home), COLUMNS="220", NO_COLOR="1")
    p = subprocess.run([sys.executable, "-m", "dynocell", *args], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.mark.parametrize("config", sorted(RUNS))
def test_stored_per_rank_splits_match_a_fresh_split_of_the_traces(home, config):
    run_id, boot_id = RUNS[config]
    shown = json.loads(dynocell(home, "show", run_id, "--json"))
    prof = shown["profile"]
    assert prof["num_ranks"] == 2 and [r["rank"] for r in prof["rank_splits"]] == [0, 1]
    fresh = analyze_ranks(sorted((DATA / "boots" / boot_id).glob(f"{run_id}-TP-*.trace.json.gz")))
    assert [r.rank for r in fresh.ranks] == [0, 1]
    assert fresh.rank_skew == pytest.approx(prof["rank_skew"], rel=1e-6)
    for stored, split in zip(prof["rank_splits"], fresh.ranks):
        assert stored["device_ms"] == pytest.approx(split.device_ms, rel=1e-6)
        comm = next(x for x in stored["splits"] if x["category"] == "communication")
        assert comm["ms"] > 0 and comm["ms"] == pytest.approx(split.category("communication").ms, rel=1e-6)
    assert 1.5 < prof["rank_skew"] < 3.0  # one rank waits at the all-reduce: a visible straggler


def test_report_shows_ranks_health_per_rank_table_and_acceptance(home):
    run_id, _ = RUNS["h200-tp2-standalone-pair"]
    out = dynocell(home, "show", run_id)
    assert "2/2 ranks alive (scheduler_TP0, scheduler_TP1)" in out
    assert "2 ranks, skew 2.0×" in out
    assert "per rank (ms, % of the rank's device time)" in out and "rank 1" in out
    assert "lossless: yes" in out
    shown = json.loads(dynocell(home, "show", run_id, "--json"))
    assert shown["run"]["lossless"] == "yes"
    for c in shown["curves"]:
        p = [pt["p"] for pt in c["points"]]
        assert c["tau"] == pytest.approx(1 + sum(p)) and p[0] > p[1] > p[2]
