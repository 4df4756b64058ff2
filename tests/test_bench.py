"""The streaming bench client against the real fake SGLang server (a subprocess on a free port)."""

from __future__ import annotations

import dataclasses

import httpx
import pytest
from servers.fake_stream import start_server

from dynocell.engine.bench import measure_tokens_per_byte, percentiles, run_level, run_level_sync
from dynocell.engine.workloads import BenchRequest, load_workload


def _serve(*args: str):
    proc, url = start_server(*args)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="module")
def paced():
    """20 ms to first token, 2 ms per token, one token per chunk."""
    yield from _serve("--ttft-ms", "20", "--itl-ms", "2")


@pytest.fixture(scope="module")
def spec():
    """Simulated speculative decoding (3 drafts per step), several tokens per chunk, fast."""
    yield from _serve("--spec-steps", "3")


def _reqs(n: int, tokens: int = 16, prompt: str = "hello world", ignore_eos: bool = True) -> list[BenchRequest]:
    return [BenchRequest(i, "t", "prose", f"{prompt} #{i}", 16, 16, 16, tokens, 0.0, ignore_eos) for i in range(n)]


def _stats(url: str) -> dict:
    return httpx.get(url + "/stats", trust_env=False).json()


def _reset(url: str) -> None:
    httpx.post(url + "/stats/reset", trust_env=False)


def test_ttft_tpot_itl_consistent(paced):
    lr = run_level_sync(paced, _reqs(6, 16), 2)
    assert (lr.completed, lr.failed, lr.length_mismatches) == (6, 0, 0)
    for r in lr.results:
        assert r.ok and r.completion_tokens == 16 and r.prompt_tokens == len(f"hello world #{r.index}".encode())
        assert r.ttft_s >= 0.019  # the server waits 20 ms before the first chunk
        assert r.tpot_s * (r.completion_tokens - 1) + r.ttft_s == pytest.approx(r.e2e_s, abs=1e-9)
        assert len(r.itl_s) == r.completion_tokens - 1  # one token per chunk
        assert sum(r.itl_s) == pytest.approx(r.e2e_s - r.ttft_s, abs=0.05)  # [DONE] follows the last chunk
        assert r.tpot_s >= 0.0019
        assert r.decode_tok_s == pytest.approx(1 / r.tpot_s)
        assert r.prefill_tok_s == pytest.approx(r.prompt_tokens / r.ttft_s)
        assert r.text.startswith("alpha beta ") and r.meta_info["finish_reason"] == {"type": "length", "length": 16}
    assert lr.ttft_ms.n == 6 and lr.ttft_ms.p50 >= 19
    assert lr.itl_ms.n == 6 * 15
    assert lr.e2e_ms.p50 <= lr.e2e_ms.p90 <= lr.e2e_ms.p99 <= lr.e2e_ms.max
    assert lr.output_tokens == 96
    assert lr.output_throughput == pytest.approx(96 / lr.wall_s)
    assert lr.request_throughput == pytest.approx(6 / lr.wall_s)
    assert lr.total_throughput == pytest.approx((96 + lr.prompt_tokens) / lr.wall_s)
    d = lr.to_dict()
    assert d["results"][0]["tpot_s"] == lr.results[0].tpot_s and d["ttft_ms"]["p50"] == lr.ttft_ms.p50


def test_percentiles_match_numpy_linear():
    np = pytest.importorskip("numpy")
    xs = [0.001 * (i * 37 % 101) for i in range(101)]
    p = percentiles(xs)
    for q, got in ((50, p.p50), (90, p.p90), (99, p.p99)):
        assert got == pytest.approx(float(np.percentile(xs, q)) * 1000)
    assert p.n == 101 and p.min == 0 and p.max == pytest.approx(100.0)
    assert percentiles([]).p50 is None and percentiles([0.002]).p99 == pytest.approx(2.0)


