"""The web panel's access-control primitives (dynocell.web.auth) on their own: cookies, CSRF, login limiter.

The HTTP behaviour (redirects, 401/403/429, cookie flags) is in test_web_security.py; these are the
fast unit checks the mutation run (benchmarks/mutation.py) maps ``web/auth.py`` to.
"""

from __future__ import annotations

import time

import pytest

from dynocell.web.auth import LoginLimiter, Sessions, is_loopback

SECRET = b"s" * 32


@pytest.mark.parametrize("host, loop", [("localhost", True), (" localhost ", True), ("127.0.0.1", True),
                                        ("127.8.9.10", True), ("::1", True), ("[::1]", True), ("0.0.0.0", False),
                                        ("10.0.0.1", False), ("example.com", False), ("localhost.evil", False), ("Xlocalhost", False),
                                        ("", False)])
def test_is_loopback(host, loop):
    assert is_loopback(host) is loop


def test_issue_and_verify_round_trip():
    s = Sessions(SECRET, ttl_s=60)
    value, sess = s.issue(authenticated=True)
    sid, exp, sig = value.split(".")
    assert sid == sess.sid and sid.startswith("a") and len(sid) == 25
    assert int(time.time()) + 55 <= int(exp) <= int(time.time()) + 60
    assert len(sig) == 64 and sess.authenticated and sess.csrf == s.csrf_for(sid) and len(sess.csrf) == 40
    assert s.verify(value) == sess
    value_n, anon = s.issue(authenticated=False)
    assert anon.sid.startswith("n") and not anon.authenticated and s.verify(value_n) == anon
    assert s.issue(True)[1].sid != sess.sid  # random per issue


def test_forged_expired_and_malformed_cookies_are_refused():
    s = Sessions(SECRET, ttl_s=60)
    value, sess = s.issue(authenticated=False)
    sid, exp, sig = value.split(".")
    assert s.verify(None) is None and s.verify("") is None
    assert s.verify(value + "x" * 300) is None  # over 300 characters
    assert s.verify(f"{sid}.{exp}") is None and s.verify(f"{sid}.{exp}.{sig}.x") is None
    assert s.verify(f"a{sid[1:]}.{exp}.{sig}") is None  # anonymous promoted to authenticated: signature breaks
    assert s.verify(f"{sid}.{int(exp) + 1}.{sig}") is None  # extended expiry: signature breaks
    assert Sessions(b"t" * 32).verify(value) is None  # another panel's secret (a restart logs everyone out)
    past = int(time.time()) - 1
    expired = f"{sid}.{past}.{s._sig(f'{sid}.{past}')}"
    assert s.verify(expired) is None
    bad_exp = f"{sid}.soon.{s._sig(f'{sid}.soon')}"
    assert s.verify(bad_exp) is None  # signed but not a number


def test_cookie_length_limit_is_300_characters():
    s = Sessions(SECRET)
    exp = int(time.time()) + 60

    def cookie(sid_len: int) -> str:
        sid = "a" * sid_len
        return f"{sid}.{exp}.{s._sig(f'{sid}.{exp}')}"

    fixed = len(cookie(0))
    assert len(cookie(300 - fixed)) == 300 and s.verify(cookie(300 - fixed)) is not None
    assert s.verify(cookie(301 - fixed)) is None


def test_csrf_token_is_the_hmac_of_its_session():
    import hashlib
    import hmac

    s = Sessions(SECRET)
    assert s.csrf_for("abc") == hmac.new(SECRET, b"csrf|abc", hashlib.sha256).hexdigest()[:40]


def test_revoked_session_stops_verifying_only_itself():
    s = Sessions(SECRET)
    v1, a = s.issue(True)
    v2, b = s.issue(True)
    s.revoke(a.sid)
    assert s.verify(v1) is None and s.verify(v2) == b


def test_csrf_is_bound_to_the_session_and_the_secret():
    s = Sessions(SECRET)
    _, a = s.issue(True)
    _, b = s.issue(True)
    assert s.check_csrf(a, a.csrf) is True
    assert s.check_csrf(a, b.csrf) is False and s.check_csrf(b, a.csrf) is False
    assert s.check_csrf(a, None) is False and s.check_csrf(a, "") is False and s.check_csrf(None, a.csrf) is False
    assert s.csrf_for(a.sid) != Sessions(b"t" * 32).csrf_for(a.sid)
    assert s.csrf_for(a.sid) != s._sig(a.sid)[:40]  # domain-separated from the cookie signature
    assert Sessions().secret != Sessions().secret and len(Sessions().secret) == 32  # random per app


def test_login_limiter_blocks_after_max_failures_and_forgets_on_success():
    lim = LoginLimiter(max_failures=3, window_s=60.0)
    for _ in range(2):
        lim.failed("1.2.3.4")
    assert lim.blocked("1.2.3.4") == 0.0
    lim.failed("1.2.3.4")
    wait = lim.blocked("1.2.3.4")
    assert 30.0 < wait <= 60.0  # the rest of the window since the first failure, not a fixed second
    assert lim.blocked("5.6.7.8") == 0.0  # per client
    lim.succeeded("1.2.3.4")
    assert lim.blocked("1.2.3.4") == 0.0
    lim.succeeded("never-seen")  # no error


def test_login_limiter_defaults_and_wait():
    lim = LoginLimiter()
    for _ in range(4):
        lim.failed("c")
    assert lim.blocked("c") == 0.0
    lim.failed("c")
    assert 30.0 < lim.blocked("c") <= 60.0  # 5 failures in 60 s: about the whole window to wait
    # the wait counts from the oldest failure in the window, and is at least 1 s
    now = time.monotonic()
    lim = LoginLimiter(max_failures=2, window_s=60.0)
    lim._fails["c"] = type(lim._fails["c"])([now - 50.0, now - 10.0])
    assert 0.0 < lim.blocked("c") <= 10.0  # from the newest it would be about 50
    lim._fails["d"] = type(lim._fails["d"])([now - 59.9, now - 59.9])
    assert lim.blocked("d") == 1.0


def test_login_limiter_window_slides():
    lim = LoginLimiter(max_failures=2, window_s=60.0)
    lim.failed("c")
    lim.failed("c")
    assert lim.blocked("c") > 0
    # age the recorded failures past the window (the limiter keeps monotonic stamps)
    lim._fails["c"] = type(lim._fails["c"])(t - 61.0 for t in lim._fails["c"])
    assert lim.blocked("c") == 0.0 and len(lim._fails["c"]) == 0
    # failures inside the window still count
    now = time.monotonic()
    lim._fails["d"] = type(lim._fails["d"])([now - 59.0, now - 59.0])
    assert lim.blocked("d") >= 1.0
