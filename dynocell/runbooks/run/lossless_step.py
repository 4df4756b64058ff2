"""The ``lossless`` step: greedy outputs of the speculative config against its plain twin (the same
model without speculation), booted on the side; goldens are recorded for later runs.
"""

from __future__ import annotations

import time
from typing import Any

from dynocell.clock import now_utc
from dynocell.db import runs as db_runs
from dynocell.engine.client import EngineClient
from dynocell.engine.config import EngineConfig
from dynocell.errors import DynocellError
from dynocell.runbooks import boots
from dynocell.runbooks.cell import Cell
from dynocell.runbooks.run.greedy import _api_kw, _greedy, _sha
from dynocell.runbooks.run.job import LOSSLESS_TOKENS, RunOptions, _Job


def _lossless_prompts(workload: Any) -> list[str]:
    return [tc.prompts[0] for tc in workload.classes.values()]


def _record_goldens(job: _Job, live: boots.LiveBoot, workload: Any) -> int:
    """A plain config records its greedy outputs on the lossless prompts (once per config)."""
    cell = job.cell
    client = live.client(cell.settings.http_timeout_s)
    n = 0
    for p in _lossless_prompts(workload):
        if db_runs.get_golden(cell.store, live.config_hash, "lossless", _sha(p), LOSSLESS_TOKENS) is None:
            body = _greedy(client, p, LOSSLESS_TOKENS, cell.settings.request_timeout_s, live.cfg)
            db_runs.put_golden(cell.store, config_hash=live.config_hash, kind="lossless", prompt_sha256=_sha(p),
                               prompt=p, max_new_tokens=LOSSLESS_TOKENS, output_text=body.get("text", ""),
                               output_ids=body.get("output_ids"))
            n += 1
    return n


def _plain_twin(cell: Cell, cfg: EngineConfig) -> tuple[EngineConfig, str]:
    """The config without speculative decoding (same model, engine, patches), stored; returns (config, hash)."""
    from dynocell.runbooks.configs import store_config

    plain_cfg = cfg.with_changes(speculative={}, meta={"name": None, "notes": "plain twin for the lossless check"})
    return plain_cfg, store_config(cell, plain_cfg)


def _boot_twin(job: _Job, plain_cfg: EngineConfig, plain_hash: str, prompts: list[str], opts: RunOptions,
               why: str) -> dict[str, Any]:
    """Boot the plain twin, run each lossless prompt greedily, record missing goldens, stop it.

    Returns the plain step measurement: ``{step_ms, samples, source, measured_at, host,
    run_id, twin_boot_id}`` (``step_ms``: p50 over prompts of wall time / completion tokens, ms).
    """
    import socket

    cell = job.cell
    job.progress(f"booting the plain twin {why}", {"step": "lossless"})
    twin = boots.start_boot(cell, plain_cfg, plain_hash, timeout_s=opts.boot_timeout_s)
    try:
        tclient = twin.client(cell.settings.http_timeout_s)
        step_ms = []
        for p in prompts:
            t0 = time.perf_counter()
            body = _greedy(tclient, p, LOSSLESS_TOKENS, cell.settings.request_timeout_s, twin.cfg)
            elapsed = (time.perf_counter() - t0) * 1000
            n = int(body.get("meta_info", {}).get("completion_tokens") or LOSSLESS_TOKENS)
            step_ms.append(elapsed / max(n, 1))
            if db_runs.get_golden(cell.store, plain_hash, "lossless", _sha(p), LOSSLESS_TOKENS) is None:
                db_runs.put_golden(cell.store, config_hash=plain_hash, kind="lossless", prompt_sha256=_sha(p),
                                   prompt=p, max_new_tokens=LOSSLESS_TOKENS, output_text=body.get("text", ""),
                                   output_ids=body.get("output_ids"))
    finally:
        boots.stop_live(cell, twin, opts.stop_grace_s, reason="plain twin done")
    return {"step_ms": sorted(step_ms)[len(step_ms) // 2], "samples": [round(x, 4) for x in step_ms],
            "source": "plain twin boot", "measured_at": now_utc().isoformat(), "host": socket.gethostname(),
            "run_id": job.run_id, "twin_boot_id": twin.boot_id}


def _divergence_margin(client: EngineClient, prompt: str, spec_ids: list[int], plain_ids: list[int], idx: int,
                       timeout_s: float, cfg: Any = None) -> dict[str, Any]:
    """Top-2 log-probability margin (nats) at a greedy mismatch's first divergent token (issue 22, shape 3).

    Asks the engine for ``idx + 1`` greedy tokens with log-probabilities (SGLang ``return_logprob`` +
    ``top_logprobs_num`` 2; vLLM ``logprobs`` 2) and returns ``{spec_token, plain_token, margin}``; a margin
    within bf16 rounding reads as a near-tie, a large one as corruption (the doctor decides). An engine
    that does not answer log-probabilities gives ``{margin: None}`` — never an error of the run.
    """
    out: dict[str, Any] = {"spec_token": spec_ids[idx] if idx < len(spec_ids) else None,
                           "plain_token": plain_ids[idx] if idx < len(plain_ids) else None, "margin": None}
    try:
        kw = _api_kw(cfg)
        if kw:
            resp = client.completions({"model": kw["model"], "prompt": prompt, "max_tokens": idx + 1, "temperature": 0,
                                       "ignore_eos": True, "logprobs": 2}, timeout_s=timeout_s)
            tops = (((resp.body or {}).get("choices") or [{}])[0].get("logprobs") or {}).get("top_logprobs") or []
            vals = sorted((tops[idx] or {}).values(), reverse=True) if idx < len(tops) else []
        else:
            resp = client.generate({"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": idx + 1,
                                                                         "ignore_eos": True},
                                    "return_logprob": True, "top_logprobs_num": 2}, timeout_s=timeout_s)
            body = resp.body[0] if isinstance(resp.body, list) else resp.body
            tops = ((body or {}).get("meta_info") or {}).get("output_top_logprobs") or []
            vals = sorted((x[0] for x in (tops[idx] or [])), reverse=True) if idx < len(tops) else []
    except (DynocellError, OSError, ValueError, TypeError, AttributeError, IndexError, KeyError):
        return out
    if resp.ok and len(vals) >= 2:
        out["margin"] = round(float(vals[0]) - float(vals[1]), 6)
    return out


