"""FastAPI routes of the reference engine (SGLang 0.5.17 shapes) and the process entry point."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
import time
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from .decoding import SamplingParams
from .server import BadRequest, Engine, Req, log


def _err(message: str, status: int = 400) -> JSONResponse:
    kind = {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}.get(status, "Error")
    return JSONResponse({"object": "error", "message": message, "type": kind, "param": None, "code": status},
                        status_code=status)


async def _json(request: Request) -> dict:
    raw = await request.body()
    try:
        body = json.loads(raw or b"null")
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"malformed JSON body: {exc}") from exc
    if not isinstance(body, dict):
        raise BadRequest("the JSON body must be an object")
    return body


def _num(d: dict, key: str, typ, default, lo=None, hi=None, lo_open=False):
    v = d.get(key, default)
    if v is None:
        return default
    fractional_int = typ is int and isinstance(v, float) and not v.is_integer()
    if isinstance(v, bool) or not isinstance(v, (int, float)) or fractional_int:
        raise BadRequest(f"sampling parameter {key!r} must be a number, got {v!r}")
    v = typ(v)
    if lo is not None and (v <= lo if lo_open else v < lo):
        raise BadRequest(f"sampling parameter {key!r} must be {'>' if lo_open else '>='} {lo}, got {v}")
    if hi is not None and v > hi:
        raise BadRequest(f"sampling parameter {key!r} must be <= {hi}, got {v}")
    return v


#: SGLang's native routes, absent from vLLM's API server (the route list of a real vLLM 0.26 boot:
#: tests/data/vllm-0.26.0/C_draft_graph.server.log "Route: …" lines).
SGLANG_ONLY_ROUTES = frozenset({"/generate", "/health_generate", "/get_server_info", "/server_info",
                                "/get_model_info", "/model_info", "/flush_cache"})


def _spawn_engine_core():
    """Start the ``VLLM::EngineCore`` child of the vLLM surface (:mod:`.engine_core`)."""
    import subprocess

    proc = subprocess.Popen([sys.executable, "-m", "dynocell.engine.reference.engine_core", "VLLM::EngineCore"],
                            stdin=subprocess.DEVNULL)
    log(f"(EngineCore pid={proc.pid}) started")
    return proc


def _sse(obj: object) -> bytes:
    """One server-sent event carrying ``obj`` as JSON."""
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _finish_str(fr) -> str | None:
    if not fr:
        return None
    return {"length": "length", "stop": "stop", "abort": "abort"}.get(fr["type"], fr["type"])


def _usage(snap) -> dict:
    m = snap["meta_info"]
    return {"prompt_tokens": m["prompt_tokens"], "completion_tokens": m["completion_tokens"],
            "total_tokens": m["prompt_tokens"] + m["completion_tokens"]}


def _mark_disconnected(req: Req) -> None:
    """A stream ended before its generation did: the client went away; abort the request."""
    req.aborted = req.aborted or ("client disconnected" if not req.gen or not req.gen.finished else None)


async def _wait_done(req: Req) -> dict:
    while True:
        kind, payload = await req.events.get()
        if kind == "done":
            return payload


class _Routes:
    """The endpoints over one :class:`Engine`: SGLang's native routes (``/generate``, ``/health``,
    ``/get_server_info``, profiling…) and the OpenAI-compatible ones (``/v1/completions``,
    ``/v1/chat/completions``, ``/v1/models``). Bad input raises :class:`BadRequest` (400; 503
    while not ready)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # ---- request checks ----------------------------------------------------------------------
    def sampling(self, d: dict | None) -> SamplingParams:
        engine = self.engine
        d = d or {}
        if not isinstance(d, dict):
            raise BadRequest("'sampling_params' must be an object")
        gd = engine.gen_defaults
        stop = d.get("stop") or []
        if isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise BadRequest("'stop' must be a string or a list of strings")
        mnt = d.get("max_new_tokens", 128)
        if mnt is None:
            mnt = engine.context_length
        sp = SamplingParams(
            max_new_tokens=_num({"max_new_tokens": mnt}, "max_new_tokens", int, 128, lo=0, lo_open=True),
            temperature=_num(d, "temperature", float, float(gd.get("temperature", 1.0)), lo=0),
            top_p=_num(d, "top_p", float, float(gd.get("top_p", 1.0)), lo=0, hi=1, lo_open=True),
            top_k=_num(d, "top_k", int, int(gd.get("top_k", -1) or -1)),
            stop=stop,
            stop_token_ids=list(d.get("stop_token_ids") or []),
            ignore_eos=bool(d.get("ignore_eos", False)),
            seed=_num(d, "seed", int, None) if d.get("seed") is not None else None,
        )
        if sp.top_k == 0 or sp.top_k < -1:
            raise BadRequest("sampling parameter 'top_k' must be -1 (all) or >= 1")
        return sp

    def encode(self, text) -> list[int]:
        if not isinstance(text, str):
            raise BadRequest("'text' must be a string")
        return self.engine.tokenizer.encode(text, add_special_tokens=False).ids

    def check_ids(self, ids) -> list[int]:
        engine = self.engine
        if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise BadRequest("'input_ids' must be a non-empty list of integers")
        vocab = engine.target.config.vocab_size
        bad = [i for i in ids if i < 0 or i >= vocab]
        if bad:
            raise BadRequest(f"'input_ids' holds ids outside the vocabulary [0, {vocab}): {bad[:5]}")
        if len(ids) >= engine.context_length:
            raise BadRequest(f"The input ({len(ids)} tokens) is longer than the model's context length "
                             f"({engine.context_length} tokens).")
        return ids

    def ensure_ready(self) -> None:
        if not self.engine.ready:
            raise BadRequest("the server is not ready (starting or shutting down)", 503)

    async def run(self, ids: list[int], sp: SamplingParams, stream: bool, rid: str | None = None) -> Req:
        req = Req(rid=rid or uuid.uuid4().hex, prompt_ids=ids, sp=sp, loop=asyncio.get_running_loop(),
                  events=asyncio.Queue(), stream=stream)
        self.engine.submit(req)
        return req

    async def _generate_one(self, body: dict, text, ids, sp_d, stream: bool):
        if ids is None:
            if text is None:
                raise BadRequest("either 'text' or 'input_ids' is required")
            ids = self.encode(text)
            if not ids:
                raise BadRequest("'text' is empty")
        ids = self.check_ids(ids)
        sp = self.sampling(sp_d)
        return await self.run(ids, sp, stream, body.get("rid") if isinstance(body.get("rid"), str) else None)

    def add_logprobs(self, snap: dict, prompt_ids: list[int], k: Any) -> None:
        """SGLang's ``return_logprob`` / ``top_logprobs_num``: the chosen token's and the top-k log-probabilities
        of every output token (``meta_info.output_token_logprobs`` / ``output_top_logprobs``)."""
        from dynocell.engine.reference.decoding import top_logprobs

        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= 20):
            raise BadRequest("'top_logprobs_num' must be a whole number 0..20")
        engine = self.engine
        chosen, top = engine.run_command(lambda: top_logprobs(engine.target, prompt_ids, snap["output_ids"], k or 1))
        snap["meta_info"]["output_token_logprobs"] = chosen
        snap["meta_info"]["output_top_logprobs"] = top if k else [None] * len(chosen)

    def completion_logprobs(self, prompt_ids: list[int], output_ids: list[int], k: Any, as_ids: bool) -> dict:
        """vLLM's ``/v1/completions`` ``logprobs`` (OpenAI legacy shape, vLLM 0.2x
        ``OpenAIServingCompletion._create_completion_logprobs``): ``tokens``, ``token_logprobs``,
        ``top_logprobs`` (per token a dict of the chosen token and the ``k`` best, key → logprob) and
        ``text_offset`` (cumulative length of the token strings); ``as_ids`` = ``return_tokens_as_token_ids``
        (keys ``"token_id:N"``)."""
        from dynocell.engine.reference.decoding import top_logprobs

        if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= 20:
            raise BadRequest("'logprobs' must be a whole number 0..20")
        engine = self.engine
        chosen, top = engine.run_command(lambda: top_logprobs(engine.target, prompt_ids, output_ids, max(k, 1)))

        def key(t: int) -> str:
            return f"token_id:{t}" if as_ids else engine.tokenizer.decode([t], skip_special_tokens=False)

        tokens = [key(t) for t in output_ids]
        offsets, at = [], 0
        for tok in tokens:
            offsets.append(at)
            at += len(tok)
        tops = []
        for c, best in zip(chosen, top):
            d = {key(c[1]): max(c[0], -9999.0)}
            for lp, t, _ in best[:k]:
                d.setdefault(key(t), max(lp, -9999.0))
            tops.append(d)
        return {"text_offset": offsets, "token_logprobs": [max(c[0], -9999.0) for c in chosen], "tokens": tokens,
                "top_logprobs": tops}

    # ---- SGLang's native routes --------------------------------------------------------------
    async def health(self):
        return Response(status_code=200 if self.engine.ready else 503)

    async def health_generate(self):
        engine = self.engine
        if not engine.ready:
            return Response(status_code=503)
        req = await self.run([engine.tokenizer.encode("a").ids[0]], SamplingParams(max_new_tokens=1, temperature=0),
                             False)
        snap = await _wait_done(req)
        ok = snap["meta_info"]["finish_reason"] and snap["meta_info"]["finish_reason"]["type"] != "abort"
        return Response(status_code=200 if ok else 503)

    async def get_server_info(self):
        return self.engine.server_info()

    async def get_model_info(self):
        engine = self.engine
        return {"model_path": engine.model_path, "tokenizer_path": engine.args.tokenizer_path or engine.model_path,
                "is_generation": True, "preferred_sampling_params": None, "weight_version": "default",
                "has_image_understanding": False, "has_audio_understanding": False, "model_type": "llama",
                "architectures": [engine.target.architecture]}

    async def models(self):
        engine = self.engine
        return {"object": "list", "data": [{"id": engine.served_model_name, "object": "model",
                                            "created": int(engine.t0), "owned_by": "sglang",
                                            "root": engine.model_path, "max_model_len": engine.context_length}]}

    async def metrics(self):
        engine = self.engine
        if not (engine.args.enable_metrics or engine.vllm_surface):  # vLLM serves /metrics always
            return _err("metrics are disabled: start the engine with --enable-metrics", 404)
        return Response(engine.metrics_text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def flush_cache(self):
        return PlainTextResponse("Cache flushed.\nPlease check backend logs for more details. (When there are "
                                 "running or waiting requests, the operation will not be performed.)\n")

    async def start_profile(self, request: Request):
        raw = await request.body()
        body = {}
        if raw.strip():
            body = await _json(request)
        if body.get("num_steps") is not None:
            _num(body, "num_steps", int, None, lo=1)
        msg = await asyncio.to_thread(self.engine.start_profile, body)
        return PlainTextResponse(msg)

    async def stop_profile(self):
        msg = await asyncio.to_thread(self.engine.stop_profile)
        return PlainTextResponse(msg)

    async def generate(self, request: Request):
        self.ensure_ready()
        body = await _json(request)
        stream = bool(body.get("stream", False))
        text, ids, sp_d = body.get("text"), body.get("input_ids"), body.get("sampling_params")
        batch = isinstance(text, list) or (isinstance(ids, list) and ids and isinstance(ids[0], list))
        if batch:
            if stream:
                raise BadRequest("streaming is not supported for batched requests in the reference engine")
            return await self._generate_batch(body, text, ids, sp_d)
        req = await self._generate_one(body, text, ids, sp_d, stream)
        if not stream:
            snap = await _wait_done(req)
            snap["meta_info"]["e2e_latency"] = time.time() - req.received
            if body.get("return_logprob"):
                self.add_logprobs(snap, req.prompt_ids, body.get("top_logprobs_num"))
            return snap

        async def gen():
            try:
                while True:
                    kind, snap = await req.events.get()
                    if kind == "update" and snap["text"].endswith("\ufffd"):
                        continue  # an incomplete UTF-8 character: wait for the rest
                    yield _sse(snap)
                    if kind == "done":
                        break
                yield b"data: [DONE]\n\n"
            finally:
                _mark_disconnected(req)
        return StreamingResponse(gen(), media_type="text/event-stream")

    async def _generate_batch(self, body: dict, text, ids, sp_d) -> list:
        items = text if isinstance(text, list) else ids
        n = len(items)
        if n == 0:
            raise BadRequest("empty batch")
        sps = sp_d if isinstance(sp_d, list) else [sp_d] * n
        if len(sps) != n:
            raise BadRequest("'sampling_params' list must have one entry per prompt")
        reqs = []
        for i in range(n):
            reqs.append(await self._generate_one(body, items[i] if isinstance(text, list) else None,
                                                 None if isinstance(text, list) else items[i], sps[i], False))
        return list(await asyncio.gather(*(_wait_done(r) for r in reqs)))

    # ---- OpenAI-compatible -------------------------------------------------------------------
    def oa_sampling(self, body: dict, default_max: int) -> SamplingParams:
        mt = body.get("max_completion_tokens", body.get("max_tokens", default_max))
        d = {"max_new_tokens": mt, "temperature": body.get("temperature"), "top_p": body.get("top_p"),
             "top_k": body.get("top_k"), "stop": body.get("stop"), "seed": body.get("seed"),
             "ignore_eos": body.get("ignore_eos", False)}
        if (body.get("n") or 1) != 1:
            raise BadRequest("only n=1 is supported")
        return self.sampling({k: v for k, v in d.items() if v is not None})

    async def openai(self, body: dict, ids: list[int], chat: bool):
        sp = self.oa_sampling(body, 16 if not chat else 256)
        stream = bool(body.get("stream", False))
        req = await self.run(self.check_ids(ids), sp, stream)
        head = {"id": ("chatcmpl-" if chat else "cmpl-") + req.rid, "created": int(time.time()),
                "model": body.get("model") or self.engine.served_model_name}
        if stream:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(_openai_stream(req, head, chat, include_usage), media_type="text/event-stream")
        snap = await _wait_done(req)
        fr = snap["meta_info"]["finish_reason"]
        choice = {"index": 0, "logprobs": None, "finish_reason": _finish_str(fr),
                  "matched_stop": fr.get("matched") if fr else None}
        if chat:
            choice["message"] = {"role": "assistant", "content": snap["text"], "tool_calls": None,
                                 "reasoning_content": None}
        else:
            choice["text"] = snap["text"]
            if body.get("return_token_ids"):
                choice["prompt_token_ids"], choice["token_ids"] = list(ids), list(snap["output_ids"])
            if body.get("logprobs") is not None:
                choice["logprobs"] = self.completion_logprobs(ids, snap["output_ids"], body.get("logprobs"),
                                                              bool(body.get("return_tokens_as_token_ids")))
        return {"id": head["id"], "object": "chat.completion" if chat else "text_completion",
                "created": head["created"], "model": head["model"], "choices": [choice], "usage": _usage(snap),
                "metadata": {"weight_version": "default"}}

    async def completions(self, request: Request):
        self.ensure_ready()
        body = await _json(request)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if isinstance(prompt, str):
            ids = self.encode(prompt)
        elif isinstance(prompt, list) and prompt and all(isinstance(i, int) for i in prompt):
            ids = prompt
        else:
            raise BadRequest("'prompt' is required: a string or a list of token ids (one prompt)")
        return await self.openai(body, ids, chat=False)

    async def chat(self, request: Request):
        self.ensure_ready()
        body = await _json(request)
        msgs = body.get("messages")
        if not isinstance(msgs, list) or not msgs:
            raise BadRequest("'messages' is required: a non-empty list of {role, content}")
        parts = []
        for m in msgs:
            if not isinstance(m, dict) or not isinstance(m.get("content"), str):
                raise BadRequest("each message needs a string 'content'")
            parts.append(f"{m.get('role', 'user')}: {m['content']}\n")
        parts.append("assistant:")
        return await self.openai(body, self.encode("".join(parts)), chat=True)


async def _openai_stream(req: Req, head: dict, chat: bool, include_usage: bool):
    """The OpenAI streaming answer of ``req``: (chat: a first role chunk,) one chunk per text
    delta, the finish reason on the last, usage when asked for, then ``[DONE]``."""
    sent = ""
    base = {"id": head["id"], "object": "chat.completion.chunk" if chat else "text_completion",
            "created": head["created"], "model": head["model"]}
    if chat:
        yield _sse({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                         "logprobs": None, "finish_reason": None}]})
    last = None
    try:
        while True:
            kind, snap = await req.events.get()
            last = snap
            text = snap["text"]
            if kind == "update" and text.endswith("\ufffd"):
                continue
            delta = text[len(sent):] if text.startswith(sent) else text
            sent = text
            fr = _finish_str(snap["meta_info"]["finish_reason"]) if kind == "done" else None
            ch: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": fr}
            if chat:
                ch["delta"] = {"content": delta} if delta or fr is None else {}
            else:
                ch["text"] = delta
            yield _sse({**base, "choices": [ch]})
            if kind == "done":
                break
        if include_usage and last is not None:
            yield _sse({**base, "choices": [], "usage": _usage(last)})
        yield b"data: [DONE]\n\n"
    finally:
        _mark_disconnected(req)


