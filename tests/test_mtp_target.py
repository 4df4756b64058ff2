"""Issue 24 item 5: an MTP-capable target made locally — the r2 target in MiMo's layout with one MTP
layer (SGLang 0.5.17 ``MiMoForCausalLM`` + ``MiMoMTP``, run with NEXTN / EAGLE, draft path = model path).

Names derived here from ``sglang/srt/models/mimo_mtp.py`` @ v0.5.17 (``MiMoMTP``)::

    def map_model_name_to_mtp_param_name(self, name):
        name_without_prefix = ["token_layernorm", "hidden_layernorm", "input_proj", "final_layernorm"]
        pattern = r"model.mtp_layers.(\\d+)."
        group = re.match(pattern, name)
        if group is not None:
            for sub_name in name_without_prefix:
                if sub_name in name:
                    name = name.replace(group.group(), "model.")
                    return name
            name = name.replace(group.group(), "model.mtp_block.")
        return name

and its parameters: ``model.embed_tokens``, ``model.token_layernorm``, ``model.hidden_layernorm``,
``model.input_proj`` (Linear 2H → H, no bias), ``model.mtp_block`` (a ``Qwen2DecoderLayer``: qkv_proj
with bias, o_proj, gate_up_proj, down_proj, two norms), ``model.final_layernorm``, ``lm_head``; names
outside ``mtp_block`` other than embed_tokens / lm_head / the four above are skipped.
``sglang/srt/models/mimo.py`` ``MiMoForCausalLM.load_weights`` skips names holding ``mtp_layers``.
"""

from __future__ import annotations

import json
import re

import pytest
import torch

from dynocell.engine.acceptance import Curve
from dynocell.engine.reference.decoding import Generation, LoadedModel, SamplingParams, load_tokenizer
from dynocell.engine.reference.eagle import load_head
from dynocell.engine.reference.eagle_decoding import EagleGeneration
from dynocell.engine.reference.nets import PACKAGED_DIR, recipe_id
from dynocell.engine.reference.mtp import make_mtp_target

PACKAGED_MTP = PACKAGED_DIR / recipe_id(0) / "mimo-mtp"
MTP_PARAMS = {  # MiMoMTP's parameters after q/k/v and gate/up stacking (H hidden, I intermediate, V vocab)
    "model.embed_tokens.weight": ("V", "H"),
    "model.token_layernorm.weight": ("H",),
    "model.hidden_layernorm.weight": ("H",),
    "model.input_proj.weight": ("H", "2H"),
    "model.final_layernorm.weight": ("H",),
    "model.mtp_block.input_layernorm.weight": ("H",),
    "model.mtp_block.self_attn.qkv_proj.weight": ("3H", "H"),
    "model.mtp_block.self_attn.qkv_proj.bias": ("3H",),
    "model.mtp_block.self_attn.o_proj.weight": ("H", "H"),
    "model.mtp_block.post_attention_layernorm.weight": ("H",),
    "model.mtp_block.mlp.gate_up_proj.weight": ("2I", "H"),
    "model.mtp_block.mlp.down_proj.weight": ("H", "I"),
    "lm_head.weight": ("V", "H"),
}
PROMPTS = ["def main(argv):\n    ", "import os\nimport sys\n\n", "class Config:\n    def __init__(self"]


def mtp_name(name: str) -> str:
    group = re.match(r"model.mtp_layers.(\d+).", name)
    if group is not None:
        for sub in ("token_layernorm", "hidden_layernorm", "input_proj", "final_layernorm"):
            if sub in name:
                return name.replace(group.group(), "model.")
        name = name.replace(group.group(), "model.mtp_block.")
    return name


