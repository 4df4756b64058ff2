"""Web-panel access tokens, the write side of ``dynocell web token …`` and the panel's login: create,
count, verify, check, list, revoke. Only each token's scrypt hash is stored (:mod:`dynocell.db.web`)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from dynocell.db import web as dbweb
from dynocell.clock import aware_utc as _aware, now_utc
from dynocell.errors import NotFound, UserError

#: The longest label a web token may have (characters).
LABEL_MAX = 64


def check_label(label: str | None) -> str | None:
    """``label`` stripped (None when empty), or UserError naming ``--label`` when it is longer than
    :data:`LABEL_MAX` characters or holds a control or other non-printable character (it is
    printed on terminals and pages)."""
    if label is None or not label.strip():
        return None
    label = label.strip()
    if len(label) > LABEL_MAX:
        raise UserError(f"--label: {len(label)} characters; a web token label has at most {LABEL_MAX}",
                        "give a shorter name, e.g. --label alice")
    bad = next((ch for ch in label if not ch.isprintable()), None)
    if bad is not None:
        raise UserError(f"--label: control character {ord(bad):#04x} in the web token label",
                        "use printable characters only, e.g. --label alice")
    return label


#: ``--expires``: a whole number and a unit (seconds, minutes, hours, days, weeks): ``90m``, ``12h``, ``7d``.
_EXPIRES = re.compile(r"^\s*(\d{1,6})\s*([smhdw])\s*$", re.IGNORECASE)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
#: The longest a token may be made to last (``--expires``), seconds: ten years.
EXPIRES_MAX_S = 10 * 365 * 86400


def parse_expires(text: str | None) -> timedelta | None:
    """``--expires`` as a duration (None when not given): ``7d`` → 7 days. Raises UserError naming
    ``--expires`` for anything else (no unit, zero, a fraction, more than ten years)."""
    if text is None or not str(text).strip():
        return None
    m = _EXPIRES.match(str(text))
    seconds = int(m.group(1)) * _UNITS[m.group(2).lower()] if m else 0
    if not m or seconds <= 0 or seconds > EXPIRES_MAX_S:
        raise UserError(f"--expires: {str(text)[:40]!r} is not a duration of 1 s to 10 years",
                        "give a whole number and a unit: s, m, h, d or w (e.g. --expires 7d)")
    return timedelta(seconds=seconds)


def create(cell, label: str | None = None, expires: str | timedelta | None = None) -> str:
    """Create a web-panel token; returns the clear token (print it once; only its scrypt hash is stored).
    ``expires`` (``7d`` or a timedelta; None: never): it stops logging in after that long (:func:`create_expiring`).

    Raises UserError for a bad ``label`` (:func:`check_label`) or ``expires`` (:func:`parse_expires`); nothing is
    stored then."""
    return create_expiring(cell, label, expires)[0]


def create_expiring(cell, label: str | None = None,
                    expires: str | timedelta | None = None) -> tuple[str, datetime | None]:
    """:func:`create`, returning ``(token, expires_at)`` (aware UTC, None for a token that never expires)."""
    label = check_label(label)
    span = expires if isinstance(expires, timedelta) or expires is None else parse_expires(expires)
    at: datetime | None = now_utc() + span if span else None
    return dbweb.create_token(cell.store, label, at), at


def count(cell) -> int:
    """Number of live web-panel tokens."""
    return dbweb.count_tokens(cell.store)


def verify(cell, token: str) -> int | None:
    """Id of the live token (not revoked, not expired) equal to ``token``, or None."""
    return dbweb.verify_token(cell.store, token)


def is_live(cell, token_id: int) -> bool:
    """True when stored web token ``token_id`` exists and is live (not revoked, not expired)."""
    return dbweb.is_live(cell.store, token_id)


def list_tokens(cell) -> list[dict[str, Any]]:
    """Every web token as ``{id, label, created_at, revoked_at, expires_at, expired}`` (never the token or its
    hash); times aware UTC, ``expires_at`` None for a token that never expires."""
    now = now_utc()
    out = []
    for t in dbweb.list_tokens(cell.store):
        exp = _aware(t.expires_at)
        out.append({**t.to_dict(), "created_at": _aware(t.created_at), "revoked_at": _aware(t.revoked_at),
                    "expires_at": exp, "expired": exp is not None and exp <= now})
    return out


def revoke(cell, token_id: int) -> None:
    """Revoke web token ``token_id`` (its sessions end at their next request). Raises NotFound
    when no live token has that id."""
    if not dbweb.revoke_token(cell.store, token_id):
        raise NotFound(f"no live web token with id {token_id}", "see `dynocell web token list`")
