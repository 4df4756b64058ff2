"""A hostile HTTP server that never finishes an answer: it dribbles one byte every ``--every`` seconds, so each
read of a client stays under its timeout while the answer never ends (issue 32, item 10's reproduction).

``--where headers``: the status line and headers dribble (the answer never reaches its body);
``--where body``: the headers arrive at once (``200``, JSON, chunked) and the body dribbles for ever.
Every connection (any path: ``/health``, ``/get_server_info``, ``/v1/models`` …) gets the same.

Stdlib only. Run: ``python tests/servers/dribble.py --where body --every 0.2``; prints ``LISTENING <port>``
first. :func:`start` does that in a subprocess and returns ``(process, base URL)``.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path


def _serve_one(conn: socket.socket, where: str, every: float) -> None:
    try:
        conn.settimeout(5)
        with contextlib.suppress(OSError):
            conn.recv(65536)  # the request (never answered in full)
        if where == "body":
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n")
            while True:
                conn.sendall(b"1\r\n \r\n")  # a one-byte chunk, for ever
                time.sleep(every)
        head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-dribble: "
        for i in range(len(head)):
            conn.sendall(head[i:i + 1])
            time.sleep(every)
        while True:  # an endless header value
            conn.sendall(b"a")
            time.sleep(every)
    except OSError:
        pass
    finally:
        conn.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--where", choices=("headers", "body"), default="body")
    ap.add_argument("--every", type=float, default=0.2)
    a = ap.parse_args()
    srv = socket.create_server(("127.0.0.1", a.port))
    print(f"LISTENING {srv.getsockname()[1]}", flush=True)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=_serve_one, args=(conn, a.where, a.every), daemon=True).start()


def start(where: str = "body", every: float = 0.2) -> tuple[subprocess.Popen, str]:
    """Start the server in a subprocess on a free port: ``(process, "http://127.0.0.1:PORT")`` (terminate the
    process when done)."""
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--where", where, "--every", str(every)],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("LISTENING "):
        proc.kill()
        raise RuntimeError(f"dribble server did not start: {line!r}")
    return proc, f"http://127.0.0.1:{int(line.split()[1])}"


if __name__ == "__main__":
    main()