def sglang_mtp_load(shapes: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    out: dict[str, list[int]] = {}
    for name, shape in shapes.items():
        name = mtp_name(name)
        if "mtp_block" in name:
            for param, shard in ((".qkv_proj", ".q_proj"), (".qkv_proj", ".k_proj"), (".qkv_proj", ".v_proj"),
                                 (".gate_up_proj", ".gate_proj"), (".gate_up_proj", ".up_proj")):
                if shard in name:
                    name = name.replace(shard, param)
                    break
        elif not any(s in name for s in ("embed_tokens", "lm_head", "token_layernorm", "hidden_layernorm",
                                         "input_proj", "final_layernorm")):
            continue  # the trunk's weights: not the draft's
        assert name in MTP_PARAMS, f"{name} is not a parameter of SGLang's MiMoMTP"
        if name in out:
            out[name][0] += shape[0]
        else:
            out[name] = list(shape)
    return {k: tuple(v) for k, v in out.items()}


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def short_mtp(model_pair, tmp_path_factory):
    out = tmp_path_factory.mktemp("mtp") / "mimo"
    make_mtp_target(out, model_pair.target, seed=0, recipe={"steps": 3, "batch": 2, "seq": 64}, max_bytes=200_000)
    return out


def check_mimo_layout(folder) -> None:
    from safetensors import safe_open

    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["architectures"] == ["MiMoForCausalLM"] and cfg["num_nextn_predict_layers"] == 1
    assert cfg["model_type"] == "qwen2"  # transformers' AutoConfig knows it; SGLang picks the class by architectures
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        names = f.keys()  # a safetensors file handle: not iterable itself
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in names}
    h, i = cfg["hidden_size"], cfg["intermediate_size"]
    d = {"H": h, "2H": 2 * h, "3H": 3 * h, "I": i, "2I": 2 * i, "V": cfg["vocab_size"]}
    assert sglang_mtp_load(shapes) == {k: tuple(d[x] for x in v) for k, v in MTP_PARAMS.items()}
    trunk = {k for k in shapes if "mtp_layers" not in k}  # MiMoForCausalLM loads these, skips mtp_layers
    for layer in range(cfg["num_hidden_layers"]):
        for n in ("q_proj", "k_proj", "v_proj"):  # Qwen2's qkv_proj has a bias
            assert f"model.layers.{layer}.self_attn.{n}.bias" in trunk
    assert {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"} <= trunk


def test_short_recipe_writes_mimo_layout(short_mtp):
    check_mimo_layout(short_mtp)


def test_the_mimo_trunk_is_the_r2_target(short_mtp, model_pair):
    """Zero q/k/v biases: transformers loads the folder as Qwen2 and computes the Llama target's logits."""
    from transformers import AutoModelForCausalLM

    ids = torch.tensor([load_tokenizer(model_pair.target).encode(PROMPTS[0]).ids])
    with torch.inference_mode():
        a = AutoModelForCausalLM.from_pretrained(str(model_pair.target), dtype=torch.float32)(input_ids=ids).logits
        m = AutoModelForCausalLM.from_pretrained(str(short_mtp), dtype=torch.float32)
        assert type(m).__name__ == "Qwen2ForCausalLM"
        b = m(input_ids=ids).logits
    assert torch.allclose(a, b, atol=1e-4)


@pytest.mark.parametrize("topk,ndt", [(1, 4), (2, 6)])
def test_greedy_nextn_over_the_mtp_layer_is_lossless(short_mtp, topk, ndt):
    target = LoadedModel(short_mtp, "cpu")
    head = load_head(short_mtp, target.model)
    assert head.architecture == "MiMoMTP"
    tok = load_tokenizer(short_mtp)
    for prompt in PROMPTS[:2]:
        ids = tok.encode(prompt).ids
        g = EagleGeneration(ids, SamplingParams(max_new_tokens=32, temperature=0.0, ignore_eos=True), target, head,
                            "NEXTN", 3, topk, ndt, "top1", set(), 1024)
        while not g.finished:
            g.step()
        plain = Generation(ids, SamplingParams(max_new_tokens=32, temperature=0.0, ignore_eos=True), target, None,
                           None, 0, "top1", set(), 1024)
        while not plain.finished:
            plain.step()
        assert g.output_ids == plain.output_ids and len(g.histogram) == 4


@pytest.mark.skipif(not (PACKAGED_MTP / "model.safetensors").is_file(), reason="no packaged MTP target")
def test_packaged_mtp_target_layout_and_a_non_degenerate_curve():
    check_mimo_layout(PACKAGED_MTP)
    assert (PACKAGED_MTP / "model.safetensors").stat().st_size < 10_000_000
    target = LoadedModel(PACKAGED_MTP, "cpu")
    head = load_head(PACKAGED_MTP, target.model)
    tok = load_tokenizer(PACKAGED_MTP)
    h = [0, 0, 0, 0]
    for i, prompt in enumerate(PROMPTS):
        g = EagleGeneration(tok.encode(prompt).ids, SamplingParams(max_new_tokens=64, temperature=0.5, seed=i,
                            ignore_eos=True), target, head, "NEXTN", 3, 1, 4, "top1", set(), 1024)
        while not g.finished:
            g.step()
        h = [a + b for a, b in zip(h, g.histogram)]
    curve = Curve.from_histogram(h)
    assert 0.3 <= curve.p[0] <= 0.95, curve
    assert curve.tau < 1 + 3 - 0.5, curve
