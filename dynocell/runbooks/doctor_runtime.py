"""Doctor rules over how the engine ran (issue 22, shapes 6, 8 and 9): logs, scrapes, profiles, the config.

Rules (id — shape):

- ``health_lies`` — a scheduler exception while serving, then ``/health`` still answering 200.
- ``stalled_queue`` — requests waiting with none running (stats lines, or the last ``/metrics`` gauges), or
  requests running with a generation throughput of 0 to the log's end (the generation stalled, issue 35).
- ``engine_hang`` — a rank or the engine core stopped answering: vLLM's shared-memory broadcast wait or an RPC
  to a worker timing out (issue 35).
- ``nccl_startup_skew`` — an NCCL watchdog timeout before the server was ready while the ranks' weight
  loading differed by more than the skew threshold: the fast ranks waited in their first collective.
- ``nccl_serving_timeout`` — an NCCL watchdog timeout after ready (or, in a fragment without boot lines,
  with a sequence number only reached while serving).
- ``profile_no_trace`` — a profiler window that wrote no trace (or the engine said its profiler is off).
- ``graph_launches_missing`` — a GPU trace with zero CUDA-graph launches while the config has graphs on.
- ``capture_size_miss`` — max running requests × (drafts + 1) beyond the largest CUDA-graph capture size
  (or the engine truncating its capture size): verify steps fall off the captured graphs.
- ``config_smell`` — knobs the engine silently changes or that cannot work together.
- ``draft_window_short`` — the draft model's window (config.json) shorter than the target's serving context.
- ``prefix_cache_lost_to_spec`` — prefix-cache hit rate 0 % on every stats line while speculation drafts
  (issue 35).
- ``draft_head_mismatch`` — the draft's config.json names an EAGLE-3 head served as EAGLE, or the reverse.

Each reads plain values of :class:`~dynocell.runbooks.doctor_model.DoctorInputs` (``log``,
``gauges``, ``profile``, ``knobs``); thresholds are in ``doctor_thresholds.toml``.
"""

from __future__ import annotations

from typing import Any

from dynocell.runbooks.doctor_model import DoctorInputs, Finding, r


