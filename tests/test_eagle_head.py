"""Issue 24 items 2-3: the EAGLE head made locally (SGLang 0.5.17's ``LlamaForCausalLMEagle`` layout)
and the reference engine drafting with it — chain (topk 1) and tree (topk > 1) — losslessly.

The name table below is derived here from SGLang 0.5.17's source, independently of
``dynocell.engine.reference.eagle.SGLANG_EAGLE_NAMES``:

- ``sglang/srt/models/llama_eagle.py``::

      class LlamaModel(nn.Module):
          self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size, ...)
          self.layers = nn.ModuleList([LlamaDecoderLayer(config, i, ...) for i in range(config.num_hidden_layers)])
          self.fc = torch.nn.Linear(config.hidden_size * 2, config.hidden_size)
      class LlamaDecoderLayer(LlamaDecoderLayer):
          if layer_id == 0:
              del self.input_layernorm
      def load_weights(self, weights):
          for name, loaded_weight in weights:
              if "lm_head" not in name:
                  name = "model." + name
                  super().load_weights([(name, loaded_weight)])

- ``sglang/srt/models/llama.py`` ``LlamaForCausalLM._legacy_load_weights``: ``stacked_params_mapping``
  ``(".qkv_proj", ".q_proj", "q"), (".qkv_proj", ".k_proj", "k"), (".qkv_proj", ".v_proj", "v"),
  (".gate_up_proj", ".gate_proj", 0), (".gate_up_proj", ".up_proj", 1)``; any other name must be in
  ``params_dict`` or it is only warned about ("Parameter {name} not found in params_dict") and dropped.
"""

from __future__ import annotations

import json

import pytest
import torch

from dynocell.engine.acceptance import Curve, curve_from_meta_infos
from dynocell.engine.meta import check_generations
from dynocell.engine.reference.decoding import Generation, LoadedModel, SamplingParams, load_tokenizer
from dynocell.engine.reference.eagle import load_head, make_eagle
from dynocell.engine.reference.eagle_decoding import EagleGeneration
from dynocell.engine.reference.nets import PACKAGED_DIR, recipe_id

#: SGLang's parameters of LlamaForCausalLMEagle (num_hidden_layers 1) other than lm_head, which
#: the EAGLE worker replaces with the target's (eagle_worker_v2.py init_lm_head: set_embed_and_head).
SGLANG_PARAMS = {
    "model.embed_tokens.weight": ("V", "H"),
    "model.fc.weight": ("H", "2H"),
    "model.fc.bias": ("H",),
    "model.layers.0.self_attn.qkv_proj.weight": ("3H", "H"),
    "model.layers.0.self_attn.o_proj.weight": ("H", "H"),
    "model.layers.0.post_attention_layernorm.weight": ("H",),
    "model.layers.0.mlp.gate_up_proj.weight": ("2I", "H"),
    "model.layers.0.mlp.down_proj.weight": ("H", "I"),
}
STACKED = [(".qkv_proj", ".q_proj"), (".qkv_proj", ".k_proj"), (".qkv_proj", ".v_proj"),
           (".gate_up_proj", ".gate_proj"), (".gate_up_proj", ".up_proj")]
PROMPTS = ["def main(argv):\n    ", "import os\nimport sys\n\n", "class Config:\n    def __init__(self",
           "    for i in range(len(items)):\n"]
PACKAGED_EAGLE = PACKAGED_DIR / recipe_id(0) / "eagle"


