"""Issue 32 item 12: the web import's 64 MiB limit is enforced while the upload streams in. A chunked upload
(no Content-Length, so no early refusal) of more than the limit used to be spooled whole into the temporary
directory before the 400; now the request stops at the limit, and never more than the limit and one chunk are
on disk. Real parts: the panel served by uvicorn on 127.0.0.1, a real chunked multipart upload over HTTP.
"""

from __future__ import annotations

import os
import tempfile

import requests

from tests.test_web_fuzz import StubProcedures, serve
from tests.weblogin import LAUNCH

CHUNK = 1 << 20
BOUNDARY = "dynocellboundary7f3a"


def _spooled_bytes(tmp: str) -> int:
    """Bytes in this process's open files under ``tmp`` (the form parser's spooled uploads: unlinked files)."""
    total = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(tmp):
                total += os.stat(f"/proc/self/fd/{fd}").st_size
        except OSError:
            continue
    return total


def test_an_oversized_chunked_upload_stops_at_the_limit(settings, tmp_path, monkeypatch):
    from dynocell.runbooks.cell import open_cell
    from dynocell.runbooks.imports import MAX_UPLOAD_BYTES
    from dynocell.web.app import create_app

    spool = tmp_path / "spool"
    spool.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spool))  # where the form parser spools uploads
    seen = {"max": 0, "sent": 0}
    total = MAX_UPLOAD_BYTES + 32 * CHUNK

    def body():
        yield (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"kind\"\r\n\r\nlog\r\n"
               f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.log\"\r\n"
               "Content-Type: text/plain\r\n\r\n").encode()
        line = b"2026-01-01 00:00:00 INFO a log line of an engine that goes on and on\n"
        block = (line * (CHUNK // len(line) + 1))[:CHUNK]
        while seen["sent"] < total:
            seen["max"] = max(seen["max"], _spooled_bytes(str(spool)))
            seen["sent"] += len(block)
            yield block
        yield f"\r\n--{BOUNDARY}--\r\n".encode()

    app = create_app(settings, cell=open_cell(settings), launch_token=LAUNCH, procedures=StubProcedures())
    with serve(app) as base:
        http = requests.Session()
        http.trust_env = False
        status = None
        try:
            r = http.post(f"{base}/actions/import", data=body(), timeout=120,
                          headers={"Authorization": f"Bearer {LAUNCH}",
                                   "Content-Type": f"multipart/form-data; boundary={BOUNDARY}"})
            status = r.status_code
        except requests.ConnectionError:
            pass  # the panel may close the connection once it has answered 413
        seen["max"] = max(seen["max"], _spooled_bytes(str(spool)))
    bound = MAX_UPLOAD_BYTES + (1 << 20) + CHUNK  # the limit, the form's room (MAX_IMPORT_BODY) and one chunk
    assert seen["max"] <= bound, f"{seen['max'] >> 20} MiB spooled (at most {bound >> 20} allowed)"
    assert status in (None, 413), status
    assert _spooled_bytes(str(spool)) == 0  # nothing of the refused upload is kept open
