"""The health oracle: a conjunction of checks, never a single probe (docs/DESIGN.md "Health oracle").

:func:`check_health` runs, in order, each with its latency (ms) and reason:

1. ``process`` — the supervised process group is alive (zombie = dead) and no
   stop was requested. An engine that ignores SIGTERM still answers /health
   200 for minutes: while stopping, the verdict is ``down`` whatever HTTP says.
2. ``health`` — ``GET /health`` answers 200.
3. ``health_generate`` — ``GET /health_generate`` answers 200 within
   ``generate_timeout_s`` (a real one-token generation).
4. ``server_info`` — ``GET /get_server_info`` reports the booted model and key
   args (``model_path``, ``tp_size``, ``speculative_algorithm``,
   ``speculative_num_steps``, ``speculative_eagle_topk``,
   ``speculative_num_draft_tokens``; SGLang's ServerArgs field names). Only
   the fields set in :class:`ExpectedServer` are compared.
5. ``canary`` (optional) — ``POST /generate`` of a fixed prompt with greedy
   sampling (temperature 0) must reproduce the golden continuation recorded
   when the config was qualified.
6. ``progress`` — from ``GET /metrics``: when requests are running or queued,
   the token counters must advance between two probes. Generated tokens =
   ``sglang:generation_tokens_total`` (counted at request completion) +
   ``sglang:realtime_tokens_total{mode="decode"}`` (updated every decode log
   interval); prompt tokens = ``sglang:prompt_tokens_total`` +
   ``realtime_tokens_total{mode=~"prefill.*"}`` — names from SGLang 0.5.17's
   /metrics (tests/data/sglang-0.5.17/*.metrics.txt). Either
   advancing counts as progress, so a long prefill is not "dead". The check
   fails once the engine had load but no progress for ``stall_after_s``
   seconds (measured across probes with the :class:`ProgressSample` the
   previous call returned). No /metrics (engine without --enable-metrics) →
   the check passes with reason "skipped".

``ranks`` (only when a :class:`~dynocell.engine.ranks.RankStatus` is given, right
after ``process``) — every expected rank process (SGLang's
``sglang::scheduler_TP<n>``…) is found and alive; zombies are dead. No rank
alive → ``down``; one dead or missing → ``degraded`` even when HTTP answers.

vLLM's HTTP surface (``api="vllm"``, vLLM 0.26 ``vllm serve``) has no ``/health_generate``,
``/get_server_info`` nor ``/generate``, so checks 3-5 become:

3'. ``models`` — ``GET /v1/models`` lists the served name (``served_model_name``, else
   the model path as given: vLLM's default).
4'. ``completion`` — ``POST /v1/completions`` of one token (greedy) answers 200 with a
   choice within ``generate_timeout_s``.
5'. ``canary`` — the same prompt through ``/v1/completions`` (``temperature`` 0,
   ``max_tokens``) must reproduce the golden ``choices[0].text``.

The EngineCore child is the ``ranks`` check (:mod:`dynocell.engine.ranks`): a dead EngineCore
behind a live API server is ``down``. Progress reads ``vllm:`` counters (see
:func:`progress_from_metrics`); vLLM serves ``/metrics`` always.

Verdict: ``down`` when the process check fails (dead or stopping) or /health
is unreachable / not 200; ``degraded`` when any other check fails (the
reason names them); ``healthy`` otherwise. The oracle persists nothing: the
caller stores the :class:`Verdict` and passes ``verdict.progress`` to the
next call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

from prometheus_client.parser import text_string_to_metric_families

from dynocell.engine.client import EngineClient, EngineUnreachable, HttpResult
from dynocell.engine.ranks import RankStatus
from dynocell.text import printable

HEALTHY, DEGRADED, DOWN = "healthy", "degraded", "down"


@dataclass(frozen=True)
class ExpectedServer:
    """What ``/get_server_info`` must report; None fields are not checked."""

    model_path: str | None = None
    tp_size: int | None = None
    speculative_algorithm: str | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    speculative_num_draft_tokens: int | None = None
    check_speculative: bool = True
    served_model_name: str | None = None

    @classmethod
    def from_config(cls, cfg: Any, model_path: str | None = None) -> "ExpectedServer":
        """From an EngineConfig; ``model_path`` overrides (the resolved path the engine was given)."""
        s = cfg.speculative
        return cls(
            model_path=model_path or cfg.model_path,
            tp_size=cfg.parallel.tp_size,
            speculative_algorithm=s.algorithm,
            speculative_num_steps=s.num_steps,
            speculative_eagle_topk=s.eagle_topk,
            speculative_num_draft_tokens=s.num_draft_tokens,
            served_model_name=getattr(cfg, "served_model_name", None),
        )

    @property
    def served_name(self) -> str | None:
        """The name an OpenAI-style server lists in ``/v1/models`` (served name, else the model path)."""
        return self.served_model_name or self.model_path


@dataclass(frozen=True)
class Canary:
    """A fixed greedy prompt and its golden continuation (``text`` of /generate)."""

    prompt: str
    golden: str
    max_new_tokens: int = 16


@dataclass(frozen=True)
class ProgressSample:
    """Token counters at one probe: ``t`` (monotonic s), ``generated``/``prompt`` (tokens),
    ``running``/``queued`` (requests), ``stalled_since`` (monotonic s when a stall
    under load began, else None)."""

    t: float
    generated: float
    prompt: float
    running: float
    queued: float
    stalled_since: float | None = None

    @property
    def loaded(self) -> bool:
        return self.running + self.queued > 0


@dataclass(frozen=True)
class Check:
    """One check: ``name``, ``ok``, ``latency_ms`` (None if no request was made), ``reason``."""

    name: str
    ok: bool
    latency_ms: float | None
    reason: str


@dataclass(frozen=True)
class Verdict:
    """``verdict`` (healthy | degraded | down), the ``checks``, one-line ``reason``,
    ``progress`` (pass to the next call), ``at`` (UTC)."""

    verdict: str
    checks: list[Check]
    reason: str
    progress: ProgressSample | None = None
    at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))

    @property
    def failed(self) -> list[str]:
        return [c.name for c in self.checks if not c.ok]

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict for storing."""
        return {
            "verdict": self.verdict, "reason": self.reason, "at": self.at.isoformat(),
            "checks": [{"name": c.name, "ok": c.ok, "latency_ms": c.latency_ms, "reason": c.reason}
                       for c in self.checks],
        }


