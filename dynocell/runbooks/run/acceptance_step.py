"""The ``acceptance`` step: per text class, the client-side acceptance curve (p_i, a_i, τ) with the
engine's own τ beside it (SGLang ``meta_info`` / counters; vLLM ``/metrics`` deltas and log lines).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from dynocell.db import runs as db_runs
from dynocell.engine import acceptance as acc
from dynocell.engine import breakeven as be
from dynocell.engine import kinds
from dynocell.engine.client import EngineClient
from dynocell.engine.meta import check_generations
from dynocell.engine.request_acceptance import request_record
from dynocell.errors import EngineError
from dynocell.runbooks import boots
from dynocell.runbooks.run.bench_step import bench_row, run_bench_level
from dynocell.runbooks.run.job import RunJob, SkipStep


def run_acceptance(job: RunJob, live: boots.LiveBoot | boots.AttachedBoot, workload: Any, context_length: int,
                   d: dict[str, Any]) -> None:
    """The ``acceptance`` step: each text class of the workload's acceptance levels, one acceptance curve per
    class (SGLang's per-request histograms; vLLM's ``/metrics`` counter deltas), and the length curve.
    Raises SkipStep when the workload has no acceptance section."""
    from dynocell.engine import metrics as engine_metrics

    client = live.client(job.cell.settings.http_timeout_s)
    levels = [lv for lv in workload.levels() if lv.purpose == "acceptance"]
    if not levels:
        raise SkipStep("the workload has no acceptance section")
    kind = kinds.get(live.cfg.engine)
    if kind is not None:
        _acceptance_kind(job, live, kind, workload, context_length, levels, d)
        return
    if live.cfg.api == "vllm":
        _acceptance_vllm(job, live, workload, context_length, levels, d)
        return
    per_class: dict[str, list[Any]] = {}
    curves_out = []
    by_length: list[tuple[int, Any]] = []  # (the workload's target input length, result): the length curve
    for level in levels:
        for text_class, creqs in _by_class(workload, level, context_length).items():
            # No warm-up here: the bench step warmed the engine, and a warm-up request would
            # land in the engine's counters but not in the client's histogram.
            before = _metrics(client, engine_metrics)
            result = run_bench_level(job, live, level, creqs, warmup=0)
            after = _metrics(client, engine_metrics)
            bench_row(job, live, result, text_class)
            target = {r.index: r.input_tokens_target for r in creqs}
            by_length += [(target[x.index], x) for x in result.results if x.index in target]
            metas = [r.meta_info for r in result.results if r.ok]
            prompts = {r.index: r.prompt for r in creqs}
            # Each request's evidence, so the doctor can compare greedy curves on identical generated text.
            records = [request_record(x.index, prompts[x.index], x.text, x.meta_info)
                       for x in result.results if x.ok and x.index in prompts]
            per_class.setdefault(text_class, []).extend(metas)
            # A histogram that contradicts the rest of meta_info (Σ h ≠ spec_verify_ct …) is flagged, not
            # silently turned into a τ.
            problems = check_generations(metas)
            # A class whose requests never accepted all num_steps drafts reports shorter histograms:
            # pad to the config's depth so D (and p_D = 0) is not read from the data.
            curve = acc.curve_from_meta_infos(metas, num_drafts=live.cfg.speculative.accept_depth)
            if curve is None:
                raise EngineError(f"class {text_class}: the engine returned no speculative histogram"
                                  + (f" ({problems[0]})" if problems else ""),
                                  "the engine's meta_info lacks spec_correct_drafts_histogram")
            engine_tau, source = be.engine_tau(engine_metrics, before, after, metas)
            dis = acc.relative_diff(curve.tau, engine_tau) if engine_tau else None
            warning = None
            if dis is not None and dis > 0.02:
                warning = (f"client histogram τ {curve.tau:.3f} and engine {source} τ {engine_tau:.3f} "
                           f"differ by {dis * 100:.1f} % (> 2 %)")
                job.warnings.append(f"{text_class}: {warning}")
            if problems:
                lie = (f"the engine's meta_info contradicts itself ({len(problems)} problem(s)), so τ from its "
                       f"histogram is suspect: {problems[0]}")
                job.warnings.append(f"{text_class}: {lie}")
                warning = f"{warning}; {lie}" if warning else lie
            completion = be.completion_tokens(metas)
            db_runs.add_curve(
                job.cell.store,
                [(i + 1, curve.p[i], curve.a[i]) for i in range(len(curve.p))],
                run_id=job.run_id, text_class=text_class, num_drafts=curve.num_drafts, steps=curve.steps,
                tau=curve.tau, accept_rate=curve.accept_rate, histogram=list(curve.histogram or []),
                completion_tokens=completion, engine_tau=engine_tau, engine_source=source,
                disagreement_pct=None if dis is None else round(dis * 100, 3), warning=warning, requests=records,
            )
            curves_out.append({"class": text_class, "tau": round(curve.tau, 4),
                               "p": [round(x, 4) for x in curve.p]})
    d["curves"] = curves_out
    _length_curve(job, by_length, d)


def _length_curve(job: RunJob, pairs: list[tuple[int, Any]], d: dict[str, Any]) -> None:
    """Acceptance by context length (issue 22, shape 5): with a ladder of two or more input lengths in the
    workload's ``[acceptance] input_tokens``, one curve per length over every class, kept in the step's
    detail as ``by_length`` (:class:`dynocell.engine.length_curve.LengthBucket` dicts; the views add the
    break-even per bucket once the run's plain step is known)."""
    from dynocell.engine import length_curve

    try:
        rows = [b.as_dict() for b in length_curve.buckets(pairs)]
    except acc.AcceptanceError as e:
        job.warnings.append(f"acceptance by length: {e}")
        return
    if rows:
        d["by_length"] = rows


def _acceptance_vllm(job: RunJob, live: boots.LiveBoot | boots.AttachedBoot, workload: Any, context_length: int,
                     levels: list[Any], d: dict[str, Any]) -> None:
    """vLLM puts no speculative counts in a response: each class (one at a time) is measured by
    differencing ``/metrics`` counters around it (:mod:`dynocell.engine.vllm_acceptance`), and
    cross-checked with the engine's ``SpecDecoding metrics`` log lines of the same window."""
    from dynocell.engine import metrics as engine_metrics
    from dynocell.engine import vllm_acceptance as va

    client = live.client(job.cell.settings.http_timeout_s)
    curves_out = []
    for level in levels:
        for text_class, creqs in _by_class(workload, level, context_length).items():
            offset = _quiet_log(live.log_path, _log_interval_s(live.cfg))
            before_text = client.metrics_text().text
            result = run_bench_level(job, live, level, creqs, warmup=0)
            after_text = client.metrics_text().text
            _keep_scrapes(live.log_path.parent, text_class, before_text, after_text)
            before, after = engine_metrics.parse_metrics(before_text), engine_metrics.parse_metrics(after_text)
            cc = va.class_curve(before, after)
            bench_row(job, live, result, text_class, verify_step_ms=None if cc is None else va.verify_step_ms(
                result.results, cc.figures["drafts"], level.concurrency))
            if cc is None:
                raise EngineError(f"class {text_class}: the vLLM spec-decode counters did not move",
                                  "is speculative decoding on (vllm:spec_decode_num_drafts_total)?")
            samples = _log_window(live.log_path, offset, cc.figures["draft_tokens"])
            log_tau, dis, warning = va.cross_check(cc.curve.tau, samples, cc.k)
            if warning:
                job.warnings.append(f"{text_class}: {warning}")
            curve = cc.curve
            db_runs.add_curve(
                job.cell.store, [(i + 1, curve.p[i], curve.a[i]) for i in range(len(curve.p))],
                run_id=job.run_id, text_class=text_class, num_drafts=curve.num_drafts, steps=curve.steps,
                tau=curve.tau, accept_rate=curve.accept_rate, histogram=[],
                completion_tokens=int(result.output_tokens), engine_tau=log_tau,
                engine_source="vLLM log SpecDecoding lines" if log_tau is not None else None,
                disagreement_pct=None if dis is None else round(dis * 100, 3), warning=warning,
            )
            curves_out.append({"class": text_class, "tau": round(curve.tau, 4), "p": [round(x, 4) for x in curve.p],
                               "source": "vllm /metrics counter deltas"})
    d["curves"] = curves_out
    d["note"] = va.UNCONDITIONAL_NOTE


def _acceptance_kind(job: RunJob, live: boots.LiveBoot | boots.AttachedBoot, kind: Any, workload: Any,
                     context_length: int, levels: list[Any], d: dict[str, Any]) -> None:
    """A registered engine kind's acceptance (:mod:`dynocell.engine.kinds`): each class alone, its curve from the
    ``/metrics`` counter deltas around it (``kind.class_acceptance``), cross-checked against the sum of the
    requests' own counts (``kind.request_acceptance``: drafted / accepted per response). Both definitions are
    kept in the step's detail (``definitions``); the scrapes are kept as evidence."""
    from dynocell.engine import metrics as engine_metrics
    from dynocell.engine import vllm_acceptance as va

    client = live.client(job.cell.settings.http_timeout_s)
    curves_out = []
    for level in levels:
        for text_class, creqs in _by_class(workload, level, context_length).items():
            before_text = client.metrics_text().text
            result = run_bench_level(job, live, level, creqs, warmup=0)
            after_text = client.metrics_text().text
            _keep_scrapes(live.log_path.parent, text_class, before_text, after_text)
            cc = kind.class_acceptance(engine_metrics.parse_metrics(before_text),
                                       engine_metrics.parse_metrics(after_text))
            bench_row(job, live, result, text_class)
            if cc is None:
                raise EngineError(f"class {text_class}: the engine's speculative counters did not move",
                                  "is speculative decoding on? (no draft was verified in this class)")
            own = {x.index: kind.request_acceptance(x.meta_info) for x in result.results if x.ok}
            reqs = [a for a in own.values() if a]
            drafted, accepted = sum(a.drafted for a in reqs), sum(a.accepted for a in reqs)
            k = cc.figures["draft_tokens"] / cc.figures["drafts"] if cc.figures.get("drafts") else 0
            # τ from the responses' own counts, with the window's mean draft length k = draft tokens / steps
            # (responses carry no step count): 1 + Σ accepted / (Σ drafted / k), the vLLM log formula.
            req_tau = 1.0 + accepted / (drafted / k) if drafted and k else None
            dis = acc.relative_diff(cc.curve.tau, req_tau) if req_tau else None
            warning = None
            if dis is not None and dis > va.TOLERANCE:
                warning = (f"/metrics counter τ {cc.curve.tau:.3f} and the responses' timings τ {req_tau:.3f} differ "
                           f"by {dis * 100:.1f} % (> {va.TOLERANCE * 100:g} %)")
                job.warnings.append(f"{text_class}: {warning}")
            curve = cc.curve
            prompts = {r.index: r.prompt for r in creqs}
            records = []
            for x in result.results:
                if x.ok and x.index in prompts:
                    rec = request_record(x.index, prompts[x.index], x.text, x.meta_info)
                    a = own.get(x.index)
                    if a is not None and k:  # the request's own counts: τ's interval over requests
                        rec.update(spec_drafted=a.drafted, spec_accepted=a.accepted, spec_draft_len=round(k, 6))
                    records.append(rec)
            db_runs.add_curve(
                job.cell.store, [(i + 1, curve.p[i], curve.a[i]) for i in range(len(curve.p))],
                run_id=job.run_id, text_class=text_class, num_drafts=curve.num_drafts, steps=curve.steps,
                tau=curve.tau, accept_rate=curve.accept_rate, histogram=[],
                completion_tokens=int(result.output_tokens), engine_tau=req_tau,
                engine_source="responses' timings.draft_n_accepted / draft_n" if req_tau is not None else None,
                disagreement_pct=None if dis is None else round(dis * 100, 3), warning=warning, requests=records,
            )
            curves_out.append({"class": text_class, "tau": round(curve.tau, 4), "p": [round(x, 4) for x in curve.p],
                               "steps": curve.steps, "source": f"{kind.name} /metrics counter deltas",
                               "request_accept_rate": round(accepted / drafted, 4) if drafted else None,
                               "requests_drafting": len(reqs), "requests": len(creqs)})
    d["curves"] = curves_out
    d["definitions"] = {"curve": kind.class_definition, "requests": kind.request_definition}
    d["note"] = kind.class_definition


def _keep_scrapes(boot_dir: Path, text_class: str, before: str, after: str) -> None:
    """Keep the two ``/metrics`` scrapes a vLLM class curve was differenced from, as the evidence
    (``<boot dir>/scrapes/<class>.before.prom`` / ``.after.prom``; ``dynocell import metrics`` reads
    them back). The class name comes from a workload file: only ``[A-Za-z0-9_-]`` reach the path.
    Best effort: a full disk loses the copies, never the curve."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", text_class)[:64] or "class"
    try:
        out = boot_dir / "scrapes"
        out.mkdir(exist_ok=True)
        (out / f"{name}.before.prom").write_text(before)
        (out / f"{name}.after.prom").write_text(after)
    except OSError:
        pass


def _log_interval_s(cfg: Any) -> float:
    """Seconds between vLLM's stats lines (``VLLM_LOG_STATS_INTERVAL``, vLLM's default 10 s); the
    reference engine's vLLM surface logs the last interval as soon as it is idle."""
    if cfg.engine != "vllm":
        return 0.2
    try:
        return max(0.1, float(cfg.env.get("VLLM_LOG_STATS_INTERVAL", "10")))
    except ValueError:
        return 10.0


