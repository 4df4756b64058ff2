"""Decoding core of the reference engine: plain, greedy-speculative and speculative-sampling steps.

One :class:`Generation` is one request's state (token ids, the target's and
the draft's KV caches, counters). The server's worker calls :meth:`Generation.step`
repeatedly; each call is one forward "decode step" (plain) or one
draft-then-verify step (speculative) and returns the newly emitted token ids.

Conventions (shared with SGLang 0.5.17, see ``tests/data``):

- The prefill forward samples the first output token; it is not a verify step.
- A verify step feeds ``[last, d_1 … d_D]`` to the target in one forward and
  emits the accepted drafts plus one token from the target (the bonus token on
  full acceptance, the correction token on a rejection), so it emits ``k + 1``
  tokens where ``k`` is the number of accepted drafts; ``histogram[k] += 1``.
- Greedy (temperature ≤ 1e-5): accept the longest prefix on which the target's
  argmax agrees with the drafts.
- Sampling: speculative sampling (Leviathan et al. 2023, "Fast Inference from
  Transformers via Speculative Decoding", Alg. 1; Chen et al. 2023): accept
  ``x`` with probability ``min(1, p(x)/q(x))``; on rejection sample from
  ``norm(max(p − q, 0))``. Draft-proposal modes: ``sampled`` (x ~ q) and
  ``top1`` (x = argmax q, q is one-hot, so accept with probability p(x) and on
  rejection sample from p with x removed — SGLang's behaviour with
  ``eagle_topk`` 1). NGRAM proposals are one-hot too.
- KV caches: the target cache holds every token except the last one (which is
  fed by the next step); after a verify it is cropped to the accepted length
  (``DynamicCache.crop``). The draft cache is cropped to the longest prefix
  still valid.
- Profiler ranges (:func:`span`, only while a torch profiler runs): a speculative step is a
  ``scheduler.run_batch`` envelope, its target forward ``step[TARGET_VERIFY bs=1]``, and a STANDALONE
  draft's forwards ``draft`` — SGLang 0.5.17's names (it runs STANDALONE through its EAGLE worker),
  which ``dynocell/engine/spec_phases.toml`` splits by. Here the draft model catches up on the
  accepted tokens inside its first draft forward, so ``draft`` holds what SGLang's separate
  ``draft_extend`` pass does. NGRAM proposes on the CPU without a model: no ``draft`` range.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

GREEDY_EPS = 1e-5
#: SGLang 0.5.17's range of the target's verify forward (``build_step_span_name``, batch size 1 here).
VERIFY_SPAN = "step[TARGET_VERIFY bs=1]"


def span(name: str):
    """A ``torch.profiler.record_function`` range named as SGLang 0.5.17 names it, only while a profiler
    runs (SGLang ``profile_range``): ``scheduler.run_batch``, ``draft``, ``draft_extend``,
    ``step[TARGET_VERIFY bs=1]`` — the names ``dynocell/engine/spec_phases.toml`` splits by."""
    if not torch.autograd._profiler_enabled():
        return contextlib.nullcontext()
    return torch.profiler.record_function(name)


@dataclass
class SamplingParams:
    """SGLang ``sampling_params`` subset: ``max_new_tokens`` (tokens), ``temperature``, ``top_p``,
    ``top_k`` (-1 = all), ``stop`` (strings), ``stop_token_ids``, ``ignore_eos``, ``seed``."""

    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= GREEDY_EPS or self.top_k == 1


class LoadedModel:
    """A ``LlamaForCausalLM`` (or any HF causal LM) in fp32 on ``device``, eval mode, no grad."""

    def __init__(self, path: Path, device: str) -> None:
        from transformers import AutoModelForCausalLM

        self.path = Path(path)
        # transformers types from_pretrained's wrapped .to() as taking a model: a gap in its annotations
        self.model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).to(device).eval()  # type: ignore[arg-type]
        self.device = device
        self.config = self.model.config
        cfg = json.loads((self.path / "config.json").read_text())
        self.architecture = (cfg.get("architectures") or ["LlamaForCausalLM"])[0]
        self.num_params = sum(p.numel() for p in self.model.parameters())
        import inspect

        params = inspect.signature(self.model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"

    def new_cache(self):
        from transformers import DynamicCache

        return DynamicCache(config=self.config)

    @torch.inference_mode()
    def forward(self, ids: list[int], cache) -> torch.Tensor:
        """Feed ``ids`` after what ``cache`` holds; return fp32 CPU logits, shape ``[len(ids), vocab]``."""
        t = torch.tensor([ids], dtype=torch.long, device=self.device)
        out = self.model(input_ids=t, **{self._cache_kw: cache}, use_cache=True)
        return out.logits[0].float().cpu()


def crop_cache(cache, length: int) -> None:
    """Drop cached positions beyond ``length`` (tokens). transformers ≥ 5.2x takes a negative count to
    remove; older versions take the absolute length to keep."""
    cur = cache.get_seq_length()
    if cur <= length:
        return
    import inspect

    if "tokens_to_remove" in inspect.signature(cache.crop).parameters:
        cache.crop(-(cur - length))
    else:
        cache.crop(length)


def top_logprobs(model: "LoadedModel", prompt_ids: list[int], output_ids: list[int], k: int,
                 ) -> tuple[list[list[Any]], list[list[list[Any]]]]:
    """SGLang's ``output_token_logprobs`` / ``output_top_logprobs`` for a finished generation.

    One teacher-forced pass of the target over prompt + output: the log-softmax of the logits that
    predicted output token i gives ``[logprob, token_id, None]`` for the chosen token and the ``k`` best
    (``[[logprob, token_id, None], …]``, best first). Shapes follow SGLang's ``meta_info`` (the text slot
    is None, as SGLang returns it without ``return_text_in_logprobs``). Log-probabilities are natural logs.
    """
    if not output_ids:
        return [], []
    ids = list(prompt_ids) + list(output_ids)
    logits = model.forward(ids[:-1], model.new_cache())[len(prompt_ids) - 1:]
    lp = torch.log_softmax(logits.float(), dim=-1)
    chosen = [[float(lp[i, t]), int(t), None] for i, t in enumerate(output_ids)]
    vals, idx = torch.topk(lp, k=max(1, min(int(k), lp.shape[-1])), dim=-1)
    top = [[[float(v), int(j), None] for v, j in zip(vals[i].tolist(), idx[i].tolist())]
           for i in range(len(output_ids))]
    return chosen, top


def load_tokenizer(path: Path):
    """The ``tokenizers.Tokenizer`` of a model folder (``tokenizer.json``)."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(Path(path) / "tokenizer.json"))