def progress_from_metrics(text: str, t: float, names: dict[str, tuple[str, ...]] | None = None) -> ProgressSample:
    """Parse Prometheus text into a :class:`ProgressSample` at monotonic time ``t``.

    Sums over label sets (ranks); see the module docstring for the metric names.
    vLLM's own families count the same way (``vllm/v1/metrics/loggers.py``):
    ``vllm:generation_tokens_total`` / ``vllm:prompt_tokens_total`` (counters),
    ``vllm:num_requests_running`` / ``vllm:num_requests_waiting`` (gauges).
    ``names`` (an engine kind's ``progress_names()``: keys ``generated``, ``prompt``, ``running``,
    ``queued``, each the sample names summed) replaces the SGLang/vLLM names.
    Raises ValueError on text prometheus_client cannot parse.
    """
    if names is not None:
        return _progress_named(text, t, names)
    gen = prompt = running = queued = 0.0
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            name, labels, value = s.name, s.labels, float(s.value)
            if name == "sglang:generation_tokens_total":
                gen += value
            elif name == "sglang:prompt_tokens_total":
                prompt += value
            elif name == "sglang:realtime_tokens_total":
                mode = labels.get("mode", "")
                if mode == "decode":
                    gen += value
                elif mode.startswith("prefill"):
                    prompt += value
            elif name in ("sglang:num_running_reqs", "vllm:num_requests_running"):
                running += value
            elif name in ("sglang:num_queue_reqs", "vllm:num_requests_waiting"):
                queued += value
            elif name == "vllm:generation_tokens_total":
                gen += value
            elif name == "vllm:prompt_tokens_total":
                prompt += value
    return ProgressSample(t, gen, prompt, running, queued)


