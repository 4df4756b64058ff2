"""Fast reader of the trace split: whole events cut from the byte stream, typed-decoded by msgspec.

The split needs seven fields per event (``name``, ``ph``, ``cat``, ``ts``,
``dur``, ``pid``, ``tid``); everything else (``args`` above all) is skipped by
msgspec's decoder without building a Python object. The stream is read in
blocks of :data:`BLOCK_BYTES`; each block is cut after the last ``}`` that
is followed by ``,`` and ``{`` (the seam between two events), and the events
before the cut are decoded at once as ``list[Event]``.

Why a cut is never wrong: a chunk always starts at the first byte of an event,
so ``[`` + chunk up to the cut + ``]`` is valid JSON only if the cut is at the
end of an event (a cut inside a string leaves the string open; a cut inside a
nested value leaves a bracket open). A failed decode means a wrong cut (the
previous seam is tried) or a file this reader does not take.

Anything unusual raises :class:`NotFast` and the caller reads the whole file
again with the ijson reader (``dynocell.engine.trace``), which has the exact
errors and limits: a value that is not of the typed shape (a string ``ts``,
a non-object event, a non-finite number), invalid UTF-8 anywhere, no seam within
``max_event_bytes`` (a giant event), nesting past the interpreter's recursion
limit, an empty or duplicated ``traceEvents``, a byte-order mark. Memory: the
pending bytes never exceed ``max_event_bytes`` + one block, plus the decoded
events of one chunk (about 16 000 small objects for a 4 MiB block).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from typing import Any, BinaryIO

import msgspec

__all__ = ["BLOCK_BYTES", "Event", "NotFast", "event_chunks"]

#: Bytes read and decoded at a time (uncompressed).
BLOCK_BYTES = 4 << 20
#: Above this recursion limit msgspec could overflow the C stack on deeply nested input before it
#: raises RecursionError, so the fast reader steps aside (Python's default is 1000).
_MAX_RECURSION_LIMIT = 10_000
_WS = rb"[ \t\r\n]*"
_SEAM = re.compile(rb"\}" + _WS + rb"," + _WS + rb"\{")  # end of one event, start of the next
_LAST = re.compile(rb"\}" + _WS + rb"\]")  # end of the last event and of the list
_KEY = re.compile(rb"[{,]" + _WS + rb'"traceEvents"' + _WS + rb":" + _WS + rb"\[")
_TAIL = 64 << 10  # bytes at the end of a block searched first for a seam
_SEAM_TRIES = 3  # seams tried per chunk (from the last) before giving up on the fast reader


class Event(msgspec.Struct, gc=False):
    """The fields of one Chrome-trace event that the split reads (Chrome trace format names).

    ``ts``/``dur`` are µs (``int`` in the file becomes ``float``, as ``float(v)``
    does); a missing field and JSON ``null`` are both ``None``.
    """

    name: str | None = None
    ph: str | None = None
    cat: str | None = None
    ts: float | None = None
    dur: float | None = None
    pid: Any = None
    tid: Any = None


class NotFast(Exception):
    """The fast reader does not take this file (the reason is the message); read it with ijson."""


_DECODE = msgspec.json.Decoder(list[Event]).decode
_HEADER = msgspec.json.Decoder(dict[str, Any]).decode


def _decode(buf: bytearray, n: int) -> list[Event] | None:
    """Typed decode of ``buf[:n]`` (``[…]``); ``None`` when it is not a valid list of typed events."""
    with memoryview(buf) as mv, mv[:n] as part:
        try:
            evs = _DECODE(part)
        except (msgspec.DecodeError, RecursionError):  # ValidationError is a DecodeError
            return None
        if not buf.isascii():  # msgspec checks UTF-8 only in the strings it keeps; ijson checks all
            try:
                str(part, "utf-8")
            except UnicodeDecodeError:
                raise NotFast("not UTF-8") from None
    return evs


def _start(f: BinaryIO, max_event_bytes: int) -> tuple[bytearray, bool]:
    """Read up to the first event: ``(buf, bare)`` with ``buf`` = ``[`` + bytes after the list's ``[``."""
    buf = bytearray()
    while True:
        block = f.read(BLOCK_BYTES)
        buf += block
        body = buf.lstrip(b" \t\r\n")
        if body[:1] == b"[":
            return bytearray(b"[") + body[1:], True
        if bytes(body[:1]) not in (b"{", b""):
            raise NotFast("neither an object nor an array")
        m = _KEY.search(buf)
        if m is not None:
            head = bytes(buf[: m.start()]) + (b"}" if buf[m.start()] == ord(",") else b"{}")
            try:
                header = _HEADER(head)
            except msgspec.DecodeError:
                raise NotFast("traceEvents is not a key of the top-level object") from None
            if "traceEvents" in header:
                raise NotFast("traceEvents given twice")
            return bytearray(b"[") + buf[m.end():], False
        if not block or len(buf) > max_event_bytes:
            raise NotFast("no traceEvents list near the start")


def _cut(buf: bytearray, rx: re.Pattern[bytes], start: int, close: bool) -> tuple[list[Event], int] | None:
    """Decode ``buf`` up to the last seam ``rx`` found at or after ``start``: ``(events, end)``.

    ``close``: the seam ends with the list's own ``]`` (last chunk); otherwise the
    byte after the seam's ``}`` is set to ``]`` for the decode and put back.
    ``end`` is the index of the seam's last byte. ``None``: no seam decodes.
    """
    seams: list[re.Match[bytes]] = []
    for lo in (max(start, len(buf) - _TAIL), start):  # the last seam is nearly always near the end
        seams = list(rx.finditer(buf, lo))[-_SEAM_TRIES:]
        if seams or lo == start:
            break
    for m in reversed(seams):
        if close:
            evs = _decode(buf, m.end())
        else:
            at = m.start() + 1
            saved = buf[at]
            buf[at] = 0x5D  # "]"
            evs = _decode(buf, at + 1)
            buf[at] = saved
        if evs is not None:
            return evs, m.end() - 1
    return None


def event_chunks(f: BinaryIO, max_event_bytes: int) -> Iterator[list[Event]]:
    """Events of a Chrome trace (object form with ``traceEvents``, or bare array), in file order.

    ``f``: the decompressed byte stream, read to its end. Yields lists of
    :class:`Event`, one per block. Raises :class:`NotFast` when the file is not
    one this reader takes (see the module docstring); read errors of ``f``
    (``OSError``, ``EOFError``, ``zlib.error``) pass through.
    """
    if sys.getrecursionlimit() > _MAX_RECURSION_LIMIT:
        raise NotFast("recursion limit raised")
    buf, bare = _start(f, max_event_bytes)
    if buf[1:].lstrip(b" \t\r\n")[:1] == b"]":
        raise NotFast("no events")  # the ijson reader checks the rest of such a small file
    searched = 0  # seams before this index have been looked for already
    while True:
        block = f.read(BLOCK_BYTES)
        if not block:
            break
        searched = max(1, len(buf) - 64)
        buf += block
        got = _cut(buf, _SEAM, searched, close=False)
        if got is None:
            if len(buf) > max_event_bytes:
                raise NotFast("no end of event within the size limit")
            continue
        evs, end = got
        del buf[1:end]  # keep "[" and the next event's "{" onwards
        yield evs
    got = _cut(buf, _LAST, 1, close=True)
    if got is None:
        raise NotFast("the end of the event list does not decode")
    evs, end = got
    tail = bytes(buf[end + 1:]).strip(b" \t\r\n")
    if bare:
        if tail:
            raise NotFast("data after the array")
    elif tail != b"}":
        if tail[:1] != b",":
            raise NotFast("no end of the top-level object")
        try:
            rest = _HEADER(b"{" + tail[1:])
        except msgspec.DecodeError:
            raise NotFast("the end of the top-level object does not decode") from None
        if "traceEvents" in rest:
            raise NotFast("traceEvents given twice")
    yield evs
