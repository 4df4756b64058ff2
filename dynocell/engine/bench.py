"""Async streaming benchmark client for SGLang-compatible engines (and the reference engine).

One level = a list of :class:`~dynocell.engine.workloads.BenchRequest` sent at a
fixed concurrency over one shared ``aiohttp.ClientSession`` whose pool holds one
connection per concurrent stream. The bench client uses aiohttp (C HTTP parser)
rather than httpx (pure-Python h11), which dynocell uses everywhere else: on a
fake server emitting one token per chunk it read 2-3x more tokens/s on this
2-core machine (``benchmarks/bench_client.py``), and the client must not be the
bottleneck of what it measures. Definitions (times measured on the client
with ``time.perf_counter``; token counts always from the server's
``meta_info`` / ``usage``, never re-tokenised):

- **TTFT** — request start → the first chunk whose text grew (a non-empty
  generated delta), seconds (reported in ms).
- **ITL** — per request, (last content chunk − first content chunk) /
  (completion_tokens − 1): AIPerf's ``inter_token_latency`` ((request_latency −
  TTFT) / (OSL − 1), its metrics reference) and GuideLLM's
  ``inter_token_latency_ms`` ((last_token − first_token) / (output_tokens − 1),
  ``GenerativeRequestStats``), which agree per request. A request of N tokens adds
  N − 1 entries of its ITL to the level's distribution, so the level's
  percentiles weight each request by its N − 1 token gaps, as GuideLLM's do
  (AIPerf weights requests equally: the same numbers when every request has the
  same length, as with ``ignore_eos``). Tokens that arrive together in one chunk
  or one network read are not 0 ms apart: they share the request's ITL.
- **ICL** (inter-chunk latency, AIPerf's ``inter_chunk_latency``) — the gaps
  between consecutive network reads that carried generated text, one entry per
  gap: what the stream's burstiness looks like (SSE events that arrive in one
  read are one chunk here, never a 0 ms gap). Reported beside ITL, never in its
  place.
- **e2e** — request start → ``data: [DONE]``.
- **TPOT** — (e2e − TTFT) / (completion_tokens − 1) (the vLLM / SGLang
  ``bench_serving`` definition); requests with one token have none.
- **decode tok/s** per request — (completion_tokens − 1) / (e2e − TTFT);
  **prefill tok/s** — prompt_tokens / TTFT.
- Level throughput — completed requests, output tokens and prompt + output
  tokens over the level's wall time (first measured request sent → last one
  finished); warm-up requests are excluded from every number.

Wire formats: SGLang ``POST /generate`` with ``stream: true`` (``data: {"text":
<cumulative text>, "output_ids": [...], "meta_info": {...}}`` chunks, then
``data: [DONE]``; an ``{"error": ...}`` chunk is a failure; SGLang
``entrypoints/http_server.py`` ``generate_request``), and OpenAI
``POST /v1/completions`` SSE (``choices[0].text`` deltas, ``usage`` in the
final chunk with ``stream_options.include_usage``; llama-server's final chunk also carries
``timings`` — ``draft_n``/``draft_n_accepted`` when the request drafted — kept as
``meta_info["timings"]``, ``tools/server/server-task.cpp`` ``to_json_oaicompat``).

With ``ignore_eos`` the server must produce exactly ``max_new_tokens``; any
other ``completion_tokens`` marks the request ``length_mismatch`` (counted,
still measured). A stream that breaks (connection closed, HTTP error, error
chunk, no ``[DONE]``, timeout) fails that request with a reason; the level goes
on.

Public API: :func:`run_level`, :func:`run_level_sync`, :class:`LevelResult`,
:class:`RequestResult`, :class:`Percentiles`, :func:`percentiles`,
:func:`measure_tokens_per_byte`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp

from dynocell.engine.workloads import BenchRequest

import orjson

_loads = orjson.loads  # parses bytes directly, ~3-5x json.loads on SGLang's growing cumulative-text chunks

Api = Literal["generate", "openai"]
Progress = Callable[[int, int], None]
ENDPOINTS: dict[str, str] = {"generate": "/generate", "openai": "/v1/completions"}


@dataclass(frozen=True)
class Percentiles:
    """Summary of one latency in milliseconds: p50/p90/p99 (linear interpolation, as numpy's default), mean, min,
    max, n."""

    p50: float | None
    p90: float | None
    p99: float | None
    mean: float | None
    min: float | None
    max: float | None
    n: int


def percentiles(values_s: Sequence[float]) -> Percentiles:
    """Percentiles of ``values_s`` (seconds) returned in **milliseconds**; all None when empty.

    Uses linear interpolation between closest ranks (``numpy.percentile``'s
    default ``method="linear"``).
    """
    n = len(values_s)
    if n == 0:
        return Percentiles(None, None, None, None, None, None, 0)
    xs = sorted(values_s)

    def q(p: float) -> float:
        pos = p / 100 * (n - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, n - 1)
        return (xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)) * 1000

    return Percentiles(q(50), q(90), q(99), sum(xs) / n * 1000, xs[0] * 1000, xs[-1] * 1000, n)


@dataclass
class RequestResult:
    """One measured request. Times in seconds from the request's start; token counts from the server.

    ``ok`` False → ``error`` holds the reason (``failure_kind`` its short class).
    ``meta_info`` is the server's final ``meta_info`` (OpenAI: built from
    ``usage`` + ``finish_reason``), kept whole (spec histograms live there).
    ``itl_s`` has completion_tokens − 1 entries, each the request's ITL (module docstring);
    ``icl_s`` one entry per gap between consecutive reads that carried generated text.
    """

    index: int
    text_class: str
    level: str
    max_new_tokens: int
    ignore_eos: bool
    ok: bool = False
    error: str | None = None
    failure_kind: str | None = None
    start_s: float = 0.0
    ttft_s: float | None = None
    e2e_s: float | None = None
    itl_s: list[float] = field(default_factory=list)
    icl_s: list[float] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    counts_from_server: bool = True
    length_mismatch: bool = False
    finish_reason: Any = None
    meta_info: dict[str, Any] = field(default_factory=dict)
    text: str = ""

    @property
    def tpot_s(self) -> float | None:
        """(e2e − TTFT) / (completion_tokens − 1), seconds; None below two tokens or on failure."""
        if (not self.ok or self.ttft_s is None or self.e2e_s is None or not self.completion_tokens
                or self.completion_tokens < 2):
            return None
        return (self.e2e_s - self.ttft_s) / (self.completion_tokens - 1)

    @property
    def decode_tok_s(self) -> float | None:
        """(completion_tokens − 1) / (e2e − TTFT), tok/s; None when undefined."""
        t = self.tpot_s
        return 1.0 / t if t else None

    @property
    def prefill_tok_s(self) -> float | None:
        """prompt_tokens / TTFT, tok/s; None when undefined."""
        if not self.ok or not self.ttft_s or not self.prompt_tokens:
            return None
        return self.prompt_tokens / self.ttft_s

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (with the derived tpot_s / decode_tok_s / prefill_tok_s)."""
        d = dataclasses.asdict(self)
        d.update(tpot_s=self.tpot_s, decode_tok_s=self.decode_tok_s, prefill_tok_s=self.prefill_tok_s)
        return d