def _quiet_log(log_path: Path, interval_s: float, rounds: int = 3) -> int:
    """The log's size once one stats interval passed without a new line (at most ``rounds``
    intervals): a class window then starts on an interval boundary, so the ``SpecDecoding`` lines
    after it cover this class only (the last interval of earlier traffic is already printed)."""
    size = log_path.stat().st_size if log_path.exists() else 0
    for _ in range(rounds):
        time.sleep(interval_s + 0.1)
        now = log_path.stat().st_size if log_path.exists() else 0
        if now == size:
            break
        size = now
    return size


def _log_window(log_path: Path, offset: int, draft_tokens: float, wait_s: float = 10.0) -> list[Any]:
    """The ``SpecDecoding metrics`` lines written after byte ``offset``, waiting up to ``wait_s`` for
    their drafted tokens to reach the counters' (vLLM logs every ``VLLM_LOG_STATS_INTERVAL``)."""
    deadline = time.monotonic() + wait_s
    while True:
        with open(log_path, "rb") as f:
            f.seek(offset)
            samples = acc.parse_vllm_spec_lines(f.read().decode(errors="replace").splitlines())
        if sum(s.drafted or 0 for s in samples) >= draft_tokens or time.monotonic() > deadline:
            return samples
        time.sleep(0.2)


def _metrics(client: EngineClient, engine_metrics: Any) -> Any:
    try:
        return engine_metrics.parse_metrics(client.metrics_text().text)
    except Exception:  # noqa: BLE001 - a broken /metrics must not lose the client-side curve
        return None


def _by_class(workload: Any, level: Any, context_length: int) -> dict[str, list[Any]]:
    """The level's requests (``workload.requests``) grouped by text class, in workload order."""
    by_class: dict[str, list[Any]] = {}
    for r in workload.requests(level.name, context_length):
        by_class.setdefault(r.text_class, []).append(r)
    return by_class
