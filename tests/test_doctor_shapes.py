"""Issue 22's shapes through the store and the engine: what the JSON cases of tests/data/curves cannot show.

- the lossless step's top-2 margin at the first divergent token, asked of the real reference engine;
- ``lossless: near-tie (margin …)`` in the run report and the doctor's near-tie vs corruption;
- a same-config baseline recorded in the store (``baseline_regression``);
- the config_hash decision for ``eagle_topk`` 1 with ``num_draft_tokens`` ≠ ``num_steps`` + 1 (``config_smell``).
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

DATA = Path(__file__).parent / "data"


def test_divergence_margin_is_the_engines_top2_gap(model_pair, tmp_path):
    from dynocell.engine.client import EngineClient
    from dynocell.engine.reference.launch import start_engine
    from dynocell.runbooks.run.lossless_step import _divergence_margin

    eng = start_engine(model_pair.target, [], tmp_path / "server.log")
    try:
        prompt = "The quick brown fox jumps over the lazy dog. It was"
        body = {"text": prompt, "sampling_params": {"max_new_tokens": 8, "temperature": 0},
                "return_logprob": True, "top_logprobs_num": 2}
        ref = httpx.post(eng.url + "/generate", json=body, timeout=120).json()
        ids, tops = ref["output_ids"], ref["meta_info"]["output_top_logprobs"]
        other = [t + 1 for t in ids]
        got = _divergence_margin(EngineClient(eng.url), prompt, ids, other, 5, 120.0)
        assert got["spec_token"] == ids[5] and got["plain_token"] == ids[5] + 1
        assert got["margin"] == pytest.approx(tops[5][0][0] - tops[5][1][0], abs=1e-5) and got["margin"] >= 0
        # an engine that cannot answer gives no margin, never an error
        assert _divergence_margin(EngineClient("http://127.0.0.1:9"), prompt, ids, other, 5, 2.0)["margin"] is None
    finally:
        eng.stop()


def _stored(cell, cfg: Path, run_id: str, hist: dict[str, list[int]], **run_fields) -> str:
    from dynocell.db import runs as db_runs
    from dynocell.engine.acceptance import Curve
    from dynocell.runbooks.configs import add_config

    h = add_config(cell, cfg).hash
    db_runs.create_run(cell.store, id=run_id, kind="run", config_hash=h, state="completed", **run_fields)
    for cls, hh in hist.items():
        c = Curve.from_histogram(hh)
        db_runs.add_curve(cell.store, [(i + 1, c.p[i], c.a[i]) for i in range(c.num_drafts)], run_id=run_id,
                          text_class=cls, num_drafts=c.num_drafts, steps=c.steps, tau=c.tau,
                          accept_rate=c.accept_rate, histogram=list(hh), completion_tokens=192)
    return run_id


HEALTHY = {"code": [14, 6, 6, 133], "prose": [40, 20, 15, 80]}


@pytest.mark.parametrize("margins,rule,lossless", [([0.031, 0.004], "lossless_near_tie", "near-tie (margin 0.031)"),
                                                    ([0.031, 2.31], "corrupt_output", "no")])
def test_lossless_mismatch_near_tie_or_corruption(settings, margins, rule, lossless):
    from dynocell.cli.render import lossless_text
    from dynocell.db import runs as db_runs
    from dynocell.runbooks.cell import open_cell
    from dynocell.runbooks.doctor import diagnose
    from dynocell.runbooks.run.lossless_step import _near_ties

    cell = open_cell(settings)
    mms = [{"prompt": f"p{i}", "first_diverging_index": 17, "unit": "token", "speculative": "a", "plain": "b",
            "spec_token": 311, "plain_token": 279, "margin": m} for i, m in enumerate(margins)]
    near = _near_ties(mms)
    detail = {"prompts": 5, "mismatches": mms, **({"max_margin": max(margins)} if near else {})}
    _stored(cell, DATA / "configs/bisect-good.toml", "runmm0001", HEALTHY,
            lossless="near-tie" if near else "no", lossless_detail=detail)
    fs = diagnose(cell, "runmm0001")
    assert rule in [f.rule for f in fs]
    f = next(f for f in fs if f.rule == rule)
    assert "lossless-near-tie-logprob-margin" in f.entries
    run = db_runs.get_run(cell.store, "runmm0001").to_dict()  # the run's columns, as the faces get them
    assert lossless_text(run).plain.startswith(f"lossless: {lossless}")
    assert "top-2 margin 0.031 nats" in lossless_text(run).plain


def test_baseline_regression_from_the_store(settings):
    from dynocell.runbooks.cell import open_cell
    from dynocell.runbooks.doctor import diagnose

    cell = open_cell(settings)
    cfg = DATA / "configs/bisect-good.toml"
    _stored(cell, cfg, "runbase001", HEALTHY)
    _stored(cell, cfg, "runnew0001", {"code": [60, 20, 10, 69], "prose": [70, 25, 15, 45]})
    fs = {f.rule: f for f in diagnose(cell, "runnew0001")}
    f = fs["baseline_regression"]
    assert f.evidence["baseline"] == "runbase001" and f.evidence["drop"] > 0.15 and f.severity == "error"
    assert "regression-against-recorded-baseline" in f.entries
    assert "baseline_regression" not in [f.rule for f in diagnose(cell, "runbase001")]  # the better run is quiet


def test_chain_with_extra_draft_tokens_keeps_its_hash_and_is_a_smell(settings, tmp_path):
    """Decision (issue 22, shape 8): config_hash names the config as written, so num_draft_tokens 6 and 4 with
    eagle_topk 1 and num_steps 3 hash differently although SGLang runs 4; config_smell says so."""
    from dynocell.engine.config import load_config
    from dynocell.runbooks.doctor import diagnose_inputs, flatten_config

    base = (DATA / "configs/bisect-good.toml").read_text()
    assert "num_draft_tokens = 4" in base and "num_steps = 3" in base
    (tmp_path / "six.toml").write_text(base.replace("num_draft_tokens = 4", "num_draft_tokens = 6"))
    four, six = load_config(DATA / "configs/bisect-good.toml"), load_config(tmp_path / "six.toml")
    assert four.config_hash != six.config_hash
    from dynocell.runbooks.doctor import DoctorInputs

    smell = [f for f in diagnose_inputs(DoctorInputs(knobs=flatten_config(six))) if f.rule == "config_smell"]
    assert smell and smell[0].evidence["effective_num_draft_tokens"] == 4
    assert "spec-chain-num-draft-tokens-rewritten" in smell[0].entries
    assert not [f for f in diagnose_inputs(DoctorInputs(knobs=flatten_config(four))) if f.rule == "config_smell"]


def test_v0_rate_above_one_is_refused_through_import(settings, tmp_path):
    """A vLLM V0 line whose 'Draft acceptance rate' exceeds 1 (a count passed off as a rate): the import keeps
    it, and the doctor refuses it with a message instead of judging τ 1.00 as pinned near one."""
    from dynocell.runbooks.cell import open_cell
    from dynocell.runbooks.doctor import diagnose
    from dynocell.runbooks.imports import import_log

    line = ("INFO 02-06 03:05:53 metrics.py:475] Speculative metrics: Draft acceptance rate: 1.300, System efficiency: "
            "0.167, Number of speculative tokens: 5, Number of accepted tokens: 130, Number of draft tokens: 100, "
            "Number of emitted tokens: 20.")
    (tmp_path / "server.log").write_text(line + "\n")
    cell = open_cell(settings)
    res = import_log(cell, [tmp_path / "server.log"], config_ref=str(DATA / "configs/bisect-good.toml"))
    rules = {f.rule: f for f in diagnose(cell, res["run_id"])}
    assert "rate_above_one" in rules and "pinned_near_one" not in rules
    assert rules["rate_above_one"].evidence["value"] == 1.3 and "refuses" in rules["rate_above_one"].message


def test_v0_curve_knows_its_steps():
    from dynocell.engine.logfile import parse_v0_spec_line

    s = parse_v0_spec_line("INFO 02-06 03:18:09 metrics.py:475] Speculative metrics: Draft acceptance rate: 0.067, "
                           "System efficiency: 0.167, Number of speculative tokens: 5, Number of accepted tokens: 1, "
                           "Number of draft tokens: 15, Number of emitted tokens: 3.")
    assert s.to_curve().steps == 3


def test_gradual_decay_by_length_gives_the_break_even_crossover():
    """Shape 5: a drafter's natural decay is depth_decay (gate by length), with the length where τ falls
    below the measured break-even; the same data with a one-step cliff is length_cliff instead."""
    from dynocell.runbooks.doctor import diagnose_inputs, inputs_from_dict

    ladder = [(512, [0.8, 0.7, 0.7]), (1024, [0.75, 0.6, 0.55]), (2048, [0.7, 0.5, 0.4]), (4096, [0.6, 0.4, 0.3]),
              (8192, [0.5, 0.3, 0.2])]
    d = {"curves": [{"text_class": f"len{L}", "p": p, "steps": 200, "prompt_tokens": L} for L, p in ladder],
         "spec_step_ms": 2.1, "plain_step_ms": 1.0}
    fs = {f.rule: f for f in diagnose_inputs(inputs_from_dict(d))}
    assert "length_cliff" not in fs
    f = fs["depth_decay"]
    assert f.evidence["breakeven_tau"] == 2.1 and f.evidence["crossover_length"] == 8192.0  # τ 2.3 at 4096, 2.0 at 8192
    assert "gate speculation by length" in f.message and "from 8192 tokens on" in f.message


def test_idle_spec_windows_do_not_pull_the_curve_down(tmp_path):
    """Shape 7: a vLLM stats window with nothing drafted (an idle or prefill-only interval) is dropped, not
    averaged in as zeros. The busy line is the real first line of tests/data/vllm-0.26.0/C_draft_graph.server.log;
    the idle one is that line with every count at zero."""
    from dynocell.engine.logfile import read_log

    real = next(x for x in (DATA / "vllm-0.26.0/C_draft_graph.server.log").read_text().splitlines()
                if "SpecDecoding metrics" in x)
    idle = (real.split("SpecDecoding metrics:")[0] + "SpecDecoding metrics: Mean acceptance length: 0.00, Accepted "
            "throughput: 0.00 tokens/s, Drafted throughput: 0.00 tokens/s, Accepted: 0 tokens, Drafted: 0 tokens, "
            "Per-position acceptance rate: 0.000, 0.000, 0.000, Avg Draft acceptance rate: 0.0%")
    (tmp_path / "busy.log").write_text(real + "\n")
    (tmp_path / "idle.log").write_text(real + "\n" + idle + "\n" + idle + "\n")
    busy, with_idle = (read_log(tmp_path / n, engine="vllm").acceptance["curve"] for n in ("busy.log", "idle.log"))
    assert with_idle.p == pytest.approx(busy.p) and with_idle.tau == pytest.approx(busy.tau)


def test_a_newer_run_without_acceptance_does_not_shadow_an_older_one_with_it(settings, tmp_path):
    """Issue 35 item 7: the graph twin's newest run failed before it measured acceptance; its older completed
    run has curves, and the doctor still compares graph and eager on it (before: the newest run per config
    was taken, found empty, and the config skipped)."""
    from datetime import timedelta

    from dynocell.clock import now_utc
    from dynocell.db import runs as db_runs
    from dynocell.runbooks.cell import open_cell
    from dynocell.runbooks.doctor import diagnose

    cell = open_cell(settings)
    eager = DATA / "configs/bisect-good.toml"
    graph = tmp_path / "graph.toml"
    graph.write_text(eager.read_text().replace("disable = true", "disable = false")
                     .replace('name = "bisect-good"', 'name = "bisect-graph"'))
    t0 = now_utc()
    _stored(cell, graph, "rungraph01", {"prose": [80, 20, 10, 10], "code": [70, 20, 15, 15]},
            started_at=t0 - timedelta(hours=2))
    _stored(cell, graph, "rungraph02", {}, started_at=t0 - timedelta(minutes=5))  # newest: no acceptance
    db_runs.update_run(cell.store, "rungraph02", summary={"note": "stopped before the acceptance step"})
    _stored(cell, eager, "runeager01", HEALTHY, started_at=t0)
    fs = [f for f in diagnose(cell, "runeager01", store_findings=False) if f.rule == "graph_vs_eager"]
    assert fs and fs[0].evidence["graph_label"] == "rungraph01", fs