@dataclass
class LevelResult:
    """Everything measured at one concurrency level (warm-up excluded).

    Throughputs are over ``wall_s``: ``request_throughput`` req/s,
    ``output_throughput`` and ``total_throughput`` (prompt + output) tok/s.
    Latency summaries are in ms (``itl_ms``: AIPerf's and GuideLLM's ITL, ``icl_ms``: the
    gaps between content reads; both defined in the module docstring). ``failures`` counts failed requests by kind
    (``connection_closed``, ``http_status``, ``server_error``, ``no_done``,
    ``timeout``, ``connect``, ``no_content``, ``http_error``).
    ``results`` holds every measured request in workload order.
    """

    name: str
    concurrency: int
    api: str
    num_requests: int
    completed: int
    failed: int
    failures: dict[str, int]
    length_mismatches: int
    wall_s: float
    request_throughput: float
    output_throughput: float
    total_throughput: float
    ttft_ms: Percentiles
    tpot_ms: Percentiles
    itl_ms: Percentiles
    e2e_ms: Percentiles
    decode_tok_s: float | None
    prefill_tok_s: float | None
    output_tokens: int
    prompt_tokens: int
    warmup_requests: int
    warmup_failed: int
    results: list[RequestResult]
    icl_ms: Percentiles = Percentiles(None, None, None, None, None, None, 0)

    def by_class(self) -> dict[str, list[RequestResult]]:
        """Successful requests grouped by text class, in first-seen order."""
        out: dict[str, list[RequestResult]] = {}
        for r in self.results:
            if r.ok:
                out.setdefault(r.text_class, []).append(r)
        return out

    def to_dict(self, with_requests: bool = True) -> dict[str, Any]:
        """Plain JSON-able dict; ``with_requests=False`` drops the per-request list."""
        d = {k: v for k, v in dataclasses.asdict(self).items() if k != "results"}
        if with_requests:
            d["results"] = [r.to_dict() for r in self.results]
        return d


