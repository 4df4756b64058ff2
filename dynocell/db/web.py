"""Web-panel access tokens: created once, stored only as a salted scrypt hash.

``token_hash`` format: ``scrypt$<n>$<r>$<p>$<salt hex>$<digest hex>`` (hashlib.scrypt,
RFC 7914). The clear token is returned once by :func:`create_token` and never stored.

A token is *live* while it is not revoked and, when it has an ``expires_at`` (migration 0010, UTC), before
that time: only live tokens verify, count and keep their sessions.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone

from sqlalchemy import func, or_, select

from dynocell.db.rows import Record
from dynocell.db.session import Store
from dynocell.db.tables import WebToken

_N, _R, _P = 2**14, 8, 1
TOKEN_BYTES = 24


def hash_token(token: str, salt: bytes | None = None) -> str:
    """The storable scrypt hash of ``token`` (random 16-byte salt unless given)."""
    salt = salt if salt is not None else secrets.token_bytes(16)
    digest = hashlib.scrypt(token.encode(), salt=salt, n=_N, r=_R, p=_P, dklen=32)
    return f"scrypt${_N}${_R}${_P}${salt.hex()}${digest.hex()}"


def _matches(token: str, stored: str) -> bool:
    try:
        scheme, n, r, p, salt_hex, digest_hex = stored.split("$")
        if scheme != "scrypt":
            return False
        digest = hashlib.scrypt(token.encode(), salt=bytes.fromhex(salt_hex), n=int(n), r=int(r), p=int(p),
                                dklen=len(digest_hex) // 2)
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(digest.hex(), digest_hex)


def _utc_naive(t: datetime) -> datetime:
    return t.astimezone(timezone.utc).replace(tzinfo=None) if t.tzinfo else t


def _live():  # noqa: ANN202 - a SQLAlchemy condition
    now = datetime.now(timezone.utc).replace(tzinfo=None)  # stored times are naive UTC (SQLite)
    return WebToken.revoked_at.is_(None) & or_(WebToken.expires_at.is_(None), WebToken.expires_at > now)


def create_token(store: Store, label: str | None = None, expires_at: datetime | None = None) -> str:
    """Make a new random token, store its hash with ``label`` and ``expires_at`` (None: never expires);
    returns the clear token (show it once)."""
    token = "dct_" + secrets.token_urlsafe(TOKEN_BYTES)
    with store.session() as s:
        s.add(WebToken(token_hash=hash_token(token), label=label,
                       expires_at=_utc_naive(expires_at) if expires_at else None))
    return token


def count_tokens(store: Store) -> int:
    """Number of live tokens (not revoked, not expired)."""
    with store.session() as s:
        return int(s.scalar(select(func.count()).select_from(WebToken).where(_live())) or 0)


def verify_token(store: Store, token: str) -> int | None:
    """The id of the live token equal to ``token``, or None (constant-time digest comparison)."""
    if not token or len(token) > 512:
        return None
    with store.session() as s:
        rows = s.execute(select(WebToken.id, WebToken.token_hash).where(_live())).all()
    for tid, stored in rows:
        if _matches(token, stored):
            return int(tid)
    return None


def revoke_token(store: Store, token_id: int) -> bool:
    """Mark token ``token_id`` revoked; False when no live token has that id."""
    with store.session() as s:
        row = s.get(WebToken, token_id)
        if row is None or row.revoked_at is not None:
            return False
        row.revoked_at = datetime.now(timezone.utc)
        return True


@dataclass(frozen=True)
class TokenRow(Record):
    """One row of ``web_tokens`` without its hash: ``id``, ``label``, ``created_at``, ``revoked_at`` (None: not
    revoked), ``expires_at`` (None: never expires)."""

    id: int
    label: str | None
    created_at: datetime
    revoked_at: datetime | None
    expires_at: datetime | None


def list_tokens(store: Store) -> list[TokenRow]:
    """Every token, oldest first (never the hash)."""
    with store.session() as s:
        return [TokenRow.of(t) for t in s.scalars(select(WebToken).order_by(WebToken.id))]


def is_live(store: Store, token_id: int) -> bool:
    """True when token ``token_id`` exists and is live (not revoked, not expired)."""
    with store.session() as s:
        return s.scalar(select(WebToken.id).where(WebToken.id == token_id, _live())) is not None