def probs(logits: torch.Tensor, sp: SamplingParams) -> torch.Tensor:
    """Sampling distribution(s) from logits ``[..., V]``: temperature, then top-k, then top-p (nucleus)."""
    x = logits / max(sp.temperature, GREEDY_EPS)
    if sp.top_k is not None and 0 < sp.top_k < x.shape[-1]:
        kth = torch.topk(x, sp.top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    p = torch.softmax(x, dim=-1)
    if sp.top_p < 1.0:
        sp_, idx = torch.sort(p, dim=-1, descending=True)
        cum = torch.cumsum(sp_, dim=-1)
        drop = (cum - sp_) > sp.top_p
        sp_ = sp_.masked_fill(drop, 0.0)
        p = torch.zeros_like(p).scatter(-1, idx, sp_)
        p = p / p.sum(dim=-1, keepdim=True)
    return p


def _sample(p: torch.Tensor, gen: torch.Generator) -> int:
    return int(torch.multinomial(p, 1, generator=gen).item())


def ngram_propose(tokens: list[int], n_drafts: int, max_n: int = 4, window: int = 4096) -> list[int]:
    """Prompt-lookup drafts: match the last ``n`` tokens (``n`` = max_n … 1) against earlier context
    (most recent match first) and propose what followed; extended one token at a time so exactly
    ``n_drafts`` tokens are returned (the last token repeated when nothing matches)."""
    ctx = list(tokens[-window:])
    out: list[int] = []
    for _ in range(n_drafts):
        nxt = None
        L = len(ctx)
        for n in range(min(max_n, L - 1), 0, -1):
            pat = ctx[L - n:]
            for s in range(L - n - 1, -1, -1):
                if ctx[s:s + n] == pat:
                    nxt = ctx[s + n]
                    break
            if nxt is not None:
                break
        if nxt is None:
            nxt = ctx[-1]
        out.append(nxt)
        ctx.append(nxt)
    return out


class Generation:
    """State of one request being decoded.

    ``draft_corrupt`` (class default 0): the share of STANDALONE draft tokens replaced by the next token id
    (``--draft-corrupt``, a planted worse draft for benchmarks/reproducibility.py).

    ``algorithm`` is ``None`` | ``"STANDALONE"`` | ``"NGRAM"``; ``num_drafts`` is D (drafts per
    verify step); ``draft_mode`` is ``"top1"`` | ``"sampled"``. ``eos_ids`` end generation unless
    ``ignore_eos``. Counters: ``verify_ct``, ``histogram`` (length D + 1), ``num_correct``,
    ``num_proposed``; ``output_ids`` are the generated tokens (after truncation by stop rules).
    """

    draft_corrupt: float = 0.0

    def __init__(self, prompt_ids: list[int], sp: SamplingParams, target: LoadedModel,
                 draft: LoadedModel | None, algorithm: str | None, num_drafts: int,
                 draft_mode: str, eos_ids: set[int], context_length: int) -> None:
        self.prompt_ids = list(prompt_ids)
        self.sp = sp
        self.target = target
        # a LoadedModel (STANDALONE), None (NGRAM, no speculation), or an EAGLE-family head (EagleGeneration)
        self.draft: Any = draft
        self.algorithm = algorithm
        self.D = num_drafts if algorithm else 0
        self.draft_mode = draft_mode
        self.eos_ids = eos_ids
        self.context_length = context_length
        self.gen = torch.Generator().manual_seed(sp.seed if sp.seed is not None else
                                                 int(torch.randint(0, 2**62, (1,)).item()))
        self.tokens = list(prompt_ids)
        self.output_ids: list[int] = []
        self.tcache = target.new_cache()
        self.tcache_len = 0
        self.dcache = draft.new_cache() if draft is not None and algorithm == "STANDALONE" else None
        self.dcache_tokens: list[int] = []
        self.verify_ct = 0
        self.histogram = [0] * (self.D + 1)
        self.num_correct = 0
        self.num_proposed = 0
        self.finished: dict | None = None
        self.prefilled = False

    # -- helpers -------------------------------------------------------------------------
    def _choose(self, logits_row: torch.Tensor) -> int:
        if self.sp.greedy:
            return int(torch.argmax(logits_row).item())
        return _sample(probs(logits_row, self.sp), self.gen)

    def _draw_draft(self, logits_row: torch.Tensor) -> tuple[int, torch.Tensor | None]:
        """One draft token from the draft's logits and the distribution it was drawn from: the argmax and
        None under greedy sampling or ``draft_mode`` ``top1`` (q is then a point mass), else a draw from
        q = ``probs(logits_row)`` and q (the speculative-sampling rule needs it at verify)."""
        if self.sp.greedy or self.draft_mode == "top1":
            return int(torch.argmax(logits_row).item()), None
        q = probs(logits_row, self.sp)
        return _sample(q, self.gen), q

    def _resample(self, resid: torch.Tensor, p: torch.Tensor) -> int:
        """The token drawn after a rejection: from the residual ``resid`` normalised, or from the target's
        ``p`` when nothing is left of it (speculative sampling, Leviathan et al. 2023)."""
        s = float(resid.sum())
        return _sample(resid / s, self.gen) if s > 0 else _sample(p, self.gen)

    def _emit(self, toks: list[int]) -> list[int]:
        """Append tokens one by one, applying stop rules; returns the tokens actually kept."""
        kept = []
        for t in toks:
            if self.finished:
                break
            self.tokens.append(t)
            self.output_ids.append(t)
            kept.append(t)
            if t in self.eos_ids and not self.sp.ignore_eos or t in self.sp.stop_token_ids:
                self.finished = {"type": "stop", "matched": t}
            elif len(self.output_ids) >= self.sp.max_new_tokens or len(self.tokens) >= self.context_length:
                self.finished = {"type": "length", "length": len(self.output_ids)}
        return kept

    # -- steps -----------------------------------------------------------------------------
    def prefill(self) -> list[int]:
        """Feed the prompt to the target and emit the first token; returns it (as a list)."""
        logits = self.target.forward(self.prompt_ids, self.tcache)
        self.tcache_len = len(self.prompt_ids)
        self.prefilled = True
        return self._emit([self._choose(logits[-1])])

    def step(self) -> list[int]:
        """One decode step (plain) or one draft + verify step (speculative); returns emitted tokens."""
        if not self.prefilled:
            return self.prefill()
        if self.finished:
            return []
        if not self.algorithm:
            logits = self.target.forward([self.tokens[-1]], self.tcache)
            self.tcache_len += 1
            return self._emit([self._choose(logits[-1])])
        return self._spec_step()

    def _propose(self) -> tuple[list[int], list[torch.Tensor | None]]:
        """D draft tokens and, per draft, the draft's distribution q (None = one-hot proposal)."""
        D = self.D
        if self.algorithm == "NGRAM":
            return ngram_propose(self.tokens, D), [None] * D
        # STANDALONE: crop the draft cache to the longest valid prefix, feed the rest.
        valid = 0
        for a, b in zip(self.dcache_tokens, self.tokens):
            if a != b:
                break
            valid += 1
        valid = min(valid, len(self.tokens) - 1)
        if valid < len(self.dcache_tokens):
            crop_cache(self.dcache, valid)
            self.dcache_tokens = self.dcache_tokens[:valid]
        feed = self.tokens[valid:]
        drafts: list[int] = []
        qs: list[torch.Tensor | None] = []
        for _ in range(D):
            logits = self.draft.forward(feed, self.dcache)[-1]
            self.dcache_tokens.extend(feed)
            x, q = self._draw_draft(logits)
            if self.draft_corrupt and float(torch.rand((), generator=self.gen)) < self.draft_corrupt:
                x, q = (x + 1) % logits.shape[-1], None  # --draft-corrupt: a planted worse draft
            qs.append(q)
            drafts.append(x)
            feed = [x]
        return drafts, qs

    def _spec_step(self) -> list[int]:
        with span("scheduler.run_batch"):
            return self._spec_step_in_span()

    def _spec_step_in_span(self) -> list[int]:
        D = self.D
        with span("draft") if self.algorithm == "STANDALONE" else contextlib.nullcontext():
            drafts, qs = self._propose()
        with span(VERIFY_SPAN):
            logits = self.target.forward([self.tokens[-1]] + drafts, self.tcache)  # [D+1, V]
        k, extra = self._accept_chain(logits, drafts, qs)
        self._count(k, D)
        # Target cache: it now holds old_len + D + 1 entries; keep the accepted ones.
        n_before = len(self.tokens)  # the cache held n_before - 1 tokens
        crop_cache(self.tcache, n_before + k)
        self.tcache_len = n_before + k
        return self._emit(drafts[:k] + [extra])

    def _count(self, k: int, proposed: int) -> None:
        """Book one verify step that accepted ``k`` drafts of ``proposed``."""
        self.verify_ct += 1
        self.num_proposed += proposed
        self.histogram[k] += 1
        self.num_correct += k

    def _accept_chain(self, logits: torch.Tensor, drafts: list[int],
                      qs: list[torch.Tensor | None]) -> tuple[int, int]:
        """Verify a chain: ``logits`` ``[len(drafts)+1, V]`` of the target over ``[last] + drafts``.

        Returns ``(k, extra)``: the number of accepted drafts and the token the target adds
        (bonus on full acceptance, correction on a rejection). Greedy: longest argmax-agreeing
        prefix; sampling: speculative sampling (module docstring)."""
        D = len(drafts)
        if self.sp.greedy:
            tgt = torch.argmax(logits, dim=-1).tolist()
            k = 0
            while k < D and tgt[k] == drafts[k]:
                k += 1
            return k, tgt[k]
        P = probs(logits, self.sp)
        k = 0
        while k < D:
            x = drafts[k]
            p = P[k]
            q = qs[k]
            px = float(p[x])
            qx = 1.0 if q is None else float(q[x])
            u = float(torch.rand((), generator=self.gen))
            if qx > 0 and u < min(1.0, px / qx):
                k += 1
                continue
            if q is None:
                resid = p.clone()
                resid[x] = 0.0
            else:
                resid = torch.clamp(p - q, min=0.0)
            return k, self._resample(resid, p)
        return D, _sample(P[D], self.gen)

    def meta(self) -> dict:
        """SGLang's speculative ``meta_info`` fields for this request (empty without speculation)."""
        if not self.algorithm:
            return {}
        n = len(self.output_ids)
        return {
            "spec_accept_rate": (self.num_correct / self.num_proposed) if self.num_proposed else 0.0,
            "spec_accept_length": (n / self.verify_ct) if self.verify_ct else 0.0,
            "spec_num_correct_drafts": self.num_correct,
            "spec_num_proposed_drafts": self.num_proposed,
            "spec_verify_ct": self.verify_ct,
            "spec_accepted_drafts": self.num_correct,
            "spec_proposed_drafts": self.num_proposed,
            "spec_correct_drafts_histogram": list(self.histogram),
            "spec_accept_histogram": list(self.histogram),
        }
