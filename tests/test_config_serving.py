"""Config fields the comparisons need (issue 17 item 3): serving topology, overlap schedule,
speculative v2, CUDA-graph mode, engine version — hashed like every field, absent when unstated."""

from __future__ import annotations

from pathlib import Path

import pytest

from dynocell.engine.adapters import build_env, adapter_for as get_adapter
from dynocell.engine.config import parse_config
from dynocell.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
BASE = 'engine = "sglang"\nmodel_path = "org/model"\n'


def test_configs_that_do_not_state_the_new_fields_keep_their_hash():
    from dynocell.engine.config import load_config

    # examples/tiny.toml's hash before these fields existed (commit 24b6c33)
    assert load_config(REPO / "examples" / "tiny.toml").config_hash == \
        "sha256:50712f7ac3e5d5185b0ad04f27dfcadf1fb6eac0f8395f5085201248bc5388ce"
    canon = parse_config(BASE).canonical()
    assert "serving" not in canon and "mode" not in canon["cuda_graph"]


@pytest.mark.parametrize("extra", [
    '[serving]\ntopology = "prefill"\n',
    '[serving]\ndisable_overlap_schedule = true\n',
    '[serving]\nspec_v2 = true\n',
    '[serving]\nengine_version = "sglang 0.5.17"\n',
    '[cuda_graph]\nmode = "piecewise"\n',
])
def test_each_stated_field_changes_the_hash_and_spelled_out_none_does_not(extra):
    base = parse_config(BASE)
    stated = parse_config(BASE + extra)
    assert stated.config_hash != base.config_hash
    assert parse_config(BASE + extra).config_hash == stated.config_hash  # stable


def test_sglang_argv_and_env_of_the_new_fields():
    cfg = parse_config(BASE + '[serving]\ntopology = "decode"\ndisable_overlap_schedule = true\nspec_v2 = false\n')
    argv = get_adapter("sglang").args(cfg, port=30000)
    assert argv[argv.index("--disaggregation-mode") + 1] == "decode" and "--disable-overlap-schedule" in argv
    assert build_env(cfg, {}, None)["SGLANG_ENABLE_SPEC_V2"] == "0"
    colocated = parse_config(BASE + '[serving]\ntopology = "colocated"\n')
    assert "--disaggregation-mode" not in get_adapter("sglang").args(colocated, port=30000)


@pytest.mark.parametrize("extra,field", [
    ('[serving]\ntopology = "both"\n', "serving.topology"),
    ('[cuda_graph]\ndisable = true\nmode = "full"\n', "cuda_graph"),
    ('[serving]\nspec_v2 = true\n[env]\nSGLANG_ENABLE_SPEC_V2 = "1"\n', "spec_v2"),
])
def test_contradictions_and_bad_values_are_refused(extra, field):
    with pytest.raises(ConfigError) as err:
        parse_config(BASE + extra, source="c.toml")
    assert field in str(err.value.message) + str(err.value.hint or "")


def test_observed_configs_use_the_same_names():
    from dynocell.engine.observed import from_server_args, from_vllm_args

    sgl = from_server_args({"disable_overlap_schedule": True, "disaggregation_mode": "prefill", "version": "0.5.17"})
    assert sgl.fields == {"serving.disable_overlap_schedule": True, "serving.topology": "prefill",
                          "serving.engine_version": "sglang 0.5.17"}
    v = from_vllm_args({"kv_transfer_config": {"kv_connector": "NixlConnector", "kv_role": "kv_consumer"},
                        "compilation_config": {"cudagraph_mode": "PIECEWISE"}})
    assert v.fields == {"serving.topology": "decode", "cuda_graph.mode": "piecewise"}


def test_reference_engine_refuses_a_disaggregated_role():
    cfg = parse_config('engine = "reference"\nmodel_path = "dynocell:tiny"\n[serving]\ntopology = "prefill"\n')
    with pytest.raises(ConfigError, match="colocated only"):
        get_adapter("reference").args(cfg, port=1)
