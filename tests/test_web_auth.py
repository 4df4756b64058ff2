"""The web panel's access-control primitives (dynocell.web.auth) on their own: cookies, CSRF, login back-off.

The HTTP behaviour (redirects, 401/403/429, cookie flags) is in test_web_security.py; these are the
fast unit checks the mutation run (benchmarks/mutation.py) maps ``web/auth.py`` to.
"""

from __future__ import annotations

import time

import pytest

from dynocell.web.auth import LoginBackoff, Sessions, is_loopback

SECRET = b"s" * 32


@pytest.mark.parametrize("host, loop", [("localhost", True), (" localhost ", True), ("127.0.0.1", True),
                                        ("127.8.9.10", True), ("::1", True), ("[::1]", True), ("0.0.0.0", False),
                                        ("10.0.0.1", False), ("example.com", False), ("localhost.evil", False),
                                        ("Xlocalhost", False),
                                        ("", False)])
def test_is_loopback(host, loop):
    assert is_loopback(host) is loop


def test_issue_and_verify_round_trip():
    s = Sessions(SECRET, ttl_s=60)
    value, sess = s.issue("tok1")
    sid, tid, exp, sig = value.split(".")
    assert sid == sess.sid and sid.startswith("a") and len(sid) == 25 and tid == "tok1" == sess.token_id
    assert int(time.time()) + 55 <= int(exp) <= int(time.time()) + 60
    assert len(sig) == 64 and sess.authenticated and sess.csrf == s.csrf_for(sid) and len(sess.csrf) == 40
    assert s.verify(value) == sess
    assert s.issue("tok1")[1].sid != sess.sid  # random per issue
    assert s.issue("a.b")[1].token_id == "a_b"  # a dot in a token id cannot add a cookie field


def test_forged_expired_and_malformed_cookies_are_refused():
    s = Sessions(SECRET, ttl_s=60)
    value, sess = s.issue("tok1")
    sid, tid, exp, sig = value.split(".")
    assert s.verify(None) is None and s.verify("") is None
    assert s.verify(value + "x" * 300) is None  # over 300 characters
    assert s.verify(f"{sid}.{tid}.{exp}") is None and s.verify(f"{value}.x") is None
    assert s.verify(f"{sid}.tok2.{exp}.{sig}") is None  # another token's id: signature breaks
    assert s.verify(f"{sid}.{tid}.{int(exp) + 1}.{sig}") is None  # extended expiry: signature breaks
    assert Sessions(b"t" * 32).verify(value) is None  # another panel's secret (a restart logs everyone out)
    past = int(time.time()) - 1
    expired = f"{sid}.{tid}.{past}.{s._sig(f'{sid}.{tid}.{past}')}"
    assert s.verify(expired) is None
    bad_exp = f"{sid}.{tid}.soon.{s._sig(f'{sid}.{tid}.soon')}"
    assert s.verify(bad_exp) is None  # signed but not a number


def test_cookie_length_limit_is_300_characters():
    s = Sessions(SECRET)
    exp = int(time.time()) + 60

    def cookie(sid_len: int) -> str:
        sid = "a" * sid_len
        return f"{sid}.t.{exp}.{s._sig(f'{sid}.t.{exp}')}"

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
    v1, a = s.issue("t")
    v2, b = s.issue("t")
    s.revoke(a.sid)
    assert s.verify(v1) is None and s.verify(v2) == b


def test_csrf_is_bound_to_the_session_and_the_secret():
    s = Sessions(SECRET)
    _, a = s.issue("t")
    _, b = s.issue("t")
    assert s.check_csrf(a, a.csrf) is True
    assert s.check_csrf(a, b.csrf) is False and s.check_csrf(b, a.csrf) is False
    assert s.check_csrf(a, None) is False and s.check_csrf(a, "") is False and s.check_csrf(None, a.csrf) is False
    assert s.csrf_for(a.sid) != Sessions(b"t" * 32).csrf_for(a.sid)
    assert s.csrf_for(a.sid) != s._sig(a.sid)[:40]  # domain-separated from the cookie signature
    assert Sessions().secret != Sessions().secret and len(Sessions().secret) == 32  # random per app