def _bad_chunk(obj: Any, openai: bool) -> str | None:
    """Why a decoded stream chunk cannot be used (None when it can): the engine answered garbage.

    Checked per chunk so a lying engine is recorded as a failed request
    (``bad_response``), never an exception out of the level.
    """
    if not isinstance(obj, dict):
        return f"expected a JSON object, got {type(obj).__name__}"
    if openai:
        ch = obj.get("choices")
        if ch is not None and not (isinstance(ch, list) and all(isinstance(c, dict) for c in ch)):
            return "choices is not a list of objects"
        if ch and not isinstance(ch[0].get("text") or "", str):
            return "choices[0].text is not a string"
        if obj.get("usage") is not None and not isinstance(obj["usage"], dict):
            return "usage is not a JSON object"
        return None
    if not isinstance(obj.get("text") or "", str):
        return f"text is {type(obj['text']).__name__}, not a string"
    m = obj.get("meta_info")
    if m is None:
        return None
    if not isinstance(m, dict):
        return f"meta_info is {type(m).__name__}, not a JSON object"
    for key in ("completion_tokens", "prompt_tokens"):
        v = m.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            return f"meta_info.{key} is not a token count: {v!r}"
    return None


#: What a request failure is called in results, by aiohttp exception (first match wins).
_TRANSPORT_ERRORS = (aiohttp.ClientError, asyncio.TimeoutError, OSError)


def _failure_kind(exc: BaseException) -> str:
    if isinstance(exc, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return "timeout"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "connect"
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError,
                        ConnectionError)):
        return "connection_closed"
    return "http_error"


