"""Stand-in of vLLM's ``EngineCore`` child for the reference engine's vLLM surface (stdlib only).

vLLM 0.26's API server runs its engine in a child process titled ``VLLM::EngineCore``
(comm ``VLLM::EngineCor``). This process carries that title in its argv and comm and lives
exactly as long as its parent; it does no work. Killing it leaves a live API server with a dead
engine — the state dynocell's health oracle must call ``down``
(:mod:`dynocell.engine.ranks`). Run as ``python -m dynocell.engine.reference.engine_core VLLM::EngineCore``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path


def main(title: str = "VLLM::EngineCore") -> None:
    """Set the 15-character comm to ``title`` and wait until the parent process is gone."""
    with contextlib.suppress(OSError):
        Path("/proc/self/comm").write_text(title[:15])
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.2)


if __name__ == "__main__":
    main(*sys.argv[1:2])
