"""Is dynocell's bench client the bottleneck? Client token rate vs server emitted rate, and TTFT overhead.

Starts ``tests/servers/fake_stream.py`` (stdlib asyncio server speaking SGLang's
``/generate`` streaming format, emitting tokens as fast as it can) in a
subprocess, then at concurrency 1 / 16 / 64 runs one level of
``dynocell.engine.bench.run_level`` against it and prints, measured in this one
run:

- client tok/s — output tokens the client counted / the level's wall time;
- server tok/s — tokens the server emitted / its busy window (first request
  received → last chunk written), from its ``/stats`` endpoint;
- ratio = client / server (goal >= 0.95);
- TTFT overhead p50 (ms) — per request, client TTFT minus the server's own
  time to first token (``first_token_ts - request_received_ts`` in the final
  ``meta_info``); goal <= 1 ms;
- the same two numbers for a minimal raw-socket reader (no HTTP library, no
  JSON), as the floor a client can reach on this machine, and dynocell's rate
  relative to it.

Client and server share this machine's cores, so on a loaded 2-core box both
slow down together; compare the ratios, not the absolute rates. At concurrency
16 and 64 the "TTFT overhead" also holds the server's own queueing (its single
event loop is busy writing other streams before it reads a new request, and
stamps ``request_received_ts`` only then); the raw reader's column shows that
floor.

Measured on this project's 2-core development machine on 2026-11-30, while a soak
ran beside it (load average ~4), 256 tokens/request, after the switch from httpx
to aiohttp: client 25,254 / 22,931 / 11,606 tok/s at c=1/16/64 (httpx/h11 read
3,393 / 3,497 / 3,606 tok/s in the same conditions an hour earlier); ratio
1.279 / 0.954 / 0.955 (c=1 above 1: the server's window also holds the warm-up
request); TTFT overhead p50 3.3 ms at c=1, equal to the raw reader's 3.4 ms
floor on the loaded machine. Earlier, on the H200 host's CPU (16 idle cores),
httpx reached c=1 ratio 0.985-0.998 with 0.96-1.2 ms TTFT overhead.

Usage: ``python benchmarks/bench_client.py [--tokens 256] [--levels 1,16,64] [--per-level 4]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from servers.fake_stream import start_server  # noqa: E402

from dynocell.engine.bench import run_level  # noqa: E402
from dynocell.engine.workloads import BenchRequest  # noqa: E402


def _requests(n: int, tokens: int) -> list[BenchRequest]:
    return [
        BenchRequest(i, "bench", "prose", f"request {i}: " + "the quick brown fox " * 6, 128, 128, 128, tokens, 0.0,
                     True)
        for i in range(n)
    ]


def _stats(url: str, reset: bool = False) -> dict:
    with httpx.Client(trust_env=False) as c:
        if reset:
            c.post(url + "/stats/reset")
            return {}
        return c.get(url + "/stats").json()


async def _raw_level(host: str, port: int, reqs: list[BenchRequest],
                     concurrency: int) -> tuple[float, list[float], int]:
    """Minimal reader: one keep-alive socket per worker, counts ``data:`` lines, parses only the final one."""
    it = iter(reqs)
    overheads: list[float] = []
    tokens = 0

    async def worker() -> None:
        nonlocal tokens
        r, w = await asyncio.open_connection(host, port)
        for req in it:
            body = json.dumps(req.payload()).encode()
            t0 = time.perf_counter()
            w.write(b"POST /generate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(body), body))
            ttft = None
            last = b""
            while True:
                line = await r.readline()
                if line.startswith(b"data: [DONE]"):
                    break
                if line.startswith(b"data:"):
                    if ttft is None:
                        ttft = time.perf_counter() - t0
                    last = line
            await r.readline(), await r.readline(), await r.readline()  # chunk end, "0", blank
            meta = json.loads(last[5:])["meta_info"]
            tokens += meta["completion_tokens"]
            overheads.append(ttft - (meta["first_token_ts"] - meta["request_received_ts"]))
        w.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return tokens / (time.perf_counter() - t0), overheads, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=256, help="output tokens per request")
    ap.add_argument("--levels", default="1,16,64", help="concurrency levels")
    ap.add_argument("--per-level", type=int, default=4, help="requests per level = this x concurrency (min 16)")
    a = ap.parse_args()
    proc, url = start_server()
    host, port = url.split("//")[1].split(":")
    rows = []
    try:
        for c in [int(x) for x in a.levels.split(",")]:
            n = max(16, a.per_level * c)
            reqs = _requests(n, a.tokens)
            # raw floor first (also warms the server)
            _stats(url, reset=True)
            raw_rate, raw_ov, _ = asyncio.run(_raw_level(host, int(port), reqs, c))
            raw_srv = _stats(url)["emitted_tok_s"]
            _stats(url, reset=True)
            lr = asyncio.run(run_level(url, reqs, c, warmup=c))
            st = _stats(url)
            ov = [
                r.ttft_s - (r.meta_info["first_token_ts"] - r.meta_info["request_received_ts"])
                for r in lr.results
                if r.ok
            ]
            client_rate = lr.output_throughput
            rows.append(
                (c, n, lr.failed, client_rate, st["emitted_tok_s"], client_rate / st["emitted_tok_s"],
                 statistics.median(ov) * 1000, raw_rate, raw_rate / raw_srv, statistics.median(raw_ov) * 1000,
                 client_rate / raw_rate)
            )
    finally:
        proc.terminate()
        proc.wait()
    print(f"bench client vs fake server ({a.tokens} tokens/request, 1 token per chunk, SGLang cumulative-text chunks)")
    hdr = ("conc", "reqs", "fail", "client tok/s", "server tok/s", "ratio", "TTFT ovh p50 ms",
           "raw tok/s", "raw ratio", "raw ovh ms", "client/raw")
    print("  ".join(f"{h:>14}" if i > 2 else f"{h:>5}" for i, h in enumerate(hdr)))
    for row in rows:
        c, n, f, cr, sr, ratio, ov, rr, rratio, rov, rel = row
        print(f"{c:>5}  {n:>5}  {f:>5}  {cr:>14,.0f}  {sr:>14,.0f}  {ratio:>14.3f}  {ov:>14.3f}  "
              f"{rr:>14,.0f}  {rratio:>14.3f}  {rov:>14.3f}  {rel:>14.3f}")
    ok = all(r[5] >= 0.95 for r in rows) and all(r[6] <= 1.0 for r in rows)
    print(f"goals (ratio >= 0.95, TTFT overhead p50 <= 1 ms): {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
