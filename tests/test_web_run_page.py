"""The web run page reads as sentences and honest charts (issue 20, item 8).

Break-even and lossless as sentences, the profile chart titled by its source with zero
categories left out and one colour per category, τ written as an annotation (one line per run,
so the compare page's labels never collide), never as a line on the draft-position axis.
"""

from __future__ import annotations

import re

from dynocell.web import charts
from dynocell.web.filters import breakeven_sentence, lossless_sentence


def test_breakeven_is_a_sentence():
    be = {"tau": 1.70, "spec_step_ms": 10.35, "plain_step_ms": 5.88, "budget_ms": 9.996, "margin": -0.0342,
          "pays": False, "noise_band": 0.05, "verdict": "within noise",
          "plain_source": "stored plain twin measurement (run 0110d9b7f46b)", "plain_age_s": 7200.0}
    text = breakeven_sentence(be)
    assert text.startswith("within noise: margin −3.4 % (τ 1.70 must exceed 1.76)"), text
    assert "noise band ±5.0 %" in text and "stored plain twin measurement" in text and "2h 00m ago" in text
    old = {k: be[k] for k in ("tau", "spec_step_ms", "plain_step_ms", "budget_ms", "margin", "pays")}
    assert breakeven_sentence(old).startswith("does NOT pay: margin −3.4 %")
    assert "pays 0.000" not in text and breakeven_sentence(None) == "not computed"


def test_lossless_is_a_sentence_with_the_mismatch_count():
    run = {"lossless": "no", "lossless_detail": {"prompts": 5, "max_new_tokens": 48, "mismatches": [
        {"prompt": "def f", "first_diverging_index": 7, "unit": "token", "speculative": "x = 1", "plain": "x = 2"}]}}
    text = lossless_sentence(run)
    assert text.startswith("NOT lossless: 1 of 5 prompt(s) diverge") and "token 7" in text and "{" not in text
    ok = lossless_sentence({"lossless": "yes", "lossless_detail": {"prompts": 5, "max_new_tokens": 48}})
    assert "0 mismatches" in ok and lossless_sentence({}) == "not checked"


def test_profile_chart_title_legend_and_colours():
    splits = [{"category": c, "pct": p, "ms": p * 2} for c, p in
              (("gemm", 50.8), ("other", 19.3), ("elementwise", 11.8), ("memcpy_gather", 11.5),
               ("attention", 5.2), ("sampling", 1.4), ("router_topk", 0.0), ("moe", 0.0), ("norm", 0.0))]
    svg = str(charts.profile_split_chart([{"label": "all ranks", "splits": splits}],
                                         title=charts.profile_title("cpu_op")))
    assert "CPU ops" in svg and "GPU kernels" in charts.profile_title("kernel")
    assert svg.count("<g class='legend'>") == 6 and "moe" not in svg and "router_topk" not in svg
    fills = re.findall(r"<rect class='bar' data-category='([^']+)'[^>]*fill='(#[0-9a-f]{6})'", svg)
    assert len(fills) == 6 and len({f for _, f in fills}) == 6, fills
    every = [*charts.CATEGORY_COLORS, "custom_a", "custom_b"]
    colours = {charts.category_color(c, i) for i, c in enumerate(every) if "/" not in c}
    assert len(colours) == len([c for c in every if "/" not in c])


def test_tau_is_an_annotation_not_a_position():
    series = [{"name": "p", "label": "p_i", "points": [(1, 0.9), (2, 0.8), (3, 0.6)]}]
    taus = [{"label": f"run{i}", "tau": 3.3 + i * 0.01, "engine_tau": None} for i in range(3)]
    svg = str(charts.acceptance_chart(series, title="t", num_drafts=3, taus=taus))
    markers = re.findall(r"<g class='tau-marker'[^>]*>(.*?)</g>", svg)
    assert len(markers) == 3 and not any("<line" in m for m in markers)
    ys = [re.search(r"y='([0-9.]+)'", m).group(1) for m in markers]
    assert len(set(ys)) == 3  # one line each: labels never collide
    assert all("tokens per verify step" in m for m in markers)


def test_applies_to_reads_as_text():
    from dynocell.runbooks.knowledge import selector_text

    sel = {"speculative.algorithm": {"in": ["EAGLE", "NEXTN"]}, "parallel.dcp_size": {"gt": 1},
           "cuda_graph.disable": False, "env.X": {"exists": True}}
    text = selector_text(sel)
    assert text == ("speculative.algorithm one of EAGLE, NEXTN and parallel.dcp_size > 1 and "
                    "cuda_graph.disable = false and env.X is set"), text
    assert "{" not in selector_text({"any": [{"engine": "sglang"}, {"not": {"parallel.tp_size": 1}}]})
    assert selector_text({}) == ""


def test_entry_view_has_evidence_what_to_try_and_applies_text(tmp_path, monkeypatch):
    monkeypatch.setenv("DYNOCELL_HOME", str(tmp_path))
    from dynocell.runbooks import views
    from dynocell.runbooks.cell import open_cell
    from dynocell.settings import load_settings

    e = views.get_entry(open_cell(load_settings()), "eagle3-unsupported")
    assert e["evidence"] and e["fix"]
    assert e["applies_to_text"] == "speculative.algorithm = EAGLE3"