def rule_health_lies(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """Scheduler exception then ``GET /health`` 200 (SGLang's /health answers from the HTTP process,
    without a generation, unless the engine enables it — docs/DESIGN.md "Health oracle")."""
    t = th["health_lies"]
    exc = inp.log.get("exceptions") or []
    ok = int(inp.log.get("health_ok_after_exception") or 0)
    if not exc or ok < t["min_health_200"]:
        return []
    return [Finding("health_lies", "error",
                    f"the scheduler hit an exception at log line {exc[0]} and /health still answered 200 "
                    f"{ok} time(s) after it: the health check did not prove a generation — SGLang counts any "
                    "detokenizer output inside its window as healthy, so other requests can answer for a dead "
                    "scheduler (sglang #6624), SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0 skips the generation, vLLM's "
                    "/health checks the engine process only — or another server holds the port. Judge liveness by "
                    "one generation of your own (dynocell's health oracle) and restart this engine.",
                    {"exception_line": exc[0], "exceptions": len(exc), "health_200_after": ok})]


def rule_stalled_queue(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """Requests waiting while none run: the scheduler admits nothing (a stuck admission, a KV pool it
    believes full, a dead worker) — the GPU is idle, not busy."""
    t = th["stalled_queue"]
    stalls = inp.log.get("stalls") or []
    running, waiting = inp.gauges.get("running"), inp.gauges.get("waiting")
    from_gauges = running is not None and waiting is not None and running == 0 and waiting >= t["min_waiting"]
    # Stats lines *in a row*: an isolated "0 running, 1 waiting" line falls between two batches of a healthy
    # engine (a reference-engine ladder run showed two such lines, each followed by prefill and decode).
    in_a_row = inp.log.get("stall_run_max", len(stalls))
    gen = inp.log.get("gen_stalls") or []
    if not from_gauges and in_a_row < t["min_stall_lines"] and gen and inp.log.get("gen_stall_last"):
        return [Finding("stalled_queue", "warn",
                        f"the last stats line (line {gen[-1]['line']}) shows {gen[-1]['running']} request(s) running "
                        "and a generation throughput of 0: generation stopped with work in flight — a hung rank or "
                        "collective, a dead drafter, a stuck scheduler. /health may still say 200; send one "
                        "generation (/health_generate) before trusting it, and read each rank's last lines.",
                        {"waiting": None, "running": gen[-1]["running"], "kv_usage": None, "stall_lines": len(gen),
                         "stall_lines_in_a_row": None, "source": "log", "generation_stalled": True})]
    if not from_gauges and in_a_row < t["min_stall_lines"]:
        return []
    if from_gauges:
        where = f"the /metrics scrape shows {waiting:g} request(s) waiting and 0 running"
        if inp.gauges.get("kv_usage") is not None:
            where += f" with the KV cache {inp.gauges['kv_usage'] * 100:.0f} % used"
    else:
        where = (f"{in_a_row} stats lines in a row show requests waiting (up to {max(s['waiting'] for s in stalls)}) "
                 f"with none running (first at line {stalls[0]['line']})")
    return [Finding("stalled_queue", "warn",
                    f"{where}: the queue does not move — admission is stuck (a scheduler that never re-admits "
                    "after a stall, a KV pool it believes full, a dead worker). /health may still say 200; "
                    "send one generation (/health_generate) before trusting it.",
                    {"waiting": waiting, "running": running, "kv_usage": r(inp.gauges.get("kv_usage")),
                     "stall_lines": len(stalls), "stall_lines_in_a_row": in_a_row,
                     "source": "metrics" if from_gauges else "log"})]


def _nccl_serving(ev: dict[str, Any], log: dict[str, Any], t: dict[str, Any]) -> bool:
    if ev.get("after_ready"):
        return True
    # a fragment without boot lines: only serving reaches sequence numbers this high
    return log.get("ready_line") is None and not log.get("weight_load_s") and (ev.get("seqnum") or 0) >= t[
        "serving_seqnum_min"]


def rule_nccl_serving_timeout(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """NCCL watchdog timeout while serving: a rank stopped joining collectives (hung, crashed, XID)."""
    t = th["nccl_serving_timeout"]
    evs = [e for e in inp.log.get("nccl") or [] if _nccl_serving(e, inp.log, t)]
    if not evs:
        return []
    e = evs[0]
    why = "after the server was ready" if e.get("after_ready") else (
        f"with SeqNum {e['seqnum']} (≥ {t['serving_seqnum_min']}: thousands of collectives already ran)")
    return [Finding("nccl_serving_timeout", "error",
                    f"NCCL watchdog timeout {why} (op {e.get('op')}, rank {e.get('rank')}, timeout "
                    f"{(e.get('timeout_ms') or 0) / 1000:.0f} s): one rank stopped joining collectives while "
                    "serving. Find the first rank's own error above the timeout (OOM, an exception, a GPU XID), "
                    "not the watchdog lines; then restart the engine.",
                    {"seqnum": e.get("seqnum"), "op": e.get("op"), "rank": e.get("rank"),
                     "timeout_ms": e.get("timeout_ms"), "ran_ms": e.get("ran_ms"), "timeouts": len(evs),
                     "after_ready": bool(e.get("after_ready"))})]


def rule_nccl_startup_skew(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """A start-up that timed out waiting for slow ranks: an NCCL timeout before ready with the ranks' (or
    nodes') weight loading ``skew_min_s`` or more apart, or SGLang's "rank N could finish the model loading,
    but there are other ranks that didn't finish" after a long shard load.

    SGLang's line comes from a Gloo ``monitored_barrier`` with a fixed ``UNBALANCED_MODEL_LOADING_TIMEOUT_S = 480``
    (``sglang/srt/model_executor/model_runner.py`` ≤ 0.5.14, ``model_runner_components/load_model_utils.py``
    0.5.17), which ``--dist-timeout`` does not change: that finding advises pre-staging only."""
    t = th["nccl_startup_skew"]
    evs = [e for e in inp.log.get("nccl") or [] if not _nccl_serving(e, inp.log, th["nccl_serving_timeout"])]
    loads = {k: float(v) for k, v in (inp.log.get("weight_load_s") or {}).items()}
    skew = inp.log.get("phase_skew_s")
    if skew is None and len(loads) >= 2:
        skew = max(loads.values()) - min(loads.values())
    wait, shards = inp.log.get("rank_load_wait"), inp.log.get("shard_load_s")
    if wait is None and (not evs or skew is None or skew < t["skew_min_s"]):
        return []
    e = evs[0] if evs else {}
    timeout_s = (e.get("timeout_ms") or 0) / 1000
    if wait is not None:
        what = (f"rank {wait['rank']} finished loading the weights while other ranks had not (log line {wait['line']})"
                + (f", after {shards / 60:.0f} min of checkpoint shards" if shards else ""))
    else:
        what = (f"NCCL watchdog timeout before the server was ready, and weight loading differed by {skew:.0f} s "
                f"between ranks/nodes ("
                f"{', '.join(f'{k}: {v:.0f} s' for k, v in sorted(loads.items())) or 'phase skew'})")
    if wait is not None:  # SGLang's Gloo monitored_barrier: a fixed UNBALANCED_MODEL_LOADING_TIMEOUT_S = 480
        advice = ("the fast ranks waited in SGLang's post-load barrier for the slow ones, a Gloo monitored_barrier "
                  "with a fixed 480 s timeout (UNBALANCED_MODEL_LOADING_TIMEOUT_S) that --dist-timeout does not "
                  "change. Pre-stage the weights on every node's local disk (or warm the page cache) so every "
                  "rank loads within 480 s of the first.")
    else:
        advice = (f"the fast ranks waited in their first collective for the slow ones"
                  f"{f' past the {timeout_s:.0f} s timeout' if timeout_s else ''}. Pre-stage the weights on every "
                  "node's local disk (or warm the page cache), or raise the process-group timeout the watchdog "
                  "line names (SGLang --dist-timeout; vLLM/torch the process-group timeout).")
    return [Finding("nccl_startup_skew", "error", f"{what}: {advice}",
                    {"skew_s": r(skew, 1), "weight_load_s": loads or None, "shard_load_s": shards,
                     "waiting_rank_line": wait["line"] if wait else None, "seqnum": e.get("seqnum"),
                     "timeout_ms": e.get("timeout_ms"), "op": e.get("op")})]


def rule_profile_no_trace(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """A profile window that wrote nothing: the trace directory is not visible to the server process,
    or the engine's profiler is not configured (SGLang ``SGLANG_TORCH_PROFILER_DIR`` / ``output_dir``;
    vLLM's profiler config fixed at launch)."""
    t = th["profile_no_trace"]
    prof_log = inp.log.get("profile") or {}
    after = prof_log.get("last_line", 0) - (prof_log.get("last_start_line") or 0)
    if prof_log.get("last_start_line") and after < t["min_lines_after"]:
        prof_log = {**prof_log, "started": int(prof_log.get("started") or 0) - 1}  # the excerpt ends in the window
    started = int(prof_log.get("started") or 0) + (1 if inp.profile.get("requested") else 0)
    traces = inp.profile.get("traces")
    disabled = prof_log.get("disabled") or []
    saved = int(prof_log.get("saved") or 0) + (len(traces) if traces else 0)
    if not disabled and (started < t["min_windows"] or saved > 0 or (traces is None and not prof_log.get("started"))):
        return []
    engine = inp.knobs.get("engine")
    fix = ("vLLM fixes its profiler at launch: boot with --profiler-config (torch profiler, a torch_profiler_dir "
           "the server can write; VLLM_TORCH_PROFILER_DIR no longer exists in 0.26)"
           if engine == "vllm" else
           "SGLang writes where SGLANG_TORCH_PROFILER_DIR (or start_profile's output_dir) points, on the server's "
           "host and filesystem: give a directory the server process can see and write")
    what = (f"the engine said its profiler is off (line {disabled[0]})" if disabled else
            f"{started} profile window(s) started and no trace was written")
    return [Finding("profile_no_trace", "warn", f"{what}. {fix}.",
                    {"windows": started, "traces": saved, "disabled_line": disabled[0] if disabled else None,
                     "trace_dir": inp.profile.get("trace_dir")})]


def _graphs_meant_on(knobs: dict[str, Any]) -> bool:
    return bool(knobs) and not knobs.get("cuda_graph.disable") and knobs.get("cuda_graph.mode") not in ("off",)


def rule_graph_launches_missing(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """GPU kernels in the trace but no CUDA-graph launch while graphs were meant to be on: decode ran eager
    (batch beyond the captured sizes, capture disabled by a fallback, a profiler that broke capture)."""
    t = th["graph_launches_missing"]
    p = inp.profile
    if p.get("source") != "kernel" or p.get("graph_launches") is None or not _graphs_meant_on(inp.knobs):
        return []
    if p["graph_launches"] > 0 or (p.get("launches") or 0) < t["min_launches"]:
        return []
    return [Finding("graph_launches_missing", "warn",
                    f"the trace holds {p.get('launches')} kernel launches and 0 CUDA-graph launches although the "
                    "config has CUDA graphs on: the profiled steps ran eager. Check the batch against the captured "
                    "sizes (cuda_graph.max_bs, capture sizes × spec width) and the log for a capture fallback.",
                    {"launches": p.get("launches"), "graph_launches": 0,
                     "cuda_graph_mode": inp.knobs.get("cuda_graph.mode")})]


def spec_width(knobs: dict[str, Any]) -> int | None:
    """Tokens one request puts through a verify step: drafts + 1 (``num_draft_tokens``, else num_steps + 1)."""
    if not knobs.get("speculative.algorithm"):
        return None
    ndt, steps = knobs.get("speculative.num_draft_tokens"), knobs.get("speculative.num_steps")
    return int(ndt) if ndt else (int(steps) + 1 if steps else None)


def vllm_kept_capture_max(max_capture: int) -> int:
    """The largest CUDA-graph capture size vLLM keeps for ``max_cudagraph_capture_size`` = ``max_capture`` when
    no explicit sizes are given: its default list is 1, 2, 4 and then every multiple of 8 up to the maximum, so
    a maximum off that list is truncated (``Truncating max_cudagraph_capture_size to 40`` for 42)."""
    return max(s for s in [1, 2, 4, *range(8, max_capture + 1, 8)] if s <= max_capture)


def rule_capture_size_miss(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """Capture-size arithmetic: vLLM counts tokens, so capture sizes must reach max_num_seqs × (k + 1)
    (the non-fatal ``Truncating max_cudagraph_capture_size to N`` warning lowers the largest one). SGLang
    counts requests (cuda_graph_max_bs) and multiplies by num_draft_tokens itself, so it is judged only on
    an engine truncation warning — max running above max_bs is its ordinary default."""
    t = th["capture_size_miss"]
    if inp.knobs.get("engine") not in ("sglang", "vllm"):
        return []  # the reference engine captures no CUDA graphs; imported logs name their engine
    width = spec_width(inp.knobs)
    running = inp.knobs.get("memory.max_running_requests")
    truncs = inp.log.get("capture_truncations") or []
    sizes = list(inp.knobs.get("cuda_graph.capture_sizes") or ())
    max_bs = inp.knobs.get("cuda_graph.max_bs")
    kept = vllm_kept_capture_max(max_bs) if (max_bs and not sizes and inp.knobs.get("engine") == "vllm") else max_bs
    largest = min([t["to"] for t in truncs] + ([max(sizes)] if sizes else []) + ([kept] if kept else []),
                  default=None)
    if width is None or not running or largest is None or inp.knobs.get("cuda_graph.disable"):
        return []
    per_tokens = inp.knobs.get("engine") != "sglang"
    if not per_tokens and not truncs:
        return []  # SGLang counts requests, and batches above cuda_graph_max_bs run eager with or without speculation
    need = running * width if per_tokens else running
    if need <= t["max_ratio"] * largest:
        return []
    unit = "tokens" if per_tokens else "requests"
    msg = (f"max running requests {running} × (drafts + 1 = {width}) = {running * width} verify tokens"
           if per_tokens else f"max running requests {running}")
    msg += f" but the largest captured size is {largest} {unit}"
    if kept != max_bs and kept == largest and not truncs:
        msg += f" (vLLM keeps {kept} of the stated maximum {max_bs}: its sizes step by 8)"
    if truncs:
        msg += f" (the engine truncated its capture size to {truncs[0]['to']}, log line {truncs[0]['line']})"
    msg += (": batches beyond it fall off the captured graphs and run eager, so speculation slows down as load "
            "grows. Capture sizes count tokens for a speculative vLLM engine: set them (or max_cudagraph_capture_size)"
            f" to ≥ {need}, or lower max running requests.")
    return [Finding("capture_size_miss", "warn", msg,
                    {"max_running_requests": running, "spec_width": width, "needed": need, "largest_captured": largest,
                     "unit": unit, "truncated_to": truncs[0]["to"] if truncs else None})]


def rule_config_smell(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """Knobs an engine silently rewrites or that cannot work together.

    - ``eagle_topk`` 1 with ``num_draft_tokens`` ≠ ``num_steps`` + 1: SGLang's ``server_args.py`` sets
      ``speculative_num_draft_tokens = speculative_num_steps + 1`` for a chain (with a warning). dynocell
      keeps the config's hash as written (the hash names what the operator asked for; the rewrite is
      the engine's and version-dependent) and says here what the engine runs instead.
    - capture sizes stated below the spec width (a verify step of one request is not captured).
    """
    k = inp.knobs
    chain = th["config_smell"]["chain_topk"]
    smells = []
    topk, steps = k.get("speculative.eagle_topk"), k.get("speculative.num_steps")
    ndt = k.get("speculative.num_draft_tokens")
    if k.get("speculative.algorithm") and (topk in (None, chain)) and ndt and steps and ndt != steps + 1:
        smells.append(("num_draft_tokens", f"eagle_topk 1 (a chain) with num_draft_tokens {ndt} ≠ num_steps + 1 = "
                       f"{steps + 1}: SGLang runs {steps + 1} draft tokens (it rewrites the knob), so this config "
                       "measures the same thing as num_draft_tokens = num_steps + 1 under another hash"))
    width = spec_width(k)
    sizes = k.get("cuda_graph.capture_sizes")
    if width and sizes and max(sizes) < width:
        smells.append(("capture_sizes", f"capture sizes {list(sizes)} all below the spec width {width}: not even one "
                       "request's verify step is captured"))
    if not smells:
        return []
    return [Finding("config_smell", "warn", "; ".join(m for _, m in smells) + ".",
                    {"knobs": [n for n, _ in smells], "effective_num_draft_tokens":
                     (steps + 1) if steps and smells[0][0] == "num_draft_tokens" else None})]


def rule_draft_window_short(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """The draft model's window (its config.json ``max_position_embeddings``, rope-scaled as the engine reads
    it) is shorter than the context the target serves with (``context_length`` / ``max_model_len`` in the
    config, else the target's own config.json): prompts past the draft's window put it beyond the positions
    it was built for — acceptance drops to zero past the boundary (``zero_past_length``) or decays."""
    w = inp.windows
    d, t = w.get("draft_window"), w.get("target_context")
    if not d or not t or t <= d * th["draft_window_short"]["max_ratio"]:
        return []
    return [Finding("draft_window_short", "warn",
                    f"the draft's window is {d} tokens ({w.get('draft_source')}) but the target serves up to {t} "
                    f"tokens ({w.get('target_source')}): prompts longer than {d} tokens put the draft past the "
                    "positions it was built for — expect acceptance exactly 0 beyond that length (or a decay with "
                    f"rope scaling). Serve with context_length ≤ {d}, gate speculation off above {d} tokens, or use a "
                    "draft whose max_position_embeddings / rope_scaling match the target's.",
                    {"draft_window": d, "target_context": t, "draft_source": w.get("draft_source"),
                     "target_source": w.get("target_source")})]


def rule_engine_hang(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """A rank or the engine core stopped answering (vLLM ``shm_broadcast.py``'s "No available shared memory
    broadcast block found in N seconds", the executor's "RPC call to <method> timed out"): the engine hangs,
    it has not crashed — the requests in flight never finish (vllm #44185, #41530)."""
    hangs = inp.log.get("hangs") or []
    if len(hangs) < th["engine_hang"]["min_hang_lines"]:
        return []
    first = hangs[0]
    return [Finding("engine_hang", "error",
                    f"the engine hangs: {first['text']!r} (line {first['line']}, {len(hangs)} such line(s)) — one "
                    "process waits on another that stopped (a rank that skipped a collective, a drafter that "
                    "diverged from its peers, a worker stuck in a kernel). Compare each rank's last lines, dump "
                    "the stacks (py-spy dump), and restart; a request near max_model_len or a DP rank with no "
                    "work are the usual triggers with speculation.",
                    {"line": first["line"], "hang_lines": len(hangs), "text": first["text"]})]


def rule_prefix_cache_lost_to_spec(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """Prefix caching hits nothing while speculation drafts: every vLLM stats line says ``Prefix cache hit rate:
    0.0%`` (at least ``min_stats_lines``) in a log whose ``SpecDecoding`` windows drafted. vLLM drafters that
    keep their own KV (EAGLE / EAGLE-3, MTP, DFlash, DSpark) with hybrid attention groups (sliding window,
    linear attention / GDN, Mamba) have lost every prefix-cache hit in several releases (vllm-project/vllm
    #40624, "definitely a bug" in the thread; #54360: 0 hits with MTP or DFlash, normal hits with the same command
    minus ``--speculative-config``; fixed for DSpark/MTP by #44082). From the log alone 0 % also means a
    workload without shared prefixes, so the finding is ``info``; ``warn`` when the config turned prefix caching
    on by name (``enable_prefix_caching``: the operator expects hits)."""
    t = th["prefix_cache_lost_to_spec"]
    hits = inp.log.get("prefix_hit_pct") or []
    spec = int(inp.log.get("spec_windows") or 0)
    if spec < 1 or len(hits) < t["min_stats_lines"] or max(hits) > t["hit_pct_max"]:
        return []
    asked = inp.knobs.get("extra.enable_prefix_caching") is True
    return [Finding("prefix_cache_lost_to_spec", "warn" if asked else "info",
                    f"prefix cache hit rate {max(hits):.1f} % on all {len(hits)} stats line(s) while speculation "
                    f"drafted ({spec} SpecDecoding window(s)): either the requests share no prefix, or the drafter "
                    "costs the hits — vLLM's EAGLE-like drafters (EAGLE-3, MTP, DFlash, DSpark) with hybrid "
                    "attention (sliding window, linear attention, Mamba) have lost every hit in several releases. "
                    "Send the same long prompt twice, with and without --speculative-config: hits without "
                    "speculation only name the drafter.",
                    {"stats_lines": len(hits), "hit_pct_max": r(max(hits)), "spec_windows": spec,
                     "prefix_caching_asked": asked})]


#: The speculative algorithm each EAGLE head is served by, in SGLang's ``--speculative-algorithm`` names (vLLM's
#: ``method`` ``eagle`` / ``eagle3`` upper-cased are the same words).
_HEAD_ALGORITHM = {"EAGLE3": "EAGLE3", "EAGLE": "EAGLE"}


def rule_draft_head_mismatch(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """The draft folder holds one EAGLE head and the config serves it as the other (issue 35 item 4).

    An EAGLE-3 head under ``EAGLE``: the engine captures no auxiliary hidden states, the head's ``fc`` expects
    3 × hidden_size and gets 1 ×, and SGLang skips the projection silently — accept length exactly 1.00, slower
    than no speculation (sgl-project/sglang#21272, Kimi-K2.5 + kimi-k2.5-eagle3). An EAGLE-1/2 head under
    ``EAGLE3`` is asked for auxiliary layers it was not trained on. The head is read from the draft's
    ``config.json`` ``architectures`` (:func:`dynocell.engine.model_window.draft_head_kind`); a folder that is not
    on this host, or whose architecture does not name EAGLE, is not judged."""
    head = inp.draft_model.get("head")
    alg = str(inp.knobs.get("speculative.algorithm") or "").upper()
    want = _HEAD_ALGORITHM.get(head or "")
    if not want or alg not in _HEAD_ALGORITHM.values() or alg == want:
        return []
    archs = ", ".join(inp.draft_model.get("architectures") or [])
    return [Finding("draft_head_mismatch", "error",
                    f"the draft model is an {head} head ({archs}, {inp.draft_model.get('source')}) but the config "
                    f"serves it with algorithm {alg}: " + (
                        "EAGLE mode captures no auxiliary hidden states, so the head's fc layer (3 × hidden_size in) "
                        "is skipped and every draft is rejected — expect accept length 1.00, slower than no "
                        "speculation (sgl-project/sglang#21272)" if head == "EAGLE3" else
                        "EAGLE3 mode feeds auxiliary hidden states the head was not trained on")
                    + f". Serve it with --speculative-algorithm {want} (vLLM: \"method\": \"{want.lower()}\").",
                    {"head": head, "algorithm": alg, "architectures": inp.draft_model.get("architectures") or [],
                     "source": inp.draft_model.get("source")})]


RUNTIME_RULES = {
    "health_lies": rule_health_lies,
    "stalled_queue": rule_stalled_queue,
    "engine_hang": rule_engine_hang,
    "nccl_startup_skew": rule_nccl_startup_skew,
    "nccl_serving_timeout": rule_nccl_serving_timeout,
    "profile_no_trace": rule_profile_no_trace,
    "graph_launches_missing": rule_graph_launches_missing,
    "capture_size_miss": rule_capture_size_miss,
    "config_smell": rule_config_smell,
    "draft_window_short": rule_draft_window_short,
    "prefix_cache_lost_to_spec": rule_prefix_cache_lost_to_spec,
    "draft_head_mismatch": rule_draft_head_mismatch,
}
