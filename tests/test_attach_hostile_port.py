"""``dynocell attach`` to a server reporting a port that is no TCP port (left-over defects, item 3).

A real HTTP server on 127.0.0.1 answers ``/get_server_info`` as SGLang does, with ``port`` set to
-1, 0, 70000, a string or a boolean. Before: the observed config stored ``port = -1`` (and hashed
it). Now the value is dropped from the observed config and the attach says so (``warning: …
reports port -1, not a TCP port (1–65535): ignored``); a sane port is kept. The same check
covers vLLM's non-default args (``from_vllm_args``), read from real log lines.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.test_bad_inputs import cli


def _server(port_value, **more):
    """A real HTTP server on 127.0.0.1 answering ``/get_server_info`` as SGLang does (``more``: other fields)."""
    info = json.dumps({"model_path": "/models/llama", "port": port_value, "tp_size": 1,
                       "version": "0.5.17", **more}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = info if self.path == "/get_server_info" else b"{}"
            self.send_response(200 if self.path != "/metrics" else 404)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("reported, shown", [(-1, "-1"), (0, "0"), (70000, "70000"), ("http", '"http"'),
                                             (True, "true"), ("x" * 500, '"' + "x" * 38 + "…")],
                         ids=["minus-one", "zero", "70000", "string", "bool", "long-string"])
def test_attach_ignores_a_nonsense_port_and_says_so(isolated_home, reported, shown):
    server = _server(reported)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        code, out, err = cli("attach", url)
        assert code == 0, (out, err)
        assert f"warning: /get_server_info reports port {shown}, not a TCP port (1–65535): ignored" in out
        assert "port=" not in out  # the "seen:" fields do not list it
    finally:
        server.shutdown()
        server.server_close()
    code, listing, err = cli("config", "list", "--json")
    assert code == 0, err
    (row,) = json.loads(listing)
    code, shown_cfg, err = cli("config", "show", row["hash"], "--json")
    assert code == 0, err
    assert "/models/llama" in shown_cfg and '"port"' not in shown_cfg, shown_cfg


def test_attach_keeps_a_real_port(isolated_home):
    server = _server("30000")
    try:
        code, out, err = cli("attach", f"http://127.0.0.1:{server.server_address[1]}", "--json")
    finally:
        server.shutdown()
        server.server_close()
    res = json.loads(out)
    assert code == 0 and res["config_fields"]["port"] == 30000 and res["warnings"] == []


def test_vllm_args_with_a_nonsense_port_are_kept_without_it():
    from dynocell.engine.observed import from_vllm_args

    obs = from_vllm_args({"model": "m", "port": -1}, "engine.log line 3")
    assert "port" not in obs.fields and obs.fields["model_path"] == "m"
    assert obs.warnings == ("engine.log line 3 reports port -1, not a TCP port (1–65535): ignored",)
    assert from_vllm_args({"model": "m", "port": 8000}).fields["port"] == 8000
