"""EAGLE draft heads for the reference target, made locally, in the layout SGLang 0.5.17 loads.

An EAGLE head (Li et al. 2024, "EAGLE: Speculative Sampling Requires Rethinking Feature
Uncertainty") is one decoder layer over ``fc([token embedding ; target hidden state])``: to
propose the token at position ``j + 2`` it reads the token at ``j + 1`` and the target's feature
(last hidden state, after the final norm) at ``j``; its own output feature then feeds the next
draft step. SGLang 0.5.17 ``sglang/srt/models/llama_eagle.py`` (``LlamaForCausalLMEagle``) is the
contract this module follows:

- ``LlamaModel.forward``: ``hidden = fc(cat(embed_tokens(ids), spec_info.hidden_states))``, then the
  decoder layers, and returns ``hidden_states + residual`` — no final norm;
- ``LlamaDecoderLayer``: layer 0 has no ``input_layernorm`` (deleted and replaced by identity, after
  SafeAILab/EAGLE ``cnets.py``);
- ``fc = torch.nn.Linear(hidden_size * 2, hidden_size)`` — with a bias;
- ``load_weights`` drops every name holding ``lm_head`` and prefixes the rest with ``model.``;
  the q/k/v and gate/up projections are stacked by ``LlamaForCausalLM``'s loader;
- ``eagle_worker_v2.py`` ``init_lm_head``: ``set_embed_and_head(embed, head)`` with the
  *target's* embedding and LM head — the head owns neither (a copy of the embedding is saved so
  the file has the layout of published EAGLE heads; SGLang replaces it with the target's).

The target feature SGLang hands the draft is the logits processor's ``hidden_states`` of the
target (``layers/logits_processor.py`` ``_get_hidden_states_to_store``: the model output, after
``model.norm`` for Llama). :func:`target_features` computes the same with transformers.

Public API: :data:`EAGLE_HEAD`, :data:`SGLANG_EAGLE_NAMES`, :class:`EagleHead`, :class:`KVCache`,
:func:`make_eagle`, :func:`load_head`, :func:`target_features`, :func:`expected_tensors`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from dynocell.errors import EngineError, UserError

if TYPE_CHECKING:  # the other head kinds import this module
    from dynocell.engine.reference.eagle3 import Eagle3Head
    from dynocell.engine.reference.mtp import MtpHead

#: Training recipe of the EAGLE head (CPU, deterministic for a seed): AdamW steps, learning rate,
#: batch of windows × tokens, and the weight of the feature regression next to the token loss
#: (EAGLE's loss: L_reg (smooth L1 to the target's next feature) + w_cls · L_cls; here the token
#: term is KL(target ‖ head) on the target's own next-token distribution). One torch thread: on a
#: shared 2-core machine two threads were 5-10× slower per step (contention), not faster.
EAGLE_HEAD = {"steps": 200, "lr": 3e-3, "batch": 8, "seq": 256, "cls_weight": 1.0, "reg_weight": 1.0, "threads": 1}

#: Tensor names of an EAGLE head file, with their shapes in terms of H = hidden_size,
#: I = intermediate_size, V = vocab_size, as SGLang 0.5.17 maps them (``llama_eagle.py``
#: ``LlamaForCausalLMEagle.load_weights`` → ``model.<name>``; ``llama.py``
#: ``LlamaForCausalLM._legacy_load_weights``' ``stacked_params_mapping`` folds ``q/k/v_proj`` into
#: ``qkv_proj`` and ``gate/up_proj`` into ``gate_up_proj``). Layer 0 has no ``input_layernorm``
#: (deleted), the model has no final ``norm``, and ``lm_head`` is the target's.
SGLANG_EAGLE_NAMES = {
    "embed_tokens.weight": ("model.embed_tokens.weight", ("V", "H")),
    "fc.weight": ("model.fc.weight", ("H", "2H")),
    "fc.bias": ("model.fc.bias", ("H",)),
    "layers.0.self_attn.q_proj.weight": ("model.layers.0.self_attn.qkv_proj.weight", ("H", "H")),
    "layers.0.self_attn.k_proj.weight": ("model.layers.0.self_attn.qkv_proj.weight", ("H", "H")),
    "layers.0.self_attn.v_proj.weight": ("model.layers.0.self_attn.qkv_proj.weight", ("H", "H")),
    "layers.0.self_attn.o_proj.weight": ("model.layers.0.self_attn.o_proj.weight", ("H", "H")),
    "layers.0.post_attention_layernorm.weight": ("model.layers.0.post_attention_layernorm.weight", ("H",)),
    "layers.0.mlp.gate_proj.weight": ("model.layers.0.mlp.gate_up_proj.weight", ("I", "H")),
    "layers.0.mlp.up_proj.weight": ("model.layers.0.mlp.gate_up_proj.weight", ("I", "H")),
    "layers.0.mlp.down_proj.weight": ("model.layers.0.mlp.down_proj.weight", ("H", "I")),
}

Progress = Callable[[str], None]


def expected_tensors(config: dict) -> dict[str, tuple[int, ...]]:
    """``{file tensor name: shape}`` an EAGLE head of ``config`` (config.json dict) must hold."""
    dims = {"H": config["hidden_size"], "2H": 2 * config["hidden_size"], "I": config["intermediate_size"],
            "V": config["vocab_size"]}
    return {name: tuple(dims[d] for d in shape) for name, (_, shape) in SGLANG_EAGLE_NAMES.items()}


class KVCache:
    """Keys and values of one attention layer for one sequence: ``[heads, length, head_dim]`` each."""

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else int(self.k.shape[1])

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add ``k``, ``v`` (``[heads, T, head_dim]``); return the whole keys and values."""
        self.k = k if self.k is None else torch.cat([self.k, k], dim=1)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=1)
        return self.k, self.v

    def crop(self, length: int) -> None:
        """Keep the first ``length`` positions."""
        if self.k is not None and self.v is not None and length < self.k.shape[1]:  # set together
            self.k, self.v = self.k[:, :length], self.v[:, :length]

    def clone(self) -> "KVCache":
        """A copy sharing no mutable state (tensors are never written in place)."""
        c = KVCache()
        c.k, c.v = self.k, self.v
        return c


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm of ``x`` over its last dimension (computed in fp32, returned in ``x``'s dtype) scaled by ``w``,
    as Llama's ``LlamaRMSNorm``."""
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w


def apply_rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding, NeoX / Hugging Face Llama style (``rotate_half``), of ``x`` ``[..., T, d]``
    at integer positions ``pos`` ``[T]`` (SGLang ``get_rope(is_neox_style=True)``)."""
    d = x.shape[-1]
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    ang = pos.float()[:, None] * inv[None, :]
    emb = torch.cat([ang, ang], dim=-1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class NormWeight(nn.Module):
    """A norm's scale alone, ``weight`` (ones): the checkpoint's ``…layernorm.weight``, applied by :func:`rms_norm`."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))


class HeadAttn(nn.Module):
    """The q/k/v/o projections of a draft head's attention, in Llama's parameter names (``in_dim`` → ``hidden``,
    ``heads`` heads); the forward lives in the head that owns it."""

    def __init__(self, in_dim: int, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads, self.hd = heads, hidden // heads
        self.q_proj = nn.Linear(in_dim, hidden, bias=False)
        self.k_proj = nn.Linear(in_dim, hidden, bias=False)
        self.v_proj = nn.Linear(in_dim, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)


class HeadMLP(nn.Module):
    """Llama's gated SiLU MLP (``gate_proj``, ``up_proj``, ``down_proj``) of a draft head or MTP layer."""

    def __init__(self, hidden: int, inter: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class _Layer(nn.Module):
    """SGLang's ``LlamaDecoderLayer`` with layer 0's ``input_layernorm`` removed: ``r = x + attn(x)``,
    out = ``r + mlp(post_attention_layernorm(r))`` (= llama_eagle.py's ``hidden_states + residual``)."""

    def __init__(self, hidden: int, heads: int, inter: int, eps: float, theta: float) -> None:
        super().__init__()
        self.self_attn = HeadAttn(hidden, hidden, heads)
        self.post_attention_layernorm = NormWeight(hidden)
        self.mlp = HeadMLP(hidden, inter)
        self.eps, self.theta = eps, theta

    def forward(self, x: torch.Tensor, pos: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """``x`` ``[B, T, H]`` at positions ``pos`` ``[T]``; with ``cache`` (B = 1) attend to it too."""
        a = self.self_attn
        B, T, _ = x.shape
        q = a.q_proj(x).view(B, T, a.heads, a.hd).transpose(1, 2)
        k = a.k_proj(x).view(B, T, a.heads, a.hd).transpose(1, 2)
        v = a.v_proj(x).view(B, T, a.heads, a.hd).transpose(1, 2)
        q, k = apply_rope(q, pos, self.theta), apply_rope(k, pos, self.theta)
        if cache is None:
            o = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            past = len(cache)
            kk, vv = cache.append(k[0], v[0])
            mask = torch.arange(past + T)[None, :] <= (past + torch.arange(T))[:, None]
            o = nn.functional.scaled_dot_product_attention(q, kk[None], vv[None], attn_mask=mask)
        r = x + a.o_proj(o.transpose(1, 2).reshape(B, T, -1))
        return r + self.mlp(rms_norm(r, self.post_attention_layernorm.weight, self.eps))


class EagleHead(nn.Module):
    """``LlamaForCausalLMEagle`` of SGLang 0.5.17 on CPU: ``fc`` over [embedding ; feature], one layer.

    The embedding and LM head are the target's (:meth:`set_embed_and_head`, as SGLang's EAGLE
    worker does); they are not parameters of the head. :meth:`forward` takes token ids ``[B, T]``,
    features ``[B, T, H]`` and positions ``[T]`` and returns ``(features [B, T, H], logits [B, T, V])``.
    """

    def __init__(self, config: dict) -> None:
        super().__init__()
        self.config = dict(config)
        h, inter = config["hidden_size"], config["intermediate_size"]
        theta = float((config.get("rope_parameters") or {}).get("rope_theta", config.get("rope_theta", 10000.0)))
        self.fc = nn.Linear(2 * h, h, bias=True)
        self.layers = nn.ModuleList([_Layer(h, config["num_attention_heads"], inter, config["rms_norm_eps"], theta)])
        self._embed: torch.Tensor | None = None
        self._head: torch.Tensor | None = None

    architecture = "LlamaForCausalLMEagle"

    def target_features(self, model, ids: torch.Tensor, cache=None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(logits, features)`` of the target ``model`` over ``ids`` as this head reads them
        (:func:`target_features`: the last hidden state after the final norm)."""
        return target_features(model, ids, cache)

    def token_loss(self, out_logits: torch.Tensor, target_logits: torch.Tensor) -> torch.Tensor:
        """KL(target ‖ head) of next-token distributions, summed over positions, mean over the batch."""
        import torch.nn.functional as F

        return F.kl_div(F.log_softmax(out_logits, -1), F.log_softmax(target_logits, -1), log_target=True,
                        reduction="batchmean")

    def set_embed_and_head(self, embed: torch.Tensor, head: torch.Tensor) -> None:
        """Share the target's embedding ``[V, H]`` and LM head ``[V, H]`` (not copied, not trained)."""
        self._embed, self._head = embed.detach(), head.detach()

    def forward(self, ids: torch.Tensor, feats: torch.Tensor, pos: torch.Tensor,
                cache: KVCache | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if self._embed is None or self._head is None:
            raise EngineError("the EAGLE head has no embedding / LM head", "call set_embed_and_head(target's)")
        if feats.shape[-1] != self.config["hidden_size"]:
            raise EngineError(f"EAGLE feature width {feats.shape[-1]} ≠ hidden_size {self.config['hidden_size']}")
        x = self.fc(torch.cat([nn.functional.embedding(ids, self._embed), feats], dim=-1))
        out = self.layers[0](x, pos, cache)
        return out, out @ self._head.T


def target_features(model, ids: torch.Tensor, cache=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Run a transformers ``LlamaForCausalLM`` over ``ids`` ``[B, T]``: ``(logits [B, T, V], features
    [B, T, H])`` where features are the last hidden state after ``model.norm`` (SGLang's captured
    ``hidden_states`` for EAGLE)."""
    import inspect

    name = "cache" if "cache" in inspect.signature(model.model.forward).parameters else "past_key_values"
    kw = {name: cache, "use_cache": True} if cache is not None else {"use_cache": False}
    h = model.model(input_ids=ids, **kw).last_hidden_state
    return model.lm_head(h), h


def head_config(target_cfg: dict) -> dict:
    """The ``config.json`` of an EAGLE head for a target with config ``target_cfg``: the target's shape fields,
    ``LlamaForCausalLMEagle``, one layer, untied embeddings, fp32."""
    keep = ("attention_bias", "bos_token_id", "eos_token_id", "pad_token_id", "head_dim", "hidden_act",
            "hidden_size", "intermediate_size", "max_position_embeddings", "mlp_bias", "num_attention_heads",
            "num_key_value_heads", "rms_norm_eps", "rope_parameters", "rope_theta", "vocab_size")
    cfg = {k: target_cfg[k] for k in keep if k in target_cfg}
    cfg.update({"architectures": ["LlamaForCausalLMEagle"], "model_type": "llama", "num_hidden_layers": 1,
                "tie_word_embeddings": False, "torch_dtype": "float32", "dtype": "float32"})
    return cfg


def _init_from_target(head: EagleHead, target) -> None:
    """Start the layer from the target's last layer (minus its input norm) and ``fc`` as [0 ; I], so the
    untrained head already continues the target's feature."""
    h = head.config["hidden_size"]
    src = target.model.layers[-1]
    lay = cast(_Layer, head.layers[0])  # an EagleHead's one layer (EagleHead.__init__)
    with torch.no_grad():
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            getattr(lay.self_attn, n).weight.copy_(getattr(src.self_attn, n).weight)
        for n in ("gate_proj", "up_proj", "down_proj"):
            getattr(lay.mlp, n).weight.copy_(getattr(src.mlp, n).weight)
        lay.post_attention_layernorm.weight.copy_(src.post_attention_layernorm.weight)
        head.fc.weight.zero_()
        head.fc.weight[:, h:].copy_(torch.eye(h))
        head.fc.bias.zero_()


def train_head(head: EagleHead | Eagle3Head | MtpHead, target, data: torch.Tensor, recipe: dict, seed: int,
               progress: Progress | None = None) -> tuple[float, float]:
    """Train ``head`` against the frozen ``target`` on random windows of ``data`` (1-D ids).

    Per window ``t_0 … t_L``: target features ``f_j`` and next-token distributions ``P_j``; the head
    reads ``(t_{j+1}, f_j)`` and is trained so that its feature ``g_j`` regresses onto ``f_{j+1}``
    (smooth L1) and ``softmax(lm_head(g_j))`` matches ``P_{j+1}`` (KL), EAGLE's objective. AdamW,
    warm-up then cosine. Returns ``(last loss, seconds)``.
    """
    import torch.nn.functional as F

    torch.manual_seed(seed)
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=recipe["lr"], betas=(0.9, 0.95), weight_decay=0.0)
    steps = recipe["steps"]
    warm = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * max(0.05, 0.5 * (1 + math.cos(math.pi * s / steps))))
    gen = torch.Generator().manual_seed(seed + 1)
    L = recipe["seq"]
    n = data.numel() - L - 1
    pos = torch.arange(L - 1)
    t0 = last = time.monotonic()
    loss_v = float("nan")
    head.train()
    for step in range(steps):
        starts = torch.randint(0, n, (recipe["batch"],), generator=gen)
        batch = data[starts[:, None] + torch.arange(L)[None, :]]
        with torch.no_grad():
            logits, feats = head.target_features(target, batch)
        g, out_logits = head(batch[:, 1:], feats[:, :-1], pos)
        # EAGLE regresses its feature onto the target's next one; EAGLE-3 reads other layers (no regression).
        reg = F.smooth_l1_loss(g, feats[:, 1:]) if g.shape == feats[:, 1:].shape else torch.zeros(())
        kl = head.token_loss(out_logits, logits[:, 1:]) / (L - 1)
        loss = recipe["reg_weight"] * reg + recipe["cls_weight"] * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        loss_v = float(loss.detach())
        now = time.monotonic()
        if progress and (step == 0 or step == steps - 1 or now - last >= 5.0):
            last = now
            progress(f"{getattr(head, 'architecture', 'head')}: step {step + 1}/{steps} loss {loss_v:.3f} "
                     f"(reg {float(reg.detach()):.3f}, "
                     f"kl {float(kl.detach()):.3f}; {now - t0:.0f} s)")
    head.eval()
    return loss_v, time.monotonic() - t0


def corpus_ids(tokenizer_path: Path, max_bytes: int) -> torch.Tensor:
    """The pair's corpus (CPython's stdlib sources, :func:`models.load_corpus`) tokenized with the
    target's tokenizer, as a 1-D LongTensor."""
    from dynocell.engine.reference.decoding import load_tokenizer
    from dynocell.engine.reference.nets import load_corpus

    raw, _ = load_corpus(max_bytes)
    tok = load_tokenizer(tokenizer_path)
    text = raw.decode("utf-8", errors="replace")
    chunks = [text[i:i + 65536] for i in range(0, len(text), 65536)]
    return torch.tensor([i for enc in tok.encode_batch(chunks, add_special_tokens=False) for i in enc.ids],
                        dtype=torch.long)


@contextmanager
def frozen_target(out_dir: Path, target_dir: Path, command: str, threads: int) -> Iterator[tuple[Any, dict]]:
    """The preamble every head recipe shares: check ``out_dir``/``target_dir`` (UserError naming
    ``command`` for an unusable one), limit torch to ``threads`` for the training, and yield
    ``(target, target config.json)`` — the target in fp32 with every parameter frozen. The previous
    thread count is restored on exit."""
    from transformers import AutoModelForCausalLM

    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"{out_dir} exists and is not a directory", f"choose another DIR for {command}")
    if not (target_dir / "config.json").is_file():
        raise UserError(f"{target_dir} holds no config.json", "give the target model's folder (--target)")
    prev = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        target = AutoModelForCausalLM.from_pretrained(str(target_dir), dtype=torch.float32).eval()
        for p in target.parameters():
            p.requires_grad_(False)
        yield target, json.loads((target_dir / "config.json").read_text())
    finally:
        torch.set_num_threads(prev)


def copy_tokenizer(target_dir: Path, out_dir: Path, names: tuple[str, ...] = ("tokenizer.json",
                                                                              "tokenizer_config.json")) -> None:
    """Copy the target's tokenizer files (those present) beside a head, as SGLang loads them."""
    for f in names:
        if (target_dir / f).is_file():
            (out_dir / f).write_bytes((target_dir / f).read_bytes())


def make_eagle(out_dir: Path, target_dir: Path, seed: int = 0, recipe: dict | None = None,
               max_bytes: int = 6_000_000, progress: Progress | None = None) -> Path:
    """Train an EAGLE head for the target in ``target_dir`` and save it to ``out_dir`` (SGLang layout).

    Writes ``config.json`` (``architectures: ["LlamaForCausalLMEagle"]``), ``model.safetensors``
    (names of :data:`SGLANG_EAGLE_NAMES`), the target's tokenizer files and a README with the
    recipe and the measured loss. Deterministic for ``seed`` on one torch build (``threads`` of the recipe).
    Raises :class:`UserError` if ``out_dir`` is a file or ``target_dir`` holds no model.
    """
    from safetensors.torch import save_file

    recipe = {**EAGLE_HEAD, **(recipe or {})}
    out_dir, target_dir = Path(out_dir), Path(target_dir)
    t_start = time.monotonic()
    with frozen_target(out_dir, target_dir, "make-eagle", recipe["threads"]) as (target, tcfg):
        cfg = head_config(tcfg)
        torch.manual_seed(seed)
        head = EagleHead(cfg)
        head.set_embed_and_head(target.model.embed_tokens.weight, target.lm_head.weight)
        _init_from_target(head, target)
        data = corpus_ids(target_dir, max_bytes)
        if progress:
            progress(f"corpus: {data.numel()} tokens; training the EAGLE head for {recipe['steps']} steps")
        loss, secs = train_head(head, target, data, recipe, seed, progress)
        out_dir.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().contiguous().clone() for k, v in head.state_dict().items()}
        tensors["embed_tokens.weight"] = target.model.embed_tokens.weight.detach().contiguous().clone()
        save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
        (out_dir / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        copy_tokenizer(target_dir, out_dir)
    total = time.monotonic() - t_start
    (out_dir / "README.md").write_text(
        f"# EAGLE head for `{target_dir.name}`\n\nMade by `dynocell model make-eagle` "
        f"(`dynocell.engine.reference.eagle.make_eagle`), no network, seed {seed}.\n\n"
        f"- Layout: SGLang 0.5.17 `LlamaForCausalLMEagle` (`sglang/srt/models/llama_eagle.py`): `fc` "
        f"[{2 * cfg['hidden_size']} → {cfg['hidden_size']}] over [token embedding ; target feature], one decoder "
        f"layer without input norm, no final norm; embedding and LM head shared with the target.\n"
        f"- Recipe: {recipe['steps']} AdamW steps (lr {recipe['lr']}, cosine), batch {recipe['batch']} × "
        f"{recipe['seq']} tokens of the pair's corpus; loss {recipe['reg_weight']} · smoothL1(feature) + "
        f"{recipe['cls_weight']} · KL(target ‖ head); layer initialised from the target's last layer.\n"
        f"- Final loss {loss:.3f}; training {secs:.0f} s; total {total:.0f} s; torch {torch.__version__}.\n")
    if progress:
        progress(f"EAGLE head saved to {out_dir} (loss {loss:.3f}, {total:.0f} s)")
    return out_dir


def load_head(path: Path, target_model) -> EagleHead | Eagle3Head | MtpHead:
    """Load an EAGLE head folder for ``target_model`` (a transformers Llama): the file's tensors by
    SGLang's names; the embedding and LM head are the target's, as in SGLang. An EAGLE-3 folder
    (``LlamaForCausalLMEagle3``) gives an :class:`~.eagle3.Eagle3Head`, a MiMo folder
    (``MiMoForCausalLM`` with ``model.mtp_layers``) its MTP layer (:class:`~.mtp.MtpHead`). Raises
    :class:`EngineError` when the folder is not an EAGLE head of this target's width and vocabulary."""
    from safetensors.torch import load_file

    path = Path(path)
    try:
        cfg = json.loads((path / "config.json").read_text())
        tensors = load_file(str(path / "model.safetensors"))
    except (OSError, ValueError) as exc:
        raise EngineError(f"cannot read the EAGLE head in {path}: {exc}",
                          "make one with `dynocell model make-eagle DIR`") from exc
    arch = (cfg.get("architectures") or ["?"])[0]
    if arch == "MiMoForCausalLM":
        from dynocell.engine.reference.mtp import load_mtp

        return load_mtp(path, cfg, tensors, target_model)
    if arch == "LlamaForCausalLMEagle3":
        from dynocell.engine.reference.eagle3 import load_eagle3

        return load_eagle3(path, cfg, tensors, target_model)
    if arch != "LlamaForCausalLMEagle":
        raise EngineError(f"{path}: architectures[0] is {arch!r}, not 'LlamaForCausalLMEagle'",
                          "give an EAGLE head folder (dynocell model make-eagle)")
    tcfg = target_model.config
    if cfg["hidden_size"] != tcfg.hidden_size or cfg["vocab_size"] != tcfg.vocab_size:
        raise EngineError(f"{path}: EAGLE head width/vocab {cfg['hidden_size']}/{cfg['vocab_size']} ≠ the target's "
                          f"{tcfg.hidden_size}/{tcfg.vocab_size}", "use a head made for this target")
    head = EagleHead(cfg)
    own = {k: v for k, v in tensors.items() if k != "embed_tokens.weight" and "lm_head" not in k}
    missing, unexpected = head.load_state_dict(own, strict=False)
    if missing or unexpected:
        raise EngineError(f"{path}: EAGLE head tensors missing {missing}, unexpected {unexpected}",
                          "remake the head with `dynocell model make-eagle`")
    head.set_embed_and_head(target_model.model.embed_tokens.weight, target_model.lm_head.weight)
    return head.float().eval()
