"""The doctor's plain-value shapes: what rules read (:class:`DoctorInputs`) and what they say (:class:`Finding`).

Kept apart from the rules (``doctor.py`` and the ``doctor_*`` rule modules) so every rule module can
import them without importing the others. No I/O.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, overload


#: Fields that change neither the build nor how it runs (addresses, names, node lists, labels).
PLACE_KNOBS = ("host", "port", "served_model_name", "dist_init_addr", "nodes", "meta.")
#: Flattened config fields that never change what an engine computes, nor how it is measured (ignored by
#: comparisons of issue 22's rules): the place knobs, patches and environment.
IGNORED_KNOBS = (*PLACE_KNOBS, "patches", "env.")


def differing_knobs(a: dict[str, Any], b: dict[str, Any], *, include_patches: bool = False,
                    include_env: bool = False) -> list[str]:
    """The flattened config fields (``flatten_config`` keys such as ``parallel.tp_size``, ``env.NAME``) whose
    values differ between ``a`` and ``b``, sorted.

    A field present on one side only differs unless its value there is None (``a.get(k) != b.get(k)``).
    :data:`PLACE_KNOBS` (addresses, names, node lists, labels; matched as key prefixes) are always left out:
    they change neither what an engine computes nor how it is measured. The two parameters select what else
    counts:

    - ``include_patches`` — count ``patches`` (the engine build). False (default) for comparisons of knobs
      (siblings, issue 22's others); True where a build change must be seen (``confounded_comparison``'s
      build/env candidates, ``tau_up_throughput_down``'s "same config, other build").
    - ``include_env`` — count ``env.*`` variables (an env switch can change how a build runs). True for the
      acceptance rules' sibling and reference-twin selection (``doctor.py``), False (default) for issue 22's
      comparisons.

    With both False the left-out prefixes are :data:`IGNORED_KNOBS`. An observed extra (``extra.*``, a
    setting dynocell's config does not model, :mod:`dynocell.engine.observed`) differs only where both sides
    revealed it: a written config cannot state it, so its absence there is unknown, not a difference.
    """
    ignored = (*PLACE_KNOBS, *(() if include_patches else ("patches",)), *(() if include_env else ("env.",)))
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k) and not k.startswith(ignored)
                  and not (k.startswith("extra.") and (k not in a or k not in b)))


def headline_tok_s(summary: dict[str, Any] | None) -> float | None:
    """A run's headline throughput (tok/s) from its stored ``summary``: ``best_output_tok_s`` (the best
    whole-workload level's aggregate output rate, :func:`dynocell.runbooks.run.summary_step.summarize`), or for
    runs stored before that field existed its deprecated alias ``decode_tok_s`` (the same number)."""
    s = summary or {}
    return s.get("best_output_tok_s") if s.get("best_output_tok_s") is not None else s.get("decode_tok_s")


@overload
def r(x: float, n: int = 4) -> float: ...
@overload
def r(x: float | None, n: int = 4) -> float | None: ...
def r(x: float | None, n: int = 4) -> float | None:
    """``x`` rounded to ``n`` places (None stays None): evidence numbers."""
    return None if x is None else round(float(x), n)


@dataclass(frozen=True)
class Finding:
    """One doctor finding.

    ``rule``: rule id; ``severity``: info | warn | error; ``message``: one or two
    sentences with the numbers; ``evidence``: the numbers (τ, p_i, sizes, tok/s …;
    plus a few names such as ``text_class`` or ``knob``); ``entries``: linked runbook slugs.
    """

    rule: str
    severity: str
    message: str
    evidence: dict[str, Any]
    entries: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return asdict(self)


@dataclass(frozen=True)
class ClassCurve:
    """The curve of one text class (or one rung of a length ladder).

    ``curve``: :class:`dynocell.engine.acceptance.Curve`; ``prompt_tokens``: mean
    prompt length of its requests (tokens) when known; ``engine_tau``: the engine's
    own τ for the same requests and ``engine_source`` where it came from; ``step_ms``: the median verify
    step of these requests (ms), which sets a length bucket's own break-even τ (step_ms / plain step);
    ``requests``: each request's record (prompt and output hashes, histogram) when stored (migration 0009).
    """

    text_class: str
    curve: Any
    prompt_tokens: float | None = None
    engine_tau: float | None = None
    engine_source: str | None = None
    step_ms: float | None = None
    #: each request's record (:mod:`dynocell.engine.request_acceptance`), when the store has them
    requests: tuple[dict[str, Any], ...] | None = None


@dataclass(frozen=True)
class Sibling:
    """Another measured config: ``knobs`` = flattened config (``parallel.dcp_size`` …), ``tau`` its overall τ;
    ``requests``: its request records, every class (the interval of its τ, issue 33); ``context``: its
    comparability context (:func:`dynocell.runbooks.run.context.full_context`), empty when unknown."""

    label: str
    knobs: dict[str, Any]
    tau: float
    tau_by_class: dict[str, float] = field(default_factory=dict)
    decode_tok_s: float | None = None
    requests: tuple[dict[str, Any], ...] = ()
    context: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class OracleCurve:
    """A reference-engine curve on the same prompts; ``mode``: greedy | top1 | sampled (draft proposal semantics);
    ``requests``: its requests' records when stored (to compare greedy curves on identical generated text)."""

    text_class: str
    mode: str
    curve: Any
    requests: tuple[dict[str, Any], ...] | None = None


@dataclass
class DoctorInputs:
    """Everything the rules look at, as plain values (all optional except ``curves``).

    - ``curves``: per class; ``ladder``: per prompt length (defaults to the curves
      that carry ``prompt_tokens``).
    - ``knobs``: this run's flattened config (:func:`flatten_config`); ``siblings``:
      other measured configs (for parallel-size and graph/eager comparisons).
    - ``spec_decode_tok_s`` / ``plain_decode_tok_s``: decode throughput with and
      without speculation at the same concurrency (tok/s); ``spec_step_ms`` /
      ``plain_step_ms``: one verify step / one plain decode step (ms); ``breakeven_noise``: the
      break-even's noise band (fraction; a margin inside it is not a finding).
    - ``output_ids`` (token id lists) / ``output_texts``: generations of the run, of the same workload
      (sampling settings) its curves come from; ``outputs_of`` says whose (e.g. ``run samples``).
    - ``oracle``: reference curves; ``sampling``: greedy | sampled;
      ``proposal_mode``: how the engine proposes drafts under sampling (top1 for
      SGLang with eagle_topk 1, sampled otherwise).
    - ``baselines``: recorded runs of the same config (other builds, versions, dates);
      ``others``: every other measured config of the same model (any knobs differing, with τ,
      per-class τ and throughput where known) — comparisons and contradictions.
    - ``concurrency``: decode throughput with and without speculation per concurrency.
    - ``mismatches``: greedy lossless mismatches (first divergent position, the two tokens and the
      top-2 log-probability margin there when fetched); ``mode_outputs`` / ``mode_texts``: token ids /
      texts per serving mode (``cuda_graph=full`` …) on the same prompts, this run's mode first.
    - ``engine_rates``: rates the engine reported (``{name, value, definition}``).
    - ``log``: runtime signs from the engine log (:func:`dynocell.engine.log_signs.scan_lines`);
      ``gauges``: the last ``/metrics`` gauges (``running``, ``waiting``, ``kv_usage``);
      ``profile``: the profile window (``requested``, ``traces``, ``graph_launches``, ``source``).
    - ``windows``: context windows in tokens (``target_context`` the target serves with and
      ``target_source``, ``draft_window`` and ``draft_source``; ``*_unknown`` says why one could not be read).
    - ``accept_lengths``: accept lengths τ (tokens per verify step, bonus included) a bench tool or an engine
      reported where the draft count D is unknown, so no curve can be made (``{text_class, tau, source}``):
      an imported SGLang ``bench_serving`` file of a server whose config dynocell never saw (issue 35).
    - ``acceptance_windows``: one log's acceptance windows in order (``{line, offset_s, tau, accepted,
      drafted}``: vLLM's per-interval ``SpecDecoding metrics`` lines, τ as printed, token counts of the
      interval, seconds since the log's first stamp or None), for acceptance over a server's life.
    - ``draft_model``: what the draft folder's ``config.json`` says of its head (``{head: EAGLE3 | EAGLE | None,
      architectures, source}``, or ``{unknown: why}``), for checking it against the algorithm.
    """

    curves: list[ClassCurve] = field(default_factory=list)
    ladder: list[ClassCurve] = field(default_factory=list)
    knobs: dict[str, Any] = field(default_factory=dict)
    siblings: list[Sibling] = field(default_factory=list)
    spec_decode_tok_s: float | None = None
    plain_decode_tok_s: float | None = None
    spec_step_ms: float | None = None
    plain_step_ms: float | None = None
    breakeven_noise: float | None = None
    output_ids: list[list[int]] = field(default_factory=list)
    output_texts: list[str] = field(default_factory=list)
    outputs_of: str | None = None
    oracle: list[OracleCurve] = field(default_factory=list)
    sampling: str = "greedy"
    proposal_mode: str = "top1"
    baselines: list[Baseline] = field(default_factory=list)
    others: list[Sibling] = field(default_factory=list)
    concurrency: list[ConcurrencyPoint] = field(default_factory=list)
    mismatches: list[Mismatch] = field(default_factory=list)
    mode_outputs: dict[str, list[list[int]]] = field(default_factory=dict)
    mode_texts: dict[str, list[str]] = field(default_factory=dict)
    engine_rates: list[dict[str, Any]] = field(default_factory=list)
    log: dict[str, Any] = field(default_factory=dict)
    gauges: dict[str, Any] = field(default_factory=dict)
    profile: dict[str, Any] = field(default_factory=dict)
    windows: dict[str, Any] = field(default_factory=dict)
    effect_size: float = 0.05
    context: dict[str, Any] = field(default_factory=dict)
    contended: str | None = None
    allow_contended: bool = False
    breakeven: dict[str, Any] = field(default_factory=dict)
    accept_lengths: list[dict[str, Any]] = field(default_factory=list)
    acceptance_windows: list[dict[str, Any]] = field(default_factory=list)
    draft_model: dict[str, Any] = field(default_factory=dict)

    def overall_tau(self) -> float | None:
        """Step-weighted τ over the curves (unweighted when steps are unknown); None without curves."""
        cs = [c.curve for c in self.curves]
        if not cs:
            return None
        w = [c.steps if c.steps else 1 for c in cs]
        return sum(c.tau * wi for c, wi in zip(cs, w)) / sum(w)


@dataclass(frozen=True)
class Baseline:
    """A recorded run of the SAME config: ``label`` (run id), ``build`` (engine build / version / date label),
    ``curves``: ``{text_class: Curve}``, ``decode_tok_s`` its decode throughput (tok/s) when known; ``requests``:
    ``{text_class: request records}`` when stored; ``context``: its comparability context (issue 33)."""

    label: str
    build: str | None
    curves: dict[str, Any]
    decode_tok_s: float | None = None
    requests: dict[str, tuple[dict[str, Any], ...]] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ConcurrencyPoint:
    """Decode throughput at one concurrency: ``spec_tok_s`` with speculation, ``plain_tok_s`` without (tok/s);
    ``spec_requests`` / ``plain_requests``: each request's decode rate at that level (tok/s, the bench row's
    ``extra.requests.decode_tok_s``), empty when the level kept none (imports): the speed-up's interval."""

    concurrency: int
    spec_tok_s: float
    plain_tok_s: float
    spec_requests: tuple[float, ...] = ()
    plain_requests: tuple[float, ...] = ()


@dataclass(frozen=True)
class Mismatch:
    """A greedy lossless mismatch: ``prompt`` index, first divergent ``position`` (token index of the output),
    the ``spec_token`` / ``plain_token`` ids there and, when fetched, ``margin`` = top-1 minus top-2
    log-probability (nats) of the plain engine at that position; ``margin_unknown``: why it could not be
    fetched (the engine refused or ignored the log-probability request, or gave no token ids)."""

    prompt: int
    position: int
    spec_token: int | None = None
    plain_token: int | None = None
    margin: float | None = None
    margin_unknown: str | None = None


def self_and_siblings(inp: DoctorInputs) -> tuple[Sibling | None, list[Sibling]]:
    """``(this run as a Sibling, the other configs measured beside it)``; the first is None without knobs or τ."""
    tau = inp.overall_tau()
    me = (Sibling("this run", inp.knobs, tau, requests=tuple(x for c in inp.curves for x in (c.requests or ())),
                  context=dict(inp.context)) if inp.knobs and tau is not None else None)
    return me, list(inp.siblings)