def _progress_named(text: str, t: float, names: dict[str, tuple[str, ...]]) -> ProgressSample:
    """:func:`progress_from_metrics` with an engine kind's names: each key's samples summed."""
    sums = dict.fromkeys(("generated", "prompt", "running", "queued"), 0.0)
    where = {n: key for key, ns in names.items() for n in ns}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in where:
                sums[where[s.name]] += float(s.value)
    return ProgressSample(t, sums["generated"], sums["prompt"], sums["running"], sums["queued"])


def judge_progress(prev: ProgressSample | None, cur: ProgressSample,
                   stall_after_s: float) -> tuple[ProgressSample, bool, str]:
    """Compare two samples: ``(cur with stalled_since set, ok, reason)``."""
    if prev is None:
        return cur, True, f"baseline: {cur.running:g} running, {cur.queued:g} queued"
    advanced_gen = cur.generated > prev.generated
    advanced_prompt = cur.prompt > prev.prompt
    if advanced_gen or advanced_prompt or not (cur.loaded and prev.loaded):
        what = "generated tokens" if advanced_gen else "prompt tokens" if advanced_prompt else "no load"
        return cur, True, (f"progress: {what} (+{cur.generated - prev.generated:g} gen, "
                           f"+{cur.prompt - prev.prompt:g} prompt)")
    since = prev.stalled_since if prev.stalled_since is not None else prev.t
    stalled = ProgressSample(cur.t, cur.generated, cur.prompt, cur.running, cur.queued, since)
    for_s = cur.t - since
    msg = (f"no token progress for {for_s:.1f} s with {cur.running:g} running and {cur.queued:g} queued "
           f"(generated stays {cur.generated:g})")
    return stalled, for_s < stall_after_s, msg


def _timed(fn, *a, **kw) -> tuple[HttpResult | None, float, str | None]:
    t0 = time.perf_counter()
    try:
        r = fn(*a, **kw)
        return r, r.latency_ms, None
    except EngineUnreachable as exc:
        return None, (time.perf_counter() - t0) * 1000.0, exc.message


def _why(err: str | None, r: HttpResult | None, path: str) -> str:
    """A failed check's reason: the error of an unreachable engine, else the status ``path`` answered."""
    if err:
        return err
    return f"{path} answered {r.status}" if r is not None else f"{path}: no answer"


def _server_info_mismatches(body: Any, exp: ExpectedServer) -> list[str]:
    if not isinstance(body, dict):
        return ["answer is not a JSON object"]
    # Newer SGLang nests server args; accept both shapes.
    info = body.get("server_args", body) if isinstance(body.get("server_args"), dict) else body
    bad = []

    def cmp(key: str, want: Any, norm=lambda v: v) -> None:
        if want is None:
            return
        got = info.get(key)
        if norm(got) != norm(want):
            bad.append(f"{key}: expected {want!r}, engine reports {got!r}")

    cmp("model_path", exp.model_path, lambda v: str(v).rstrip("/") if v is not None else None)
    cmp("tp_size", exp.tp_size, lambda v: int(v) if v is not None else None)
    if exp.check_speculative:
        def norm_alg(v: Any) -> str | None:
            # SGLang 0.5.17 resolves NEXTN to EAGLE before it stores the server args
            # (arg_groups/speculative_hook.py:
            # `if speculative_algorithm == "NEXTN" or ... == "EAGLE": return "EAGLE"`).
            if v in (None, "", "NONE", "none"):
                return None
            return {"NEXTN": "EAGLE"}.get(str(v).upper(), str(v).upper())

        if norm_alg(info.get("speculative_algorithm")) != norm_alg(exp.speculative_algorithm):
            bad.append(f"speculative_algorithm: expected {exp.speculative_algorithm!r}, "
                       f"engine reports {info.get('speculative_algorithm')!r}")
        if exp.speculative_algorithm:
            cmp("speculative_num_steps", exp.speculative_num_steps)
            cmp("speculative_eagle_topk", exp.speculative_eagle_topk)
            cmp("speculative_num_draft_tokens", exp.speculative_num_draft_tokens)
    return bad


