"""Helpers every CLI command shares: the cell (settings built once, here at the edge),
JSON output, rich console output and small formatters.

Kept light on imports: ``dynocell --help`` imports this module, so settings,
the store and the procedures are imported only when a command runs.
"""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from rich.console import Console, RenderHook

from dynocell.clock import aware_utc, now_utc

if TYPE_CHECKING:  # pragma: no cover
    from dynocell.runbooks.cell import Cell
    from dynocell.settings import Settings

class _Printable:
    """Renders an inner renderable with every text segment made printable (:func:`dynocell.text.printable`).

    Rich's own styles and cursor moves live outside segment text (style objects,
    control segments) and are kept; escape sequences and control bytes inside
    the text — from a config, a log line, a kernel name — are not.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __rich_console__(self, console: Console, options: Any) -> Any:
        from rich.segment import Segment

        from dynocell.text import printable

        for seg in console.render(self.inner, options):
            if seg.control or seg.text.isprintable() or seg.text == "\n":
                yield seg
            else:
                yield Segment(printable(seg.text, keep_newlines=True), seg.style)


class _PrintableHook(RenderHook):
    """Every renderable a CLI console prints goes through :class:`_Printable` (issue 16, item 5)."""

    def process_renderables(self, renderables: list[Any]) -> list[Any]:
        return [_Printable(r) for r in renderables]


def _safe_console(**kwargs: Any) -> Console:
    c = Console(**kwargs)
    c.push_render_hook(_PrintableHook())
    return c


def _stdout_console() -> Console:
    """stdout's console: the terminal's width; when piped, ``COLUMNS`` if set, else 160 (not rich's 80)."""
    from dynocell.settings import terminal_columns

    c = _safe_console(highlight=False)
    if not c.is_terminal:
        c.width = terminal_columns() or 160
    return c


console = _stdout_console()
err_console = _safe_console(stderr=True, highlight=False, soft_wrap=True)


class _State:
    """Process-wide CLI state set by the root callback."""

    debug: bool = False
    store_path: str | None = None  # --store PATH: read that SQLite store, read-only (a migrated private copy)
    settings: "Settings | None" = None
    cell: "Cell | None" = None


state = _State()

_C1 = re.compile("[\x7f-\x9f]")

JSON_OPTION_HELP = "Print machine-readable JSON on stdout instead of a table."


def seconds(*, at_least: float = 0.0, zero_ok: bool = False) -> Any:
    """A Typer ``callback`` for an option in seconds: refuses NaN, ±inf and values below ``at_least``
    (``at_least`` itself only when ``zero_ok``) as a bad parameter (exit 2, naming the option).

    Click's FloatRange lets NaN through (every comparison with NaN is false), so a ``--timeout nan``
    was a boot without a limit and ``--timeout -5`` "timed out: -5 s were spent"."""
    import math

    import typer

    def check(value: float | None) -> float | None:
        if value is None:
            return None
        if not math.isfinite(value) or value < at_least or (value == at_least and not zero_ok):
            sign = "≥" if zero_ok else ">"
            raise typer.BadParameter(f"must be a number of seconds {sign} {at_least:g}, got {value:g}")
        return value

    return check


def interrupt_on_term_and_hangup() -> None:
    """Make SIGTERM and SIGHUP end the command as Ctrl-C does (KeyboardInterrupt in the main thread), so a
    command that owns an engine stops it and records the step in flight ``interrupted``.

    ``timeout`` and ``kill`` send SIGTERM; a closed terminal or a dropped SSH session sends SIGHUP, whose
    default ended dynocell at once, the run left ``running`` and its engine up until a later command
    reconciled them. After a hangup the terminal is gone: stdout and stderr go to /dev/null, so the
    clean-up is not cut short by writing to it (EIO).
    """
    import os
    import signal

    def on_term(_s: int, _f: object) -> None:
        raise KeyboardInterrupt

    def on_hangup(_s: int, _f: object) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_hangup)


