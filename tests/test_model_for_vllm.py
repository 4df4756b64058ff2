"""`dynocell model for-vllm` / :func:`dynocell.runbooks.model_pair.head_for_vllm`: the shipped heads in the layout
vLLM 0.26.0 loads for the same function (EAGLE-3: aux layer ids + 1, at the config's top level and under
eagle_config; EAGLE: only with a zero fc.bias; MiMo MTP: needs no copy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dynocell.cli.app import build_app
from dynocell.errors import UserError
from dynocell.runbooks.model_pair import head_for_vllm

PAIR = Path(__file__).parents[1] / "dynocell" / "engine" / "reference" / "pair" / "tiny-llama-bpe512-r2-s0"


def test_eagle3_copy_shifts_the_aux_layers_and_keeps_the_weights(tmp_path):
    out = tmp_path / "e3"
    res = head_for_vllm(PAIR / "eagle3", out)
    src, cfg = json.loads((PAIR / "eagle3" / "config.json").read_text()), json.loads((out / "config.json").read_text())
    ids = src["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    shifted = [i + 1 for i in ids]
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == shifted
    assert cfg["eagle_aux_hidden_state_layer_ids"] == shifted  # vLLM's V2 model runner reads only this one
    assert res["eagle_aux_hidden_state_layer_ids"] == [ids, shifted]
    assert (out / "model.safetensors").read_bytes() == (PAIR / "eagle3" / "model.safetensors").read_bytes()
    assert {k: v for k, v in cfg.items() if k != "eagle_aux_hidden_state_layer_ids" and k != "eagle_config"} == {
        k: v for k, v in src.items() if k != "eagle_config"}


def test_the_shipped_eagle_head_is_refused_for_its_trained_bias(tmp_path):
    with pytest.raises(UserError, match="fc.bias is trained"):
        head_for_vllm(PAIR / "eagle", tmp_path / "e")
    assert not (tmp_path / "e").exists()


def test_a_zero_bias_eagle_head_converts(tmp_path):
    from safetensors.torch import load_file, save_file

    src = tmp_path / "zero"
    src.mkdir()
    for f in (PAIR / "eagle").iterdir():
        (src / f.name).write_bytes(f.read_bytes())
    t = load_file(str(src / "model.safetensors"))
    t["fc.bias"].zero_()
    save_file(t, str(src / "model.safetensors"))
    res = head_for_vllm(src, tmp_path / "v")
    assert res["dropped"] == ["fc.bias"]
    cfg = json.loads((tmp_path / "v" / "config.json").read_text())
    assert cfg["architectures"] == ["EagleLlamaForCausalLM"]
    got = load_file(str(tmp_path / "v" / "model.safetensors"))
    assert "fc.bias" not in got and set(got) == set(t) - {"fc.bias"}
    assert all(bool((got[k] == t[k]).all()) for k in got)


def test_mtp_needs_no_copy_and_the_cli_says_so(tmp_path):
    res = CliRunner().invoke(build_app(), ["model", "for-vllm", str(PAIR / "mimo-mtp"), str(tmp_path / "m")])
    assert res.exit_code != 0 and "loads in vLLM 0.26.0 as it is" in " ".join(res.output.split())
    ok = CliRunner().invoke(build_app(), ["model", "for-vllm", str(PAIR / "eagle3"), str(tmp_path / "e3"), "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["dest"] == str((tmp_path / "e3").resolve())


@pytest.mark.parametrize("algo,method", [("eagle3", "eagle3"), ("mtp", "mtp")])
@pytest.mark.parametrize("mode", ["graph", "eager"])
def test_the_h200_vllm_head_configs_build_vllms_argv(algo, method, mode):
    """gpu/configs/h200-vllm-{eagle3,mtp}-{graph,eager}.toml pass dynocell's checks and become vLLM 0.26.0's
    `--speculative-config` with its method name, k = 3 and the draft's own attention backend."""
    from dynocell.engine.adapters import adapter_for
    from dynocell.engine.config import load_config

    cfg = load_config(Path(__file__).parents[1] / "gpu" / "configs" / f"h200-vllm-{algo}-{mode}.toml")
    argv = adapter_for(cfg.engine).args(cfg, port=30000)
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["method"] == method and spec["num_speculative_tokens"] == 3
    assert spec["attention_backend"] == "TRITON_ATTN"
    assert spec["model"].endswith("eagle3-vllm" if algo == "eagle3" else "mimo-mtp")
    assert ("--enforce-eager" in argv) == (mode == "eager")
