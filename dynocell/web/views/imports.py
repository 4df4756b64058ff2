"""The open world: attaching to an engine dynocell did not start (by URL) and importing evidence
(a log, a trace, metrics, requests, a bench result) uploaded from the browser; both are jobs."""

from __future__ import annotations

from fastapi import File, Form, Request, UploadFile
from starlette.concurrency import run_in_threadpool

from dynocell.errors import UserError
from dynocell.runbooks.imports import MAX_UPLOAD_BYTES, store_upload
from dynocell.web.views.shared import Family, cell, start, started

routes = Family()
#: The most bytes an import request's body may have: the file's limit and room for the form's other fields and
#: multipart boundaries. Counted as the body streams in (FastAPI's ``max_body_size``), so a chunked upload without
#: a Content-Length stops there too: never more than this and one chunk reach the temporary directory (a 3 GiB
#: upload used to be spooled whole before the 400).
MAX_IMPORT_BODY = MAX_UPLOAD_BYTES + (1 << 20)


@routes.actions.post("/actions/attach")
def start_attach(request: Request, url: str = Form(...)):
    url = url.strip()
    return started(request, start(request, "attach", "attach", url, f"attach {url}", f"attach {url}"))


@routes.actions.post("/actions/import", max_body_size=MAX_IMPORT_BODY)
async def start_import(request: Request, kind: str = Form(...), config: str = Form(""),
                       file: UploadFile = File(...)):
    too_large = UserError(f"file: more than {MAX_UPLOAD_BYTES >> 20} MiB",
                          "import a file this large with the CLI (dynocell import …)")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_IMPORT_BODY:
        raise too_large
    data, size = [], 0
    while chunk := await file.read(1 << 20):
        size += len(chunk)
        if size > MAX_UPLOAD_BYTES:
            raise too_large
        data.append(chunk)
    path = await run_in_threadpool(store_upload, cell(request), kind, iter(data))
    ref = (kind, str(path), config.strip() or None)
    return started(request, start(request, "import", "import", ref, f"import {path.name}",
                                  f"import {kind} {path.name[:12]}"))