class _Stream:
    """What one streaming response has said so far: content chunks ``(arrival, cumulative
    completion tokens)``, the text pieces, SGLang's ``meta_info`` or OpenAI's ``usage`` and
    ``finish_reason``, whether ``data: [DONE]`` came and when the last event arrived."""

    __slots__ = ("openai", "chunks", "content_events", "text_len", "cumulative", "pieces", "last_text", "meta",
                 "usage", "finish", "done", "t_end")

    def __init__(self, openai: bool) -> None:
        self.openai = openai
        # (arrival, cumulative completion tokens) of each read that carried content: events of one read
        # share its arrival stamp and are one chunk
        self.chunks: list[tuple[float, int | None]] = []
        self.content_events = 0  # SSE events that carried content (the token count when the server gives none)
        self.text_len = 0
        self.cumulative = True
        self.pieces: list[str] = []
        self.last_text = ""
        self.meta: dict[str, Any] = {}
        self.usage: dict[str, Any] | None = None
        self.finish: Any = None
        self.done = False
        self.t_end = 0.0

    def event(self, data: bytes, now: float) -> tuple[str, str] | None:
        """One SSE ``data:`` payload arrived at ``now``; ``(error, failure kind)`` when it ends the
        request as failed (not JSON, malformed, a server error), else None."""
        if data == b"[DONE]":
            self.done, self.t_end = True, now
            return None  # read on to the end of the body so the connection goes back to the pool
        try:
            obj = _loads(data)
        except ValueError as e:  # orjson.JSONDecodeError is a ValueError
            return f"malformed stream chunk: not JSON ({e})", "bad_response"
        bad = _bad_chunk(obj, self.openai)
        if bad:
            return f"malformed stream chunk: {bad}", "bad_response"
        if "error" in obj and obj["error"]:
            err = obj["error"]
            msg = err.get("message", err) if isinstance(err, dict) else err
            return f"server error: {msg}", "server_error"
        self.t_end = now
        if self.openai:
            self._openai(obj, now)
        else:
            self._native(obj, now)
        return None

    def _openai(self, obj: dict[str, Any], now: float) -> None:
        if obj.get("usage"):
            self.usage = obj["usage"]
        if isinstance(obj.get("timings"), dict):  # llama-server's last event: draft_n, draft_n_accepted, …
            self.meta = {"timings": obj["timings"]}
        ch = obj.get("choices") or ()
        if ch:
            piece = ch[0].get("text") or ""
            if ch[0].get("finish_reason"):
                self.finish = ch[0]["finish_reason"]
            if piece:
                self.pieces.append(piece)
                self._content(now, None)

    def _native(self, obj: dict[str, Any], now: float) -> None:
        t = obj.get("text") or ""
        self.meta = meta = obj.get("meta_info") or self.meta
        n = len(t)
        if self.cumulative and n < self.text_len:  # server streams deltas (--incremental-streaming-output)
            self.cumulative = False
            self.pieces.append(self.last_text)
        if self.cumulative:
            if n > self.text_len:
                self._content(now, meta.get("completion_tokens"))
                self.text_len, self.last_text = n, t
        elif t:
            self.pieces.append(t)
            self._content(now, meta.get("completion_tokens"))

    def _content(self, now: float, completion_tokens: int | None) -> None:
        """An event with generated text arrived at ``now``: a new chunk, or part of this read's chunk."""
        self.content_events += 1
        if self.chunks and self.chunks[-1][0] == now:
            self.chunks[-1] = (now, completion_tokens)
        else:
            self.chunks.append((now, completion_tokens))


async def _read_stream(resp: aiohttp.ClientResponse, st: _Stream) -> tuple[str, str] | None:
    """Read the SSE body of ``resp`` into ``st``; ``(error, failure kind)`` of the first bad event."""
    # Hot path (the client must not be the bottleneck): raw bytes split on the SSE event
    # separator, no str decoding of the stream and no per-line async generator; events that
    # arrive in one network read share its arrival stamp.
    buf, crlf = b"", False
    async for raw in resp.content.iter_any():
        now = time.perf_counter()
        buf = buf + raw if buf else raw
        if crlf or b"\r" in raw:  # SSE allows CRLF line ends; SGLang and uvicorn write LF
            crlf, buf = True, buf.replace(b"\r\n", b"\n")
        start = 0
        while True:
            end = buf.find(b"\n\n", start)
            if end < 0:
                break
            event, start = buf[start:end], end + 2
            if not event.startswith(b"data:"):
                continue
            failure = st.event(event[5:].strip(), now)
            if failure:
                return failure
        buf = buf[start:]
    return None


async def _one(client: aiohttp.ClientSession, url: str, req: BenchRequest, api: Api, model: str,
               t_level: float) -> RequestResult:
    """Send one streaming request and time it. Never raises for engine/network trouble."""
    res = RequestResult(req.index, req.text_class, req.level, req.max_new_tokens, req.ignore_eos)
    body = req.payload(api, model)
    st = _Stream(api == "openai")
    t0 = time.perf_counter()
    res.start_s = t0 - t_level
    try:
        async with client.post(url, json=body) as resp:
            if resp.status != 200:
                raw = await resp.read()
                res.error, res.failure_kind = f"HTTP {resp.status}: {raw[:300].decode(errors='replace')}", "http_status"
                return res
            failure = await _read_stream(resp, st)
            if failure:
                res.error, res.failure_kind = failure
                return res
    except _TRANSPORT_ERRORS as e:
        res.failure_kind = _failure_kind(e)
        res.error = (f"{type(e).__name__}: {e}" if res.failure_kind != "connection_closed"
                     else f"connection closed mid-stream ({type(e).__name__}: {e})")
        return res
    if not st.done:
        res.error, res.failure_kind = "stream ended without data: [DONE]", "no_done"
        return res
    if not st.chunks:
        res.error, res.failure_kind = "no generated content in the stream", "no_content"
        return res
    _measure(res, req, st, t0)
    return res