def _near_ties(mismatches: list[dict[str, Any]]) -> bool:
    """Every mismatch diverges where the top two tokens are within ``lossless_near_tie.margin_max`` nats
    (doctor_thresholds.toml): numerical near-ties, reported as ``lossless: near-tie (margin …)``."""
    from dynocell.runbooks.doctor import load_thresholds

    lim = load_thresholds()["lossless_near_tie"]["margin_max"]
    return bool(mismatches) and all(m.get("margin") is not None and m["margin"] <= lim for m in mismatches)


def _lossless(job: _Job, live: boots.LiveBoot, cfg: EngineConfig, workload: Any, opts: RunOptions,
              d: dict[str, Any]) -> dict[str, Any] | None:
    """Greedy outputs of the speculative engine vs a plain boot of the same target.

    Returns the plain step measurement of :func:`_boot_twin` for the break-even step, or None
    when the plain outputs came from stored goldens (the twin did not boot).
    """
    cell = job.cell
    client = live.client(cell.settings.http_timeout_s)
    prompts = _lossless_prompts(workload)
    spec_out = [_greedy(client, p, LOSSLESS_TOKENS, cell.settings.request_timeout_s, live.cfg) for p in prompts]
    plain_cfg, plain_hash = _plain_twin(cell, cfg)
    goldens = [db_runs.get_golden(cell.store, plain_hash, "lossless", _sha(p), LOSSLESS_TOKENS) for p in prompts]
    plain = None
    if any(g is None for g in goldens):
        plain = _boot_twin(job, plain_cfg, plain_hash, prompts, opts, "for the lossless check")
        goldens = [db_runs.get_golden(cell.store, plain_hash, "lossless", _sha(p), LOSSLESS_TOKENS) for p in prompts]
        d["twin_boot_id"] = plain["twin_boot_id"]
    mismatches = []
    for p, s, g in zip(prompts, spec_out, goldens, strict=False):
        a_ids, b_ids = s.get("output_ids"), (g or {}).get("output_ids")
        a_txt, b_txt = s.get("text", ""), (g or {}).get("output_text", "")
        if a_ids is not None and b_ids is not None:
            same = list(a_ids) == list(b_ids)
            idx = next(
                (i for i, (x, y) in enumerate(zip(a_ids, b_ids, strict=False)) if x != y), min(len(a_ids), len(b_ids))
            )
            unit = "token"
        else:
            same = a_txt == b_txt
            idx = next(
                (i for i, (x, y) in enumerate(zip(a_txt, b_txt, strict=False)) if x != y), min(len(a_txt), len(b_txt))
            )
            unit = "character"
        if not same:
            mm = {"prompt": p[:80], "first_diverging_index": idx, "unit": unit,
                  "speculative": a_txt[:200], "plain": b_txt[:200]}
            if unit == "token":
                mm.update(_divergence_margin(client, p, a_ids, b_ids, idx, cell.settings.request_timeout_s, live.cfg))
            mismatches.append(mm)
    lossless = "yes" if not mismatches else ("near-tie" if _near_ties(mismatches) else "no")
    detail = {
        "prompts": len(prompts),
        "max_new_tokens": LOSSLESS_TOKENS,
        "plain_config_hash": plain_hash,
        "mismatches": mismatches,
    }
    if lossless == "near-tie":
        detail["max_margin"] = max(m["margin"] for m in mismatches)
    db_runs.update_run(cell.store, job.run_id, lossless=lossless, lossless_detail=detail)
    d.update(lossless=lossless, mismatches=len(mismatches))
    if plain is not None:
        d["plain_step_ms"] = round(plain["step_ms"], 4)
    return plain
