"""The ``engine_python`` stand-in shared by the boot tests and ``benchmarks/soak.py`` (stdlib only).

dynocell's SGLang adapter runs ``<engine_python> -m sglang.launch_server …``; the shim written by
:func:`write_shim` execs ``fake_engine.py`` instead, in the mode named by ``$FAKE_MODE`` (default
``graceful``) with ``$FAKE_ARGS`` appended, so config → adapter → supervisor → store stays real.
"""

from __future__ import annotations

import sys
from pathlib import Path

FAKE = Path(__file__).with_name("fake_engine.py")


def write_shim(path: Path) -> Path:
    """Write the executable shim at ``path`` and return it."""
    path.write_text(f"""#!{sys.executable}
import os, sys
args = sys.argv[1:]
assert args[:2] == ["-m", "sglang.launch_server"], args
rest = args[2:]
def opt(name, default=None):
    return rest[rest.index(name) + 1] if name in rest else default
argv = [sys.executable, {str(FAKE)!r}, "--port", opt("--port"), "--mode", os.environ.get("FAKE_MODE", "graceful"),
        "--model-path", opt("--model-path")] + os.environ.get("FAKE_ARGS", "").split()
os.execv(sys.executable, argv)
""")
    path.chmod(0o755)
    return path
