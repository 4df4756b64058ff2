"""Access control of the web panel: signed session cookies, CSRF tokens, login rate limit.

- Session cookie ``dynocell_session`` = ``<sid>.<expiry unix s>.<hmac-sha256>`` signed with a
  random per-app secret (so restarting the panel logs everyone out); HttpOnly, SameSite=Strict.
- CSRF token = HMAC(secret, "csrf|" + sid): sent as the hidden form field ``csrf_token`` or
  the ``X-CSRF-Token`` header (htmx sends it through ``hx-headers`` on ``<body>``).
- Login is required when the panel binds to a non-loopback address or any token exists;
  otherwise an anonymous session is issued on the first page (CSRF still applies, and the
  ``Host`` header must be a loopback name, which stops DNS-rebinding pages).
- Failed logins: at most ``max_failures`` per ``window_s`` per client address, then HTTP 429.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass

COOKIE = "dynocell_session"
CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf_token"
SESSION_TTL_S = 12 * 3600
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]")


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP addresses (127.0.0.0/8, ::1)."""
    host = host.strip().strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Session:
    """A verified session: ``sid``, ``csrf`` token, ``authenticated`` (logged in with a token)."""

    sid: str
    csrf: str
    authenticated: bool


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

    def issue(self, authenticated: bool) -> tuple[str, Session]:
        """A new cookie value and its session (``a`` = authenticated, ``n`` = anonymous)."""
        sid = ("a" if authenticated else "n") + secrets.token_urlsafe(18).replace(".", "_")
        exp = int(time.time()) + self.ttl_s
        value = f"{sid}.{exp}.{self._sig(f'{sid}.{exp}')}"
        return value, Session(sid=sid, csrf=self.csrf_for(sid), authenticated=authenticated)

    def verify(self, value: str | None) -> Session | None:
        """The session of a cookie value, or None when missing, forged, expired or logged out."""
        if not value or len(value) > 300:
            return None
        parts = value.split(".")
        if len(parts) != 3:
            return None
        sid, exp, sig = parts
        if not hmac.compare_digest(sig, self._sig(f"{sid}.{exp}")):
            return None
        try:
            if int(exp) < time.time():
                return None
        except ValueError:
            return None
        with self._lock:
            if sid in self._revoked:
                return None
        return Session(sid=sid, csrf=self.csrf_for(sid), authenticated=sid.startswith("a"))

    def revoke(self, sid: str) -> None:
        """Log ``sid`` out (its cookie stops verifying)."""
        with self._lock:
            self._revoked.add(sid)

    def check_csrf(self, session: Session | None, token: str | None) -> bool:
        """True when ``token`` is the CSRF token of ``session`` (constant-time)."""
        return bool(session and token and hmac.compare_digest(session.csrf, token))


class LoginLimiter:
    """Counts failed logins per client in a sliding window (in memory, per app)."""

    def __init__(self, max_failures: int = 5, window_s: float = 60.0) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self._fails: dict[str, deque[float]] = defaultdict(deque)
        self._lock = threading.Lock()

    def _prune(self, q: deque[float], now: float) -> None:
        while q and now - q[0] > self.window_s:
            q.popleft()

    def blocked(self, client: str) -> float:
        """Seconds until ``client`` may try again (0 = allowed now)."""
        now = time.monotonic()
        with self._lock:
            q = self._fails[client]
            self._prune(q, now)
            if len(q) >= self.max_failures:
                return max(1.0, self.window_s - (now - q[0]))
            return 0.0

    def failed(self, client: str) -> None:
        """Record one failed attempt of ``client``."""
        with self._lock:
            self._fails[client].append(time.monotonic())

    def succeeded(self, client: str) -> None:
        """Forget ``client``'s failures."""
        with self._lock:
            self._fails.pop(client, None)
