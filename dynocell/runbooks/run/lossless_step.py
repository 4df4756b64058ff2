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
from dynocell.runbooks.run.greedy import api_kw, greedy_generate, text_sha256
from dynocell.runbooks.run.job import LOSSLESS_TOKENS, RunOptions, RunJob


def lossless_prompts(workload: Any) -> list[str]:
    """The lossless check's prompts: the first prompt of each text class of ``workload``."""
    return [tc.prompts[0] for tc in workload.classes.values()]


def record_goldens(job: RunJob, live: boots.LiveBoot, workload: Any) -> int:
    """A plain config records its greedy outputs on the lossless prompts (once per config)."""
    cell = job.cell
    client = live.client(cell.settings.http_timeout_s)
    n = 0
    for p in lossless_prompts(workload):
        if db_runs.get_golden(cell.store, live.config_hash, "lossless", text_sha256(p), LOSSLESS_TOKENS) is None:
            body = greedy_generate(client, p, LOSSLESS_TOKENS, cell.settings.request_timeout_s, live.cfg)
            db_runs.put_golden(cell.store, config_hash=live.config_hash, kind="lossless", prompt_sha256=text_sha256(p),
                               prompt=p, max_new_tokens=LOSSLESS_TOKENS, output_text=body.get("text", ""),
                               output_ids=body.get("output_ids"))
            n += 1
    return n


def plain_twin(cell: Cell, cfg: EngineConfig) -> tuple[EngineConfig, str]:
    """The config without speculative decoding (same model, engine, patches), stored; returns (config, hash)."""
    from dynocell.runbooks.configs import store_config

    plain_cfg = cfg.with_changes(speculative={}, meta={"name": None, "notes": "plain twin for the lossless check"})
    return plain_cfg, store_config(cell, plain_cfg)


def boot_twin(job: RunJob, plain_cfg: EngineConfig, plain_hash: str, prompts: list[str], opts: RunOptions,
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
            body = greedy_generate(tclient, p, LOSSLESS_TOKENS, cell.settings.request_timeout_s, twin.cfg)
            elapsed = (time.perf_counter() - t0) * 1000
            n = int(body.get("meta_info", {}).get("completion_tokens") or LOSSLESS_TOKENS)
            step_ms.append(elapsed / max(n, 1))
            if db_runs.get_golden(cell.store, plain_hash, "lossless", text_sha256(p), LOSSLESS_TOKENS) is None:
                db_runs.put_golden(cell.store, config_hash=plain_hash, kind="lossless", prompt_sha256=text_sha256(p),
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

    Asks the speculative engine for ``idx + 1`` greedy tokens with the top-2 log-probabilities of each
    (SGLang ``/generate`` with :data:`dynocell.engine.logprobs.SGLANG_BODY`; vLLM ``/v1/completions`` with
    :data:`~dynocell.engine.logprobs.VLLM_BODY`) and returns ``{spec_token, plain_token, margin,
    margin_unknown}``; a margin within bf16 rounding reads as a near-tie, a large one as corruption (the
    doctor decides). An engine that refuses or ignores the request gives ``margin`` None and
    ``margin_unknown`` saying why — never an error of the run.
    """
    from dynocell.engine import logprobs as lp

    out: dict[str, Any] = {"spec_token": spec_ids[idx] if idx < len(spec_ids) else None,
                           "plain_token": plain_ids[idx] if idx < len(plain_ids) else None, "margin": None,
                           "margin_unknown": None}
    kw = api_kw(cfg)
    try:
        if kw:
            resp = client.completions({"model": kw["model"], "prompt": prompt, "max_tokens": idx + 1, "temperature": 0,
                                       "ignore_eos": True, **lp.VLLM_BODY}, timeout_s=timeout_s)
        else:
            resp = client.generate({"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": idx + 1,
                                                                         "ignore_eos": True}, **lp.SGLANG_BODY},
                                   timeout_s=timeout_s)
    except (DynocellError, OSError) as e:
        out["margin_unknown"] = f"the log-probability request failed: {type(e).__name__}: {str(e)[:160]}"
        return out
    if not resp.ok:
        out["margin_unknown"] = lp.refusal(resp.status, resp.text)
        return out
    margin, why = (lp.openai_margin if kw else lp.sglang_margin)(resp.body, idx)
    out["margin"], out["margin_unknown"] = margin, why
    return out


#: Why a mismatch found in characters has no margin (the engine gave no token ids to locate a token).
NO_TOKEN_IDS = "the engine returned no token ids, so the divergence is a character position with no log-probability"


def _near_ties(mismatches: list[dict[str, Any]]) -> bool:
    """Every mismatch diverges where the top two tokens are within ``lossless_near_tie.margin_max`` nats
    (doctor_thresholds.toml): numerical near-ties, reported as ``lossless: near-tie (margin …)``."""
    from dynocell.runbooks.doctor import load_thresholds

    lim = load_thresholds()["lossless_near_tie"]["margin_max"]
    return bool(mismatches) and all(m.get("margin") is not None and m["margin"] <= lim for m in mismatches)


def run_lossless(job: RunJob, live: boots.LiveBoot, cfg: EngineConfig, workload: Any, opts: RunOptions,
              d: dict[str, Any]) -> dict[str, Any] | None:
    """Greedy outputs of the speculative engine vs a plain boot of the same target.

    Returns the plain step measurement of :func:`boot_twin` for the break-even step, or None
    when the plain outputs came from stored goldens (the twin did not boot).
    """
    cell = job.cell
    client = live.client(cell.settings.http_timeout_s)
    prompts = lossless_prompts(workload)
    spec_out = [greedy_generate(client, p, LOSSLESS_TOKENS, cell.settings.request_timeout_s, live.cfg) for p in prompts]
    plain_cfg, plain_hash = plain_twin(cell, cfg)
    goldens = [db_runs.get_golden(cell.store, plain_hash, "lossless", text_sha256(p), LOSSLESS_TOKENS) for p in prompts]
    plain = None
    if any(g is None for g in goldens):
        plain = boot_twin(job, plain_cfg, plain_hash, prompts, opts, "for the lossless check")
        goldens = [db_runs.get_golden(cell.store, plain_hash, "lossless", text_sha256(p), LOSSLESS_TOKENS)
                   for p in prompts]
        d["twin_boot_id"] = plain["twin_boot_id"]
    mismatches = []
    for p, s, g in zip(prompts, spec_out, goldens, strict=False):
        a_ids, b_ids = s.get("output_ids"), g.output_ids if g else None
        a_txt, b_txt = s.get("text", ""), g.output_text if g else ""
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
            if a_ids is not None and b_ids is not None:  # unit "token"
                mm.update(_divergence_margin(client, p, a_ids, b_ids, idx, cell.settings.request_timeout_s, live.cfg))
            else:
                mm.update(margin=None, margin_unknown=NO_TOKEN_IDS)
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
