"""A tiny streaming test server speaking SGLang's ``/generate`` and OpenAI ``/v1/completions`` SSE.

Stdlib only (raw asyncio HTTP/1.1 with keep-alive and chunked bodies, like
uvicorn's ``StreamingResponse``), so it is fast enough to benchmark the bench
client against (``benchmarks/bench_client.py``) and starts in ~50 ms for tests.

Wire format, copied from SGLang 0.5.17 ``entrypoints/http_server.py``
``generate_request``: one ``data: <json>\\n\\n`` per chunk, where the JSON has
the *cumulative* ``text``, the chunk's ``output_ids`` and a ``meta_info`` with
cumulative ``completion_tokens``; then ``data: [DONE]\\n\\n``. The final chunk's
``meta_info`` carries ``prompt_tokens``, ``completion_tokens``, ``e2e_latency``,
``finish_reason`` (``{"type": "length", "length": n}`` or ``{"type": "stop",
"matched": 2}``), ``request_received_ts``, ``response_sent_to_client_ts`` and,
with ``--spec-steps D``, the speculative fields (``spec_verify_ct``,
``spec_correct_drafts_histogram`` of D+1 buckets, ``spec_accept_length``,
``spec_accept_rate``, ...). Fake-only field: ``first_token_ts`` (time.time()
when the first content chunk was written), for TTFT-overhead measurement.

"Tokenizer": one token per UTF-8 byte of the prompt (like the reference
engine's byte-level model); each generated token is one short word.

Behaviour switches written into the prompt text (what a real engine sees):
``#fake:eos_at=N`` stop after N tokens (finish_reason stop) even with
ignore_eos; ``#fake:close_at=N`` drop the connection after N content chunks;
``#fake:error`` answer one ``{"error": {...}}`` chunk; ``#fake:status=503``.

Endpoints: ``GET /health``, ``GET /stats`` (tokens emitted, busy window,
emitted tok/s since the last reset), ``POST /stats/reset``, ``POST /generate``,
``POST /v1/completions``.

Run: ``python tests/servers/fake_stream.py --port 0 [--ttft-ms X] [--itl-ms Y]
[--tokens-per-chunk K] [--spec-steps D]``; prints ``LISTENING <port>`` first.
:func:`start_server` does that in a subprocess and returns the base URL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import random
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

WORDS = ("alpha ", "beta ", "gamma ", "delta ", "eps ", "zeta ", "eta ", "theta ")
_FAKE = re.compile(r"#fake:(\w+)(?:=(\d+))?")


@dataclass
class Stats:
    tokens: int = 0
    requests: int = 0
    first_recv: float | None = None
    last_emit: float | None = None

    def as_dict(self) -> dict:
        busy = (self.last_emit - self.first_recv) if self.first_recv and self.last_emit else 0.0
        return {
            "tokens_emitted": self.tokens,
            "requests": self.requests,
            "busy_s": busy,
            "emitted_tok_s": self.tokens / busy if busy > 0 else 0.0,
        }


@dataclass
class Options:
    ttft_ms: float = 0.0
    itl_ms: float = 0.0
    tokens_per_chunk: int = 1
    spec_steps: int = 0
    stats: Stats = field(default_factory=Stats)


def _controls(text: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2) or 1) for m in _FAKE.finditer(text)}


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes] | None:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    length = 0
    for line in lines[1:]:
        if line[:15].lower() == "content-length:":
            length = int(line[15:].strip())
    body = await reader.readexactly(length) if length else b""
    return method, path, body


def _send_json(writer: asyncio.StreamWriter, status: int, obj: object) -> None:
    body = json.dumps(obj).encode()
    writer.write(
        f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n".encode()
        + body
    )


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class _Plan:
    """The token groups (chunks) one request emits and its speculative bookkeeping."""

    def __init__(self, n: int, tokens_per_chunk: int, spec_steps: int, text: str) -> None:
        self.groups: list[int] = []
        self.hist = [0] * (spec_steps + 1) if spec_steps else None
        if spec_steps:
            # Deterministic per prompt; "Copy"-style prompts accept more (like verbatim text).
            rng = random.Random(hashlib.sha256(text.encode()).digest())
            p = 0.85 if "copy" in text.lower() else 0.55
            left = n
            while left > 0:
                k = 0
                while k < spec_steps and rng.random() < p:
                    k += 1
                step = min(k + 1, left)
                self.hist[step - 1] += 1
                self.groups.append(step)
                left -= step
        else:
            left = n
            while left > 0:
                step = min(tokens_per_chunk, left)
                self.groups.append(step)
                left -= step

    def spec_meta(self, spec_steps: int, completion: int) -> dict:
        if self.hist is None:
            return {}
        verify = sum(self.hist)
        correct = sum(k * h for k, h in enumerate(self.hist))
        proposed = verify * spec_steps
        return {
            "spec_verify_ct": verify,
            "spec_accept_length": completion / verify if verify else 0.0,
            "spec_accept_rate": correct / proposed if proposed else 0.0,
            "spec_num_correct_drafts": correct,
            "spec_num_proposed_drafts": proposed,
            "spec_accepted_drafts": correct,
            "spec_proposed_drafts": proposed,
            "spec_correct_drafts_histogram": list(self.hist),
            "spec_accept_histogram": list(self.hist),
        }


async def _stream(writer, opts: Options, body: dict, openai: bool, t_recv: float, wall_recv: float) -> bool:
    """Write one streamed generation. Returns False when the connection must be dropped."""
    stats = opts.stats
    text = body.get("prompt", "") if openai else body.get("text", "")
    sp = body if openai else (body.get("sampling_params") or {})
    max_new = int(sp.get("max_tokens" if openai else "max_new_tokens", 16))
    ctl = _controls(text)
    if "status" in ctl:
        _send_json(writer, ctl["status"], {"error": {"message": "fake status"}})
        return True
    n = min(max_new, ctl["eos_at"]) if "eos_at" in ctl else max_new
    prompt_tokens = len(text.encode())
    plan = _Plan(n, opts.tokens_per_chunk, opts.spec_steps, text)
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    if opts.ttft_ms:
        await asyncio.sleep(opts.ttft_ms / 1000)
    if "error" in ctl:
        writer.write(_chunk(b'data: {"error": {"message": "fake engine error"}}\n\n'))
        writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        return True
    rid = hashlib.md5(f"{wall_recv}{text[:64]}".encode()).hexdigest()
    out: list[str] = []
    done = 0
    first_ts = None
    for i, g in enumerate(plan.groups):
        if "close_at" in ctl and i >= ctl["close_at"]:
            await writer.drain()
            return False
        piece = "".join(WORDS[(done + j) % len(WORDS)] for j in range(g))
        ids = [100 + (done + j) % len(WORDS) for j in range(g)]
        done += g
        out.append(piece)
        last = i == len(plan.groups) - 1
        now_wall = time.time()
        if first_ts is None:
            first_ts = now_wall
        if openai:
            obj = {
                "id": rid,
                "object": "text_completion",
                "created": int(wall_recv),
                "model": body.get("model", "fake"),
                "choices": [
                    {"index": 0, "text": piece, "logprobs": None,
                     "finish_reason": ("length" if done == max_new else "stop") if last else None}
                ],
                "usage": None,
            }
        else:
            meta: dict = {"id": rid, "finish_reason": None, "prompt_tokens": prompt_tokens,
                          "completion_tokens": done, "cached_tokens": 0}
            if last:
                meta["finish_reason"] = (
                    {"type": "length", "length": done} if done == max_new else {"type": "stop", "matched": 2}
                )
                meta["e2e_latency"] = time.perf_counter() - t_recv
                meta["request_received_ts"] = wall_recv
                meta["first_token_ts"] = first_ts
                meta["response_sent_to_client_ts"] = now_wall
                meta.update(plan.spec_meta(opts.spec_steps, done))
            obj = {"text": "".join(out), "output_ids": ids, "meta_info": meta}
        writer.write(_chunk(b"data: " + json.dumps(obj).encode() + b"\n\n"))
        stats.tokens += g
        stats.last_emit = time.perf_counter()
        if opts.itl_ms:
            await writer.drain()
            await asyncio.sleep(opts.itl_ms / 1000 * g)
        elif i % 8 == 7:
            await writer.drain()
    if openai and (body.get("stream_options") or {}).get("include_usage"):
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": done, "total_tokens": prompt_tokens + done}
        obj = {"id": rid, "object": "text_completion", "created": int(wall_recv), "model": body.get("model", "fake"),
               "choices": [], "usage": usage}
        writer.write(_chunk(b"data: " + json.dumps(obj).encode() + b"\n\n"))
    writer.write(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    return True


async def _handle(opts: Options, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            try:
                req = await _read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            method, path, raw = req
            t_recv, wall_recv = time.perf_counter(), time.time()
            if path == "/health" or path == "/health_generate":
                _send_json(writer, 200, {})
            elif path == "/stats":
                _send_json(writer, 200, opts.stats.as_dict())
            elif path == "/stats/reset":
                opts.stats = Stats()
                _send_json(writer, 200, {})
            elif method == "POST" and path in ("/generate", "/v1/completions"):
                body = json.loads(raw or b"{}")
                st = opts.stats
                st.requests += 1
                if st.first_recv is None:
                    st.first_recv = t_recv
                if not body.get("stream"):
                    _send_json(writer, 400, {"error": {"message": "fake server only streams"}})
                elif not await _stream(writer, opts, body, path != "/generate", t_recv, wall_recv):
                    writer.transport.abort()
                    return
            else:
                _send_json(writer, 404, {"detail": "Not Found"})
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def serve(port: int, opts: Options) -> None:
    """Serve forever on 127.0.0.1:``port`` (0 = any free port); prints ``LISTENING <port>`` once bound."""
    server = await asyncio.start_server(lambda r, w: _handle(opts, r, w), "127.0.0.1", port, backlog=1024)
    print(f"LISTENING {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def start_server(*args: str) -> tuple[subprocess.Popen, str]:
    """Start this server in a subprocess on a free port; returns ``(process, base_url)``.

    The caller terminates the process (``proc.terminate(); proc.wait()``).
    Raises RuntimeError when it exits before announcing its port.
    """
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--port", "0", *args],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    if not line.startswith("LISTENING "):
        proc.kill()
        raise RuntimeError(f"fake server did not start: {line!r}")
    return proc, f"http://127.0.0.1:{int(line.split()[1])}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ttft-ms", type=float, default=0.0, help="delay before the first chunk")
    ap.add_argument("--itl-ms", type=float, default=0.0,
                    help="delay per token after each chunk (0 = as fast as it can)")
    ap.add_argument("--tokens-per-chunk", type=int, default=1)
    ap.add_argument("--spec-steps", type=int, default=0, help="simulate speculative decoding with D drafts per step")
    a = ap.parse_args()
    opts = Options(a.ttft_ms, a.itl_ms, max(1, a.tokens_per_chunk), a.spec_steps)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(a.port, opts))


if __name__ == "__main__":
    main()
