"""Issue 24 item 4: the EAGLE-3 head (SGLang 0.5.17's ``LlamaForCausalLMEagle3`` layout) made locally for
the r2 target, and the reference engine drafting with it.

Name table derived here from ``sglang/srt/models/llama_eagle3.py`` @ v0.5.17, independently of
``dynocell.engine.reference.eagle3.SGLANG_EAGLE3_NAMES``:

- ``LlamaDecoderLayer.__init__``: ``self.self_attn.qkv_proj = QKVParallelLinear(2 * hidden_size, ...)``
  for the input layer; ``self.hidden_norm = RMSNorm(config.hidden_size)``; ``input_layernorm`` and
  ``post_attention_layernorm`` are the base layer's;
- ``LlamaModel.__init__``: ``self.fc = torch.nn.Linear(self.hidden_size_in * self.num_aux_hidden_states,
  config.hidden_size, bias=getattr(config, "bias", False))``; ``self.norm = RMSNorm(config.hidden_size)``;
  num_aux from ``eagle_config["eagle_aux_hidden_state_layer_ids"]``;
- ``LlamaForCausalLMEagle3.__init__``: ``self.lm_head = ParallelLMHead(config.draft_vocab_size, ...)``;
- ``load_weights``: ``legacy_name_map = {"midlayer": "layers.0", ...}``; ``if "d2t" in name:
  self.hot_token_id = loaded_weight + torch.arange(loaded_weight.shape[0])``; ``if "t2d" in name: continue``;
  stacked q/k/v → qkv_proj, gate/up → gate_up_proj; ``param_name = name if name in params_dict else
  f"model.{name}"``.
- ``models/llama.py`` ``set_eagle3_layers_to_capture``: ``layers_to_capture = [val + 1 for val in layer_ids]``,
  captured as ``hidden_states + residual`` before layer ``val + 1`` runs.
"""

from __future__ import annotations

import json

import pytest
import torch

from dynocell.engine.acceptance import curve_from_meta_infos
from dynocell.engine.meta import check_generations
from dynocell.engine.reference.decoding import Generation, LoadedModel, SamplingParams, load_tokenizer
from dynocell.engine.reference.eagle import load_head
from dynocell.engine.reference.eagle3 import make_eagle3
from dynocell.engine.reference.eagle_decoding import EagleGeneration
from dynocell.engine.reference.nets import PACKAGED_DIR, recipe_id

SGLANG_PARAMS = {
    "model.fc.weight": ("H", "AH"),
    "model.layers.0.hidden_norm.weight": ("H",),
    "model.layers.0.input_layernorm.weight": ("H",),
    "model.layers.0.self_attn.qkv_proj.weight": ("3H", "2H"),
    "model.layers.0.self_attn.o_proj.weight": ("H", "H"),
    "model.layers.0.post_attention_layernorm.weight": ("H",),
    "model.layers.0.mlp.gate_up_proj.weight": ("2I", "H"),
    "model.layers.0.mlp.down_proj.weight": ("H", "I"),
    "model.norm.weight": ("H",),
    "lm_head.weight": ("Vd", "H"),
}
STACKED = [(".qkv_proj", ".q_proj"), (".qkv_proj", ".k_proj"), (".qkv_proj", ".v_proj"),
           (".gate_up_proj", ".gate_proj"), (".gate_up_proj", ".up_proj")]
PROMPTS = ["def main(argv):\n    ", "import os\nimport sys\n\n", "class Config:\n    def __init__(self"]
PACKAGED_EAGLE3 = PACKAGED_DIR / recipe_id(0) / "eagle3"


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def short_head3(model_pair, tmp_path_factory):
    out = tmp_path_factory.mktemp("eagle3") / "head"
    make_eagle3(out, model_pair.target, seed=0, recipe={"steps": 3, "batch": 2, "seq": 64}, max_bytes=200_000)
    return out


@pytest.fixture(scope="module")
def target(model_pair):
    return LoadedModel(model_pair.target, "cpu")


def sglang_load(shapes: dict[str, tuple[int, ...]]) -> tuple[dict[str, tuple[int, ...]], set[str]]:
    params: dict[str, list[int]] = {}
    buffers = set()
    for name, shape in shapes.items():
        name = name.replace("midlayer", "layers.0")
        if "d2t" in name or "t2d" in name:
            buffers.add(name)
            continue
        for param, shard in STACKED:
            if shard in name:
                name = name.replace(shard, param)
                break
        name = name if name in SGLANG_PARAMS else f"model.{name}"
        assert name in SGLANG_PARAMS, f"{name} is not a parameter of SGLang's LlamaForCausalLMEagle3 (dropped)"
        if name in params:
            params[name][0] += shape[0]
        else:
            params[name] = list(shape)
    return {k: tuple(v) for k, v in params.items()}, buffers