def test_ignore_eos_mismatch_flagged(spec):
    reqs = _reqs(3, 12) + [dataclasses.replace(r, index=3 + r.index,
                                               prompt="stop early #fake:eos_at=5") for r in _reqs(2, 12)]
    lr = run_level_sync(spec, reqs, 2)
    assert lr.completed == 5 and lr.length_mismatches == 2
    short = [r for r in lr.results if r.length_mismatch]
    assert [r.completion_tokens for r in short] == [5, 5]
    assert all(r.meta_info["finish_reason"]["type"] == "stop" for r in short)
    # without ignore_eos a short answer is fine
    lr2 = run_level_sync(spec, [dataclasses.replace(r, ignore_eos=False) for r in reqs], 2)
    assert lr2.length_mismatches == 0


def test_warmup_excluded(spec):
    _reset(spec)
    seen: list[tuple[int, int]] = []
    lr = run_level_sync(spec, _reqs(4, 8), 2, warmup=3, progress=lambda d, t: seen.append((d, t)))
    assert _stats(spec)["requests"] == 7
    assert lr.num_requests == 4 and lr.warmup_requests == 3 and lr.warmup_failed == 0
    assert sorted(r.index for r in lr.results) == [0, 1, 2, 3]
    assert seen[-1] == (4, 4) and len(seen) == 4


def test_mid_stream_close_and_errors_fail_only_that_request(spec):
    reqs = _reqs(4, 20)
    reqs[1] = dataclasses.replace(reqs[1], prompt="drop me #fake:close_at=3")
    reqs[2] = dataclasses.replace(reqs[2], prompt="engine error #fake:error")
    reqs[3] = dataclasses.replace(reqs[3], prompt="overloaded #fake:status=503")
    more = [dataclasses.replace(r, index=4 + r.index) for r in _reqs(3, 20)]
    lr = run_level_sync(spec, reqs + more, 2)
    assert lr.num_requests == 7 and lr.completed == 4 and lr.failed == 3
    assert lr.failures == {"connection_closed": 1, "server_error": 1, "http_status": 1}
    by_index = {r.index: r for r in lr.results}
    assert "connection closed mid-stream" in by_index[1].error
    assert "fake engine error" in by_index[2].error and "503" in by_index[3].error
    assert lr.ttft_ms.n == 4  # failed requests stay out of the latency summaries


def test_connection_refused_is_a_failure_not_an_exception():
    lr = run_level_sync("http://127.0.0.1:9", _reqs(2), 1, timeout_s=5)
    assert lr.failed == 2 and lr.failures == {"connect": 2}


def test_openai_sse_shape(paced):
    lr = run_level_sync(paced, _reqs(3, 10), 3, api="openai", model="fake-model")
    gen = run_level_sync(paced, _reqs(3, 10), 3)
    assert lr.completed == 3 and lr.length_mismatches == 0
    for r, g in zip(lr.results, gen.results):
        assert r.counts_from_server and r.completion_tokens == 10 and r.prompt_tokens == g.prompt_tokens
        assert r.text == g.text and r.finish_reason == "length"
        assert len(r.itl_s) == 9
        assert r.tpot_s * 9 + r.ttft_s == pytest.approx(r.e2e_s, abs=1e-9)


def test_spec_meta_info_kept_per_class(spec):
    w = load_workload()
    reqs = w.requests("acceptance", 1024)
    lr = run_level_sync(spec, reqs, 1)
    assert lr.completed == len(reqs)
    groups = lr.by_class()
    assert list(groups) == list(w.classes)
    for rs in groups.values():
        for r in rs:
            h = r.meta_info["spec_correct_drafts_histogram"]
            assert len(h) == 4 and sum(h) == r.meta_info["spec_verify_ct"]
            assert sum((k + 1) * n for k, n in enumerate(h)) == r.completion_tokens == 64
            # several tokens per chunk: ITL is spread over the chunk's tokens
            assert 64 - 4 <= len(r.itl_s) <= 64 - 1
            assert sum(r.itl_s) == pytest.approx(r.e2e_s - r.ttft_s, abs=0.02)


def test_itl_spread_over_multi_token_chunks():
    import asyncio

    gen = _serve("--tokens-per-chunk", "4", "--itl-ms", "1")
    url = next(gen)
    try:
        lr = asyncio.run(run_level(url, _reqs(2, 13), 2))
        for r in lr.results:
            # chunks of 4,4,4,1 tokens: 12 token gaps, each the request's ITL (AIPerf's and GuideLLM's
            # (last content − first content) / (tokens − 1)); at most 3 gaps between content reads
            assert len(r.itl_s) == 13 - 1 and len(set(r.itl_s)) == 1
            assert r.itl_s[0] == pytest.approx((r.e2e_s - r.ttft_s) / 12, abs=0.05)
            assert 1 <= len(r.icl_s) + 1 <= 4 and all(g > 0 for g in r.icl_s)
    finally:
        next(gen, None)


