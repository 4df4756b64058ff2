"""EAGLE decoding in the reference engine, with SGLang 0.5.17's proposal semantics.

One :class:`EagleGeneration` is one request drafted by an EAGLE-family head (:mod:`.eagle`).
What SGLang does (``sglang/srt/speculative/eagle_worker_v2.py``, ``eagle_utils.py``,
``spec_utils.py``) and what this module models:

- **Draft extend.** After the prefill and after every verify, the head runs over the new
  positions ``j`` with input ``(token[j + 1], target feature at j)``; its cache then holds only
  positions computed from the target's own features (the drafting positions are discarded).
- **Chain** (``speculative_eagle_topk`` 1): ``num_steps`` draft forwards, each proposing the
  head's argmax (``topk_index = argmax(next_token_logits)``), the next one reading the proposed
  token and the head's own output feature. D = ``num_steps`` = ``num_draft_tokens`` − 1. The
  target verifies ``[last] + drafts`` in one forward (as :class:`~.decoding.Generation`).
- **Tree** (``eagle_topk`` k > 1, ``num_draft_tokens`` > ``num_steps`` + 1): step 0 takes the top k
  of ``softmax(logits)`` (plain softmax, ``renorm_draft_probs``) as k branches with scores p;
  each later step runs the head on the k branches, scores all k² children as
  ``parent score × child p`` (``_select_top_k_tokens_later``) and keeps the best k as the next
  branches; after ``num_steps`` steps the ``num_draft_tokens − 1`` best-scored of all candidates
  (``organize_draft_results``: ``topk`` then sorted by index) form the tree under the last token.
  Verify walks the tree from its root: greedy accepts the child whose token is the target's
  argmax; sampling draws one coin per level and accepts the first child whose cumulative target
  probability exceeds it (``tree_speculative_sampling_target_only`` with thresholds 1: each child
  is accepted with its target probability), else samples the target with the children removed.
  The accepted path is at most ``num_steps`` deep: the histogram has ``num_steps + 1`` buckets,
  τ ≤ ``num_steps + 1``, and ``spec_num_proposed_drafts`` counts ``num_draft_tokens − 1`` per verify
  (SGLang's ``tokenizer_manager``), so accept rate = correct / (verify steps × tree size).

The target's features come from the same forward that gives its logits
(:func:`~.eagle.target_features`); the target cache always holds exactly the accepted tokens.
"""

from __future__ import annotations

import torch

from dynocell.engine.reference.decoding import VERIFY_SPAN, Generation, SamplingParams, probs, span
from dynocell.engine.reference.eagle import KVCache
from dynocell.errors import EngineError


