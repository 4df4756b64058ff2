"""One error hierarchy, translated once at each edge.

The CLI turns a :class:`DynocellError` into one ``Error: …`` line and an exit
code (``exit_code``); the web panel into a page, fragment or JSON body with an
HTTP status (``http_status``); the TUI into a toast. Lower layers raise these
and never print.
"""

from __future__ import annotations

from dynocell.text import quoted_name  # a file name with a newline would split the Error: line


class DynocellError(Exception):
    """Base of every error dynocell reports to a person.

    ``message`` says what went wrong; ``hint`` (optional) says what to do.
    """

    exit_code = 1
    http_status = 500

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class UserError(DynocellError):
    """Bad input from a person: a flag, a file, a name. Exit code 2, HTTP 400."""

    exit_code = 2
    http_status = 400


class ConfigError(UserError):
    """An engine config file that cannot be accepted.

    ``source`` is the file (or ``<string>``), ``field`` the dotted field path
    (``speculative.num_draft_tokens``) or ``None`` for syntax errors.
    """

    def __init__(self, source: str, field: str | None, message: str, hint: str | None = None) -> None:
        where = f"{quoted_name(source)}: {field}" if field else quoted_name(source)
        super().__init__(f"{where}: {message}", hint)
        self.source = source
        self.field = field


class NotFound(UserError):
    """A name, hash, id or prefix that matches nothing (or more than one thing). HTTP 404."""

    http_status = 404


class Refused(UserError):
    """An action this face may not take on its own (e.g. the web booting an untrusted config). HTTP 403."""

    http_status = 403


class StoreUnavailable(UserError):
    """The store cannot take a write: a read-only path or URL, a full disk, a lock held too long.

    Exit code 2 (the operator fixes the path or the setting), HTTP 503.
    """

    http_status = 503


class EngineError(DynocellError):
    """An engine misbehaved: failed to boot, died, answered garbage. Exit code 3."""

    exit_code = 3
    http_status = 502


class Interrupted(DynocellError):
    """A long procedure was interrupted (Ctrl-C / SIGTERM); what was done is recorded. Exit 130."""

    exit_code = 130
    http_status = 409


def not_a_file(path: object, noun: str = "file") -> str:
    """Why ``path`` (a ``str`` or ``Path`` that is not a regular file) cannot be read, for an error
    message: ``a directory, not a {noun}``; ``not a regular {noun} (a pipe, device or socket)`` —
    a FIFO or ``/dev/zero`` used to be called missing; or ``no such {noun}``."""
    import os
    import stat

    try:
        mode = os.stat(str(path)).st_mode
    except OSError:
        return f"no such {noun}"
    if stat.S_ISDIR(mode):
        return f"a directory, not a {noun}"
    return f"not a regular {noun} (a pipe, device or socket)"
