"""A boot's log: the last lines, or followed as it grows (only on the boot's own host).
"""

from __future__ import annotations

import sys
import time
from collections import deque
from pathlib import Path
from typing import Iterator

from dynocell.db import boots as db_boots
from dynocell.runbooks.boots.live import resolve_boot
from dynocell.runbooks.boots.reconcile import refuse_foreign_files
from dynocell.runbooks.cell import Cell


def logs(cell: Cell, boot_ref: str, tail: int = 50) -> list[str]:
    """The last ``tail`` lines of a boot's log file (timestamped as written); a ``tail`` larger than
    the log (even past what an index holds, e.g. 10^23) gives the whole log, 0 or less none.

    Raises UserError for a boot of another host (its log is there, not here).
    """
    boot = resolve_boot(cell, boot_ref)
    refuse_foreign_files(cell, boot)
    path = Path(boot.log_path)
    if not path.exists():
        return []
    with open(path, "r", encoding="utf-8", errors="replace") as f:
        return [line.rstrip("\n") for line in deque(f, maxlen=min(max(tail, 0), sys.maxsize))]


def follow(cell: Cell, boot_ref: str, tail: int = 50, poll_s: float = 0.3) -> Iterator[str]:
    """Yield the last ``tail`` lines, then new lines as they are written, until the boot ends."""
    boot = resolve_boot(cell, boot_ref)
    path = Path(boot.log_path)
    yield from logs(cell, boot.id, tail)
    pos = path.stat().st_size if path.exists() else 0
    while True:
        if path.exists() and path.stat().st_size > pos:
            with open(path, "r", encoding="utf-8", errors="replace") as f:
                f.seek(pos)
                chunk = f.read()
                pos = f.tell()
            yield from chunk.splitlines()
        else:
            row = db_boots.get_boot(cell.store, boot.id)
            if row and row.state not in db_boots.LIVE_STATES:
                return
            time.sleep(poll_s)
