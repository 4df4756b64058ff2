"""`dynocell web` on a port in use (issue 20, item 7): one `Error:` line + hint, exit 2, no URL.

And on a free port the URL is printed only once the port is listening (a connection made right
after the line appears is accepted).
"""

from __future__ import annotations

import socket
import subprocess
import sys


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_port_in_use_is_a_clear_error(cli_env):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "dynocell", "web", "--port", str(port)], env=cli_env,
                              capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == f"Error: port {port} is in use", proc.stderr
    assert lines[1].startswith("hint: ") and "--port" in lines[1], proc.stderr
    assert "http://" not in proc.stderr + proc.stdout and "Errno" not in proc.stderr


def test_url_is_printed_once_listening(cli_env):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "dynocell", "web", "--port", str(port)], env=cli_env,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        head = ""
        while f"http://127.0.0.1:{port}/" not in head and len(head.splitlines()) < 4:
            head += proc.stderr.readline()
        assert f"http://127.0.0.1:{port}/" in head, head
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            pass  # accepted: the port was listening when the URL was printed
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
