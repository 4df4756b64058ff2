"""The detached supervisor process behind ``dynocell boot --detach``.

``python -m dynocell.runbooks.supervise CONFIG_HASH --boot-id ID [--timeout S]``
boots the config, records everything, then watches the engine until it dies
(``crashed``) or this process gets SIGTERM/SIGINT (stop discipline →
``stopped``). The timeout is the end: it counts from this process's start,
making the model pair included (a backstop alarm ends a step that hangs); a
SIGTERM while booting stops the boot at once. It runs in its own session so it outlives the command that
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


#: Seconds beyond timeout + stop grace before the backstop alarm ends a boot step that hangs.
BACKSTOP_SLACK_S = 15.0


class BootTimeout(BaseException):
    """The backstop alarm: the boot's timeout passed while a step (model making) was still running.
    A BaseException so that no ``except Exception`` on the way swallows it."""


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (0 after a clean stop, 3 when the boot failed)."""
    ap = argparse.ArgumentParser(prog="dynocell-supervise")
    ap.add_argument("config_hash")
    ap.add_argument("--boot-id", required=True)
    ap.add_argument("--timeout", type=float, default=None)
    args = ap.parse_args(argv)
    settings = load_settings()
    cell = open_cell(settings)
    stop_requested = threading.Event()
    watching = threading.Event()

    def _on_signal(_signo: int, _frame: object) -> None:
        stop_requested.set()
        if not watching.is_set():
            raise KeyboardInterrupt  # still booting: stop now (start_boot stops what it started)

    def _on_alarm(_signo: int, _frame: object) -> None:
        if not watching.is_set():
            raise BootTimeout

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    from dynocell.runbooks.configs import config_by_hash

    cfg = config_by_hash(cell, args.config_hash)
    timeout = args.timeout or boots.default_boot_timeout(settings, cfg.engine)
    # start_boot honours the timeout itself between steps; this backstop ends a step that does not
    # return in time (making the model pair on first use), so a timed-out boot never goes on.
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout + settings.stop_grace_s + BACKSTOP_SLACK_S)
    try:
        live = boots.start_boot(cell, cfg, args.config_hash, timeout_s=timeout, boot_id=args.boot_id)
    except DynocellError as exc:
        print(f"boot failed: {exc}", file=sys.stderr)
        return exc.exit_code
    except BootTimeout:
        print(f"boot failed: timed out after {timeout:.0f} s before the engine was ready; "
              "nothing was left running", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("boot stopped before it was ready (stop requested)", file=sys.stderr)
        return 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    watching.set()
    if stop_requested.is_set():  # a stop that came between ready and watching
        boots.stop_live(cell, live, boots.requested_grace(live))
        print(f"boot {live.boot_id} stopped")
        return 0
    state = boots.watch(cell, live, should_stop=stop_requested.is_set)
    print(f"boot {live.boot_id} {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