def _measure(res: RequestResult, req: BenchRequest, st: _Stream, t0: float) -> None:
    """Fill a successful ``res`` from its stream: text, meta_info, token counts (counted content events
    when the server gives none), TTFT, E2E, ITL and the inter-chunk gaps (module docstring)."""
    chunks = st.chunks
    res.text = "".join(st.pieces) if (st.openai or not st.cumulative) else st.last_text
    meta = st.meta
    if st.openai:
        meta = {"finish_reason": st.finish, **st.meta}
        if st.usage:
            meta.update(prompt_tokens=st.usage.get("prompt_tokens"),
                        completion_tokens=st.usage.get("completion_tokens"))
    res.meta_info = meta
    res.finish_reason = meta.get("finish_reason")
    res.prompt_tokens = meta.get("prompt_tokens")
    res.completion_tokens = meta.get("completion_tokens")
    if res.completion_tokens is None:
        res.completion_tokens, res.counts_from_server = st.content_events, False
    res.ttft_s = chunks[0][0] - t0
    res.e2e_s = st.t_end - t0
    n = res.completion_tokens
    if not (isinstance(n, int) and 0 < n <= max(req.max_new_tokens, st.content_events)):
        n = st.content_events  # a count past the request's limit (or not a count) is a lie: the events say
    if n > 1:
        res.itl_s = [(chunks[-1][0] - chunks[0][0]) / (n - 1)] * (n - 1)
    res.icl_s = [t - prev for (prev, _), (t, _) in zip(chunks, chunks[1:], strict=False)]
    res.ok = True
    if req.ignore_eos and res.completion_tokens != req.max_new_tokens:
        res.length_mismatch = True


def _warmup_copy(req: BenchRequest, i: int) -> BenchRequest:
    # Same length and class, different prefix: a warm-up must not pre-fill the prefix cache of a measured prompt.
    p = req.prompt
    half = len(p) // 2
    return dataclasses.replace(req, index=-1 - i, prompt=p[half:] + p[:half])


async def _drive(
    client: aiohttp.ClientSession,
    url: str,
    reqs: Sequence[BenchRequest],
    concurrency: int,
    api: Api,
    model: str,
    progress: Progress | None,
) -> tuple[list[RequestResult], float, float]:
    results: list[RequestResult | None] = [None] * len(reqs)
    it = iter(enumerate(reqs))
    done = 0
    t_level = time.perf_counter()

    async def worker() -> None:
        nonlocal done
        for i, r in it:  # one shared iterator: each worker takes the next request when free
            results[i] = await _one(client, url, r, api, model, t_level)
            done += 1
            if progress is not None:
                progress(done, len(reqs))

    await asyncio.gather(*(worker() for _ in range(max(1, min(concurrency, len(reqs))))))
    return [r for r in results if r is not None], t_level, time.perf_counter()