def create_app(engine: Engine) -> FastAPI:
    """The FastAPI app serving SGLang's endpoints over ``engine`` (with ``--surface vllm``,
    SGLang's native routes answer 404 as vLLM 0.26's API server does)."""
    app = FastAPI(title="dynocell reference engine")
    r = _Routes(engine)

    @app.exception_handler(BadRequest)
    async def _bad(_request, exc: BadRequest):
        return _err(exc.message, exc.status)

    @app.middleware("http")
    async def _vllm_routes(request: Request, call_next):
        # vLLM 0.26 has none of SGLang's native routes: with --surface vllm they answer 404 as vLLM does.
        if engine.vllm_surface and request.url.path in SGLANG_ONLY_ROUTES:
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        return await call_next(request)

    app.get("/health")(r.health)
    app.get("/health_generate")(r.health_generate)
    app.get("/get_server_info")(r.get_server_info)
    app.get("/server_info")(r.get_server_info)
    app.get("/get_model_info")(r.get_model_info)
    app.get("/model_info")(r.get_model_info)
    app.get("/v1/models")(r.models)
    app.get("/metrics")(r.metrics)
    app.api_route("/flush_cache", methods=["GET", "POST"])(r.flush_cache)
    app.post("/start_profile")(r.start_profile)
    app.post("/stop_profile")(r.stop_profile)
    app.post("/generate")(r.generate)
    app.post("/v1/completions")(r.completions)
    app.post("/v1/chat/completions")(r.chat)
    return app


