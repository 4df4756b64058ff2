"""/metrics parsing on real SGLang 0.5.17 captures, deltas, per-position counters, garbage input."""

from __future__ import annotations

from pathlib import Path

import pytest

from dynocell.engine import metrics as M
from dynocell.engine.acceptance import relative_diff
from dynocell.errors import EngineError

DATA = Path(__file__).parent / "data"
RUNS = {
    "A": DATA / "sglang-0.5.17" / "A.metrics.txt",
    "B": DATA / "sglang-0.5.17" / "B.metrics.txt",
    "C": DATA / "sglang-0.5.17" / "C.metrics.txt",
    "D": DATA / "sglang-0.5.17" / "D.metrics.txt",
    "E": DATA / "sglang-0.5.17" / "E.metrics.txt",
    "R": DATA / "sglang-0.5.17" / "trained-pair" / "R.metrics.txt",
    "T": DATA / "sglang-0.5.17-tp2" / "T.metrics.txt",
}


def snap(run: str) -> M.MetricsSnapshot:
    return M.parse_metrics(RUNS[run].read_text())


@pytest.mark.parametrize("run", sorted(RUNS))
def test_real_captures_parse(run):
    s = snap(run)
    assert s.types["sglang:generation_tokens_total"] == "counter"
    assert M.generation_tokens(s) > 0 and M.prompt_tokens(s) > 0
    assert M.num_running_reqs(s) == 0 and M.num_queue_reqs(s) == 0
    assert s.is_cumulative("sglang:generation_tokens_total")
    assert not s.is_cumulative("sglang:num_running_reqs")
    assert M.position_curve(s) is None  # stock SGLang has no per-position counters


@pytest.mark.parametrize("run,length", [("C", 4.0), ("D", 12.0), ("E", 4.0)])
def test_spec_gauges_present_for_speculative_runs(run, length):
    s = snap(run)
    assert M.spec_accept_length(s) == length
    assert M.spec_accept_rate(s) == 1.0
    assert M.spec_verify_calls(s) > 0
    assert s.get("sglang:spec_accept_length", tp_rank="0") == length


def test_accept_length_gauge_is_last_interval_only():
    # The real trained-pair capture was scraped once idle: the gauge says 1.0
    # although the run's τ was ~2.3; the counters keep the whole window.
    s = snap("R")
    assert M.spec_accept_length(s) == 1.0
    assert M.spec_verify_calls(s) == 1661
    assert M.tokens_per_verify(s) == pytest.approx(3784 / 1661)
    assert M.tokens_per_verify(snap("C")) == 4.0
    assert M.tokens_per_verify(snap("B")) is None


def test_plain_runs_have_zero_spec_gauges():
    s = snap("B")
    assert M.spec_verify_calls(s) in (None, 0.0)


def test_get_ambiguous_and_missing():
    s = M.parse_metrics(
        'x_total{rank="0"} 1\nx_total{rank="1"} 2\n'
    )
    assert s.get("nope") is None
    assert s.sum("x_total") == 3 and s.mean("x_total") == 1.5
    assert s.get("x_total", rank="1") == 2
    with pytest.raises(M.MetricsError, match="matches 2 series"):
        s.get("x_total")


PER_POSITION = """# TYPE sglang:spec_verify_steps_total counter
sglang:spec_verify_steps_total{{tp_rank="0"}} {steps}
# TYPE sglang:spec_accepted_drafts_at_position_total counter
sglang:spec_accepted_drafts_at_position_total{{position="1",tp_rank="0"}} {p1}
sglang:spec_accepted_drafts_at_position_total{{position="2",tp_rank="0"}} {p2}
sglang:spec_accepted_drafts_at_position_total{{position="3",tp_rank="0"}} {p3}
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{tp_rank="0"}} {running}
"""


def test_per_position_counters_delta_and_curve():
    before = M.parse_metrics(PER_POSITION.format(steps=100, p1=90, p2=80, p3=70, running=3))
    # greedy trained pair histogram 14, 6, 6, 133 → p = 145, 139, 133 over 159 steps
    after = M.parse_metrics(PER_POSITION.format(steps=259, p1=235, p2=219, p3=203, running=1))
    d = M.delta(before, after)
    assert d.get("sglang:spec_verify_steps_total") == 159
    assert d.get("sglang:num_running_reqs") == 1  # gauge keeps "after"
    c = M.position_curve(d)
    assert c.steps == 159 and c.num_drafts == 3
    assert [round(x, 3) for x in c.p] == [0.912, 0.874, 0.836]
    assert relative_diff(c.tau, 3.623) < 0.001


def test_counter_reset_uses_after():
    before = M.parse_metrics(PER_POSITION.format(steps=500, p1=400, p2=300, p3=200, running=0))
    after = M.parse_metrics(PER_POSITION.format(steps=10, p1=9, p2=8, p3=7, running=0))
    d = M.delta(before, after)
    assert d.get("sglang:spec_verify_steps_total") == 10
    assert M.position_curve(d).p == (0.9, 0.8, 0.7)


def test_zero_based_positions_are_shifted():
    text = (
        "sglang:spec_verify_steps_total 10\n"
        'sglang:spec_accepted_drafts_at_position_total{position="0"} 5\n'
        'sglang:spec_accepted_drafts_at_position_total{position="1"} 2\n'
    )
    c = M.position_curve(M.parse_metrics(text))
    assert c.p == (0.5, 0.2)


def test_impossible_position_counts():
    text = "sglang:spec_verify_steps_total 10\n" 'sglang:spec_accepted_drafts_at_position_total{position="1"} 11\n'
    with pytest.raises(M.MetricsError, match="outside"):
        M.position_curve(M.parse_metrics(text))


@pytest.mark.parametrize(
    "garbage",
    ["<html><body>502 Bad Gateway</body></html>", "garbage garbage garbage", "metric{ 1", "\x00\x01\x02"],
)
def test_garbage_is_a_clear_error(garbage):
    with pytest.raises(M.MetricsError) as exc:
        M.parse_metrics(garbage)
    assert isinstance(exc.value, EngineError) and isinstance(exc.value, ValueError)
    assert "not Prometheus text format" in str(exc.value)


def test_empty_body_is_empty_snapshot():
    assert M.parse_metrics("").names() == []
