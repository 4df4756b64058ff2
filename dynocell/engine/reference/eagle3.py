"""EAGLE-3 draft heads for the reference target, in the layout SGLang 0.5.17 loads.

EAGLE-3 (Li et al. 2025, "EAGLE-3: Scaling up Inference Acceleration of Large Language Models via
Training-Time Test") drafts from hidden states of several target layers fused by ``fc``, and has
its own (smaller) draft vocabulary. SGLang 0.5.17 ``sglang/srt/models/llama_eagle3.py``
(``LlamaForCausalLMEagle3``) is the contract:

- ``LlamaModel.forward``: ``hidden = spec_info.hidden_states``; when its width differs from the
  embedding's (the first draft step, fed the target's aux states) ``hidden = fc(hidden)``; later
  draft steps feed the head's own pre-norm output back unchanged;
- the one ``LlamaDecoderLayer`` (input layer): ``residual = hidden``; ``hidden = hidden_norm(hidden)``;
  ``embeds = input_layernorm(embeds)``; attention over ``cat([embeds, hidden])`` (``qkv_proj`` takes
  2 × hidden_size); ``post_attention_layernorm`` fused with the residual; MLP;
- then ``norm(hidden, residual)``: the normed state goes to ``lm_head`` (``draft_vocab_size`` rows, the
  head's own), the pre-norm sum is the feature for the next step (``norm_output`` false);
- ``fc = Linear(target_hidden × num_aux, hidden, bias=config.bias)`` where num_aux is
  ``len(eagle_config["eagle_aux_hidden_state_layer_ids"])``;
- ``load_weights``: legacy ``midlayer`` → ``layers.0``; ``d2t`` holds draft-id → target-id offsets
  (``hot_token_id = d2t + arange``), ``t2d`` is skipped; names not in ``params_dict`` get ``model.``;
- ``eagle_worker_v2.py`` ``init_lm_head``: with ``draft_vocab_size`` set, only the embedding is the
  target's (``set_embed``); proposals are mapped through ``hot_token_id``.

Aux states (``models/llama.py``): ``set_eagle3_layers_to_capture(layer_ids)`` captures at
``layers_to_capture = [i + 1 for i in layer_ids]`` the residual stream *entering* that layer —
the output of layer ``i``. Layer 0's input cannot be captured (``hidden_states + residual`` with
``residual`` None) and the last layer's output is never entered, so a target of L layers offers
the outputs of layers 0 … L − 2. The r2 target has 3 layers: its EAGLE-3 head fuses the outputs
of layers 0 and 1 (``eagle_aux_hidden_state_layer_ids = [0, 1]``, num_aux 2) — the "low" and
"middle" states; no "high" one exists that SGLang can capture (the default ``[2, L // 2, L − 3]``
= ``[2, 1, 0]`` would crash on this target, so the config states the ids).

Public API: :data:`EAGLE3_HEAD`, :data:`AUX_LAYER_IDS`, :data:`SGLANG_EAGLE3_NAMES`,
:class:`Eagle3Head`, :func:`make_eagle3`, :func:`load_eagle3`, :func:`expected_tensors3`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import cast

import torch
from torch import nn

from dynocell.engine.reference.eagle import (
    KVCache, Progress, HeadAttn, HeadMLP, head_config, rms_norm, apply_rope, copy_tokenizer, corpus_ids, frozen_target,
    train_head, NormWeight,
)
from dynocell.errors import EngineError, UserError

#: Recipe: as the EAGLE head's, token loss only (EAGLE-3 drops the feature regression).
EAGLE3_HEAD = {"steps": 200, "lr": 3e-3, "batch": 8, "seq": 256, "cls_weight": 1.0, "reg_weight": 0.0,
               "threads": 1, "draft_vocab": 256}
#: Target layers whose outputs the head fuses (see the module docstring for why two on r2).
AUX_LAYER_IDS = (0, 1)

#: File tensor → (SGLang parameter, shape) with H = hidden_size, I = intermediate_size, A = number of
#: aux states, Vd = draft_vocab_size, V = vocab_size. ``d2t``/``t2d`` are buffers SGLang reads or skips.
SGLANG_EAGLE3_NAMES = {
    "fc.weight": ("model.fc.weight", ("H", "AH")),
    "midlayer.hidden_norm.weight": ("model.layers.0.hidden_norm.weight", ("H",)),
    "midlayer.input_layernorm.weight": ("model.layers.0.input_layernorm.weight", ("H",)),
    "midlayer.self_attn.q_proj.weight": ("model.layers.0.self_attn.qkv_proj.weight", ("H", "2H")),
    "midlayer.self_attn.k_proj.weight": ("model.layers.0.self_attn.qkv_proj.weight", ("H", "2H")),
    "midlayer.self_attn.v_proj.weight": ("model.layers.0.self_attn.qkv_proj.weight", ("H", "2H")),
    "midlayer.self_attn.o_proj.weight": ("model.layers.0.self_attn.o_proj.weight", ("H", "H")),
    "midlayer.post_attention_layernorm.weight": ("model.layers.0.post_attention_layernorm.weight", ("H",)),
    "midlayer.mlp.gate_proj.weight": ("model.layers.0.mlp.gate_up_proj.weight", ("I", "H")),
    "midlayer.mlp.up_proj.weight": ("model.layers.0.mlp.gate_up_proj.weight", ("I", "H")),
    "midlayer.mlp.down_proj.weight": ("model.layers.0.mlp.down_proj.weight", ("H", "I")),
    "norm.weight": ("model.norm.weight", ("H",)),
    "lm_head.weight": ("lm_head.weight", ("Vd", "H")),
    "d2t": ("hot_token_id", ("Vd",)),
    "t2d": (None, ("V",)),
}


def expected_tensors3(config: dict) -> dict[str, tuple[int, ...]]:
    """``{file tensor name: shape}`` an EAGLE-3 head of ``config`` (config.json dict) must hold."""
    h = config["hidden_size"]
    a = len(config["eagle_config"]["eagle_aux_hidden_state_layer_ids"])
    dims = {"H": h, "2H": 2 * h, "AH": a * h, "I": config["intermediate_size"], "Vd": config["draft_vocab_size"],
            "V": config["vocab_size"]}
    return {name: tuple(dims[d] for d in shape) for name, (_, shape) in SGLANG_EAGLE3_NAMES.items()}


class _Layer3(nn.Module):
    hidden_norm: NormWeight  # set in __init__ by name, as the file's tensors are named
    input_layernorm: NormWeight
    post_attention_layernorm: NormWeight

    def __init__(self, hidden: int, heads: int, inter: int, eps: float, theta: float) -> None:
        super().__init__()
        self.self_attn = HeadAttn(2 * hidden, hidden, heads)
        self.mlp = HeadMLP(hidden, inter)
        for n in ("hidden_norm", "input_layernorm", "post_attention_layernorm"):
            setattr(self, n, NormWeight(hidden))
        self.eps, self.theta = eps, theta

    def forward(self, emb: torch.Tensor, x: torch.Tensor, pos: torch.Tensor, cache: KVCache | None):
        """Returns ``(mlp output, residual)`` as SGLang's layer does (the caller fuses the final norm)."""
        a = self.self_attn
        B, T, _ = x.shape
        residual = x
        inp = torch.cat([rms_norm(emb, self.input_layernorm.weight, self.eps),
                         rms_norm(x, self.hidden_norm.weight, self.eps)], dim=-1)
        q = a.q_proj(inp).view(B, T, a.heads, a.hd).transpose(1, 2)
        k = a.k_proj(inp).view(B, T, a.heads, a.hd).transpose(1, 2)
        v = a.v_proj(inp).view(B, T, a.heads, a.hd).transpose(1, 2)
        q, k = apply_rope(q, pos, self.theta), apply_rope(k, pos, self.theta)
        if cache is None:
            o = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            past = len(cache)
            kk, vv = cache.append(k[0], v[0])
            mask = torch.arange(past + T)[None, :] <= (past + torch.arange(T))[:, None]
            o = nn.functional.scaled_dot_product_attention(q, kk[None], vv[None], attn_mask=mask)
        residual = a.o_proj(o.transpose(1, 2).reshape(B, T, -1)) + residual
        return self.mlp(rms_norm(residual, self.post_attention_layernorm.weight, self.eps)), residual


