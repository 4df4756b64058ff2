"""Web-panel access tokens, the write side of ``dynocell web token …`` and the panel's login: create,
count, verify, check, list, revoke. Only each token's scrypt hash is stored (:mod:`dynocell.db.web`)."""

from __future__ import annotations

from typing import Any

from dynocell.db import web as dbweb
from dynocell.clock import aware_utc as _aware
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


def create(cell, label: str | None = None) -> str:
    """Create a web-panel token; returns the clear token (print it once; only its scrypt hash is stored).

    Raises UserError for a bad ``label`` (:func:`check_label`); nothing is stored then."""
    return dbweb.create_token(cell.store, check_label(label))


def count(cell) -> int:
    """Number of live web-panel tokens."""
    return dbweb.count_tokens(cell.store)


def verify(cell, token: str) -> int | None:
    """Id of the live token equal to ``token``, or None."""
    return dbweb.verify_token(cell.store, token)


def is_live(cell, token_id: int) -> bool:
    """True when stored web token ``token_id`` exists and is not revoked."""
    return dbweb.is_live(cell.store, token_id)


def list_tokens(cell) -> list[dict[str, Any]]:
    """Every web token as ``{id, label, created_at, revoked_at}`` (never the token or its hash)."""
    return [{**t.to_dict(), "created_at": _aware(t.created_at), "revoked_at": _aware(t.revoked_at)}
            for t in dbweb.list_tokens(cell.store)]


def revoke(cell, token_id: int) -> None:
    """Revoke web token ``token_id`` (its sessions end at their next request). Raises NotFound
    when no live token has that id."""
    if not dbweb.revoke_token(cell.store, token_id):
        raise NotFound(f"no live web token with id {token_id}", "see `dynocell web token list`")
