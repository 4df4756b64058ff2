"""An MTP-capable target made locally: the r2 target in MiMo's layout with one MTP layer, as SGLang
0.5.17 runs it with ``--speculative-algorithm EAGLE`` (or its alias NEXTN) and the draft path = the
model path.

Why MiMo (``sglang/srt/models/mimo.py``, ``mimo_mtp.py``): it is dense — a Qwen2 model plus
``model.mtp_layers.N`` — so the MTP draft is one Qwen2 decoder layer with plain attention and a
SiLU MLP. The other NextN families SGLang 0.5.17 ships (``deepseek_nextn.py``, ``glm4_moe_nextn.py``,
``bailing_moe_nextn.py`` …) put an MoE block (and for DeepSeek MLA attention) in the MTP layer, i.e.
fused-MoE / MLA kernels a tiny CPU-trained model cannot exercise faithfully. Qwen2 is Llama plus
q/k/v biases, so the r2 Llama target becomes a Qwen2 one exactly by adding zero biases: the target
keeps its weights, tokenizer and acceptance behaviour, and only the MTP layer is trained here.

SGLang's contract (0.5.17):

- ``configs/model_config.py``: a draft whose ``architectures[0]`` is ``MiMoForCausalLM`` becomes
  ``MiMoMTP``; the draft's KV layers = ``num_nextn_predict_layers`` (``spec_aux_hidden_state.py``);
- ``MiMoMultiTokenPredictorLayer.forward``: ``h = embed_tokens(ids)``, ``h[positions == 0] = 0``,
  ``h = input_proj(cat(hidden_layernorm(spec hidden), token_layernorm(h)))`` (hidden first, no bias),
  ``h, r = mtp_block(h)`` (a ``Qwen2DecoderLayer``), ``final_layernorm(r + h)`` → the target's LM head
  (``set_embed_and_head``); that normed state is also the next draft step's hidden state;
- ``MiMoMTP.map_model_name_to_mtp_param_name``: ``model.mtp_layers.N.{token_layernorm, hidden_layernorm,
  input_proj, final_layernorm}`` → ``model.…``, everything else under ``model.mtp_layers.N.`` →
  ``model.mtp_block.…``; ``MiMoForCausalLM.load_weights`` skips names holding ``mtp_layers``.

The target's feature is its last hidden state after ``model.norm`` (as for EAGLE).

Public API: :data:`MTP_HEAD`, :data:`MIMO_MTP_NAMES`, :class:`MtpHead`, :func:`make_mtp_target`,
:func:`load_mtp`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from torch import nn

from dynocell.engine.reference.eagle import (
    KVCache, Progress, HeadMLP, rms_norm, apply_rope, copy_tokenizer, corpus_ids, frozen_target, target_features,
    train_head, NormWeight,
)
from dynocell.errors import EngineError

#: Recipe of the MTP layer (the target is frozen): as the EAGLE head's (MTP loss = KL to the
#: target's distribution two tokens ahead of the hidden state, plus the feature regression).
MTP_HEAD = {"steps": 200, "lr": 3e-3, "batch": 8, "seq": 256, "cls_weight": 1.0, "reg_weight": 0.0, "threads": 1}

#: MTP tensor names in the file → SGLang ``MiMoMTP`` parameter (before q/k/v and gate/up stacking).
MIMO_MTP_NAMES = {
    "model.mtp_layers.0.token_layernorm.weight": "model.token_layernorm.weight",
    "model.mtp_layers.0.hidden_layernorm.weight": "model.hidden_layernorm.weight",
    "model.mtp_layers.0.input_proj.weight": "model.input_proj.weight",
    "model.mtp_layers.0.final_layernorm.weight": "model.final_layernorm.weight",
    "model.mtp_layers.0.input_layernorm.weight": "model.mtp_block.input_layernorm.weight",
    "model.mtp_layers.0.self_attn.q_proj.weight": "model.mtp_block.self_attn.q_proj.weight",
    "model.mtp_layers.0.self_attn.q_proj.bias": "model.mtp_block.self_attn.q_proj.bias",
    "model.mtp_layers.0.self_attn.k_proj.weight": "model.mtp_block.self_attn.k_proj.weight",
    "model.mtp_layers.0.self_attn.k_proj.bias": "model.mtp_block.self_attn.k_proj.bias",
    "model.mtp_layers.0.self_attn.v_proj.weight": "model.mtp_block.self_attn.v_proj.weight",
    "model.mtp_layers.0.self_attn.v_proj.bias": "model.mtp_block.self_attn.v_proj.bias",
    "model.mtp_layers.0.self_attn.o_proj.weight": "model.mtp_block.self_attn.o_proj.weight",
    "model.mtp_layers.0.post_attention_layernorm.weight": "model.mtp_block.post_attention_layernorm.weight",
    "model.mtp_layers.0.mlp.gate_proj.weight": "model.mtp_block.mlp.gate_proj.weight",
    "model.mtp_layers.0.mlp.up_proj.weight": "model.mtp_block.mlp.up_proj.weight",
    "model.mtp_layers.0.mlp.down_proj.weight": "model.mtp_block.mlp.down_proj.weight",
}


class _QAttn(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads, self.hd = heads, hidden // heads
        self.q_proj = nn.Linear(hidden, hidden, bias=True)
        self.k_proj = nn.Linear(hidden, hidden, bias=True)
        self.v_proj = nn.Linear(hidden, hidden, bias=True)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)


class _MtpLayer(nn.Module):
    """``model.mtp_layers.0``: the norms, ``input_proj`` and the Qwen2 block (attributes named as in the file)."""

    token_layernorm: NormWeight  # the norms are set in __init__ by name
    hidden_layernorm: NormWeight
    final_layernorm: NormWeight
    input_layernorm: NormWeight
    post_attention_layernorm: NormWeight

    def __init__(self, hidden: int, heads: int, inter: int) -> None:
        super().__init__()
        for n in ("token_layernorm", "hidden_layernorm", "final_layernorm", "input_layernorm",
                  "post_attention_layernorm"):
            setattr(self, n, NormWeight(hidden))
        self.input_proj = nn.Linear(2 * hidden, hidden, bias=False)
        self.self_attn = _QAttn(hidden, heads)
        self.mlp = HeadMLP(hidden, inter)


class MtpHead(nn.Module):
    """SGLang's ``MiMoMTP`` on CPU over a target in MiMo layout; :meth:`forward` as
    :class:`~.eagle.EagleHead` (ids, features ``[B, T, H]``, positions, cache) → (normed state, logits)."""

    architecture = "MiMoMTP"

    def __init__(self, config: dict) -> None:
        super().__init__()
        self.config = dict(config)
        h = config["hidden_size"]
        self.eps = config["rms_norm_eps"]
        self.theta = float((config.get("rope_parameters") or {}).get("rope_theta", config.get("rope_theta", 10000.0)))
        self.mtp = _MtpLayer(h, config["num_attention_heads"], config["intermediate_size"])
        self._embed: torch.Tensor | None = None
        self._head: torch.Tensor | None = None

    def target_features(self, model, ids, cache=None):
        """As EAGLE: the target's last hidden state after its final norm."""
        return target_features(model, ids, cache)

    def set_embed_and_head(self, embed: torch.Tensor, head: torch.Tensor) -> None:
        """Share the target's embedding and LM head (SGLang ``MiMoMTP.set_embed_and_head``)."""
        self._embed, self._head = embed.detach(), head.detach()

    def token_loss(self, out_logits, target_logits):
        import torch.nn.functional as F

        return F.kl_div(F.log_softmax(out_logits, -1), F.log_softmax(target_logits, -1), log_target=True,
                        reduction="batchmean")

    def forward(self, ids, feats, pos, cache: KVCache | None = None):
        if self._embed is None or self._head is None:
            raise EngineError("the MTP layer has no embedding / LM head", "call set_embed_and_head(target's)")
        m, eps = self.mtp, self.eps
        emb = nn.functional.embedding(ids, self._embed) * (pos != 0).to(feats.dtype)[None, :, None]
        x = m.input_proj(torch.cat([rms_norm(feats, m.hidden_layernorm.weight, eps),
                                    rms_norm(emb, m.token_layernorm.weight, eps)], dim=-1))
        a = m.self_attn
        B, T, _ = x.shape
        hin = rms_norm(x, m.input_layernorm.weight, eps)
        q = a.q_proj(hin).view(B, T, a.heads, a.hd).transpose(1, 2)
        k = a.k_proj(hin).view(B, T, a.heads, a.hd).transpose(1, 2)
        v = a.v_proj(hin).view(B, T, a.heads, a.hd).transpose(1, 2)
        q, k = apply_rope(q, pos, self.theta), apply_rope(k, pos, self.theta)
        if cache is None:
            o = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            past = len(cache)
            kk, vv = cache.append(k[0], v[0])
            mask = torch.arange(past + T)[None, :] <= (past + torch.arange(T))[:, None]
            o = nn.functional.scaled_dot_product_attention(q, kk[None], vv[None], attn_mask=mask)
        r = x + a.o_proj(o.transpose(1, 2).reshape(B, T, -1))
        r = r + m.mlp(rms_norm(r, m.post_attention_layernorm.weight, eps))
        out = rms_norm(r, m.final_layernorm.weight, eps)
        return out, out @ self._head.T