def get_settings() -> "Settings":
    """The process's settings, loaded once from the environment (``load_settings()``)."""
    if state.settings is None:
        from dynocell.settings import load_settings

        from pydantic import ValidationError

        try:
            state.settings = load_settings()
        except ValidationError as exc:  # a DYNOCELL_* variable that does not parse
            from dynocell.errors import UserError
            from dynocell.settings import ENV_PREFIX

            first = exc.errors()[0]
            var = ENV_PREFIX + "_".join(str(p) for p in first["loc"]).upper()
            raise UserError(f"invalid setting in the environment: {var}={first.get('input')!r}: "
                            f"{first['msg']}", f"fix or unset {var}") from exc
        if state.settings.debug:
            state.debug = True
        if state.store_path:
            from pathlib import Path

            path = Path(state.store_path).expanduser().resolve()
            state.settings = state.settings.model_copy(update={"database_url": f"sqlite:///{path}"})
    return state.settings


def get_cell(read_only: bool = False) -> "Cell":
    """The process's :class:`~dynocell.runbooks.cell.Cell` over :func:`get_settings`; ``read_only`` for
    commands that only read the store (a missing store directory is then an error, never created)."""
    if state.cell is None:
        from dynocell.runbooks.cell import open_cell

        state.cell = open_cell(get_settings())
        state.cell.snapshot = bool(state.store_path)
    if read_only and state.cell._store is None:
        state.cell.read_only = True
    return state.cell


def print_json(obj: Any) -> None:
    """Write ``obj`` as indented JSON to stdout (datetimes and paths as strings)."""
    text = json.dumps(obj, indent=2, default=_json_default, ensure_ascii=False)
    # JSON escapes C0 controls itself; C1 controls (8-bit CSI/OSC) and DEL are escaped here too.
    text = _C1.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _json_default(o: Any) -> Any:
    if isinstance(o, datetime):
        return o.isoformat()
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return str(o)


def human_time(iso_or_dt: str | datetime | None, now: datetime | None = None) -> str:
    """``"2026-11-30 04:12 UTC (3 min ago)"`` for an ISO 8601 string or datetime; ``"-"`` for None."""
    if iso_or_dt is None:
        return "-"
    t = aware_utc(iso_or_dt)
    now = now or now_utc()
    return f"{t.astimezone(timezone.utc):%Y-%m-%d %H:%M} UTC ({human_duration((now - t).total_seconds())} ago)"


def human_ago(iso_or_dt: str | datetime | None, now: datetime | None = None) -> str:
    """``"3 min ago"`` for an ISO 8601 string or datetime; ``"-"`` for None."""
    if iso_or_dt is None:
        return "-"
    return human_duration(((now or now_utc()) - aware_utc(iso_or_dt)).total_seconds()) + " ago"


def ended_before(ended: Any, asked: datetime) -> str | None:
    """How long before ``asked`` (naive UTC, as the store keeps times) a boot ended, as
    :func:`human_duration` — or None when it has not ended or ended at or after ``asked`` (this command
    ended it). ``stop`` and ``detach`` say ``was already …`` with it."""
    if not isinstance(ended, datetime) or ended.replace(tzinfo=None) >= asked:
        return None
    return human_duration((asked - ended.replace(tzinfo=None)).total_seconds())


def human_duration(seconds: float | None) -> str:
    """Seconds as ``"850 ms"``, ``"42 s"``, ``"7 min"``, ``"3.2 h"`` or ``"4 d"``; ``"-"`` for None."""
    if seconds is None:
        return "-"
    s = abs(seconds)
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 90:
        return f"{s:.0f} s"
    if s < 90 * 60:
        return f"{s / 60:.0f} min"
    if s < 48 * 3600:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.0f} d"


