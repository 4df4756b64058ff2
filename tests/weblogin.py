"""Log a TestClient into the web panel the way `dynocell web` users do: through the printed token URL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fastapi.testclient import TestClient

LAUNCH = "dcl_test-launch-token"
"""The launch token to give ``create_app(..., launch_token=LAUNCH)``."""


@contextmanager
def logged_in(app) -> Iterator[TestClient]:
    """A started TestClient of ``app`` (made with ``launch_token=LAUNCH``) holding a session cookie."""
    with TestClient(app) as c:
        r = c.get(f"/?token={LAUNCH}", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/", r.text
        yield c