def check_layout3(head_dir, target_cfg: dict) -> None:
    from safetensors import safe_open

    cfg = json.loads((head_dir / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"] and cfg["num_hidden_layers"] == 1
    ids = cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    # SGLang captures the input of layer id + 1: it must exist and not be layer 0 (residual None there).
    assert all(i >= 0 and 1 <= i + 1 < target_cfg["num_hidden_layers"] for i in ids), ids
    h, inter, vd = cfg["hidden_size"], cfg["intermediate_size"], cfg["draft_vocab_size"]
    dims = {"H": h, "2H": 2 * h, "3H": 3 * h, "AH": len(ids) * h, "I": inter, "2I": 2 * inter, "Vd": vd}
    with safe_open(str(head_dir / "model.safetensors"), "pt") as f:
        names = f.keys()  # a safetensors file handle: not iterable itself
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in names}
        d2t, t2d = f.get_tensor("d2t"), f.get_tensor("t2d")
    params, buffers = sglang_load(shapes)
    assert params == {k: tuple(dims[x] for x in v) for k, v in SGLANG_PARAMS.items()}
    assert buffers == {"d2t", "t2d"}
    hot = d2t + torch.arange(d2t.numel())  # SGLang's hot_token_id
    assert d2t.numel() == vd and hot.unique().numel() == vd and int(hot.max()) < cfg["vocab_size"]
    assert t2d.dtype == torch.bool and int(t2d.sum()) == vd and bool(t2d[hot].all())


def test_short_recipe_writes_sglang_eagle3_layout(short_head3, model_pair):
    check_layout3(short_head3, json.loads((model_pair.target / "config.json").read_text()))


def test_aux_states_are_the_layer_outputs_sglang_captures(short_head3, target):
    """hidden_states + residual before layer i + 1 in SGLang = the output of layer i in transformers."""
    head = load_head(short_head3, target.model)
    ids = torch.tensor([load_tokenizer(target.path).encode(PROMPTS[0]).ids])
    with torch.inference_mode():
        _, aux = head.target_features(target.model, ids)
        hs = target.model(input_ids=ids, output_hidden_states=True).hidden_states  # [emb, layer0 out, layer1 out, …]
    h = target.config.hidden_size
    assert torch.allclose(aux[..., :h], hs[1], atol=1e-5) and torch.allclose(aux[..., h:2 * h], hs[2], atol=1e-5)


@pytest.mark.parametrize("topk,steps,ndt", [(1, 3, 4), (3, 3, 8)])
def test_greedy_eagle3_is_lossless_and_proposes_only_draft_vocabulary(short_head3, target, topk, steps, ndt):
    head = load_head(short_head3, target.model)
    tok = load_tokenizer(target.path)
    hot = set(head.hot_ids.tolist())
    for prompt in PROMPTS[:2]:
        ids = tok.encode(prompt).ids
        g = EagleGeneration(ids, SamplingParams(max_new_tokens=32, temperature=0.0, ignore_eos=True), target, head,
                            "EAGLE3", steps, topk, ndt, "top1", set(), 1024)
        trees = []
        while not g.finished:
            if g.prefilled and topk > 1:
                trees.append(g.build_tree())
            g.step()
        plain = Generation(ids, SamplingParams(max_new_tokens=32, temperature=0.0, ignore_eos=True), target, None,
                           None, 0, "top1", set(), 1024)
        while not plain.finished:
            plain.step()
        assert g.output_ids == plain.output_ids
        assert all(tok_ in hot for tree in trees for tok_, _ in tree)
        meta = {**g.meta(), "completion_tokens": len(g.output_ids)}
        assert check_generations([meta]) == []
        assert curve_from_meta_infos([meta]).num_drafts == steps


@pytest.mark.skipif(not (PACKAGED_EAGLE3 / "model.safetensors").is_file(), reason="no packaged EAGLE-3 head")
def test_packaged_eagle3_head_layout_and_a_non_degenerate_curve(target, model_pair):
    from dynocell.engine.acceptance import Curve

    check_layout3(PACKAGED_EAGLE3, json.loads((model_pair.target / "config.json").read_text()))
    head = load_head(PACKAGED_EAGLE3, target.model)
    tok = load_tokenizer(target.path)
    h = [0, 0, 0, 0]
    for i, prompt in enumerate(PROMPTS):
        g = EagleGeneration(tok.encode(prompt).ids, SamplingParams(max_new_tokens=64, temperature=0.5, seed=i,
                            ignore_eos=True), target, head, "EAGLE3", 3, 1, 4, "top1", set(), 1024)
        while not g.finished:
            g.step()
        h = [a + b for a, b in zip(h, g.histogram)]
    curve = Curve.from_histogram(h)
    assert 0.3 <= curve.p[0] <= 0.95, curve
    assert curve.tau < 1 + 3 - 0.5, curve
