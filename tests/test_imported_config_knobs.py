"""An imported (observed) config reads, to every rule, as the booted config with the same settings (issue 35).

Before issue 35 an observed config flattened to ``fields.parallel.tp_size`` …, so every rule that reads a
setting found nothing on an imported log, scrape or attached engine. The table below runs every rule case
of ``tests/data/curves`` whose inputs carry settings twice — with the knobs of a written config (as a booted
run has) and with the same settings stored as an observed config (as ``import``/``attach`` store them) — and
asks for the same findings; then one real import through the store.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dynocell.engine.observed import ObservedConfig, from_vllm_args
from dynocell.runbooks.doctor import diagnose_inputs, flatten_config, inputs_from_dict

CURVES = Path(__file__).parent / "data" / "curves"


@pytest.fixture
def cell(settings):
    from dynocell.runbooks.cell import open_cell

    return open_cell(settings)


def _as_imported(knobs: dict[str, Any]) -> dict[str, Any]:
    """The knobs a rule sees when the same settings were revealed by an engine (an observed config)."""
    fields = {k: list(v) if isinstance(v, tuple) else v for k, v in knobs.items() if k != "engine"}
    cfg = ObservedConfig(knobs.get("engine"), fields)  # an absent engine stays absent
    return flatten_config(cfg.canonical_json())


def _swap_knobs(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: (_as_imported(v) if k == "knobs" and isinstance(v, dict) and v else _swap_knobs(v))
                for k, v in node.items()}
    if isinstance(node, list):
        return [_swap_knobs(v) for v in node]
    return node


def _has_knobs(node: Any) -> bool:
    if isinstance(node, dict):
        return any((k == "knobs" and bool(v)) or _has_knobs(v) for k, v in node.items())
    return isinstance(node, list) and any(_has_knobs(v) for v in node)


def _setting_cases():
    for f in sorted(CURVES.glob("*.json")):
        d = json.loads(f.read_text())
        for kind in ("positive", "negative"):
            for c in d.get(kind, []):
                if _has_knobs(c["inputs"]):
                    yield pytest.param(c["inputs"], id=f"{d['rule']}:{kind}:{c['name']}")


def _said(inputs: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(f.rule, f.severity, f.message) for f in diagnose_inputs(inputs_from_dict(inputs))]


CASES = list(_setting_cases())


def test_the_table_covers_the_rules_that_read_settings():
    rules = {p.id.split(":")[0] for p in CASES}
    assert {"capture_size_miss", "config_smell", "confounded_comparison", "pinned_near_one", "graph_vs_eager",
            "scales_with_parallel", "recursive_collapse", "draft_window_short", "no_net_win"} <= rules


@pytest.mark.parametrize("inputs", CASES)
def test_rule_reads_an_imported_config_as_a_booted_one(inputs):
    assert _said(_swap_knobs(inputs)) == _said(inputs)


def test_observed_config_flattens_to_the_written_names():
    cfg = from_vllm_args({"model": "/m", "tensor_parallel_size": 2, "enable_prefix_caching": True,
                          "speculative_config": {"method": "dspark", "num_speculative_tokens": 7}})
    knobs = flatten_config(cfg.canonical_json())
    assert knobs["engine"] == "vllm" and knobs["parallel.tp_size"] == 2 and knobs["model_path"] == "/m"
    # unmodelled settings are kept as observed extras, by the engine's own names
    assert knobs["extra.enable_prefix_caching"] is True and knobs["extra.speculative_method"] == "dspark"
    assert knobs["speculative.num_steps"] == 7
    assert not any(k.startswith(("fields.", "observed")) for k in knobs)


def test_an_imported_log_gives_the_doctor_its_settings(cell, tmp_path):
    from dynocell.runbooks.doctor_evidence import knobs_of
    from dynocell.runbooks.imports import import_log

    log = tmp_path / "server.log"
    log.write_text("(APIServer pid=1) INFO 09-09 11:51:30 [utils.py:326] non-default args: {'model': 'Qwen/Qwen3-8B', "
                   "'tensor_parallel_size': 4, 'enable_prefix_caching': False, 'speculative_config': "
                   "{'method': 'eagle3', 'model': 'AngelSlim/Qwen3-8B_eagle3', 'num_speculative_tokens': 3}}\n"
                   "(APIServer pid=1) INFO 09-09 11:51:35 [metrics.py:96] SpecDecoding metrics: Mean acceptance "
                   "length: 2.10, Accepted throughput: 4.37 tokens/s, Drafted throughput: 4.92 tokens/s, "
                   "Accepted: 110 tokens, Drafted: 300 tokens, Per-position acceptance rate: 0.600, 0.330, 0.170\n")
    out = import_log(cell, [log])
    knobs = knobs_of(cell.store, out["config_hash"])
    assert knobs["parallel.tp_size"] == 4 and knobs["speculative.algorithm"] == "EAGLE3"
    assert knobs["speculative.draft_model_path"] == "AngelSlim/Qwen3-8B_eagle3"
    assert knobs["extra.enable_prefix_caching"] is False