def _uvicorn_log_config(level: str) -> dict:
    fmt = "[%(asctime)s] %(levelprefix)s %(message)s"
    return {
        "version": 1, "disable_existing_loggers": False,
        "formatters": {
            "default": {"()": "uvicorn.logging.DefaultFormatter", "fmt": fmt, "datefmt": "%Y-%m-%d %H:%M:%S",
                        "use_colors": False},
            "access": {"()": "uvicorn.logging.AccessFormatter",
                       "fmt": '[%(asctime)s] %(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s',
                       "datefmt": "%Y-%m-%d %H:%M:%S", "use_colors": False},
        },
        "handlers": {
            "default": {"formatter": "default", "class": "logging.StreamHandler", "stream": "ext://sys.stdout"},
            "access": {"formatter": "access", "class": "logging.StreamHandler", "stream": "ext://sys.stdout"},
        },
        "loggers": {
            "uvicorn": {"handlers": ["default"], "level": level.upper(), "propagate": False},
            "uvicorn.error": {"level": level.upper()},
            "uvicorn.access": {"handlers": ["access"], "level": "WARNING", "propagate": False},
        },
    }


def _log_args(args, spec) -> None:
    """The engine's argument lines as SGLang (``server_args=ServerArgs(…)``) and, with ``--surface
    vllm``, vLLM 0.26 (``non-default args: {…}``, its first line after its imports) print them."""
    if args.surface == "vllm":
        log(f"non-default args: {{'model_tag': {str(args.model_path)!r}, 'host': {args.host!r}, 'port': {args.port}, "
            f"'served_model_name': {[args.served_model_name] if args.served_model_name else None!r}}}")
    log(f"server_args=ServerArgs(model_path={args.model_path!r}, host={args.host!r}, port={args.port}, "
        f"speculative_algorithm={spec.algorithm!r}, speculative_draft_model_path="
        f"{args.speculative_draft_model_path!r}, speculative_num_steps={spec.num_steps}, "
        f"speculative_eagle_topk={spec.eagle_topk}, speculative_num_draft_tokens={spec.num_draft_tokens}, "
        f"speculative_draft_mode={args.speculative_draft_mode!r}, context_length={args.context_length}, "
        f"enable_metrics={args.enable_metrics}, decode_log_interval={args.decode_log_interval})")