def _expire_wait(b: LoginBackoff, client: str) -> None:
    """Move the client's back-off into the past (the back-off keeps monotonic stamps)."""
    b._tries[client].not_before = time.monotonic() - 0.001


def test_backoff_free_failures_then_waits_that_double_up_to_the_cap():
    b = LoginBackoff(free_failures=3, base_s=1.0, max_s=5.0)
    assert [b.reserve("c") for _ in range(3)] == [0.0, 0.0, 0.0]  # the 3rd still reaches the check
    wait = b.reserve("c")  # then 1 s = base · 2^0, nothing reserved meanwhile
    assert 0.9 < wait <= 1.0 and b._tries["c"].failures == 3
    assert 0.0 < b.waiting("c") <= 1.0 and b.waiting("other") == 0.0  # per client; waiting reserves nothing
    assert b.reserve("other") == 0.0
    waits = []
    for _ in range(4):
        _expire_wait(b, "c")
        assert b.reserve("c") == 0.0  # one more attempt after each wait …
        waits.append(b.waiting("c"))  # … and the next wait doubles: 2, 4, then the 5 s cap
    assert [round(w) for w in waits] == [2, 4, 5, 5]
    b.succeeded("c")  # a right token clears it all
    assert b.waiting("c") == 0.0 and "c" not in b._tries
    b.succeeded("never-seen")  # no error


def test_backoff_defaults_and_forgetting_a_quiet_client():
    b = LoginBackoff()
    assert (b.free_failures, b.base_s, b.max_s, b.forget_s) == (5, 1.0, 300.0, 3600.0)
    assert [b.reserve("c") for _ in range(5)] == [0.0] * 5 and 0.9 < b.waiting("c") <= 1.0
    assert LoginBackoff(free_failures=0).free_failures == 1  # at least one attempt is free
    # a client quiet for longer than forget_s starts afresh (its old failures are not held against it)
    b._tries["c"].last -= 3601.0
    b._tries["c"].not_before = time.monotonic() + 100.0
    assert b.reserve("c") == 0.0 and b._tries["c"].failures == 1


def test_host_name_of_host_headers():
    from dynocell.web.auth import host_name

    assert [host_name(h) for h in ("127.0.0.1:8700", "LocalHost", " a.example:80 ", "[::1]:8700", "[::1]",
                                   "h:1:2", "", None)] == [
        "127.0.0.1", "localhost", "a.example", "[::1]", "[::1]", "h:1", "", ""]


def test_same_origin_names_the_host_and_port_the_request_went_to():
    from dynocell.web.auth import same_origin

    assert same_origin("http://127.0.0.1:8700", "127.0.0.1:8700")
    assert same_origin(" HTTPS://Panel.Example:443/x?y ", "panel.example:443 ")
    assert not same_origin("http://127.0.0.1:8701", "127.0.0.1:8700")
    assert not same_origin("http://evil.example", "127.0.0.1:8700")
    for bad in ("null", "file:///etc/passwd", "ftp://127.0.0.1:8700", "http://", "http://[::1", "127.0.0.1:8700"):
        assert not same_origin(bad, "127.0.0.1:8700"), bad
    assert not same_origin("http://127.0.0.1:8700", None) and not same_origin("http://127.0.0.1:8700", "")
    assert not same_origin("http://xxxx", None)  # no Host header matches no origin, whatever its host


def test_launch_tokens_are_fresh_and_long():
    import re

    from dynocell.web.auth import new_launch_token

    a, b = new_launch_token(), new_launch_token()
    assert a != b and re.fullmatch(r"dcl_[A-Za-z0-9_-]{43}", a) and re.fullmatch(r"dcl_[A-Za-z0-9_-]{43}", b)


def test_backoff_waiting_is_zero_once_the_wait_is_over():
    b = LoginBackoff(free_failures=1, base_s=0.01, max_s=0.01)
    assert b.reserve("c") == 0.0  # the free attempt, a failure: the next one waits 0.01 s
    time.sleep(0.05)
    assert b.waiting("c") == 0.0