def human_bytes(n: int | None) -> str:
    """Bytes as ``"512 B"``, ``"1.5 KiB"``, ``"3.2 MiB"``, ``"1.1 GiB"``; ``"-"`` for None."""
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def fmt_value(v: Any) -> str:
    """A config value for a table cell: None → ``-``, lists joined, strings bare."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(fmt_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return json.dumps(v)
    return str(v)


def table(*columns: str, title: str | None = None, keys: int = 1, optional: tuple[str, ...] = ()) -> Any:
    """A :class:`~dynocell.cli.fit.FitTable` with ``columns``: laid out for the width it is printed at,
    never splitting a number or word (split in two, or vertical, when narrow); ``keys`` leading
    columns are repeated in each part; ``optional`` columns are left out when all their cells are empty."""
    from dynocell.cli.fit import FitTable

    return FitTable(*columns, title=title, keys=keys, optional=optional)


class StepProgress:
    """Progress on stderr: a status line that follows the step, and one line per finished step (``run``,
    ``bench``, ``profile``; ``experiment run`` adds its own lines)."""

    def __init__(self) -> None:
        self.status = err_console.status("starting …")

    def __call__(self, msg: str, data: dict[str, Any]) -> None:
        from dynocell.text import printable

        self.status.update(msg)
        if data.get("state") in ("completed", "failed", "skipped", "interrupted") or "ready_s" in data \
                or (data.get("step") == "model" and data.get("state") != "running") or "warning" in data:
            err_console.print(printable(f"  {msg}", keep_newlines=True), markup=False, highlight=False)


def host_cells(rows: list[dict[str, Any]]) -> list[str]:
    """The ``host`` cell of each listed row (``runs``, ``ps``): the hostname alone when it names one machine
    among ``rows``, else ``hostname (id)`` with the shortest machine-id prefix (at least 4 characters) that
    tells the machines of that name apart; a row without a host record keeps its ``host_label``. The stored
    label, ``hostname (8-character id)``, stays in ``--json``."""
    ids_by_name: dict[str, set[str]] = {}
    for r in rows:
        if r.get("host_id"):
            name = str(r.get("host_label") or "").rsplit(" (", 1)[0]
            ids_by_name.setdefault(name, set()).add(str(r["host_id"]))
    cells = []
    for r in rows:
        label = str(r.get("host_label") or "?")
        if not r.get("host_id"):
            cells.append(label)
            continue
        name = label.rsplit(" (", 1)[0]
        ids = ids_by_name[name]
        if len(ids) == 1:
            cells.append(name)
            continue
        n = 4
        while len({i[:n] for i in ids}) < len(ids):
            n += 1
        cells.append(f"{name} ({str(r['host_id'])[:n]})")
    return cells


def add_row(t: Any, *cells: Any) -> None:
    """Add a row to a rich Table; cells are shown literally (``[meta]`` is not rich markup)."""
    from rich.text import Text

    from dynocell.text import printable

    t.add_row(*(c if hasattr(c, "__rich_console__") else Text(printable(fmt_value(c), keep_newlines=True))
                for c in cells))


def out(renderable: Any = "") -> None:
    """Print a rich renderable or plain text to stdout (text is not parsed as markup)."""
    if isinstance(renderable, str):
        from dynocell.text import printable

        console.print(printable(renderable, keep_newlines=True), markup=False, highlight=False, soft_wrap=True)
    else:
        console.print(renderable)


def say(text: str, indent: int = 0) -> None:
    """Print plain prose to stdout wrapped at word boundaries to the output width (a word longer than a
    line, e.g. a model path, is folded), for lines that can run long: lists of fields, warnings, list items.
    ``indent`` columns go before every line (the first one included). :func:`out` keeps a text line whole
    (ids, hashes and commands to copy); text is not parsed as markup."""
    from rich.padding import Padding
    from rich.text import Text

    from dynocell.text import printable

    body = Text(printable(text, keep_newlines=True), overflow="fold")
    console.print(Padding(body, (0, 0, 0, indent), expand=False) if indent else body, soft_wrap=False)
