"""Untrusted text made safe to print on a terminal — the one place every layer uses.

Config fields, notes, engine log lines, kernel names and runbook text come
from files and processes dynocell does not control. Written to a terminal
as they are, escape sequences in them set the window title (OSC 0), write
the clipboard (OSC 52), clear the screen (CSI 2J) or hide text. Shared by
every layer like :mod:`dynocell.errors` (no imports from dynocell).

- :func:`strip_escapes`: ECMA-48 escape sequences removed (CSI ``ESC [ … final``,
  OSC ``ESC ] … BEL|ESC \\``, the 8-bit CSI/OSC introducers U+009B/U+009D, and
  two-byte ``ESC x``); other text kept as is.
- :func:`printable`: :func:`strip_escapes`, then every remaining character that
  is not printable (``str.isprintable``: C0/C1 controls, DEL, a lone ESC,
  unassigned or format characters) shown as ``?``; newlines kept when asked.
- :func:`quoted_name`: a file name as a message quotes it (its ``repr`` when it holds a newline or control).
- :func:`shorten`: :func:`printable`, cut to a length with ``…`` as its last character.
- :func:`wrap_keeping_commands`: text wrapped to a width, a `backticked command` never split.
"""

from __future__ import annotations

import re
from typing import Any

#: ECMA-48 escape sequences: CSI (7- and 8-bit), OSC/DCS/APC/PM strings (terminated by BEL or
#: ST, or cut off at the end of the text), and two-byte escapes.
ESCAPE_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]{0,32}[ -/]{0,8}[@-~]"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]{0,4096}(?:\x07|\x1b\\|\x9c|$)"
    r"|\x1b[@-Z\\-_]"
)

REPLACEMENT = "?"


def strip_escapes(text: str) -> str:
    """``text`` with terminal escape sequences (see :data:`ESCAPE_SEQUENCE`) removed."""
    if "\x1b" not in text and not any("\x90" <= ch <= "\x9f" for ch in text):
        return text
    return ESCAPE_SEQUENCE.sub("", text)


def printable(text: Any, *, limit: int | None = None, keep_newlines: bool = False) -> str:
    """``text`` (any value, ``str()``-ed) fit for a terminal: escape sequences removed, every other
    non-printable character as ``?``, then cut to ``limit`` characters when given.

    ``keep_newlines`` keeps ``\\n`` (multi-line messages, tables); a tab becomes a space.
    """
    s = strip_escapes(text if isinstance(text, str) else str(text))
    if not s.isprintable():
        keep = "\n" if keep_newlines else ""
        s = "".join(ch if ch.isprintable() or ch in keep else (" " if ch == "\t" else REPLACEMENT)
                    for ch in s)
    return s if limit is None else s[:limit]


def quoted_name(name: Any) -> str:
    """A file name (or any one-line value) as a message quotes it: as is when every character is printable, else
    its Python ``repr`` (``'evil\\nhint: …'``), so a newline or control character in it can neither split the
    message's line nor forge a line of its own (issue 32, item 16)."""
    s = name if isinstance(name, str) else str(name)
    return s if s.isprintable() else repr(s)


def shorten(text: Any, limit: int) -> str:
    """:func:`printable` ``text`` of at most ``limit`` characters: when cut, its last character is
    ``…`` so the reader knows there is more (e.g. a C++ kernel name cut in a table)."""
    s = printable(text)
    return s if len(s) <= limit else s[:max(0, limit - 1)] + "…"


def printable_tree(value: Any) -> Any:
    """A copy of ``value`` (dicts, lists, tuples of plain values) with every string, key or value,
    made :func:`printable` (newlines kept) — for rows a face shows as they come."""
    if isinstance(value, str):
        return printable(value, keep_newlines=True)
    if isinstance(value, dict):
        return {printable_tree(k): printable_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printable_tree(v) for v in value]
    if isinstance(value, tuple):
        return tuple(printable_tree(v) for v in value)
    return value


#: A span that must stay on one line when wrapped: a `command` in backticks, or a run of non-space characters.
_WRAP_TOKEN = re.compile(r"`[^`\n]*`\S*|\S+")


def wrap_keeping_commands(text: str, width: int) -> str:
    """``text`` wrapped at spaces to ``width`` columns, each `backticked command` kept whole on one line.

    Each line of ``text`` (its own newlines kept) is filled greedily with words; a backticked span counts
    as one word, so a command an operator copies is never split. A word longer than ``width`` (a long path,
    a long command) stands alone on its line, unbroken: the terminal folds it for the eye, and a copy of
    it still pastes whole. ``width`` below 20 is taken as 20. Returns the wrapped text (no trailing spaces).
    """
    width = max(20, width)
    out: list[str] = []
    for line in text.split("\n"):
        indent = line[: len(line) - len(line.lstrip(" "))]
        current = ""
        for word in _WRAP_TOKEN.findall(line):
            if current and len(current) + 1 + len(word) > width:
                out.append(current)
                current = word
            else:
                current = f"{current} {word}" if current else indent + word
        out.append(current)
    return "\n".join(out)
