"""The reference engine process: argument errors, /health while starting, SIGTERM / SIGINT exit 0 within 5 s."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from dynocell.engine.reference.launch import free_port, start_engine


def _run(args, timeout=60):
    return subprocess.run([sys.executable, "-m", "dynocell.engine.reference", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_unknown_argument_exit_2():
    r = _run(["--model-path", "/nonexistent", "--no-such-flag", "1"])
    assert r.returncode == 2
    assert "unrecognized arguments: --no-such-flag" in r.stderr


def test_topk_other_than_one_is_refused():
    r = _run(["--model-path", "/x", "--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", "/y",
              "--speculative-eagle-topk", "4"])
    assert r.returncode == 2
    assert "--speculative-eagle-topk 4 is not supported" in r.stderr


def test_standalone_needs_draft():
    r = _run(["--model-path", "/x", "--speculative-algorithm", "STANDALONE"])
    assert r.returncode == 2 and "--speculative-draft-model-path" in r.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_exits_zero_within_5s_with_request_in_flight(model_pair, tmp_path, sig):
    eng = start_engine(model_pair.target, [], tmp_path / "server.log")
    try:
        result = {}

        def long_request():
            try:
                r = httpx.post(eng.url + "/generate", json={"text": "def ", "sampling_params": {
                    "max_new_tokens": 100000, "ignore_eos": True}}, timeout=30)
                result["status"] = r.status_code
                result["finish"] = r.json()["meta_info"]["finish_reason"]
            except httpx.HTTPError as exc:
                result["error"] = type(exc).__name__

        th = threading.Thread(target=long_request)
        th.start()
        time.sleep(1.0)
        eng.proc.send_signal(sig)
        code = eng.proc.wait(120)  # it does not finish the 100 000-token request first (the thread's result)
        assert code == 0
        th.join(10)
        # Either the request was answered (aborted by the shutdown, or cut at the context length), or the
        # server closed the connection on it; a timeout or a refused connection is a failure.
        if "error" in result:
            assert result["error"] in ("RemoteProtocolError", "ReadError"), result
        else:
            assert result["status"] == 200 and result["finish"]["type"] in ("abort", "length"), result
    finally:
        eng.stop()


def test_health_503_while_starting(model_pair, tmp_path):
    port = free_port()
    log = open(tmp_path / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "dynocell.engine.reference", "--model-path", str(model_pair.target),
                             "--port", str(port), "--startup-delay", "3"], stdout=log, stderr=subprocess.STDOUT)
    try:
        seen = set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                seen.add(httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code)
            if 200 in seen:
                break
            time.sleep(0.1)
        assert seen == {503, 200}
        text = (tmp_path / "server.log").read_text()
        assert text.index("Uvicorn running on") < text.index("The server is fired up and ready to roll!")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
