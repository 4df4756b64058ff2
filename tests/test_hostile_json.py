"""JSON nested deeper than Python's parser recurses (``[[[[…]]]]``, 100,000 levels: 200 kB).

Python's ``json`` raises RecursionError, not ValueError, on it. Before: ``dynocell import bench|requests``
of such a file, and ``dynocell attach`` to a server answering it, ended in "Error: internal error:
RecursionError …" with "report it". Now the import is a clear ``Error:`` naming the file (exit 2) and
the attach says the server describes no model, as for any other non-JSON answer.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

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