def api_of(cfg: Any) -> str:
    """The HTTP surface of an EngineConfig (``cfg.api``: ``"vllm"`` for vLLM or a reference engine
    with ``serving.surface = "vllm"``, else ``"sglang"``); a bare engine name works too."""
    if isinstance(cfg, str):
        return "vllm" if cfg == "vllm" else "sglang"
    return getattr(cfg, "api", "sglang")


def openai_checks(client: EngineClient, expected: ExpectedServer | None, canary: Canary | None,
                  timeout_s: float) -> list[Check]:
    """Checks 3'-5' of the module docstring (vLLM's OpenAI surface; llama-server's too)."""
    checks: list[Check] = []
    want = expected.served_name if expected is not None else None
    r, ms, err = _timed(client.models)
    names = [m.get("id") for m in r.body.get("data", []) if isinstance(m, dict)] \
        if r is not None and r.status == 200 and isinstance(r.body, dict) else None
    if names is None:
        checks.append(Check("models", False, ms, _why(err, r, "/v1/models")))
    else:
        ok = want is None or want in names
        checks.append(Check("models", ok, ms, f"serves {names}" if ok else f"{want!r} not in {names}"))
    model = want or (names[0] if names else None)

    def complete(max_tokens: int) -> tuple[HttpResult | None, float, str | None]:
        payload = {"prompt": canary.prompt if canary and max_tokens > 1 else "Hello", "max_tokens": max_tokens,
                   "temperature": 0.0}
        if model:
            payload["model"] = model
        return _timed(client.completions, payload, timeout_s=timeout_s)

    r, ms, err = complete(1)
    choices = r.body.get("choices") if r is not None and isinstance(r.body, dict) else None
    if r is None:
        checks.append(Check("completion", False, ms, f"no answer within {timeout_s:g} s: {err}"))
    else:
        ok = r.status == 200 and bool(choices)
        checks.append(Check("completion", ok, ms, "1 token" if ok else f"/v1/completions answered {r.status}"))
    if canary is not None:
        r, ms, err = complete(canary.max_new_tokens)
        text = None
        if r is not None and r.status == 200 and isinstance(r.body, dict) and r.body.get("choices"):
            text = r.body["choices"][0].get("text")
        ok = text == canary.golden
        checks.append(Check("canary", ok, ms, "golden continuation reproduced" if ok
                            else err or f"expected {canary.golden!r}, got {text!r}"))
    return checks


def check_health(
    client: EngineClient,
    *,
    process_alive: bool,
    stop_requested: bool = False,
    expected: ExpectedServer | None = None,
    canary: Canary | None = None,
    previous_progress: ProgressSample | None = None,
    generate_timeout_s: float = 30.0,
    stall_after_s: float = 30.0,
    now: float | None = None,
    ranks: RankStatus | None = None,
    api: str = "sglang",
    surface_checks: Callable[..., list[Check]] | None = None,
    progress_names: dict[str, tuple[str, ...]] | None = None,
) -> Verdict:
    """Run the oracle once against ``client``'s engine (see the module docstring).

    ``process_alive``/``stop_requested`` come from the supervisor (or
    :func:`dynocell.engine.supervisor.process_alive` for a boot this process
    did not start). ``now`` (monotonic s) is for the progress sample; default
    ``time.monotonic()``. ``ranks``: the engine's rank processes
    (:func:`dynocell.engine.ranks.rank_status`); None = not checked. ``api``: the HTTP
    surface (:func:`api_of`; ``"vllm"`` swaps checks 3-5 for vLLM's, see the module docstring).
    ``surface_checks`` (an engine kind's, same arguments as :func:`openai_checks`) replaces checks 3-5,
    ``progress_names`` the progress check's metric names (:func:`progress_from_metrics`).
    Never raises for engine failures: they become failed checks.
    """
    checks: list[Check] = []
    if not process_alive or stop_requested:
        why = "stop requested: the engine is stopping" if stop_requested else "engine process is dead"
        checks.append(Check("process", False, None, why))
        return Verdict(DOWN, checks, why)
    checks.append(Check("process", True, None, "alive"))
    if ranks is not None:
        checks.append(Check("ranks", ranks.ok, None, ranks.reason))
        if ranks.none_alive:
            return Verdict(DOWN, checks, f"no rank process alive: {ranks.reason}")

    r, ms, err = _timed(client.health)
    if r is None or r.status != 200:
        why = f"/health unreachable: {err}" if r is None else f"/health answered {r.status}"
        checks.append(Check("health", False, ms, why))
        return Verdict(DOWN, checks, why)
    checks.append(Check("health", True, ms, "200"))

    if surface_checks is not None:
        checks += surface_checks(client, expected, canary, generate_timeout_s)
    elif api == "vllm":
        checks += openai_checks(client, expected, canary, generate_timeout_s)
    else:
        checks += _sglang_checks(client, expected, canary, generate_timeout_s)
    progress, check = _progress_check(client, previous_progress, stall_after_s, now, progress_names)
    checks.append(check)
    failed = [c for c in checks if not c.ok]
    if failed:
        return Verdict(DEGRADED, checks, "degraded: " + "; ".join(f"{c.name} ({c.reason})" for c in failed), progress)
    return Verdict(HEALTHY, checks, "all checks passed", progress)


