"""Access control of the web panel: login tokens, signed session cookies, CSRF tokens, login back-off.

- The panel always requires a login. A *token* is either a stored web token (``dynocell web
  token create``; id = its row id) or the panel's *launch token*, made by ``dynocell web`` when
  no stored token exists and printed once inside a login URL (``/?token=…``, Jupyter-style;
  id ``"launch"``; it lives as long as the panel process).
- Session cookie ``dynocell_session`` = ``<sid>.<token id>.<expiry unix s>.<hmac-sha256>`` signed
  with a random per-app secret (restarting the panel logs everyone out); HttpOnly,
  SameSite=Strict. A session lives only while its token does: revoking a token ends its sessions.
- CSRF token = HMAC(secret, "csrf|" + sid): sent as the hidden form field ``csrf_token`` or
  the ``X-CSRF-Token`` header (htmx sends it through ``hx-headers`` on ``<body>``).
- Failed logins: growing back-off per client address (:class:`LoginBackoff`), never a hard
  lockout. The attempt is reserved *before* the slow scrypt check, so concurrent wrong guesses
  cannot overrun the limit. The client address is the TCP peer: forwarding headers count only
  when a setting names the proxy (:func:`dynocell.web.app.uvicorn_options`).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

COOKIE = "dynocell_session"
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf_token"
SESSION_TTL_S = 12 * 3600
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]")
LAUNCH_TOKEN_ID = "launch"


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP addresses (127.0.0.0/8, ::1)."""
    host = host.strip().strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(host_header: str) -> str:
    """The name part of a ``Host`` header value (``[::1]:8700`` → ``[::1]``, ``a:1`` → ``a``)."""
    h = (host_header or "").strip().lower()
    if h.startswith("["):
        return h.split("]")[0] + "]"
    return h.rsplit(":", 1)[0]


def same_origin(origin: str, host_header: str) -> bool:
    """True when the ``Origin`` (or ``Referer``) URL names the host:port the request was sent to.

    ``origin`` ``"null"`` (sandboxed frames, file: pages) and any URL without a host never match.
    """
    try:
        parts = urlsplit(origin.strip())
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False
    return parts.netloc.lower() == (host_header or "").strip().lower()


def safe_next(target: str | None) -> str:
    """``target`` when it is a path on this panel (``/…``, no scheme, host or backslash), else ``/``: where a
    login may redirect to (``//evil.example/`` is another site to a browser, so it becomes ``/``)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    parts = urlsplit(target)
    return parts.path + (("?" + parts.query) if parts.query else "") if not parts.netloc else "/"


def new_launch_token() -> str:
    """A fresh random launch token (``dcl_`` + 32 random bytes, URL-safe)."""
    return "dcl_" + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Session:
    """A verified session: ``sid``, ``csrf`` token, ``token_id`` (the token it logged in with)."""

    sid: str
    csrf: str
    token_id: str
    authenticated: bool = True


class Sessions:
    """Issues and verifies signed session cookies; keeps the set of logged-out sids."""

    def __init__(self, secret: bytes | None = None, ttl_s: int = SESSION_TTL_S) -> None:
        self.secret = secret or secrets.token_bytes(32)
        self.ttl_s = ttl_s
        self._revoked: set[str] = set()
        self._lock = threading.Lock()

    def _sig(self, msg: str) -> str:
        return hmac.new(self.secret, msg.encode(), hashlib.sha256).hexdigest()

    def csrf_for(self, sid: str) -> str:
        """The CSRF token bound to session ``sid``."""
        return self._sig("csrf|" + sid)[:40]

    def issue(self, token_id: str) -> tuple[str, Session]:
        """A new cookie value and its session, logged in with token ``token_id``."""
        sid = "a" + secrets.token_urlsafe(18).replace(".", "_")
        tid = str(token_id).replace(".", "_")
        exp = int(time.time()) + self.ttl_s
        value = f"{sid}.{tid}.{exp}.{self._sig(f'{sid}.{tid}.{exp}')}"
        return value, Session(sid=sid, csrf=self.csrf_for(sid), token_id=tid)

    def verify(self, value: str | None) -> Session | None:
        """The session of a cookie value, or None when missing, forged, expired or logged out."""
        if not value or len(value) > 300:
            return None
        parts = value.split(".")
        if len(parts) != 4:
            return None
        sid, tid, exp, sig = parts
        if not hmac.compare_digest(sig, self._sig(f"{sid}.{tid}.{exp}")):
            return None
        try:
            if int(exp) < time.time():
                return None
        except ValueError:
            return None
        with self._lock:
            if sid in self._revoked:
                return None
        return Session(sid=sid, csrf=self.csrf_for(sid), token_id=tid)

    def revoke(self, sid: str) -> None:
        """Log ``sid`` out (its cookie stops verifying)."""
        with self._lock:
            self._revoked.add(sid)

    def check_csrf(self, session: Session | None, token: str | None) -> bool:
        """True when ``token`` is the CSRF token of ``session`` (constant-time)."""
        return bool(session and token and hmac.compare_digest(session.csrf, token))


@dataclass
class _Tries:
    failures: int = 0
    not_before: float = 0.0
    last: float = 0.0


class LoginBackoff:
    """Growing back-off of failed logins per client address (in memory, per app).

    :meth:`reserve` is called *before* a token is checked and counts the attempt as a failure
    until :meth:`succeeded` clears it, so N concurrent wrong guesses reach the (slow) check at
    most ``free_failures`` times before the back-off starts. After ``free_failures`` failures
    the client waits ``base_s · 2^(failures − free_failures)`` seconds (at most ``max_s``)
    before its next attempt; a client quiet for ``forget_s`` starts afresh. Nobody is locked out:
    the wait is bounded, a right token clears it, and while it lasts
    :class:`~dynocell.web.access.TokenChecker` still lets a right token in (the address is shared
    by every local user; the back-off is for its failures, not for another user's right token).
    """

    def __init__(self, free_failures: int = 5, base_s: float = 1.0, max_s: float = 300.0,
                 forget_s: float = 3600.0) -> None:
        self.free_failures = max(1, free_failures)
        self.base_s = base_s
        self.max_s = max_s
        self.forget_s = forget_s
        self._tries: dict[str, _Tries] = {}
        self._lock = threading.Lock()

    def reserve(self, client: str) -> float:
        """Reserve one login attempt of ``client``: 0 = go ahead (counted as a failure until
        :meth:`succeeded`), else the seconds to wait (nothing reserved)."""
        now = time.monotonic()
        with self._lock:
            t = self._tries.get(client)
            if t is None or now - t.last > self.forget_s:
                t = self._tries[client] = _Tries()
            if now < t.not_before:
                return t.not_before - now
            t.failures += 1
            t.last = now
            if t.failures >= self.free_failures:
                t.not_before = now + min(self.max_s, self.base_s * 2 ** (t.failures - self.free_failures))
            return 0.0

    def waiting(self, client: str) -> float:
        """Seconds until ``client`` may try again (0 = now); reserves nothing."""
        with self._lock:
            t = self._tries.get(client)
            return max(0.0, t.not_before - time.monotonic()) if t else 0.0

    def succeeded(self, client: str) -> None:
        """A right token from ``client``: forget its failures."""
        with self._lock:
            self._tries.pop(client, None)
