"""A small stdlib-only engine for supervisor and health-oracle tests (no dynocell import).

Usage: python fake_engine.py --port P [--mode MODE] [options]

It prints SGLang-shaped phase lines ("Load weight begin." … "The server is
fired up and ready to roll!") and serves the engine HTTP surface on
127.0.0.1:P with http.server: /health (503 until ready, then 200),
/health_generate, /get_server_info, /get_model_info, /metrics, /generate,
/flush_cache.

Modes:
  graceful         ready after --ready-delay; exits 0 on SIGTERM
  ignore_term      ignores SIGTERM and keeps answering /health 200
  grandchildren    spawns children that spawn grandchildren (one escapes the
                   process group with setsid); pids written to --pid-file
  hang             prints weight/KV phase lines then answers 503 forever
  die_after_ready  ready, then after --die-after s prints --log-file and exits --exit-code
  signature        prints --log-file and exits --exit-code (default 1) before ready
  health_lie       ready; /health and /health_generate 200, but /metrics shows
                   queued + running requests and generated tokens never advance
  slow_prefill     ready; one running request, no generated tokens, prompt-token
                   counters advance with time (a long prefill)
  health_503       ready (the first /health after ready answers 200), then /health
                   answers 503 while every other endpoint still answers 200 (SGLang's
                   /health once the scheduler stopped answering)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

T0 = time.monotonic()
STATE = {"ready": False, "health_ok": 0}


def log(msg: str) -> None:
    print(time.strftime("[%Y-%m-%d %H:%M:%S] ") + msg, flush=True)


def metrics_text(args: argparse.Namespace) -> str:
    el = time.monotonic() - T0
    running, queued, gen, prompt, prefill_rt = 0, 0, 1000.0, 500.0, 500.0
    if args.mode == "health_lie":
        running, queued = 2, 4
    elif args.mode == "slow_prefill":
        running, queued = 1, 0
        prefill_rt = 500.0 + round(el * 1000.0)  # prefill progress: ~1000 tok/s
    lab = f'model_name="{args.model_path}",tp_rank="0"'
    return "\n".join([
        "# HELP sglang:num_running_reqs The number of running requests.",
        "# TYPE sglang:num_running_reqs gauge",
        f"sglang:num_running_reqs{{{lab}}} {float(running)}",
        "# HELP sglang:num_queue_reqs The number of requests in the waiting queue.",
        "# TYPE sglang:num_queue_reqs gauge",
        f"sglang:num_queue_reqs{{{lab}}} {float(queued)}",
        "# HELP sglang:generation_tokens_total Number of generation tokens processed.",
        "# TYPE sglang:generation_tokens_total counter",
        f"sglang:generation_tokens_total{{{lab}}} {gen}",
        "# HELP sglang:prompt_tokens_total Number of prefill tokens processed.",
        "# TYPE sglang:prompt_tokens_total counter",
        f"sglang:prompt_tokens_total{{{lab}}} {prompt}",
        "# HELP sglang:realtime_tokens_total Total number of tokens processed (updated on each log interval).",
        "# TYPE sglang:realtime_tokens_total counter",
        f'sglang:realtime_tokens_total{{mode="decode",{lab}}} {gen}',
        f'sglang:realtime_tokens_total{{mode="prefill_compute",{lab}}} {prefill_rt}',
        "",
    ])


def make_handler(args: argparse.Namespace):
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):  # quiet
            pass

        def _send(self, code: int, body, ctype="application/json"):
            data = (json.dumps(body) if ctype == "application/json" else body).encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            p = self.path.split("?")[0]
            if not STATE["ready"]:
                return self._send(503, {"status": "starting"})
            if p == "/health":
                STATE["health_ok"] += 1
                if args.mode == "health_503" and STATE["health_ok"] > 1:
                    return self._send(503, {"status": "unhealthy"})
                return self._send(200, {})
            if p == "/health_generate":
                time.sleep(args.health_generate_delay)
                return self._send(200, {})
            if p == "/get_server_info":
                return self._send(200, {
                    "model_path": args.model_path, "tp_size": args.tp_size,
                    "speculative_algorithm": args.speculative_algorithm,
                    "speculative_num_steps": args.speculative_num_steps,
                    "speculative_eagle_topk": args.speculative_eagle_topk,
                    "speculative_num_draft_tokens": args.speculative_num_draft_tokens,
                    "version": "fake-0",
                })
            if p == "/get_model_info":
                return self._send(200, {"model_path": args.model_path})
            if p == "/metrics":
                return self._send(200, metrics_text(args), "text/plain; version=0.0.4")
            return self._send(404, {"error": "not found"})

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            req = json.loads(self.rfile.read(n) or b"{}")
            if not STATE["ready"]:
                return self._send(503, {"status": "starting"})
            if self.path == "/generate":
                prompt = req.get("text", "")
                text = "#garbage#" if args.garbage else " " + prompt[::-1]
                return self._send(200, {"text": text, "meta_info": {
                    "prompt_tokens": len(prompt), "completion_tokens": len(text), "e2e_latency": 0.001}})
            if self.path == "/flush_cache":
                return self._send(200, {})
            return self._send(404, {"error": "not found"})

    return H


def print_file(path: str | None) -> None:
    if path:
        with open(path, encoding="utf-8") as f:
            for line in f:
                print(line.rstrip("\n"), flush=True)


CHILD = (
    "import os, sys, time, subprocess\n"
    "escape = sys.argv[1] == '1'\n"
    "if escape: os.setsid()\n"
    "g = subprocess.Popen([sys.executable, '-c', 'import time\\nwhile True: time.sleep(0.2)'])\n"
    "print(f'child {os.getpid()} grandchild {g.pid}', flush=True)\n"
    "with open(sys.argv[2], 'a') as f: f.write(f'{os.getpid()}\\n{g.pid}\\n')\n"
    "while True: time.sleep(0.2)\n"
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", default="graceful")
    ap.add_argument("--ready-delay", type=float, default=0.3)
    ap.add_argument("--die-after", type=float, default=0.5)
    ap.add_argument("--exit-code", type=int, default=1)
    ap.add_argument("--log-file")
    ap.add_argument("--pid-file")
    ap.add_argument("--model-path", default="/models/fake")
    ap.add_argument("--tp-size", type=int, default=1)
    ap.add_argument("--speculative-algorithm", default=None)
    ap.add_argument("--speculative-num-steps", type=int, default=None)
    ap.add_argument("--speculative-eagle-topk", type=int, default=None)
    ap.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    ap.add_argument("--health-generate-delay", type=float, default=0.0)
    ap.add_argument("--garbage", action="store_true")
    args = ap.parse_args()

    if args.mode == "ignore_term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        def on_term(signum, frame):
            log("Received SIGTERM, shutting down.")
            os._exit(0)
        signal.signal(signal.SIGTERM, on_term)

    if args.mode == "signature":
        print_file(args.log_file)
        sys.exit(args.exit_code)

    log("Load weight begin. avail mem=139.13 GB")
    log("Load weight end. elapsed=0.01 s, type=FakeForCausalLM, avail mem=139.10 GB, mem usage=0.03 GB.")
    log("KV Cache is allocated. dtype: torch.bfloat16, #tokens: 4096, K size: 0.01 GB, V size: 0.01 GB")
    log("Memory pool end. avail mem=139.00 GB")

    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(args))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    log(f"INFO:     Uvicorn running on http://127.0.0.1:{args.port} (Press CTRL+C to quit)")

    if args.mode == "hang":
        log("Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, bs=[1, 2, 4]")
        while True:
            time.sleep(1)

    if args.mode == "grandchildren":
        for escape in ("0", "1"):
            subprocess.Popen([sys.executable, "-c", CHILD, escape, args.pid_file])

    time.sleep(args.ready_delay)
    STATE["ready"] = True
    log("The server is fired up and ready to roll!")

    if args.mode == "die_after_ready":
        time.sleep(args.die_after)
        print_file(args.log_file)
        os._exit(args.exit_code)

    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
