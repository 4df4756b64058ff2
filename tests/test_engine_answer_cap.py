"""An engine's answer is read up to a cap, never buffered whole: `dynocell attach URL` to a server
that streams gigabytes took 12 GB of memory and 34 s before saying "neither /get_server_info nor
/v1/models describes a model" (found by the newcomer pass, a hostile server on 127.0.0.1).

Real HTTP on 127.0.0.1: a server that answers every GET with an endless JSON string.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from dynocell.engine.client import MAX_ANSWER_BYTES, AsyncEngineClient, EngineClient, EngineUnreachable

CHUNK = 1024 * 1024
#: What the server offers: past the cap, small enough that a client without the cap reads it all
#: in a few seconds (it then fails the assertions instead of exhausting the machine).
OFFERED_BYTES = MAX_ANSWER_BYTES + 96 * CHUNK


@pytest.fixture
def flood():
    """(base URL, sent) — ``sent["bytes"]``: bytes the server wrote before the client hung up."""
    sent = {"bytes": 0}

    class Flood(BaseHTTPRequestHandler):
        def log_message(self, *args):  # noqa: ANN002
            pass

        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            try:
                self.wfile.write(b'{"model_path": "')
                for _ in range(OFFERED_BYTES // CHUNK):
                    self.wfile.write(b"A" * CHUNK)
                    sent["bytes"] += CHUNK
            except OSError:
                pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Flood)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", sent
    finally:
        server.shutdown()
        server.server_close()


def test_an_answer_past_the_cap_is_a_protocol_error_not_a_buffer(flood):
    url, sent = flood
    with EngineClient(url, timeout_s=30) as client, pytest.raises(EngineUnreachable) as err:
        client.server_info()
    assert err.value.kind == "protocol" and "longer than 64 MiB" in str(err.value)
    assert sent["bytes"] < OFFERED_BYTES


def test_the_async_client_caps_the_answer_too(flood):
    url, _sent = flood

    async def ask() -> None:
        async with AsyncEngineClient(url, timeout_s=30) as client:
            await client.server_info()

    with pytest.raises(EngineUnreachable, match="longer than 64 MiB"):
        asyncio.run(ask())


def test_attach_to_a_flooding_server_is_a_clear_error(flood, cli_env):
    url, _sent = flood
    exe = shutil.which("dynocell", path=str(Path(sys.executable).parent))
    proc = subprocess.run([exe, "attach", url], env=cli_env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("Error: ") and "longer than 64 MiB" in proc.stderr, proc.stderr