def _sglang_checks(client: EngineClient, expected: ExpectedServer | None, canary: Canary | None,
                   generate_timeout_s: float) -> list[Check]:
    """Checks 3-5 of the module docstring (SGLang's native surface)."""
    checks: list[Check] = []
    r, ms, err = _timed(client.health_generate, timeout_s=generate_timeout_s)
    if r is None:
        checks.append(Check("health_generate", False, ms, f"no answer within {generate_timeout_s:g} s: {err}"))
    else:
        checks.append(Check("health_generate", r.status == 200, ms, f"{r.status}"))

    if expected is not None:
        r, ms, err = _timed(client.server_info)
        if r is None or r.status != 200:
            checks.append(Check("server_info", False, ms, _why(err, r, "/get_server_info")))
        else:
            bad = _server_info_mismatches(r.body, expected)
            checks.append(Check("server_info", not bad, ms, "; ".join(bad) or "model and key args match"))

    if canary is not None:
        payload = {"text": canary.prompt,
                   "sampling_params": {"temperature": 0.0, "max_new_tokens": canary.max_new_tokens}}
        r, ms, err = _timed(client.generate, payload, timeout_s=generate_timeout_s)
        if r is None or r.status != 200:
            checks.append(Check("canary", False, ms, _why(err, r, "/generate")))
        else:
            text = r.body.get("text") if isinstance(r.body, dict) else None
            ok = text == canary.golden
            checks.append(Check("canary", ok, ms, "golden continuation reproduced" if ok
                                else f"expected {canary.golden!r}, got {text!r}"))
    return checks


def _progress_check(client: EngineClient, previous: ProgressSample | None, stall_after_s: float,
                    now: float | None, names: dict[str, tuple[str, ...]] | None = None,
                    ) -> tuple[ProgressSample | None, Check]:
    """Check 6 (``progress``) and the sample to pass to the next call."""
    r, ms, err = _timed(client.metrics_text)
    if r is None or r.status != 200:
        return previous, Check("progress", True, ms,
                               f"skipped: /metrics unavailable ({err or (r.status if r else 'no answer')}); "
                               "start the engine with --enable-metrics")
    try:
        cur = progress_from_metrics(r.text, now if now is not None else time.monotonic(), names)
    except ValueError as exc:
        why = printable(str(exc).strip(), limit=120) or "parse error"
        head = r.text.strip().splitlines()[0][:60] if r.text.strip() else ""
        return previous, Check("progress", False, ms,
                               f"/metrics unparsable: not Prometheus text ({why}); it starts with {head!r}")
    progress, ok, why = judge_progress(previous, cur, stall_after_s)
    return progress, Check("progress", ok, ms, why)