def sglang_load(tensors: dict[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """Which SGLang parameter each file tensor lands in, with the stacked shape (rows summed)."""
    out: dict[str, list[int]] = {}
    for name, shape in tensors.items():
        if "lm_head" in name:
            continue
        name = "model." + name
        for param, shard in STACKED:
            if shard in name:
                name = name.replace(shard, param)
                break
        assert name in SGLANG_PARAMS, f"{name} is not a parameter of SGLang's LlamaForCausalLMEagle (dropped)"
        if name in out:
            out[name][0] += shape[0]
        else:
            out[name] = list(shape)
    return {k: tuple(v) for k, v in out.items()}


def _dims(cfg: dict) -> dict[str, int]:
    h, i = cfg["hidden_size"], cfg["intermediate_size"]
    return {"H": h, "2H": 2 * h, "3H": 3 * h, "I": i, "2I": 2 * i, "V": cfg["vocab_size"]}


@pytest.fixture(autouse=True)
def one_thread():
    """One torch thread, as the reference engine runs (--num-threads 1): on a shared 2-core machine two
    threads make a tiny forward ~50× slower."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def short_head(model_pair, tmp_path_factory):
    """A head trained for a few steps on a small slice of the corpus (the recipe's code path)."""
    out = tmp_path_factory.mktemp("eagle") / "head"
    lines: list[str] = []
    make_eagle(out, model_pair.target, seed=0, recipe={"steps": 4, "batch": 2, "seq": 64},
               max_bytes=200_000, progress=lines.append)
    (out / "progress.txt").write_text("\n".join(lines))
    return out


@pytest.fixture(scope="module")
def target(model_pair):
    return LoadedModel(model_pair.target, "cpu")


def _check_layout(head_dir) -> None:
    from safetensors import safe_open

    cfg = json.loads((head_dir / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle"] and cfg["num_hidden_layers"] == 1
    assert cfg["tie_word_embeddings"] is False  # else SGLang would alias lm_head to embed_tokens
    with safe_open(str(head_dir / "model.safetensors"), "pt") as f:
        names = f.keys()  # a safetensors file handle: not iterable itself
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in names}
    assert not any("input_layernorm" in k or k.startswith("norm.") or "lm_head" in k for k in shapes), shapes
    d = _dims(cfg)
    loaded = sglang_load(shapes)
    assert loaded == {k: tuple(d[x] for x in v) for k, v in SGLANG_PARAMS.items()}


def test_short_recipe_writes_sglang_layout(short_head, model_pair):
    _check_layout(short_head)
    assert (short_head / "tokenizer.json").read_bytes() == (model_pair.target / "tokenizer.json").read_bytes()
    assert "step 4/4" in (short_head / "progress.txt").read_text()
    assert (short_head / "model.safetensors").stat().st_size < 10_000_000


def test_the_head_shares_embedding_and_lm_head_with_the_target(short_head, target):
    head = load_head(short_head, target.model)
    names = {n for n, _ in head.named_parameters()}
    assert not any("embed" in n or "lm_head" in n for n in names)
    assert head._head.data_ptr() == target.model.lm_head.weight.data_ptr()


def test_a_head_of_another_shape_is_refused(short_head, tmp_path, target):
    from dynocell.errors import EngineError

    bad = tmp_path / "bad"
    bad.mkdir()
    for f in ("config.json", "model.safetensors"):
        (bad / f).write_bytes((short_head / f).read_bytes())
    cfg = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**cfg, "architectures": ["LlamaForCausalLM"]}))
    with pytest.raises(EngineError, match="LlamaForCausalLMEagle"):
        load_head(bad, target.model)


def _generate(target, head, prompt, topk, steps, ndt, temperature, seed=1, n=40):
    tok = load_tokenizer(target.path)
    ids = tok.encode(prompt).ids
    sp = SamplingParams(max_new_tokens=n, temperature=temperature, seed=seed, ignore_eos=True)
    g = EagleGeneration(ids, sp, target, head, "EAGLE", steps, topk, ndt, "top1", set(), 1024)
    while not g.finished:
        g.step()
    return g


@pytest.mark.parametrize("topk,steps,ndt", [(1, 3, 4), (3, 3, 8), (2, 4, 6)])
def test_greedy_eagle_is_lossless_chain_and_tree(short_head, target, topk, steps, ndt):
    head = load_head(short_head, target.model)
    tok = load_tokenizer(target.path)
    for prompt in PROMPTS[:2]:
        g = _generate(target, head, prompt, topk, steps, ndt, 0.0)
        plain = Generation(tok.encode(prompt).ids, SamplingParams(max_new_tokens=40, temperature=0.0,
                           ignore_eos=True), target, None, None, 0, "top1", set(), 1024)
        while not plain.finished:
            plain.step()
        assert g.output_ids == plain.output_ids
        meta = g.meta()
        assert len(meta["spec_correct_drafts_histogram"]) == steps + 1  # accepted depth ≤ num_steps
        assert meta["spec_num_proposed_drafts"] == meta["spec_verify_ct"] * (ndt - 1)
        meta.update(completion_tokens=len(g.output_ids))
        assert check_generations([meta]) == []
        curve = curve_from_meta_infos([meta])
        assert curve.num_drafts == steps
        assert curve.accept_rate == pytest.approx(meta["spec_num_correct_drafts"] / meta["spec_num_proposed_drafts"])


def test_tree_is_built_as_sglang_scores_it(short_head, target):
    """organize_draft_results: the num_draft_tokens − 1 best of topk + (steps − 1)·topk² candidates, every
    node's parent in the tree (scores are products of probabilities, so never above the parent's)."""
    head = load_head(short_head, target.model)
    g = _generate(target, head, PROMPTS[0], 3, 3, 8, 0.0, n=2)
    tree = g.build_tree()
    assert len(tree) == 7
    assert all(parent < i for i, (_, parent) in enumerate(tree))
    roots = [t for t, p in tree if p == -1]
    assert 1 <= len(roots) <= 3 and len(set(roots)) == len(roots)


def test_tree_sampling_keeps_the_target_distribution(short_head, target):
    """Sampling on a tree: each child is accepted with its target probability (one coin per level over
    the children's cumulative probability), else the target with the children removed — so the token a
    verify step emits first follows the target's distribution. 400 seeded draws after a fixed prefix;
    total variation to the target's p against the same count of direct draws from p."""
    from dynocell.engine.reference.decoding import probs

    head = load_head(short_head, target.model)
    tok = load_tokenizer(target.path)
    ids = tok.encode(PROMPTS[2]).ids
    fixed = tok.encode(")").ids[0]
    sp = SamplingParams(max_new_tokens=8, temperature=0.7, ignore_eos=True)
    cache = target.new_cache()
    p = probs(target.forward(ids + [fixed], cache)[-1], sp)
    V = p.numel()
    emitted = torch.zeros(V)
    n = 400
    for seed in range(n):
        g = EagleGeneration(ids, sp, target, head, "EAGLE", 2, 3, 6, "top1", set(), 1024)
        g.step()  # prefill; then pin the first token so every draw has one prefix
        g.tokens[-1] = g.output_ids[-1] = fixed
        g.gen = torch.Generator().manual_seed(seed)
        g.step()  # one tree verify
        emitted[g.output_ids[1]] += 1
    direct = torch.bincount(torch.multinomial(p, n, replacement=True, generator=torch.Generator().manual_seed(0)),
                            minlength=V).float()
    tv_tree = 0.5 * float((emitted / n - p).abs().sum())
    tv_direct = 0.5 * float((direct / n - p).abs().sum())
    assert tv_tree < max(0.1, 2 * tv_direct), (tv_tree, tv_direct)


@pytest.mark.skipif(not (PACKAGED_EAGLE / "model.safetensors").is_file(), reason="no packaged EAGLE head")
def test_packaged_head_layout_and_a_non_degenerate_curve(target):
    """The shipped head (made by the full recipe): p_1 in 0.3-0.95 at the pair's temperature, and τ well
    below 1 + D (dummy weights give τ ≈ 1 + D)."""
    _check_layout(PACKAGED_EAGLE)
    head = load_head(PACKAGED_EAGLE, target.model)
    h = [0, 0, 0, 0]
    for i, prompt in enumerate(PROMPTS):
        g = _generate(target, head, prompt, 1, 3, 4, 0.5, seed=i, n=64)
        h = [a + b for a, b in zip(h, g.histogram)]
    curve = Curve.from_histogram(h)
    assert 0.3 <= curve.p[0] <= 0.95, curve
    assert curve.tau < 1 + 3 - 0.5, curve


def test_reference_engine_serves_eagle_tree_with_sglang_meta_info(short_head, model_pair, tmp_path):
    """The engine process with --speculative-algorithm EAGLE and a tree (topk 2, 3 steps, 6 draft tokens):
    meta_info histograms over the accepted depth (num_steps + 1 buckets), proposed = verify × 5, and the
    same curve math as SGLang; /get_server_info reports the tree."""
    import httpx

    from dynocell.engine.reference.launch import start_engine

    eng = start_engine(model_pair.target, ["--speculative-algorithm", "EAGLE", "--speculative-draft-model-path",
                                           str(short_head), "--speculative-num-steps", "3",
                                           "--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "6",
                                           "--enable-metrics"], tmp_path / "server.log")
    try:
        metas = []
        for prompt in PROMPTS:
            r = httpx.post(eng.url + "/generate", json={"text": prompt, "sampling_params": {
                "max_new_tokens": 24, "temperature": 0, "ignore_eos": True}}, timeout=60)
            assert r.status_code == 200
            metas.append(r.json()["meta_info"])
        assert all(len(m["spec_correct_drafts_histogram"]) == 4 for m in metas)
        assert all(m["spec_num_proposed_drafts"] == 5 * m["spec_verify_ct"] for m in metas)
        assert check_generations(metas) == []
        curve = curve_from_meta_infos(metas)
        assert curve.num_drafts == 3 and 1.0 <= curve.tau <= 4.0
        info = httpx.get(eng.url + "/get_server_info", timeout=10).json()
        assert (info["speculative_algorithm"], info["speculative_eagle_topk"],
                info["speculative_num_draft_tokens"]) == ("EAGLE", 2, 6)
        assert "EAGLE head" in (tmp_path / "server.log").read_text()
    finally:
        eng.stop()


def test_reference_engine_refuses_a_tree_without_its_size(model_pair, short_head):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "dynocell.engine.reference", "--model-path", str(model_pair.target),
                        "--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", str(short_head),
                        "--speculative-eagle-topk", "4"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--speculative-num-draft-tokens must be given" in r.stderr


def test_sglang_histograms_shorter_than_d_plus_one_are_padded():
    """SGLang 0.5.17 starts each request's histogram as [] and extends it only to the largest k seen
    (schedule_batch.py update_spec_correct_drafts_histogram): a request that never accepted 3 drafts of 3
    reports [a, b, c]. Requests of one tree run (5 nodes per step) then sum bucket by bucket."""
    metas = [
        {"spec_correct_drafts_histogram": [2, 3, 1], "spec_verify_ct": 6, "spec_num_correct_drafts": 5,
         "spec_num_proposed_drafts": 30, "completion_tokens": 12, "spec_accept_length": 2.0},
        {"spec_correct_drafts_histogram": [1, 1, 1, 1], "spec_verify_ct": 4, "spec_num_correct_drafts": 6,
         "spec_num_proposed_drafts": 20, "completion_tokens": 11, "spec_accept_length": 2.75},
        {"spec_correct_drafts_histogram": [4], "spec_verify_ct": 4, "spec_num_correct_drafts": 0,
         "spec_num_proposed_drafts": 20, "completion_tokens": 5, "spec_accept_length": 1.25},
    ]
    curve = curve_from_meta_infos(metas[:2])
    assert curve.histogram == (3, 4, 2, 1) and curve.num_drafts == 3
    assert curve.accept_rate == pytest.approx(11 / 50)  # proposed over the tree's 5 nodes per step
    assert curve_from_meta_infos(metas[:1], num_drafts=3).histogram == (2, 3, 1, 0)
    with pytest.raises(Exception, match="D = 2 allows 3"):
        curve_from_meta_infos(metas[1:2] + metas[:1], num_drafts=2)
    assert curve_from_meta_infos([{"spec_correct_drafts_histogram": None}], num_drafts=3) is None
    assert curve_from_meta_infos(metas).histogram == (7, 4, 2, 1)  # [4]: four steps, nothing accepted
    assert check_generations(metas) == []


def test_cli_make_eagle_short_run_and_a_bad_kind(cli_env, model_pair, tmp_path):
    """`dynocell model make-eagle DIR --steps N` (the real console script) and its refusal of an unknown kind."""
    import shutil
    import subprocess

    exe = (shutil.which("dynocell")
           or str(__import__("pathlib").Path(__import__("sys").executable).with_name("dynocell")))
    out = tmp_path / "head"
    r = subprocess.run([exe, "model", "make-eagle", str(out), "--target", str(model_pair.target), "--steps", "2",
                        "--json"], env=cli_env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1])["eagle"] == str(out)
    _check_layout(out)
    bad = subprocess.run([exe, "model", "make-eagle", str(tmp_path / "x"), "--kind", "medusa"], env=cli_env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "Error:" in bad.stderr and "--kind eagle, eagle3 or mtp" in bad.stderr


def test_reference_engine_refuses_an_eagle3_head_for_eagle(model_pair, tmp_path):
    import subprocess
    import sys

    head3 = PACKAGED_DIR / recipe_id(0) / "eagle3"
    r = subprocess.run([sys.executable, "-m", "dynocell.engine.reference", "--model-path", str(model_pair.target),
                        "--port", "1", "--speculative-algorithm", "EAGLE", "--speculative-draft-model-path",
                        str(head3)], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "needs a LlamaForCausalLMEagle" in (r.stderr + r.stdout)
