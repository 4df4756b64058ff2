"""A small httpx client of the engine HTTP surface (SGLang's; the reference engine speaks the same).

Endpoints (SGLang 0.5.17 ``sglang/srt/entrypoints/http_server.py``):
``GET /health``, ``GET /health_generate``, ``GET /get_server_info``,
``GET /get_model_info``, ``GET /metrics`` (needs ``--enable-metrics``),
``POST /generate``, ``POST /start_profile``, ``POST /stop_profile``,
``POST /flush_cache``.

Every call returns an :class:`HttpResult` — ``status`` (HTTP code),
``latency_ms`` (wall time of the request, ms), ``body`` (parsed JSON when the
response is JSON, else None) and ``text`` — whatever the status: a 503 is an
answer, not an error. Only transport failures raise
:class:`EngineUnreachable` (an :class:`~dynocell.errors.EngineError`) with
``kind`` = ``"connect"`` (refused / no route), ``"timeout"`` or
``"protocol"`` (garbage on the socket) and a message naming the URL.

``timeout_s`` is each call's *total* deadline (connect, headers and the whole body together), besides the
timeout of each read: a server that dribbles a byte every 2 s keeps every read under its timeout and used to
hold ``dynocell ps``, ``attach``, ``health`` and the panel for minutes (issue 32, item 10). In the synchronous
client a timer shuts the request's socket down at the deadline (each request opens its own connection, so the
timer knows its socket: engine calls are a few a second at most, on loopback); the async client cancels the
request at the deadline (``asyncio.timeout``).

:class:`EngineClient` is synchronous (one ``httpx.Client``, use as a context
manager or call ``close()``); :class:`AsyncEngineClient` has the same methods
as coroutines.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx

from dynocell.errors import EngineError


class EngineUnreachable(EngineError):
    """The engine did not answer at the transport level. ``kind``: connect | timeout | protocol; ``url``."""

    def __init__(self, url: str, kind: str, detail: str) -> None:
        hints = {
            "connect": "is the engine running and listening on that host/port? (dynocell ps)",
            "timeout": "the engine is alive but slow or stuck: check its log and /metrics",
            "protocol": "something else may be listening on that port",
        }
        super().__init__(f"engine at {url} unreachable ({kind}): {detail}", hints.get(kind))
        self.url = url
        self.kind = kind


@dataclass(frozen=True)
class HttpResult:
    """One answer: ``status`` (HTTP code), ``latency_ms`` (ms), ``body`` (JSON or None), ``text``."""

    status: int
    latency_ms: float
    body: Any
    text: str

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


#: Largest answer read from an engine, bytes (after any gzip): a big engine's ``/metrics`` page is a
#: few MB. A longer answer is refused as it streams in (``protocol`` error), never buffered whole: a
#: hostile or broken server behind ``dynocell attach URL`` sending gigabytes took 12 GB of memory.
MAX_ANSWER_BYTES = 64 * 1024 * 1024


class _TooLong(Exception):
    """An answer past :data:`MAX_ANSWER_BYTES`."""


def _add_chunk(buf: bytearray, chunk: bytes) -> None:
    buf += chunk
    if len(buf) > MAX_ANSWER_BYTES:
        raise _TooLong(f"the answer is longer than {MAX_ANSWER_BYTES // (1024 * 1024)} MiB, "
                       "the most dynocell reads from an engine")


def _result(resp: httpx.Response, content: bytes, t0: float) -> HttpResult:
    latency_ms = (time.perf_counter() - t0) * 1000.0
    body: Any = None
    ctype = resp.headers.get("content-type", "")
    if "json" in ctype:
        try:
            body = json.loads(content)
        except (ValueError, RecursionError):  # not JSON, or nested deeper than Python's parser goes
            body = None
    return HttpResult(resp.status_code, latency_ms, body, content.decode(resp.encoding or "utf-8", errors="replace"))


class _Deadline:
    """The total deadline of one synchronous request: ``limit_s`` seconds after it is made, the request's
    socket (learnt from httpcore's ``connection.connect_tcp.complete`` trace event) is shut down, which ends a
    read blocked in another frame of the same thread; ``expired`` then says why the request failed."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self.expired = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(limit_s, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """httpx's ``trace`` extension callback: keeps the socket of the connection made for this request."""
        if event == "connection.connect_tcp.complete":
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            with self._lock:
                self._sock = sock
                fired = self.expired
            if fired:
                self._shutdown()

    def _fire(self) -> None:
        with self._lock:
            self.expired = True
        self._shutdown()

    def _shutdown(self) -> None:
        with self._lock:
            sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed: the request ended on its own
                sock.shutdown(socket.SHUT_RDWR)

    def check(self) -> None:
        """Raise httpx.ReadTimeout once the deadline has passed (between chunks of a body)."""
        if self.expired:
            raise httpx.ReadTimeout(f"no whole answer within {self.limit_s:g} s")

    def cancel(self) -> None:
        self._timer.cancel()


def _deadline_error(url: str, limit_s: float) -> EngineUnreachable:
    return EngineUnreachable(url, "timeout", f"no whole answer within {limit_s:g} s (the call's deadline)")


def _translate(url: str, exc: Exception) -> EngineUnreachable:
    if isinstance(exc, _TooLong):
        return EngineUnreachable(url, "protocol", str(exc))
    if isinstance(exc, httpx.TimeoutException):
        return EngineUnreachable(url, "timeout", type(exc).__name__)
    if isinstance(exc, (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
        kind = "connect" if isinstance(exc, httpx.ConnectError) else "protocol"
        return EngineUnreachable(url, kind, str(exc) or type(exc).__name__)
    return EngineUnreachable(url, "protocol", str(exc) or type(exc).__name__)


class EngineClient:
    """Synchronous client of one engine at ``base_url`` (e.g. ``http://127.0.0.1:30000``).

    ``timeout_s`` is the default deadline of a whole request (seconds; also each read's timeout); each method
    takes an optional ``timeout_s`` override. Connections are not kept alive (see the module docstring).
    """

    def __init__(self, base_url: str, timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s, trust_env=False,
                                  limits=httpx.Limits(max_keepalive_connections=0))

    def __enter__(self) -> "EngineClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, *, json: Any = None, timeout_s: float | None = None) -> HttpResult:
        """Send one request and read its whole answer within ``timeout_s`` (default: the client's) seconds in
        all; raises EngineUnreachable on transport failure only (``timeout`` once the deadline passes)."""
        url = self.base_url + path
        limit = timeout_s if timeout_s is not None else self.timeout_s
        t0 = time.perf_counter()
        buf = bytearray()
        deadline = _Deadline(limit)
        try:
            with self._http.stream(method, path, json=json, timeout=limit,
                                   extensions={"trace": deadline.trace}) as resp:
                for chunk in resp.iter_bytes():
                    _add_chunk(buf, chunk)
                    deadline.check()
        except (httpx.HTTPError, _TooLong) as exc:
            if deadline.expired:
                raise _deadline_error(url, limit) from None
            raise _translate(url, exc) from None
        finally:
            deadline.cancel()
        return _result(resp, bytes(buf), t0)

    def health(self, timeout_s: float | None = None) -> HttpResult:
        """``GET /health``: 200 when serving, 503 while starting (SGLang)."""
        return self.request("GET", "/health", timeout_s=timeout_s)

    def health_generate(self, timeout_s: float | None = None) -> HttpResult:
        """``GET /health_generate``: a one-token generation."""
        return self.request("GET", "/health_generate", timeout_s=timeout_s)

    def server_info(self, timeout_s: float | None = None) -> HttpResult:
        """``GET /get_server_info``: server args (model_path, tp_size, speculative_*), version…"""
        return self.request("GET", "/get_server_info", timeout_s=timeout_s)

    def model_info(self, timeout_s: float | None = None) -> HttpResult:
        """``GET /get_model_info``."""
        return self.request("GET", "/get_model_info", timeout_s=timeout_s)

    def metrics_text(self, timeout_s: float | None = None) -> HttpResult:
        """``GET /metrics`` (Prometheus text in ``.text``)."""
        return self.request("GET", "/metrics", timeout_s=timeout_s)

    def models(self, timeout_s: float | None = None) -> HttpResult:
        """``GET /v1/models`` (OpenAI list: ``{"data": [{"id": served name, …}]}``)."""
        return self.request("GET", "/v1/models", timeout_s=timeout_s)

    def completions(self, payload: dict[str, Any], timeout_s: float | None = None) -> HttpResult:
        """``POST /v1/completions`` (OpenAI; non-streaming unless the payload asks)."""
        return self.request("POST", "/v1/completions", json=payload, timeout_s=timeout_s)

    def generate(self, payload: dict[str, Any], timeout_s: float | None = None) -> HttpResult:
        """``POST /generate`` with ``{"text"|"input_ids", "sampling_params", ...}`` (non-streaming)."""
        return self.request("POST", "/generate", json=payload, timeout_s=timeout_s)

    def start_profile(self, req: dict[str, Any] | None = None, timeout_s: float | None = None) -> HttpResult:
        """``POST /start_profile`` with ``{output_dir, num_steps, activities, ...}``."""
        return self.request("POST", "/start_profile", json=req or {}, timeout_s=timeout_s)

    def stop_profile(self, timeout_s: float | None = None) -> HttpResult:
        """``POST /stop_profile``."""
        return self.request("POST", "/stop_profile", json={}, timeout_s=timeout_s)

    def flush_cache(self, timeout_s: float | None = None) -> HttpResult:
        """``POST /flush_cache``."""
        return self.request("POST", "/flush_cache", timeout_s=timeout_s)


class AsyncEngineClient:
    """Async twin of :class:`EngineClient` (same methods, awaitable; ``aclose()``)."""

    def __init__(self, base_url: str, timeout_s: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout_s, trust_env=False)

    async def __aenter__(self) -> "AsyncEngineClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def request(self, method: str, path: str, *, json: Any = None, timeout_s: float | None = None) -> HttpResult:
        """:meth:`EngineClient.request` as a coroutine: the whole request is cancelled at its deadline."""
        url = self.base_url + path
        limit = timeout_s if timeout_s is not None else self.timeout_s
        t0 = time.perf_counter()
        buf = bytearray()
        try:
            async with asyncio.timeout(limit):
                async with self._http.stream(method, path, json=json, timeout=limit) as resp:
                    async for chunk in resp.aiter_bytes():
                        _add_chunk(buf, chunk)
        except TimeoutError:
            raise _deadline_error(url, limit) from None
        except (httpx.HTTPError, _TooLong) as exc:
            raise _translate(url, exc) from None
        return _result(resp, bytes(buf), t0)

    async def health(self, timeout_s: float | None = None) -> HttpResult:
        return await self.request("GET", "/health", timeout_s=timeout_s)

    async def health_generate(self, timeout_s: float | None = None) -> HttpResult:
        return await self.request("GET", "/health_generate", timeout_s=timeout_s)

    async def server_info(self, timeout_s: float | None = None) -> HttpResult:
        return await self.request("GET", "/get_server_info", timeout_s=timeout_s)

    async def model_info(self, timeout_s: float | None = None) -> HttpResult:
        return await self.request("GET", "/get_model_info", timeout_s=timeout_s)

    async def metrics_text(self, timeout_s: float | None = None) -> HttpResult:
        return await self.request("GET", "/metrics", timeout_s=timeout_s)

    async def generate(self, payload: dict[str, Any], timeout_s: float | None = None) -> HttpResult:
        return await self.request("POST", "/generate", json=payload, timeout_s=timeout_s)

    async def start_profile(self, req: dict[str, Any] | None = None, timeout_s: float | None = None) -> HttpResult:
        return await self.request("POST", "/start_profile", json=req or {}, timeout_s=timeout_s)

    async def stop_profile(self, timeout_s: float | None = None) -> HttpResult:
        return await self.request("POST", "/stop_profile", json={}, timeout_s=timeout_s)

    async def flush_cache(self, timeout_s: float | None = None) -> HttpResult:
        return await self.request("POST", "/flush_cache", timeout_s=timeout_s)
