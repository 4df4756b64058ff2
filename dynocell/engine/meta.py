"""Typed ``meta_info`` of one generation, as SGLang returns it from ``/generate``.

Shape checked against real SGLang 0.5.17 responses (``tests/data/sglang-0.5.17/
*.result.json``): ``finish_reason`` is ``{"type": "length", "length": 32}``,
``e2e_latency`` is in seconds, speculative fields are present only with
speculation (``spec_verify_ct``, ``spec_accept_length`` = completion_tokens /
spec_verify_ct, ``spec_accept_rate`` = correct / proposed drafts,
``spec_num_correct_drafts``, ``spec_num_proposed_drafts``,
``spec_correct_drafts_histogram`` with D + 1 buckets; 0.5.17 duplicates the last
three as ``spec_accepted_drafts``, ``spec_proposed_drafts``,
``spec_accept_histogram``).

An engine may lie: :meth:`GenerationMeta.from_meta_info` never raises on a
mapping with wrong types (the bad field becomes ``None`` and a problem is
recorded) and :meth:`GenerationMeta.validate` lists every inconsistency.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dynocell.errors import EngineError

__all__ = ["GenerationMeta", "MetaError", "check_generations"]

# Tolerance for "equal beyond rounding": engines may print 2-decimal values.
_ROUND_TOL = 0.005 + 1e-9


class MetaError(EngineError, ValueError):
    """A ``meta_info`` that is not a JSON object at all."""


def _as_int(d: Mapping[str, Any], key: str, problems: list[str]) -> int | None:
    v = d.get(key)
    if v is None:
        return None
    fractional = isinstance(v, float) and (math.isnan(v) or v != int(v))
    if isinstance(v, bool) or not isinstance(v, (int, float)) or fractional:
        problems.append(f"{key} is not an integer: {v!r}")
        return None
    return int(v)


def _as_float(d: Mapping[str, Any], key: str, problems: list[str]) -> float | None:
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(float(v)):
        problems.append(f"{key} is not a number: {v!r}")
        return None
    return float(v)


def _as_hist(d: Mapping[str, Any], key: str, problems: list[str]) -> tuple[int, ...] | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, (list, tuple)) or not all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and float(x) == int(x) for x in v
    ):
        problems.append(f"{key} is not a list of counts: {v!r}")
        return None
    return tuple(int(x) for x in v)


@dataclass(frozen=True)
class GenerationMeta:
    """One generation's ``meta_info`` (SGLang field names; seconds; token counts).

    ``finish_reason`` is the reason's ``type`` (``"length"``, ``"stop"``,
    ``"abort"``…) whatever shape the engine used (dict, string);
    ``finish_length`` the ``length`` of a ``{"type": "length"}`` reason.
    ``parse_problems`` holds fields that had the wrong type (they are ``None``).
    """

    id: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str | None = None
    finish_length: int | None = None
    e2e_latency: float | None = None
    spec_verify_ct: int | None = None
    spec_accept_length: float | None = None
    spec_accept_rate: float | None = None
    spec_num_correct_drafts: int | None = None
    spec_num_proposed_drafts: int | None = None
    spec_correct_drafts_histogram: tuple[int, ...] | None = None
    parse_problems: tuple[str, ...] = field(default=(), compare=False)

    @classmethod
    def from_meta_info(cls, meta: Mapping[str, Any]) -> GenerationMeta:
        """Parse a ``meta_info`` mapping; wrong-typed fields become ``None`` + a problem.

        Raises :class:`MetaError` only when ``meta`` is not a mapping.
        """
        if not isinstance(meta, Mapping):
            raise MetaError(
                f"meta_info must be a JSON object, got {type(meta).__name__}: {str(meta)[:80]!r}",
                "the engine's /generate answer is malformed",
            )
        problems: list[str] = []
        fr = meta.get("finish_reason")
        reason: str | None = None
        flen: int | None = None
        if isinstance(fr, Mapping):
            reason = str(fr.get("type")) if fr.get("type") is not None else None
            if isinstance(fr.get("length"), int):
                flen = fr["length"]
        elif isinstance(fr, str):
            reason = fr
        elif fr is not None:
            problems.append(f"finish_reason has an unknown shape: {fr!r}")

        hist = _as_hist(meta, "spec_correct_drafts_histogram", problems)
        alias_hist = _as_hist(meta, "spec_accept_histogram", problems)
        if hist is None:
            hist = alias_hist
        elif alias_hist is not None and alias_hist != hist:
            problems.append(
                f"spec_correct_drafts_histogram {list(hist)} differs from spec_accept_histogram {list(alias_hist)}"
            )
        correct = _as_int(meta, "spec_num_correct_drafts", problems)
        alias_correct = _as_int(meta, "spec_accepted_drafts", problems)
        if correct is None:
            correct = alias_correct
        elif alias_correct is not None and alias_correct != correct:
            problems.append(f"spec_num_correct_drafts {correct} differs from spec_accepted_drafts {alias_correct}")
        proposed = _as_int(meta, "spec_num_proposed_drafts", problems)
        alias_proposed = _as_int(meta, "spec_proposed_drafts", problems)
        if proposed is None:
            proposed = alias_proposed
        elif alias_proposed is not None and alias_proposed != proposed:
            problems.append(
                f"spec_num_proposed_drafts {proposed} differs from spec_proposed_drafts {alias_proposed}"
            )
        rid = meta.get("id")
        return cls(
            id=str(rid) if rid is not None else None,
            prompt_tokens=_as_int(meta, "prompt_tokens", problems),
            completion_tokens=_as_int(meta, "completion_tokens", problems),
            cached_tokens=_as_int(meta, "cached_tokens", problems),
            finish_reason=reason,
            finish_length=flen,
            e2e_latency=_as_float(meta, "e2e_latency", problems),
            spec_verify_ct=_as_int(meta, "spec_verify_ct", problems),
            spec_accept_length=_as_float(meta, "spec_accept_length", problems),
            spec_accept_rate=_as_float(meta, "spec_accept_rate", problems),
            spec_num_correct_drafts=correct,
            spec_num_proposed_drafts=proposed,
            spec_correct_drafts_histogram=hist,
            parse_problems=tuple(problems),
        )

    @property
    def speculative(self) -> bool:
        """True when the generation carries speculative statistics."""
        return self.spec_correct_drafts_histogram is not None or self.spec_verify_ct is not None

    @property
    def num_drafts(self) -> int | None:
        """D, drafts proposed per verify step (histogram length − 1), or ``None``."""
        h = self.spec_correct_drafts_histogram
        return len(h) - 1 if h else None

    def _histogram_problems(self) -> list[str]:
        """The checks of ``spec_correct_drafts_histogram`` (see :meth:`validate`); [] without one."""
        h = self.spec_correct_drafts_histogram
        vct = self.spec_verify_ct
        if h is None:
            return []
        out: list[str] = []
        # SGLang 0.5.17 grows the list to the largest k seen, so [N] (no draft ever accepted) is real.
        if len(h) < 1 or (len(h) == 1 and vct is not None and h[0] != vct):
            out.append(f"spec_correct_drafts_histogram has {len(h)} bucket(s); a speculative step has D ≥ 1")
        if any(x < 0 for x in h):
            out.append(f"spec_correct_drafts_histogram has negative counts: {list(h)}")
        if vct is None:
            out.append("spec_correct_drafts_histogram present but spec_verify_ct missing")
        elif sum(h) != vct:
            out.append(f"histogram sums to {sum(h)} verify steps but spec_verify_ct is {vct}")
        acc = sum(k * c for k, c in enumerate(h))
        if self.spec_num_correct_drafts is not None and self.spec_num_correct_drafts != acc:
            out.append(
                f"spec_num_correct_drafts is {self.spec_num_correct_drafts} but the histogram gives Σk·h[k] = {acc}"
            )
        d = len(h) - 1
        pd = self.spec_num_proposed_drafts
        # A chain proposes D per verify step; an EAGLE tree (eagle_topk > 1) proposes
        # num_draft_tokens − 1 ≥ D nodes per step but accepts at most D deep.
        if (vct is not None and d >= 1 and pd is not None and pd != vct * d
                and not (vct > 0 and pd % vct == 0 and pd // vct > d)):
            out.append(
                f"spec_num_proposed_drafts is {pd} but spec_verify_ct × D = {vct} × {d} = {vct * d} "
                f"(or a tree's size × spec_verify_ct, with more than D nodes per step)"
            )
        # completion_tokens also counts the prefill's token, so the ratio may
        # exceed D + 1 by 1 / spec_verify_ct.
        top = d + 1 + (1.0 / vct if vct else 0.0) + _ROUND_TOL
        if self.spec_accept_length is not None and d >= 1 and not (
            1.0 - _ROUND_TOL <= self.spec_accept_length <= top
        ):
            out.append(f"spec_accept_length {self.spec_accept_length} is outside [1, D + 1 = {d + 1}]")
        return out

    def validate(self) -> list[str]:
        """Every inconsistency found, as sentences (empty list: consistent).

        Checks: wrong-typed fields; negative counts or latency; cached > prompt
        tokens; Σ histogram ≠ spec_verify_ct; spec_num_correct_drafts ≠ Σ k·h[k];
        spec_num_proposed_drafts ≠ spec_verify_ct·D (or a whole multiple with more than D per step: an
        EAGLE tree); spec_accept_length ≠
        completion_tokens / spec_verify_ct and spec_accept_rate ≠ correct / proposed
        beyond rounding (0.005) — SGLang 0.5.17 computes both exactly so
        (``tests/data/sglang-0.5.17``); accept length outside [1, D + 1].
        """
        out = list(self.parse_problems)
        for name in (
            "prompt_tokens", "completion_tokens", "cached_tokens", "spec_verify_ct",
            "spec_num_correct_drafts", "spec_num_proposed_drafts",
        ):
            v = getattr(self, name)
            if v is not None and v < 0:
                out.append(f"{name} is negative: {v}")
        if self.e2e_latency is not None and self.e2e_latency < 0:
            out.append(f"e2e_latency is negative: {self.e2e_latency} s")
        if (
            self.cached_tokens is not None and self.prompt_tokens is not None
            and self.cached_tokens > self.prompt_tokens
        ):
            out.append(f"cached_tokens {self.cached_tokens} exceeds prompt_tokens {self.prompt_tokens}")
        out.extend(self._histogram_problems())
        vct = self.spec_verify_ct
        if (
            self.spec_accept_length is not None and self.completion_tokens is not None
            and vct is not None and vct > 0
        ):
            expect = self.completion_tokens / vct
            if abs(self.spec_accept_length - expect) > _ROUND_TOL:
                out.append(
                    f"spec_accept_length {self.spec_accept_length} ≠ completion_tokens / spec_verify_ct = "
                    f"{self.completion_tokens} / {vct} = {expect:.4f}"
                )
        if (
            self.spec_accept_rate is not None and self.spec_num_correct_drafts is not None
            and self.spec_num_proposed_drafts
        ):
            expect = self.spec_num_correct_drafts / self.spec_num_proposed_drafts
            if abs(self.spec_accept_rate - expect) > _ROUND_TOL:
                out.append(
                    f"spec_accept_rate {self.spec_accept_rate} ≠ correct / proposed drafts = "
                    f"{self.spec_num_correct_drafts} / {self.spec_num_proposed_drafts} = {expect:.4f}"
                )
        if self.spec_accept_rate is not None and not (0.0 <= self.spec_accept_rate <= 1.0 + _ROUND_TOL):
            out.append(f"spec_accept_rate {self.spec_accept_rate} is outside [0, 1]")
        return out


def check_generations(metas: Iterable[Any]) -> list[str]:
    """Problems of the ``meta_info`` of a set of generations, before τ is computed from them.

    ``metas``: the ``meta_info`` of each generation (dicts as the engine sent
    them). Returns one sentence per problem, naming the generation (0-based,
    plus its ``id`` when it has one): a ``meta_info`` that is missing or not an
    object, and every inconsistency :meth:`GenerationMeta.validate` finds — a
    histogram that does not sum to ``spec_verify_ct``, a ``spec_num_correct_drafts``
    the histogram contradicts, … An empty list means nothing to flag. Never raises.
    """
    out: list[str] = []
    for i, m in enumerate(metas):
        if not m:
            out.append(f"generation {i}: no meta_info")
            continue
        try:
            gm = GenerationMeta.from_meta_info(m)
        except MetaError as exc:
            out.append(f"generation {i}: {exc.message}")
            continue
        who = f"generation {i}" + (f" ({gm.id})" if gm.id else "")
        out.extend(f"{who}: {p}" for p in gm.validate())
    return out
