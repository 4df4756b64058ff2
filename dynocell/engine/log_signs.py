"""Runtime signs in an engine's server log, for the doctor's runtime rules (issue 22, shapes 6, 8 and 9).

:func:`scan_lines` reads the lines once and returns plain numbers:

- ``ready_line``: the first line saying the server is ready (SGLang "The server is fired up and ready
  to roll", vLLM / uvicorn "Application startup complete"); None when the log has none (a fragment);
- ``exceptions``: line numbers of scheduler / engine-core exceptions; ``health_ok_after_exception``:
  ``GET /health … 200`` access lines after the first one (health answering while the engine is dead);
- ``stalls``: stats lines with requests waiting and none running (SGLang ``#running-req: 0 …
  #queue-req: N``, vLLM ``Running: 0 reqs … Waiting: N reqs``), ``stall_run_max`` (most of them in a row)
  and ``busy_stats`` (any other stats line);
- ``nccl``: PyTorch NCCL watchdog timeouts (``WorkNCCL(SeqNum=…, OpType=…, … Timeout(ms)=…) ran for N
  milliseconds``, ``ProcessGroupNCCL.cpp``) with the rank and whether they came before or after ready;
- ``weight_load_s``: seconds each rank took to load weights (SGLang ``Load weight end. elapsed=…``;
  vLLM ``Loading weights took … seconds`` / ``Model loading took … and … seconds``); ``shard_load_s``: the
  elapsed time of the checkpoint-shard progress bar; ``rank_load_wait``: SGLang's "rank N could finish the
  model loading, but there are other ranks that didn't finish loading" (a start-up waiting on a slow rank);
- ``capture_truncations``: vLLM ``Truncating max_cudagraph_capture_size to N`` (non-fatal) and the
  sizes SGLang captured (``Capture cuda graph bs [1, 2, 4]``);
- ``profile``: profiler windows started, traces reported saved, and profiler-disabled errors (SGLang
  ``Profiling starts`` / ``Traces are saved to``; vLLM ``Profiler is not enabled`` / ``profiler_config``);
- ``hangs``: lines an engine prints when a rank or the engine core stopped answering (issue 35): vLLM's
  ``No available shared memory broadcast block found in N seconds`` (``shm_broadcast.py``: a process
  waits on another that hangs), ``RPC call to <method> timed out`` (``EngineDeadError`` of a hung TP
  worker), SGLang's ``Scheduler watchdog timeout`` is a failure signature instead;
- ``gen_stalls``: stats lines with requests running and a generation throughput of exactly 0 (vLLM
  ``Avg generation throughput: 0.0 tokens/s, Running: 1 reqs``; SGLang ``#running-req: 1 … gen throughput
  (token/s): 0.00``), ``gen_stall_last`` (whether the log's last stats line is one);
- ``prefix_hit_pct``: the prefix-cache hit rate (%) of each vLLM stats line (``Prefix cache hit rate: 0.0%``);
  ``spec_windows``: speculative windows that drafted something (``SpecDecoding metrics: … Drafted: N tokens``).

Pure: no I/O, no database.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = ["ENGINE_EXCEPTION", "VLLM_STATS", "scan_lines"]

#: A serving engine's scheduler or engine core failing (a regex, searched): SGLang 0.5.17's ``Scheduler hit an
#: exception`` (``TP<n> scheduler …`` per rank), vLLM V1's ``EngineCore encountered a fatal error`` and
#: ``EngineDeadError`` (``AsyncEngineDeadError`` too). Each reader adds what else it counts
#: (:mod:`dynocell.engine.logfile`: any traceback while serving).
ENGINE_EXCEPTION = (r"Scheduler hit an exception|EngineCore encountered a fatal error|EngineDeadError|"
                    r"TP\d+ scheduler hit an exception")

_READY = re.compile(r"The server is fired up and ready to roll|Application startup complete|server is listening on")
_EXCEPTION = re.compile(ENGINE_EXCEPTION + r"|Engine core proc .* died unexpectedly")
_HEALTH_OK = re.compile(r'"GET /health(?:_generate)? HTTP/[\d.]+" 200')
_SGL_STATS = re.compile(r"#running-req:\s*(\d+).*?#queue-req:\s*(\d+)")
#: vLLM's periodic stats line, running and waiting requests (groups 1, 2): V1 ``…Running: 0 reqs, Waiting: 0 reqs,
#: GPU KV cache usage…`` (vllm/v1/metrics/loggers.py), V0 ``Running: 0 reqs, Swapped: 0 reqs, Pending: 0 reqs``
#: (vllm/engine/metrics.py). One pattern for every reader (:mod:`dynocell.engine.logfile` too).
VLLM_STATS = re.compile(r"Running:\s*(\d+)\s*reqs?,\s*(?:Swapped:\s*\d+\s*reqs?,\s*)?"
                        r"(?:Pending|Waiting):\s*(\d+)\s*reqs?")
#: vLLM's stats line: "…, Prefix cache hit rate: 0.0%" (V1 loggers.py), "Prefix cache hit rate: GPU: 0.00%, CPU: …" (V0)
_PREFIX_HIT = re.compile(r"Prefix cache hit rate:\s*(?:GPU:\s*)?([\d.]+)%")
#: a speculative window that drafted something: vLLM V1 "SpecDecoding metrics: … Drafted: N tokens"
_SPEC_DRAFTED = re.compile(r"SpecDecoding metrics:.*?Drafted:\s*(\d+)\s*tokens")
_NCCL = re.compile(r"Watchdog caught collective operation timeout: WorkNCCL\((?P<work>[^)]{0,400})\)"
                   r"(?: ran for (?P<ran>\d+) milliseconds)?")
_SEQ = re.compile(r"SeqNum=(\d+)")
_OP = re.compile(r"OpType=(\w+)")
_TIMEOUT = re.compile(r"Timeout\(ms\)=(\d+)")
_RANK = re.compile(r"\[(?:Rank|rank)\s*(\d+)\]|\[rank(\d+)\]:|\bTP(\d+)\b|Worker_TP(\d+)")
_LOAD_SGL = re.compile(r"Load weight end\. elapsed=\s*([\d.]+)\s*s")
_LOAD_VLLM = re.compile(r"Loading weights took\s*([\d.]+)\s*seconds|Model loading took .*? and ([\d.]+) seconds")
# SGLang (model_runner): a rank finished loading while others had not — the start-up waits on the slowest rank
_RANK_WAIT = re.compile(r"rank (\d+) could finish the model loading, but there are other ranks that didn't finish")
# tqdm progress of checkpoint shards: "[31:48<00:40, …" or "[1:02:03<…" (elapsed before '<')
_SHARDS = re.compile(r"Loading \S+ checkpoint shards:.*?\[(?:(\d+):)?(\d+):(\d+)<")
_TRUNC = re.compile(r"Truncating max_cudagraph_capture_size to (\d+)")
_SGL_CAPTURE = re.compile(r"Capture (?:cuda|CUDA) graph bs \[([\d,\s]*)\]")
_PROF_START = re.compile(r"(?i)profiling starts|starting profiler")
_PROF_SAVED = re.compile(r"(?i)traces? (?:are |is |was |were )?(?:saved|written|dumped) (?:to|at|in)")
# (not "Torch profiler disabled for CUDA graph capture": vLLM 0.26.0 prints it on every healthy graph boot)
_HANG = re.compile(r"No available shared memory broadcast block found in (?P<seconds>\d+) seconds|"
                   r"RPC call to (?P<method>\w+) timed out")
_GEN_VLLM = re.compile(r"Avg generation throughput:\s*([\d.]+)\s*tokens/s")
_GEN_SGL = re.compile(r"gen throughput \(token/s\):\s*([\d.]+)")
_PROF_OFF = re.compile(r"(?i)profiler is not enabled|profiler_config is not set|"
                       r"torch profiler (?:is )?not (?:enabled|configured)")


def _rank(line: str) -> int | None:
    m = _RANK.search(line)
    if not m:
        return None
    return int(next(g for g in m.groups() if g is not None))


def scan_lines(lines: Iterable[str]) -> dict[str, Any]:
    """The runtime signs of one log (see the module doc); line numbers are 1-based."""
    out: dict[str, Any] = {"ready_line": None, "exceptions": [], "health_ok_after_exception": 0,
                           "stalls": [], "stall_run": 0, "stall_run_max": 0, "busy_stats": 0, "nccl": [],
                           "weight_load_s": {}, "capture_truncations": [],
                           "captured_bs": None, "profile": {"started": 0, "saved": 0, "disabled": []},
                           "rank_load_wait": None, "shard_load_s": None, "hangs": [], "gen_stalls": [],
                           "gen_stall_last": False, "prefix_hit_pct": [], "spec_windows": 0}
    for i, line in enumerate(lines, 1):
        if out["ready_line"] is None and _READY.search(line):
            out["ready_line"] = i
        _scan_serving(line, i, out)
        _scan_boot(line, i, out)
    return out


def _scan_serving(line: str, i: int, out: dict[str, Any]) -> None:
    if _EXCEPTION.search(line):
        out["exceptions"].append(i)
    elif out["exceptions"] and _HEALTH_OK.search(line):
        out["health_ok_after_exception"] += 1
    hang = _HANG.search(line)
    if hang:
        out["hangs"].append({"line": i, "text": hang.group(0)})
    st = _SGL_STATS.search(line) or VLLM_STATS.search(line)
    if st:
        running, waiting = int(st.group(1)), int(st.group(2))
        gen = _GEN_VLLM.search(line) or _GEN_SGL.search(line)
        stalled = gen is not None and running > 0 and float(gen.group(1)) == 0.0
        if stalled:
            out["gen_stalls"].append({"line": i, "running": running})
        out["gen_stall_last"] = stalled
        if running == 0 and waiting > 0:
            out["stalls"].append({"line": i, "waiting": waiting})
            out["stall_run"] += 1  # stats lines in a row that show the queue not moving
            out["stall_run_max"] = max(out["stall_run_max"], out["stall_run"])
        else:
            out["busy_stats"] += 1
            out["stall_run"] = 0
    ph = _PREFIX_HIT.search(line)
    if ph:
        out["prefix_hit_pct"].append(float(ph.group(1)))
    sd = _SPEC_DRAFTED.search(line)
    if sd and int(sd.group(1)) > 0:
        out["spec_windows"] += 1
    m = _NCCL.search(line)
    if m:
        work = m.group("work")
        seq, op, to = _SEQ.search(work), _OP.search(work), _TIMEOUT.search(work)
        out["nccl"].append({"line": i, "rank": _rank(line), "seqnum": int(seq.group(1)) if seq else None,
                            "op": op.group(1) if op else None, "timeout_ms": int(to.group(1)) if to else None,
                            "ran_ms": int(m.group("ran")) if m.group("ran") else None,
                            "after_ready": out["ready_line"] is not None})


def _scan_boot(line: str, i: int, out: dict[str, Any]) -> None:
    ld = _LOAD_SGL.search(line) or _LOAD_VLLM.search(line)
    if ld:
        secs = float(next(g for g in ld.groups() if g is not None))
        rank = _rank(line)
        out["weight_load_s"][str(rank if rank is not None else len(out["weight_load_s"]))] = secs
    sh = _SHARDS.search(line)
    if sh:
        out["shard_load_s"] = int(sh.group(1) or 0) * 3600 + int(sh.group(2)) * 60 + int(sh.group(3))
    rw = _RANK_WAIT.search(line)
    if rw:
        out["rank_load_wait"] = {"line": i, "rank": int(rw.group(1))}
    tr = _TRUNC.search(line)
    if tr:
        out["capture_truncations"].append({"line": i, "to": int(tr.group(1))})
    cap = _SGL_CAPTURE.search(line)
    if cap:
        out["captured_bs"] = [int(x) for x in re.findall(r"\d+", cap.group(1))]
    prof = out["profile"]
    if _PROF_OFF.search(line):
        prof["disabled"].append(i)
    elif _PROF_SAVED.search(line):
        prof["saved"] += 1
    elif _PROF_START.search(line):
        prof["started"] += 1
        prof["last_start_line"] = i
    prof["last_line"] = i
