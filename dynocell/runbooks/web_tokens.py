"""Web-panel access tokens, the write side of ``dynocell web token …`` and the panel's login: create,
count, verify, check, list, revoke. Only each token's scrypt hash is stored (:mod:`dynocell.db.web`)."""

from __future__ import annotations

from typing import Any

from dynocell.db import web as dbweb
from dynocell.clock import aware_utc as _aware
from dynocell.errors import NotFound


def create(cell, label: str | None = None) -> str:
    """Create a web-panel token; returns the clear token (print it once; only its scrypt hash is stored)."""
    return dbweb.create_token(cell.store, label)


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
