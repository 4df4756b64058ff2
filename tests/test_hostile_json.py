"""JSON nested deeper than Python's parser recurses (``[[[[…]]]]``, 100,000 levels: 200 kB).

Python's ``json`` raises RecursionError, not ValueError, on it. Before: ``dynocell import bench|requests``
of such a file, and ``dynocell attach`` to a server answering it, ended in "Error: internal error:
RecursionError …" with "report it". Now the import is a clear ``Error:`` naming the file (exit 2) and
the attach says the server describes no model, as for any other non-JSON answer.

Also: numbers no benchmark reports (negative, past 1e15, JSON's 1e400) in a real result file.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parent.parent / "examples"
DEEP = b"[" * 100_000 + b"]" * 100_000


def dynocell(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dynocell", *args], env=env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("kind", ["bench", "requests"])
def test_import_of_deeply_nested_json_is_a_clear_error(kind, cli_env, tmp_path):
    path = tmp_path / "result.json"
    path.write_bytes(DEEP)
    proc = dynocell(cli_env, "import", kind, str(path))
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stderr.startswith(f"Error: {path}: JSON nested too deeply"), proc.stderr
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr


class _Deep(BaseHTTPRequestHandler):
    """Every route answers 200 with a deeply nested JSON array."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(DEEP)))
        self.end_headers()
        self.wfile.write(DEEP)

    do_POST = do_GET

    def log_message(self, *_args) -> None:
        pass


@pytest.fixture
def deep_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Deep)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def test_attach_to_a_server_answering_deeply_nested_json_is_a_clear_error(cli_env, deep_server):
    proc = dynocell(cli_env, "attach", deep_server)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stderr.startswith(f"Error: {deep_server} answers, but neither"), proc.stderr
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr


# ---------------------------------------------------------------- impossible numbers in a benchmark result

VLLM_RESULT = Path(__file__).parent / "data" / "bench" / "vllm-bench-serve.json"  # a real `vllm bench serve` file


@pytest.mark.parametrize(("key", "raw", "expected"), [
    ("max_concurrency", "-33", "concurrency is -33"),
    ("output_throughput", "-434.4", "output_tok_s is -434.4"),
    ("median_ttft_ms", "1.7e308", "ttft_ms.p50 is 1.7e+308"),
    ("completed", "1e400", "a count is infinite"),  # JSON's way to write inf: int() of it overflowed
])
def test_import_bench_refuses_impossible_numbers(key, raw, expected, cli_env, tmp_path):
    """Before: -33 concurrency and -434 tok/s were stored and shown as a level; 1.7e308 ms printed
    as 309 digits; 1e400 was 'internal error: OverflowError'. Now: a clear Error naming the field."""
    text = VLLM_RESULT.read_text()
    good = json.loads(text)[key]
    bad = tmp_path / "result.json"
    bad.write_text(text.replace(f'"{key}": {json.dumps(good)}', f'"{key}": {raw}', 1))
    assert bad.read_text() != text
    proc = dynocell(cli_env, "import", "bench", str(bad), "--config", str(EXAMPLES / "tiny.toml"))
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr)
    assert proc.stderr.startswith(f"Error: {bad}: line 1: {expected}"), proc.stderr
    assert "internal error" not in proc.stderr
    assert dynocell(cli_env, "runs", "--json").stdout.strip() in ("[]", ""), "nothing may be stored"


# real SGLang 0.5.17 responses from the H200 (tests/data/requests/README.md)
SGLANG_RESPONSES = Path(__file__).parent / "data" / "requests" / "sglang-0.5.17-C.meta_info.jsonl"


@pytest.mark.parametrize(("key", "raw", "expected"), [
    ("prompt_tokens", "-4", "meta_info.prompt_tokens is -4"),
    ("e2e_latency", "1.7e308", "meta_info.e2e_latency is 1.7e+308"),  # was stored, shown "e2e p50 nan ms"
    ("completion_tokens", "1e400", "meta_info.completion_tokens is inf"),
])
def test_import_requests_refuses_impossible_numbers(key, raw, expected, cli_env, tmp_path):
    first, *rest = SGLANG_RESPONSES.read_text().splitlines(keepends=True)
    good = json.loads(first)["meta_info"][key]
    bad = tmp_path / "responses.jsonl"
    bad.write_text(first.replace(f'"{key}": {json.dumps(good)}', f'"{key}": {raw}', 1) + "".join(rest))
    assert bad.read_text() != SGLANG_RESPONSES.read_text()
    proc = dynocell(cli_env, "import", "requests", str(bad), "--config", str(EXAMPLES / "tiny.toml"))
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-2000:], proc.stderr)
    assert proc.stderr.startswith(f"Error: {bad}: line 1: {expected}"), proc.stderr
    assert "internal error" not in proc.stderr
    assert dynocell(cli_env, "runs", "--json").stdout.strip() in ("[]", ""), "nothing may be stored"
