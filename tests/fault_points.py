"""Run the real ``dynocell`` CLI with one fault point armed (a helper of tests/test_faults.py).

Usage: ``python tests/fault_points.py ARGS…`` behaves like ``dynocell ARGS…``, except
that with ``DYNOCELL_FAULT_PAUSE="module:function[:key[=value]]"`` in the environment the
named function is wrapped: after the first call whose keyword arguments match (``key``
present, or ``str(kwargs[key]) == value``) has returned, the calling thread writes its pid
to the file ``DYNOCELL_FAULT_MARKER`` and blocks. The test then knows exactly which rows
are written and which step is in flight, and kills the process (``kill -9``). A pause
nobody ends exits the process after ``DYNOCELL_FAULT_MAX_PAUSE_S`` (default 300 s) so a
broken test cannot leave it behind.

Examples: ``dynocell.db.runs:add_bench`` (the first bench level is stored, the step still
runs), ``dynocell.runbooks.events:publish:new=stopping`` (the boot is ``stopping``, the
engine not yet signalled).
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import threading
from pathlib import Path


def arm(spec: str, marker: Path, max_pause_s: float) -> None:
    """Wrap the function named by ``spec`` so it pauses after its first matching call."""
    mod_name, fn_name, *rest = spec.split(":")
    key, _, want = (rest[0] if rest else "").partition("=")
    module = importlib.import_module(mod_name)
    original = getattr(module, fn_name)
    fired = threading.Event()

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        result = original(*args, **kwargs)
        matches = not key or (key in kwargs and (not want or str(kwargs[key]) == want))
        if matches and not fired.is_set():
            fired.set()
            marker.write_text(str(os.getpid()))
            if not threading.Event().wait(max_pause_s):
                os._exit(70)
        return result

    setattr(module, fn_name, wrapper)


def main() -> None:
    """Arm the fault point named in the environment, then run the dynocell CLI on ``sys.argv[1:]``."""
    spec = os.environ.get("DYNOCELL_FAULT_PAUSE")
    if spec:
        arm(spec, Path(os.environ["DYNOCELL_FAULT_MARKER"]), float(os.environ.get("DYNOCELL_FAULT_MAX_PAUSE_S", "300")))
    from dynocell.cli.app import run

    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