def _warmup_request(engine: Engine) -> bool:
    """Generate 8 tokens of "The" on a private event loop, as SGLang's server warmup does;
    False when the engine refused it (shutting down)."""
    loop = asyncio.new_event_loop()
    try:
        req = Req(rid="warmup", prompt_ids=engine.tokenizer.encode("The").ids or [3],
                  sp=SamplingParams(max_new_tokens=8, temperature=0), loop=loop, events=asyncio.Queue(),
                  stream=False)
        engine.submit(req)
        while True:
            kind, _ = loop.run_until_complete(req.events.get())
            if kind == "done":
                return True
    except BadRequest:
        return False
    finally:
        loop.close()


def _warmup(server, engine: Engine, args) -> None:
    """Thread body: once uvicorn listens, wait ``--startup-delay``, run the warmup request
    (unless ``--skip-server-warmup``), then mark the engine ready and log the ready lines of
    SGLang (``The server is fired up and ready to roll!``) or vLLM (``Application startup complete.``)."""
    while not server.started and not server.should_exit:
        time.sleep(0.02)
    if server.should_exit:
        return
    if args.startup_delay > 0:
        time.sleep(args.startup_delay)
    if not args.skip_server_warmup and not _warmup_request(engine):
        return
    if not engine.stopping:
        engine.ready = True
        if engine.vllm_surface:  # vLLM: engine init, then the API server's lines
            log(f"init engine (profile, create kv cache, warmup model) took {time.time() - engine.t0:.2f} s")
            log(f"Starting vLLM API server on http://{args.host}:{args.port}")
            log("Application startup complete.")
        else:
            log("The server is fired up and ready to roll!")


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m dynocell.engine.reference``; returns the exit code (0 on SIGTERM/SIGINT)."""
    import uvicorn

    with contextlib.suppress(Exception):
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # typeshed: TextIO; a TextIOWrapper
        sys.stderr.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # (suppressed if replaced)
    from .args import parse

    args, spec = parse(argv)
    _log_args(args, spec)
    import torch

    torch.set_num_threads(max(1, args.num_threads))
    engine = Engine(args, spec)
    try:
        engine.load()
    except Exception as exc:  # noqa: BLE001 - tokenizers/safetensors raise bare Exception for a missing file
        log(f"Error: cannot load the model from {args.model_path!r}: {exc} "
            f"(give --model-path a Hugging Face folder with config.json, weights and tokenizer.json)")
        return 2
    app = create_app(engine)

    class _Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            orig = {s: signal.signal(s, self.handle_exit) for s in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for s, h in orig.items():
                    signal.signal(s, h)

        def handle_exit(self, sig, frame):
            engine.begin_shutdown()
            super().handle_exit(sig, frame)

    config = uvicorn.Config(app, host=args.host, port=args.port, log_config=_uvicorn_log_config(args.log_level),
                            access_log=args.log_level == "debug", timeout_graceful_shutdown=2,
                            timeout_keep_alive=5, lifespan="off")
    server = _Server(config)
    threading.Thread(target=_warmup, args=(server, engine, args), name="warmup", daemon=True).start()
    core = _spawn_engine_core() if engine.vllm_surface else None
    server.run()
    engine.begin_shutdown()
    if core is not None and core.poll() is None:
        core.terminate()
    engine.worker.join(timeout=2)
    log("Shutdown complete.")
    # Leave now: interpreter finalisation of torch's modules takes 3-4 s of CPU on an idle
    # engine, and SIGTERM must end the process within 5 s (issue 3). Logs are flushed first.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