async def run_level(
    base_url: str,
    requests: Sequence[BenchRequest],
    concurrency: int,
    *,
    warmup: int = 0,
    progress: Progress | None = None,
    api: Api = "generate",
    model: str = "default",
    timeout_s: float = 600.0,
    name: str | None = None,
) -> LevelResult:
    """Run one level: ``warmup`` unmeasured requests, then every request in ``requests`` at ``concurrency``.

    ``base_url`` like ``http://127.0.0.1:30000``; ``api`` ``generate`` (SGLang
    native) or ``openai`` (``/v1/completions``, ``model`` sent as the model
    name). Warm-up requests are copies of the first ``warmup`` requests with a
    rotated prompt (same length, no shared prefix), run at the same
    concurrency. ``progress(done, total)`` is called after each measured
    request. ``timeout_s`` bounds each request's read gaps (socket read
    timeout). Per-request failures are recorded, never raised; raises
    ValueError for ``concurrency < 1`` or an unknown ``api``.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    if api not in ENDPOINTS:
        raise ValueError(f"api must be one of {sorted(ENDPOINTS)}")
    url = base_url.rstrip("/") + ENDPOINTS[api]
    # A new connection per request, as SGLang's bench_serving (one ClientSession per request) and vLLM's
    # benchmark client do: a pooled keep-alive connection the server closes while idle (llama-server's
    # cpp-httplib: CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND 5) fails the next request sent on it as
    # connection_closed, which is the client's race, not the engine's failure.
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=True)
    timeout = aiohttp.ClientTimeout(total=None, sock_read=timeout_s, sock_connect=min(30.0, timeout_s))
    warm = [_warmup_copy(requests[i % len(requests)], i) for i in range(warmup)] if requests else []
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False,
                                     json_serialize=lambda o: orjson.dumps(o).decode()) as client:
        warm_results: list[RequestResult] = []
        if warm:
            warm_results, _, _ = await _drive(client, url, warm, concurrency, api, model, None)
        results, t_start, t_stop = await _drive(client, url, requests, concurrency, api, model, progress)
    return _summarise(name or (requests[0].level if requests else "level"), concurrency, api, results,
                      t_stop - t_start, len(warm), sum(not r.ok for r in warm_results))


def _summarise(name: str, concurrency: int, api: str, results: list[RequestResult], wall: float,
               n_warm: int, warm_failed: int) -> LevelResult:
    ok = [r for r in results if r.ok]
    out_tok = sum(r.completion_tokens or 0 for r in ok)
    in_tok = sum(r.prompt_tokens or 0 for r in ok)
    tpots = [t for r in ok if (t := r.tpot_s) is not None]
    decs = [d for r in ok if (d := r.decode_tok_s) is not None]
    pres = [p for r in ok if (p := r.prefill_tok_s) is not None]
    itl: list[float] = []
    icl: list[float] = []
    for r in ok:
        itl.extend(r.itl_s)
        icl.extend(r.icl_s)
    wall = wall if wall > 0 else float("nan")
    return LevelResult(
        name=name,
        concurrency=concurrency,
        api=api,
        num_requests=len(results),
        completed=len(ok),
        failed=len(results) - len(ok),
        failures=dict(Counter(r.failure_kind or "unknown" for r in results if not r.ok)),
        length_mismatches=sum(r.length_mismatch for r in ok),
        wall_s=wall,
        request_throughput=len(ok) / wall,
        output_throughput=out_tok / wall,
        total_throughput=(out_tok + in_tok) / wall,
        ttft_ms=percentiles([r.ttft_s for r in ok if r.ttft_s is not None]),
        tpot_ms=percentiles(tpots),
        itl_ms=percentiles(itl),
        e2e_ms=percentiles([r.e2e_s for r in ok if r.e2e_s is not None]),
        decode_tok_s=sum(decs) / len(decs) if decs else None,
        prefill_tok_s=sum(pres) / len(pres) if pres else None,
        output_tokens=out_tok,
        prompt_tokens=in_tok,
        warmup_requests=n_warm,
        warmup_failed=warm_failed,
        results=results,
        icl_ms=percentiles(icl),
    )


def run_level_sync(base_url: str, requests: Sequence[BenchRequest], concurrency: int, **kwargs: Any) -> LevelResult:
    """:func:`run_level` from synchronous code (``asyncio.run``; not callable inside a running event loop)."""
    return asyncio.run(run_level(base_url, requests, concurrency, **kwargs))


async def measure_tokens_per_byte(
    base_url: str, texts: dict[str, str], *, api: Api = "generate", model: str = "default", timeout_s: float = 120.0
) -> dict[str, float]:
    """Engine tokens per UTF-8 byte per text class, from the server's ``prompt_tokens`` of a 1-token generation.

    ``texts`` maps class → sample text (``Workload.calibration_texts()``). The
    result feeds ``Workload.requests(..., tokens_per_byte=...)``. Classes whose
    request fails or reports no ``prompt_tokens`` are left out (the workload
    then assumes 1.0).
    """
    reqs = [
        BenchRequest(i, "calibration", cls, txt, 0, 0, len(txt.encode()), 1, 0.0, False)
        for i, (cls, txt) in enumerate(texts.items())
    ]
    level = await run_level(base_url, reqs, 1, api=api, model=model, timeout_s=timeout_s, name="calibration")
    out: dict[str, float] = {}
    for r in level.results:
        nbytes = len(texts[r.text_class].encode())
        if r.ok and r.prompt_tokens and nbytes:
            out[r.text_class] = r.prompt_tokens / nbytes
    return out