def _target_step(gen: Generation, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Feed ``ids`` to the target after its cache; ``(logits [T, V], features [T, F])`` (fp32, CPU)."""
    head = gen.draft
    t = torch.tensor([ids], dtype=torch.long, device=gen.target.device)
    with torch.inference_mode():
        logits, feats = head.target_features(gen.target.model, t, gen.tcache)
    return logits[0].float().cpu(), feats[0].float().cpu()


class EagleGeneration(Generation):
    """A request decoded with an EAGLE-family head ``draft`` (an :class:`~.eagle.EagleHead` or
    :class:`~.eagle.Eagle3Head`). ``num_steps`` draft steps, ``topk`` branches, ``num_draft_tokens``
    tree size (chain: ``num_steps + 1``). Counters as :class:`~.decoding.Generation`, with the
    histogram over the accepted path depth (``num_steps + 1`` buckets)."""

    def __init__(self, prompt_ids: list[int], sp: SamplingParams, target, head, algorithm: str,
                 num_steps: int, topk: int, num_draft_tokens: int, draft_mode: str, eos_ids: set[int],
                 context_length: int) -> None:
        super().__init__(prompt_ids, sp, target, head, algorithm, num_steps, draft_mode, eos_ids, context_length)
        self.num_steps, self.topk, self.num_draft_tokens = num_steps, topk, num_draft_tokens
        self.feats: torch.Tensor | None = None  # target features of positions 0 .. len(tokens) - 2
        self.hcache = KVCache()  # the head's cache: positions 0 .. len(self.hcache) - 1
        self._extended: tuple[torch.Tensor, torch.Tensor] | None = None  # head output at the last extend

    # -- target ---------------------------------------------------------------------------
    def prefill(self) -> list[int]:
        logits, feats = _target_step(self, self.prompt_ids)
        self.feats = feats
        self.tcache_len = len(self.prompt_ids)
        self.prefilled = True
        return self._emit([self._choose(logits[-1])])

    def _keep_feats(self, feats: torch.Tensor) -> None:
        self.feats = feats if self.feats is None else torch.cat([self.feats, feats], dim=0)

    # -- head -------------------------------------------------------------------------------
    def _extend(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Draft extend: run the head over positions ``len(hcache) .. n − 2`` from the target's features;
        return the head's output feature and logits at position ``n − 2`` (n = len(tokens))."""
        n = len(self.tokens)
        start = len(self.hcache)
        if start == n - 1 and self._extended is not None:  # already extended (build_tree called twice)
            return self._extended
        ids = torch.tensor([self.tokens[start + 1:n]], dtype=torch.long)
        pos = torch.arange(start, n - 1)
        if self.feats is None:  # prefill keeps them before any draft step
            raise EngineError("EAGLE draft extend before the target's prefill", "call prefill() first")
        with span("draft_extend"), torch.inference_mode():
            g, logits = self.draft(ids, self.feats[None, start:n - 1], pos, self.hcache)
        self._extended = (g[0, -1], logits[0, -1].float())
        return self._extended

    def _head_step(self, token: int, feat: torch.Tensor, pos: int, cache: KVCache):
        with torch.inference_mode():
            g, logits = self.draft(torch.tensor([[token]]), feat[None, None], torch.tensor([pos]), cache)
        return g[0, -1], logits[0, -1].float()

    # -- steps --------------------------------------------------------------------------------
    def _spec_step(self) -> list[int]:
        with span("scheduler.run_batch"):
            if self.topk == 1:
                return self._chain_step()
            return self._tree_step()

    def _chain_step(self) -> list[int]:
        n = len(self.tokens)
        g, logits = self._extend()
        with span("draft"):
            drafts, qs = self._chain_drafts(n, g, logits)
        self.hcache.crop(n - 1)
        with span(VERIFY_SPAN):
            logits_t, feats_t = _target_step(self, [self.tokens[-1]] + drafts)
        k, extra = self._accept_chain(logits_t, drafts, qs)
        self._count(k, self.num_draft_tokens - 1)
        from dynocell.engine.reference.decoding import crop_cache

        crop_cache(self.tcache, n + k)
        self.tcache_len = n + k
        self._keep_feats(feats_t[:k + 1])
        return self._emit(drafts[:k] + [extra])

    def _chain_drafts(self, n: int, g: torch.Tensor, logits: torch.Tensor):
        drafts: list[int] = []
        qs: list[torch.Tensor | None] = []
        for i in range(self.num_steps):
            x, q = self._draw_draft(logits)
            qs.append(q)
            drafts.append(x)
            if i < self.num_steps - 1:
                g, logits = self._head_step(x, g, n - 1 + i, self.hcache)
        return drafts, qs

    def build_tree(self) -> list[tuple[int, int]]:
        """The draft tree for the next verify: ``[(token, parent index or -1 for the root), …]`` in
        SGLang's candidate order (step 0's k, then each step's k² children), ``num_draft_tokens − 1``
        nodes. Leaves the head's cache at the extended length."""
        n = len(self.tokens)
        k = self.topk
        g0, logits = self._extend()
        p0 = torch.softmax(logits, dim=-1)
        top_p, top_i = torch.topk(p0, k)
        cands: list[tuple[float, int, int]] = []  # (score, token, parent candidate index)
        branches = []  # (candidate index, token, feature to pair with it, cache, score)
        for j in range(k):
            cands.append((float(top_p[j]), int(top_i[j]), -1))
            branches.append((j, int(top_i[j]), g0, self.hcache.clone(), float(top_p[j])))
        for i in range(1, self.num_steps):
            base = len(cands)
            scores = []
            outs = []
            for _b, (cand, tok, feat, cache, score) in enumerate(branches):
                g, lg = self._head_step(tok, feat, n - 1 + (i - 1), cache)
                cp, ci = torch.topk(torch.softmax(lg, dim=-1), k)
                outs.append((g, cache))
                for c in range(k):
                    cands.append((score * float(cp[c]), int(ci[c]), cand))
                    scores.append(score * float(cp[c]))
            best = torch.topk(torch.tensor(scores), k).indices.tolist()
            branches = []
            for flat in best:
                b = flat // k
                g, cache = outs[b]
                _, tok, _ = cands[base + flat]
                branches.append((base + flat, tok, g, cache.clone(), scores[flat]))
        self.hcache.crop(n - 1)
        chosen = sorted(torch.topk(torch.tensor([c[0] for c in cands]), self.num_draft_tokens - 1).indices.tolist())
        index = {c: i for i, c in enumerate(chosen)}
        return [(cands[c][1], index.get(cands[c][2], -1) if cands[c][2] >= 0 else -1)
                for c in chosen if cands[c][2] < 0 or cands[c][2] in index]

    def _tree_step(self) -> list[int]:
        self._extend()
        with span("draft"):
            tree = self.build_tree()
        children: dict[int, list[int]] = {}
        for i, (_, parent) in enumerate(tree):
            children.setdefault(parent, []).append(i)
        node, path = -1, []
        with span(VERIFY_SPAN):
            logits, feats = _target_step(self, [self.tokens[-1]])
        kept = [feats]
        while True:
            kids = children.get(node, [])
            if self.sp.greedy:
                want = int(torch.argmax(logits[-1]).item())
                nxt = next((c for c in kids if tree[c][0] == want), None)
                extra = want
            else:
                p = probs(logits[-1], self.sp)
                u = float(torch.rand((), generator=self.gen))
                acc, nxt = 0.0, None
                for c in kids:
                    acc += float(p[tree[c][0]])
                    if u < acc:
                        nxt = c
                        break
                if nxt is None:
                    resid = p.clone()
                    for c in kids:
                        resid[tree[c][0]] = 0.0
                    extra = self._resample(resid, p)
            if nxt is None:
                break
            node = nxt
            path.append(tree[node][0])
            with span(VERIFY_SPAN):
                logits, feats = _target_step(self, [tree[node][0]])
            kept.append(feats)
        k = len(path)
        self._count(k, self.num_draft_tokens - 1)
        self.tcache_len = len(self.tokens) + k
        self._keep_feats(torch.cat(kept, dim=0))
        return self._emit(path + [extra])
