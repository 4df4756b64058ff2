"""The detached supervisor process behind ``dynocell boot --detach``.

``python -m dynocell.runbooks.supervise CONFIG_HASH --boot-id ID [--timeout S]``
boots the config, records everything, then watches the engine until it dies
(``crashed``) or this process gets SIGTERM/SIGINT (stop discipline →
``stopped``). It runs in its own session so it outlives the command that
started it. Settings come from the environment it inherited (built here, at
this process's edge).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from dynocell.errors import DynocellError
from dynocell.runbooks import boots
from dynocell.runbooks.cell import open_cell
from dynocell.settings import load_settings


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (0 after a clean stop, 3 when the boot failed)."""
    ap = argparse.ArgumentParser(prog="dynocell-supervise")
    ap.add_argument("config_hash")
    ap.add_argument("--boot-id", required=True)
    ap.add_argument("--timeout", type=float, default=None)
    args = ap.parse_args(argv)
    cell = open_cell(load_settings())
    stop_requested = threading.Event()

    def _on_signal(_signo: int, _frame: object) -> None:
        stop_requested.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    from dynocell.runbooks.configs import config_by_hash

    cfg = config_by_hash(cell, args.config_hash)
    try:
        live = boots.start_boot(cell, cfg, args.config_hash, timeout_s=args.timeout, boot_id=args.boot_id)
    except DynocellError as exc:
        print(f"boot failed: {exc}", file=sys.stderr)
        return exc.exit_code
    state = boots.watch(cell, live, should_stop=stop_requested.is_set)
    print(f"boot {live.boot_id} {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