def test_measure_tokens_per_byte(spec):
    w = load_workload()
    ratios = asyncio_run(measure_tokens_per_byte(spec, w.calibration_texts()))
    assert set(ratios) == set(w.classes)
    assert all(v == pytest.approx(1.0) for v in ratios.values())  # the fake server counts one token per byte


def asyncio_run(coro):
    import asyncio

    return asyncio.run(coro)


def test_sse_split_across_reads_and_crlf_line_ends():
    """The client splits SSE events itself: events cut anywhere (even inside the blank-line
    separator) across TCP writes, several events in one write, and CRLF line ends all parse."""
    import asyncio
    import json

    async def main() -> object:
        events = [{"text": "a" * k, "output_ids": [k], "meta_info": {"completion_tokens": k}} for k in (1, 2, 3)]
        events[-1]["meta_info"].update(prompt_tokens=5, finish_reason={"type": "length", "length": 3})
        body = b"".join(b"data: " + json.dumps(e).encode() + b"\r\n\r\n" for e in events) + b"data: [DONE]\r\n\r\n"

        async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            while (await r.readline()) not in (b"\r\n", b""):
                pass
            w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
            for i in range(0, len(body), 7):  # 7-byte pieces: splits every event and separator
                w.write(body[i:i + 7])
                await w.drain()
                await asyncio.sleep(0.001)
            w.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            return await run_level(f"http://127.0.0.1:{port}", _reqs(1, tokens=3), 1)

    lr = asyncio.run(main())
    r = lr.results[0]
    assert r.ok, r.error
    assert r.text == "aaa" and r.completion_tokens == 3 and r.prompt_tokens == 5
    assert len(r.itl_s) == 2 and not r.length_mismatch


# ---------------------------------------------------------------- ITL and content chunks, event by event

def _native_events(*events: tuple[float, str, int | None]):
    """A native (SGLang ``/generate``) stream fed event by event: ``(arrival s, cumulative text,
    cumulative completion_tokens)``; the last event's ``meta_info`` gets ``prompt_tokens``."""
    import json

    from dynocell.engine.bench import _Stream

    st = _Stream(openai=False)
    for i, (now, text, tokens) in enumerate(events):
        meta = {} if tokens is None else {"completion_tokens": tokens}
        if i == len(events) - 1:
            meta.update(prompt_tokens=3, finish_reason={"type": "length", "length": tokens})
        assert st.event(json.dumps({"text": text, "meta_info": meta}).encode(), now) is None
    assert st.event(b"[DONE]", events[-1][0] + 0.1) is None
    return st


def _measured(st, max_new_tokens: int):
    from dynocell.engine.bench import RequestResult, _measure

    req = BenchRequest(0, "t", "prose", "p", 3, 3, 3, max_new_tokens, 0.0, True)
    res = RequestResult(0, "prose", "t", max_new_tokens, True)
    _measure(res, req, st, 0.0)
    return res


def test_a_native_chunk_whose_text_did_not_grow_is_not_content():
    """Audit survivor 2: SGLang sends chunks whose cumulative text did not grow (an empty first chunk, a
    repeat): they are no token, so TTFT is at the first chunk with text and they add no ITL/ICL entry."""
    st = _native_events((1.0, "", 0), (1.5, "alpha ", 1), (1.7, "alpha ", 1), (2.0, "alpha beta ", 2))
    res = _measured(st, 2)
    assert res.ttft_s == 1.5  # not 1.0, the empty chunk's arrival
    assert res.completion_tokens == 2 and res.text == "alpha beta "
    assert res.itl_s == [0.5]  # (2.0 − 1.5) / (2 − 1): the repeat at 1.7 is no gap
    assert res.icl_s == [0.5]
    assert res.e2e_s == pytest.approx(2.1)