class Eagle3Head(nn.Module):
    """``LlamaForCausalLMEagle3`` of SGLang 0.5.17 on CPU. :meth:`forward` takes ids ``[B, T]``, features
    ``[B, T, A·H]`` (target aux states) or ``[B, T, H]`` (its own) and positions ``[T]``; returns
    ``(pre-norm feature [B, T, H], logits over the *target* vocabulary [B, T, V])`` — draft-vocabulary
    logits scattered through ``d2t``, −inf elsewhere (what SGLang's ``hot_token_id[topk_index]`` selects)."""

    architecture = "LlamaForCausalLMEagle3"

    def __init__(self, config: dict, hot_ids: torch.Tensor) -> None:
        super().__init__()
        self.config = dict(config)
        h = config["hidden_size"]
        theta = float((config.get("rope_parameters") or {}).get("rope_theta", config.get("rope_theta", 10000.0)))
        self.aux_ids = tuple(config["eagle_config"]["eagle_aux_hidden_state_layer_ids"])
        self.fc = nn.Linear(len(self.aux_ids) * h, h, bias=bool(config.get("bias", False)))
        self.layers = nn.ModuleList([_Layer3(h, config["num_attention_heads"], config["intermediate_size"],
                                             config["rms_norm_eps"], theta)])
        self.norm = NormWeight(h)
        self.lm_head = nn.Linear(h, config["draft_vocab_size"], bias=False)
        self.hot_ids = hot_ids.long()  # draft id → target id
        self._embed: torch.Tensor | None = None

    def set_embed(self, embed: torch.Tensor) -> None:
        """Share the target's embedding ``[V, H]`` (SGLang ``set_embed``)."""
        self._embed = embed.detach()

    def target_features(self, model, ids: torch.Tensor, cache=None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logits [B, T, V], aux [B, T, A·H])``: the target's outputs of layers :attr:`aux_ids`
        (the residual stream SGLang captures), concatenated low to high."""
        import inspect

        got: dict[int, torch.Tensor] = {}
        hooks = [model.model.layers[i].register_forward_hook(
            lambda _m, _a, out, i=i: got.__setitem__(i, out[0] if isinstance(out, tuple) else out))
            for i in self.aux_ids]
        try:
            name = "cache" if "cache" in inspect.signature(model.model.forward).parameters else "past_key_values"
            kw = {name: cache, "use_cache": True} if cache is not None else {"use_cache": False}
            h = model.model(input_ids=ids, **kw).last_hidden_state
        finally:
            for hk in hooks:
                hk.remove()
        return model.lm_head(h), torch.cat([got[i] for i in self.aux_ids], dim=-1)

    def draft_logits(self, ids: torch.Tensor, feats: torch.Tensor, pos: torch.Tensor,
                     cache: KVCache | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(pre-norm feature, logits over the draft vocabulary)``."""
        if self._embed is None:
            raise EngineError("the EAGLE-3 head has no embedding", "call set_embed(target's)")
        x = self.fc(feats) if feats.shape[-1] != self.config["hidden_size"] else feats
        emb = nn.functional.embedding(ids, self._embed)
        out, residual = self.layers[0](emb, x, pos, cache)
        aux = out + residual
        return aux, self.lm_head(rms_norm(aux, self.norm.weight, self.config["rms_norm_eps"]))

    def forward(self, ids, feats, pos, cache=None):
        aux, dl = self.draft_logits(ids, feats, pos, cache)
        full = torch.full((*dl.shape[:-1], self.config["vocab_size"]), float("-inf"), dtype=dl.dtype)
        full[..., self.hot_ids] = dl
        return aux, full

    def token_loss(self, out_logits: torch.Tensor, target_logits: torch.Tensor) -> torch.Tensor:
        """KL(target restricted to the draft vocabulary ‖ head), as EAGLE-3 trains its reduced vocabulary."""
        import torch.nn.functional as F

        return F.kl_div(F.log_softmax(out_logits[..., self.hot_ids], -1),
                        F.log_softmax(target_logits[..., self.hot_ids], -1), log_target=True, reduction="batchmean")


