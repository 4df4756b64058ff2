"""A stdlib-only test engine with rank children, like a ``--tp-size N`` SGLang (no dynocell import).

Usage: python ranked_engine.py --port P --pid-file FILE [--ranks N] [--detokenizer] [--reap] [--vllm]

Serves the engine HTTP surface of fake_engine.py (/health, /health_generate,
/get_server_info, /metrics, /generate …) on 127.0.0.1:P and spawns N "rank"
children whose argv carries SGLang 0.5.17's process titles
``sglang::scheduler_TP0`` … (and ``sglang::detokenizer`` with
--detokenizer); each child also renames its comm to the 15-character
``sglang::schedul`` as setproctitle leaves it. The children's pids go to
--pid-file, one ``NAME PID`` per line. By default the engine never reaps its
children, so a killed rank stays a zombie (as SGLang's
``[sglang::detoken] <defunct>``); with --reap it reaps them (the rank vanishes).
With --vllm the children are vLLM 0.26's engine processes instead: ``VLLM::EngineCore``
(``VLLM::EngineCore_DP{d}`` when --ranks > 1), comm ``VLLM::EngineCor``.
On SIGTERM it exits, and the children exit when they see their parent gone.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_engine  # noqa: E402

CHILD = (
    "import os, sys, time\n"
    "try:\n"
    "    open('/proc/self/comm', 'w').write(sys.argv[1][:15])\n"
    "except OSError:\n"
    "    pass\n"
    "parent = os.getppid()\n"
    "while os.getppid() == parent: time.sleep(0.1)\n"
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid-file", required=True)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--detokenizer", action="store_true")
    ap.add_argument("--reap", action="store_true")
    ap.add_argument("--vllm", action="store_true")
    ap.add_argument("--model-path", default="/models/fake")
    args = ap.parse_args()
    # what fake_engine's handler reads
    args.mode, args.garbage, args.health_generate_delay = "graceful", False, 0.0
    args.tp_size = args.ranks
    args.speculative_algorithm = args.speculative_num_steps = None
    args.speculative_eagle_topk = args.speculative_num_draft_tokens = None

    def on_term(signum, frame):
        fake_engine.log("Received SIGTERM, shutting down.")
        os._exit(0)
    signal.signal(signal.SIGTERM, on_term)

    titles = [f"sglang::scheduler_TP{i}" for i in range(args.ranks)]
    if args.vllm:
        titles = ["VLLM::EngineCore"] if args.ranks == 1 else [f"VLLM::EngineCore_DP{i}" for i in range(args.ranks)]
    if args.detokenizer:
        titles.append("sglang::detokenizer")
    children = []
    with open(args.pid_file, "w") as f:
        for t in titles:
            p = subprocess.Popen([sys.executable, "-c", CHILD, t])
            children.append(p)
            f.write(f"{t} {p.pid}\n")
    if args.reap:
        def reaper():
            while True:
                for p in children:
                    p.poll()
                time.sleep(0.05)
        threading.Thread(target=reaper, daemon=True).start()

    server = ThreadingHTTPServer(("127.0.0.1", args.port), fake_engine.make_handler(args))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    fake_engine.log(f"INFO:     Uvicorn running on http://127.0.0.1:{args.port} (Press CTRL+C to quit)")
    fake_engine.STATE["ready"] = True
    fake_engine.log("The server is fired up and ready to roll!")
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