def test_tokens_arriving_in_one_read_are_not_zero_ms_apart():
    """Issue 38: at high concurrency several SSE events arrive in one network read (one arrival stamp).
    Before, each later event made a 0 ms ITL entry (ITL p50 0.00 ms at c=256 against a server pacing
    tokens every ~7 ms, where AIPerf and GuideLLM measured 43-49 ms). Now ITL is theirs: (last content −
    first content) / (tokens − 1), the same for every token gap of the request; the read is one chunk."""
    # first token alone at 1.0; tokens 2-5 in one read at 1.4; token 6 at 1.5
    st = _native_events((1.0, "a", 1), (1.4, "ab", 2), (1.4, "abc", 3), (1.4, "abcd", 4), (1.4, "abcde", 5),
                        (1.5, "abcdef", 6))
    res = _measured(st, 6)
    assert res.itl_s == pytest.approx([0.1] * 5)  # (1.5 − 1.0) / 5, no 0 ms entry
    assert min(res.itl_s) > 0
    assert res.icl_s == pytest.approx([0.4, 0.1])  # two gaps between the three reads
    # AIPerf's formula on the same request: (request_latency − TTFT) / (OSL − 1), request_latency at the
    # last content response
    assert res.itl_s[0] == pytest.approx((1.5 - res.ttft_s) / (res.completion_tokens - 1))


def test_a_token_count_past_the_limit_falls_back_to_the_events():
    """A ``completion_tokens`` beyond ``max_new_tokens`` is a lie: the ITL divides by the events seen."""
    st = _native_events((1.0, "a", 1), (1.2, "ab", 2), (1.4, "abc", 10 ** 9))
    res = _measured(st, 3)
    assert res.itl_s == pytest.approx([0.2, 0.2])


def test_level_itl_weights_each_request_by_its_token_gaps():
    """GuideLLM's weighting: a request of N tokens counts N − 1 times in the level's ITL percentiles."""
    from dynocell.engine.bench import _summarise

    a = _measured(_native_events((0.0, "a", 1), (0.3, "ab", 2)), 2)  # ITL 300 ms, one gap
    b = _measured(_native_events((0.0, "a", 1), (0.1, "ab", 2), (0.2, "abc", 3), (0.3, "abcd", 4)), 4)  # 100 ms
    lr = _summarise("t", 2, "generate", [a, b], 1.0, 0, 0)
    assert lr.itl_ms.n == 1 + 3 and lr.itl_ms.p50 == pytest.approx(100.0) and lr.itl_ms.max == pytest.approx(300.0)
    assert lr.icl_ms.n == 1 + 3 and lr.to_dict()["icl_ms"]["n"] == 4


def test_events_of_one_write_over_real_http_share_the_requests_itl():
    """The same over a real socket: a server that writes the first token, then 30 ms later the other
    five in one write. However the reads fall, every token gap is the request's ITL, and no ICL gap is 0."""
    import asyncio
    import json

    async def main() -> object:
        def ev(k: int) -> bytes:
            meta = {"completion_tokens": k}
            if k == 6:
                meta.update(prompt_tokens=5, finish_reason={"type": "length", "length": 6})
            return b"data: " + json.dumps({"text": "w" * k, "meta_info": meta}).encode() + b"\n\n"

        async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            while (await r.readline()) not in (b"\r\n", b""):
                pass
            w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
            w.write(ev(1))
            await w.drain()
            await asyncio.sleep(0.03)
            w.write(b"".join(ev(k) for k in range(2, 7)) + b"data: [DONE]\n\n")
            await w.drain()
            w.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            return await run_level(f"http://127.0.0.1:{port}", _reqs(1, tokens=6), 1)

    lr = asyncio.run(main())
    r = lr.results[0]
    assert r.ok, r.error
    assert r.completion_tokens == 6 and len(r.itl_s) == 5 and len(set(r.itl_s)) == 1
    # the reads fall as the kernel delivers them; the span first → last content read, shared by 5 gaps
    assert r.itl_s[0] * 5 == pytest.approx(sum(r.icl_s))
    assert all(g > 0 for g in r.icl_s) and (min(r.itl_s) > 0 if r.icl_s else r.itl_s[0] == 0)