def make_eagle3(out_dir: Path, target_dir: Path, seed: int = 0, recipe: dict | None = None,
                max_bytes: int = 6_000_000, progress: Progress | None = None) -> Path:
    """Train an EAGLE-3 head for the target in ``target_dir`` into ``out_dir`` (SGLang layout): the draft
    vocabulary is the ``draft_vocab`` most frequent corpus tokens (``d2t``/``t2d``), aux states of
    :data:`AUX_LAYER_IDS`. Raises :class:`UserError` for an unusable ``out_dir`` or ``target_dir``."""
    from safetensors.torch import save_file

    recipe = {**EAGLE3_HEAD, **(recipe or {})}
    out_dir, target_dir = Path(out_dir), Path(target_dir)
    t_start = time.monotonic()
    with frozen_target(out_dir, target_dir, "make-eagle3", recipe["threads"]) as (target, tcfg):
        if tcfg["num_hidden_layers"] < max(AUX_LAYER_IDS) + 2:
            raise UserError(f"{target_dir} has {tcfg['num_hidden_layers']} layers; SGLang can capture the outputs "
                            f"of layers 0 … L − 2 only", "use a target of at least 3 layers")
        data = corpus_ids(target_dir, max_bytes)
        V = tcfg["vocab_size"]
        counts = torch.bincount(data, minlength=V)
        hot = torch.sort(torch.topk(counts, min(recipe["draft_vocab"], V)).indices).values
        cfg = head_config(tcfg)
        cfg.update({"architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": int(hot.numel()),
                    "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(AUX_LAYER_IDS),
                                     "use_aux_hidden_state": True},
                    "target_hidden_size": tcfg["hidden_size"]})
        torch.manual_seed(seed)
        head = Eagle3Head(cfg, hot)
        head.set_embed(target.model.embed_tokens.weight)
        with torch.no_grad():  # start from the target's last layer and LM head rows, as the EAGLE head does
            src = target.model.layers[-1]
            lay = cast(_Layer3, head.layers[0])  # an Eagle3Head's one layer (Eagle3Head.__init__)
            h = cfg["hidden_size"]
            for n in ("q_proj", "k_proj", "v_proj"):
                getattr(lay.self_attn, n).weight.zero_()
                getattr(lay.self_attn, n).weight[:, h:].copy_(getattr(src.self_attn, n).weight)
            lay.self_attn.o_proj.weight.copy_(src.self_attn.o_proj.weight)
            for n in ("gate_proj", "up_proj", "down_proj"):
                getattr(lay.mlp, n).weight.copy_(getattr(src.mlp, n).weight)
            lay.post_attention_layernorm.weight.copy_(src.post_attention_layernorm.weight)
            head.norm.weight.copy_(target.model.norm.weight)
            head.lm_head.weight.copy_(target.lm_head.weight[hot])
        if progress:
            progress(f"corpus: {data.numel()} tokens; draft vocabulary {hot.numel()} of {V}; training the EAGLE-3 "
                     f"head for {recipe['steps']} steps")
        loss, secs = train_head(head, target, data, recipe, seed, progress)
        out_dir.mkdir(parents=True, exist_ok=True)
        tensors = {k.replace("layers.0.", "midlayer."): v.detach().contiguous().clone()
                   for k, v in head.state_dict().items()}
        tensors["d2t"] = (hot - torch.arange(hot.numel())).contiguous()
        t2d = torch.zeros(V, dtype=torch.bool)
        t2d[hot] = True
        tensors["t2d"] = t2d
        save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
        (out_dir / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        copy_tokenizer(target_dir, out_dir)
    total = time.monotonic() - t_start
    (out_dir / "README.md").write_text(
        f"# EAGLE-3 head for `{target_dir.name}`\n\nMade by `dynocell model make-eagle --kind eagle3` "
        f"(`dynocell.engine.reference.eagle3.make_eagle3`), no network, seed {seed}.\n\n"
        f"- Layout: SGLang 0.5.17 `LlamaForCausalLMEagle3` (`sglang/srt/models/llama_eagle3.py`): `fc` over the "
        f"target's outputs of layers {list(AUX_LAYER_IDS)} (SGLang captures layers 0 … L − 2 only; the target has "
        f"{tcfg['num_hidden_layers']}), one decoder layer over [norm(embedding) ; norm(feature)], final norm, own LM "
        f"head over a draft vocabulary of the {hot.numel()} most frequent corpus tokens (`d2t`, `t2d`).\n"
        f"- Recipe: {recipe['steps']} AdamW steps (lr {recipe['lr']}), batch {recipe['batch']} × {recipe['seq']}; "
        f"loss KL(target on the draft vocabulary ‖ head).\n"
        f"- Final loss {loss:.3f}; training {secs:.0f} s; total {total:.0f} s; torch {torch.__version__}.\n")
    if progress:
        progress(f"EAGLE-3 head saved to {out_dir} (loss {loss:.3f}, {total:.0f} s)")
    return out_dir


def load_eagle3(path: Path, cfg: dict, tensors: dict[str, torch.Tensor], target_model) -> Eagle3Head:
    """An :class:`Eagle3Head` from a folder's config and tensors (SGLang names, legacy ``midlayer``),
    its embedding shared with ``target_model``. Raises :class:`EngineError` on a mismatch."""
    tcfg = target_model.config
    if cfg["hidden_size"] != tcfg.hidden_size or cfg["vocab_size"] != tcfg.vocab_size:
        raise EngineError(f"{path}: EAGLE-3 head width/vocab {cfg['hidden_size']}/{cfg['vocab_size']} ≠ the "
                          f"target's {tcfg.hidden_size}/{tcfg.vocab_size}", "use a head made for this target")
    if "d2t" not in tensors:
        raise EngineError(f"{path}: no d2t tensor (the draft → target vocabulary map)", "remake the head")
    d2t = tensors["d2t"]
    head = Eagle3Head(cfg, d2t + torch.arange(d2t.numel()))
    own = {k.replace("midlayer.", "layers.0."): v for k, v in tensors.items() if k not in ("d2t", "t2d")}
    missing, unexpected = head.load_state_dict(own, strict=False)
    if missing or unexpected:
        raise EngineError(f"{path}: EAGLE-3 head tensors missing {missing}, unexpected {unexpected}",
                          "remake the head with `dynocell model make-eagle --kind eagle3`")
    head.set_embed(target_model.model.embed_tokens.weight)
    return head.float().eval()
