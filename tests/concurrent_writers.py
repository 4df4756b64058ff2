"""The three writers of tests/test_concurrent_writers.py, one per face, each run as its own process.

``python tests/concurrent_writers.py FACE N SUMMARY.json [ARGS…]``:

- ``cli N SUMMARY CONFIG_A CONFIG_B`` — the real Typer app (``dynocell.cli.app.run``, what the
  console script calls) N times in this process: every 5th call adds a note ``cli <i>`` to
  ``config:tiny`` (``dynocell note``), the others move the label ``cli-moving`` between
  CONFIG_A and CONFIG_B (``config add FILE --name cli-moving``: a new label row each time).
- ``web N SUMMARY LOGIN_URL CONFIG_HASH`` — a browser-like client of a running ``dynocell web``:
  one session (the login URL the panel printed → cookie, CSRF token from the first page), then N
  ``POST /api/notes`` with the ``X-CSRF-Token`` header, text ``web <i>``.
- ``tui N SUMMARY CONFIG`` — the calls the dashboard's keys make (``runbooks`` only):
  ``b`` boots CONFIG detached, then N × ``h`` (``boots.health``: a stored verdict), with the
  dashboard's poll (``boots.reconcile_and_list`` + ``views.list_runs``) every 10th, then ``s`` stops it.

Each writes ``{"face", "writes", "ok", "errors": […], "locked": n, "seconds", …}`` to SUMMARY;
"locked" counts failures whose message says the database was locked.
"""

from __future__ import annotations

import io
import json
import re
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path


def _cli(n: int, configs: list[str]) -> dict:
    from dynocell.cli.app import run

    errors, ok = [], 0
    for i in range(n):
        args = (["note", "config:tiny", f"cli {i}"] if i % 5 == 0
                else ["config", "add", configs[(i - i // 5) % 2], "--name", "cli-moving"])  # A, B, A, B…
        err = io.StringIO()
        with redirect_stdout(io.StringIO()), redirect_stderr(err):
            code = run(args)
        if code == 0:
            ok += 1
        else:
            errors.append(f"{' '.join(args)} → {code}: {err.getvalue().strip()[:300]}")
    return {"writes": n, "ok": ok, "errors": errors}


def _web(n: int, login_url: str, config_hash: str) -> dict:
    import httpx

    errors, ok = [], 0
    with httpx.Client(base_url=login_url.split("/?", 1)[0], timeout=60) as client:
        client.get(login_url, follow_redirects=True).raise_for_status()  # the URL `dynocell web` printed: cookie
        page = client.get("/")
        page.raise_for_status()
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text).group(1)
        for i in range(n):
            resp = client.post("/api/notes", json={"kind": "config", "target": config_hash, "text": f"web {i}"},
                               headers={"X-CSRF-Token": csrf})
            if resp.status_code == 200 and isinstance(resp.json().get("id"), int):
                ok += 1
            else:
                errors.append(f"POST /api/notes #{i} → {resp.status_code}: {resp.text[:300]}")
    return {"writes": n, "ok": ok, "errors": errors}


def _tui(n: int, config: str) -> dict:
    from dynocell.runbooks import boots, views
    from dynocell.runbooks.cell import open_cell
    from dynocell.settings import load_settings

    cell = open_cell(load_settings())
    boot_id = boots.boot(cell, config, detach=True)
    errors, ok, verdicts = [], 0, {}
    try:
        for i in range(n):
            try:
                row = boots.health(cell, boot_id)
                verdicts[row.verdict] = verdicts.get(row.verdict, 0) + 1
                ok += 1
                if i % 10 == 0:
                    boots.reconcile_and_list(cell)
                    views.list_runs(cell, limit=50)
            except Exception as exc:  # noqa: BLE001 - every failure is counted and shown
                errors.append(f"health #{i}: {type(exc).__name__}: {exc}"[:300])
    finally:
        final = boots.stop(cell, boot_id)
    return {"writes": n, "ok": ok, "errors": errors, "boot_id": boot_id, "verdicts": verdicts,
            "final_state": final["state"]}


def main() -> None:
    face, n, summary, *rest = sys.argv[1:]
    t0 = time.monotonic()
    if face == "cli":
        out = _cli(int(n), rest)
    elif face == "web":
        out = _web(int(n), rest[0], rest[1])
    elif face == "tui":
        out = _tui(int(n), rest[0])
    else:
        raise SystemExit(f"unknown face {face!r}")
    out.update(face=face, seconds=round(time.monotonic() - t0, 2),
               locked=sum("locked" in e.lower() for e in out["errors"]))
    Path(summary).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