def _mimo_config(target_cfg: dict) -> dict:
    keep = ("bos_token_id", "eos_token_id", "pad_token_id", "hidden_act", "hidden_size", "intermediate_size",
            "max_position_embeddings", "num_attention_heads", "num_hidden_layers", "num_key_value_heads",
            "rms_norm_eps", "rope_parameters", "rope_theta", "vocab_size")
    cfg = {k: target_cfg[k] for k in keep if k in target_cfg}
    cfg.update({"architectures": ["MiMoForCausalLM"], "model_type": "qwen2", "num_nextn_predict_layers": 1,
                "tie_word_embeddings": False, "use_sliding_window": False,
                "max_window_layers": cfg["num_hidden_layers"],
                "attention_dropout": 0.0, "torch_dtype": "float32", "dtype": "float32", "use_cache": True})
    return cfg


def make_mtp_target(out_dir: Path, target_dir: Path, seed: int = 0, recipe: dict | None = None,
                    max_bytes: int = 6_000_000, progress: Progress | None = None) -> Path:
    """Write the Llama target in ``target_dir`` as a MiMo model (Qwen2 with zero q/k/v biases, the same
    function) into ``out_dir`` with one MTP layer trained against it (target frozen; KL to the target's
    next-next-token distribution, the MTP loss of a frozen trunk). Raises :class:`UserError` for an
    unusable ``out_dir`` or ``target_dir``."""
    from safetensors.torch import load_file, save_file

    recipe = {**MTP_HEAD, **(recipe or {})}
    out_dir, target_dir = Path(out_dir), Path(target_dir)
    t_start = time.monotonic()
    with frozen_target(out_dir, target_dir, "make-eagle --kind mtp", recipe["threads"]) as (target, tcfg):
        cfg = _mimo_config(tcfg)
        torch.manual_seed(seed)
        head = MtpHead(cfg)
        head.set_embed_and_head(target.model.embed_tokens.weight, target.lm_head.weight)
        src, m = target.model.layers[-1], head.mtp
        with torch.no_grad():  # start from the target's last layer; input_proj passes the hidden state through
            for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
                getattr(m.self_attn, n).weight.copy_(getattr(src.self_attn, n).weight)
            for n in ("q_proj", "k_proj", "v_proj"):
                getattr(m.self_attn, n).bias.zero_()
            for n in ("gate_proj", "up_proj", "down_proj"):
                getattr(m.mlp, n).weight.copy_(getattr(src.mlp, n).weight)
            m.input_layernorm.weight.copy_(src.input_layernorm.weight)
            m.post_attention_layernorm.weight.copy_(src.post_attention_layernorm.weight)
            m.final_layernorm.weight.copy_(target.model.norm.weight)
            h = cfg["hidden_size"]
            m.input_proj.weight.zero_()
            m.input_proj.weight[:, :h].copy_(torch.eye(h))
        data = corpus_ids(target_dir, max_bytes)
        if progress:
            progress(f"corpus: {data.numel()} tokens; training the MTP layer for {recipe['steps']} steps")
        loss, secs = train_head(head, target, data, recipe, seed, progress)
        out_dir.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.contiguous().clone() for k, v in load_file(str(target_dir / "model.safetensors")).items()}
        for i in range(cfg["num_hidden_layers"]):
            for n in ("q_proj", "k_proj", "v_proj"):
                w = tensors[f"model.layers.{i}.self_attn.{n}.weight"]
                tensors[f"model.layers.{i}.self_attn.{n}.bias"] = torch.zeros(w.shape[0], dtype=w.dtype)
        for k, v in head.mtp.state_dict().items():
            tensors[f"model.mtp_layers.0.{k}"] = v.detach().contiguous().clone()
        save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
        (out_dir / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        copy_tokenizer(target_dir, out_dir, ("tokenizer.json", "tokenizer_config.json", "generation_config.json"))
    total = time.monotonic() - t_start
    (out_dir / "README.md").write_text(
        f"# MTP-capable target (MiMo layout) from `{target_dir.name}`\n\n"
        f"Made by `dynocell model make-eagle --kind mtp` "
        f"(`dynocell.engine.reference.mtp.make_mtp_target`), no network, seed {seed}.\n\n"
        f"- Trunk: the Llama target's weights as `MiMoForCausalLM` (`model_type` qwen2: Qwen2 = Llama + q/k/v biases, "
        f"here zero, so the same function); `num_nextn_predict_layers` 1.\n"
        f"- `model.mtp_layers.0`: token/hidden norms, `input_proj` [2H → H] over [norm(target feature) ; "
        f"norm(embedding)], a Qwen2 decoder layer, final norm; embedding and LM head shared (SGLang `MiMoMTP`).\n"
        f"- Recipe: {recipe['steps']} AdamW steps (lr {recipe['lr']}), batch {recipe['batch']} × {recipe['seq']}, "
        f"target frozen, KL(target ‖ MTP) of the token after next; final loss {loss:.3f}; "
        f"{secs:.0f} s training, {total:.0f} s.\n"
        f"- SGLang: `--speculative-algorithm EAGLE` (or NEXTN) with `--speculative-draft-model-path` = this folder.\n")
    if progress:
        progress(f"MTP target saved to {out_dir} (loss {loss:.3f}, {total:.0f} s)")
    return out_dir


def load_mtp(path: Path, cfg: dict, tensors: dict[str, torch.Tensor], target_model) -> MtpHead:
    """The MTP layer of a MiMo-layout folder (``model.mtp_layers.0.*``), sharing ``target_model``'s
    embedding and LM head. Raises :class:`EngineError` when the folder has no MTP layer."""
    prefix = "model.mtp_layers.0."
    own = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
    if not own or int(cfg.get("num_nextn_predict_layers") or 0) < 1:
        raise EngineError(f"{path}: no MTP layer (model.mtp_layers.0.*, num_nextn_predict_layers ≥ 1)",
                          "make one with `dynocell model make-eagle --kind mtp`")
    head = MtpHead(cfg)
    missing, unexpected = head.mtp.load_state_dict(own, strict=False)
    if missing or unexpected:
        raise EngineError(f"{path}: MTP tensors missing {missing}, unexpected {unexpected}", "remake the folder")
    head.set_embed_and_head(target_model.model.embed_tokens.weight, target_model.lm_head.weight)
    return head.float().eval()
