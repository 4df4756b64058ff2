"""``dynocell web [--host H] [--port P]`` serves the browser panel; ``dynocell web token create | list |
revoke`` manage its login tokens.

The panel always requires a login. With no stored token, ``dynocell web`` makes a token for
this run only and prints a login URL carrying it (``http://127.0.0.1:8700/?token=…``, as Jupyter
does); opening it trades the token for a session cookie. Binding to an address other than
loopback needs a stored token (the panel can start and stop GPU engines); the command refuses
otherwise. Tokens are printed once and stored hashed; revoking one ends its sessions.
"""

from __future__ import annotations

import signal
from typing import Optional

import typer

from dynocell.cli.common import err_console, get_cell, get_settings
from dynocell.text import printable


def register(app: typer.Typer) -> None:
    """Add ``web`` (serve) and ``web token create | list | revoke`` to the root app."""
    web = typer.Typer(help="The browser admin panel (FastAPI + htmx).\n\nExample: dynocell web --port 8700",
                      invoke_without_command=True,
                      no_args_is_help=False)
    token = typer.Typer(help="Web-panel login tokens: lasting ones, for a panel that should not print a new login URL "
                        "each start.\n\nExample: dynocell web token create --label ci", no_args_is_help=True)
    web.callback(invoke_without_command=True)(web_cmd)
    token.command("create")(token_create_cmd)
    token.command("list")(token_list_cmd)
    token.command("revoke")(token_revoke_cmd)
    web.add_typer(token, name="token")
    app.add_typer(web, name="web")


def web_cmd(
    ctx: typer.Context,
    host: Optional[str] = typer.Option(None, "--host", help="Bind address (default: setting web_host, 127.0.0.1)."),
    port: Optional[int] = typer.Option(None, "--port", min=1, max=65535,
                                       help="Port (default: setting web_port, 8700)."),
) -> None:
    """Serve the panel (example: dynocell web --port 8700; then open http://127.0.0.1:8700/)."""
    if ctx.invoked_subcommand:
        return
    import importlib

    from dynocell.errors import UserError
    from dynocell.runbooks import web_tokens

    # The CLI is the process entry point of the web face; cli and web are sibling faces in the
    # import-linter contract, so the panel is loaded by name here (the only cli → web edge).
    web_app = importlib.import_module("dynocell.web.app")
    is_loopback = importlib.import_module("dynocell.web.auth").is_loopback

    settings = get_settings()
    host = host or settings.web_host
    port = port or settings.web_port
    cell = get_cell()
    tokens = web_tokens.count(cell)
    if not is_loopback(host) and tokens == 0:
        raise UserError(f"refusing to bind the web panel to {host}: no login token exists and the panel can "
                        "start and stop engines",
                        "run `dynocell web token create` first (then log in with the printed token), "
                        "or bind to 127.0.0.1")
    import uvicorn

    auth = importlib.import_module("dynocell.web.auth")
    launch = auth.new_launch_token() if tokens == 0 else None
    app = web_app.create_app(settings, bind_host=host, cell=cell, launch_token=launch)
    shown = f"[{host}]" if ":" in host else host
    sock = listen(host, port)  # the URL is printed only once the port is ours and listening
    if launch:
        err_console.print(f"dynocell panel (login required); open this URL to log in:\n"
                          f"    http://{shown}:{port}/?token={launch}\n"
                          "(the token is valid while this panel runs; `dynocell web token create` makes a lasting one)",
                          markup=False, highlight=False, soft_wrap=True)
    else:
        err_console.print(f"dynocell panel on http://{shown}:{port}/ (login required: log in with a token from "
                          "`dynocell web token create`)", markup=False, highlight=False, soft_wrap=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", **web_app.uvicorn_options(settings)))
    # uvicorn re-raises the SIGTERM / SIGINT it shut down on once it is done; noting it here (instead of
    # dying by it) lets the panel stop its running jobs first. A second signal then ends it at once.
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    _stop_jobs(app.state.jobs, settings.stop_grace_s + JOBS_STOP_MARGIN_S)


#: Seconds past the stop grace that `dynocell web` waits, once it is told to end, for its jobs to stop.
JOBS_STOP_MARGIN_S = 60.0


def _stop_jobs(jobs, wait_s: float) -> None:  # noqa: ANN001 - runbooks.jobs.JobRunner
    """The panel is ending (SIGTERM, Ctrl-C): stop its running jobs — a run records ``interrupted`` and stops
    its engine — and say which ones did not end within ``wait_s`` seconds."""
    if not jobs.list(active_only=True):
        return
    err_console.print("stopping the panel's running jobs (their engines are stopped) …", markup=False)
    for job in jobs.shutdown(wait_s):
        err_console.print(printable(f"job {job.kind} {job.label} did not end within {wait_s:.0f} s; the next "
                                    "dynocell command reconciles what it leaves"), markup=False, highlight=False)


def listen(host: str, port: int):  # noqa: ANN201 - socket.socket
    """A listening TCP socket on ``host:port`` for the panel, or a :class:`UserError` saying why not.

    ``EADDRINUSE`` → ``port N is in use`` with a hint (exit 2) instead of uvicorn's raw
    ``[Errno 98]`` after the URL was already printed.
    """
    import errno
    import socket

    from dynocell.errors import UserError

    try:
        family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                          flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise UserError(f"--host {host!r} is not an address of this machine: {exc.strerror}",
                        "use 127.0.0.1, 0.0.0.0 or one of this host's addresses") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise UserError(f"port {port} is in use",
                            f"another program (or another dynocell web) listens there: stop it, or pick "
                            f"another port: dynocell web --port {port + 1 if port < 65535 else 8700}") from None
        if exc.errno == errno.EACCES:
            raise UserError(f"port {port} needs privileges to bind", "use a port above 1023 (default 8700)") from None
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror}",
                        "check --host and --port (defaults: 127.0.0.1, 8700)") from None
    return sock


def token_create_cmd(
    label: Optional[str] = typer.Option(None, "--label", help="A name to remember the token by "
                                        "(at most 64 printable characters)."),
    expires: Optional[str] = typer.Option(None, "--expires", metavar="DURATION",
                                          help="Stop the token logging in after this long: a number and s, m, h, "
                                               "d or w (e.g. 7d); default: it lasts until revoked."),
) -> None:
    """Create a login token and print it once (only its salted hash is stored).

    Example: dynocell web token create --label alice --expires 7d
    """
    from dynocell.runbooks import web_tokens

    tok, expires_at = web_tokens.create_expiring(get_cell(), label, expires)
    typer.echo(tok)
    until = f" It expires {expires_at:%Y-%m-%d %H:%M} UTC." if expires_at else ""
    err_console.print(f"Store it now: it is not shown again. Log in at /login with it.{until}", markup=False)


def token_list_cmd() -> None:
    """List web tokens: id, label, created, expiry, revoked (never the token itself).

    Example: dynocell web token list
    """
    from dynocell.runbooks import web_tokens

    rows = web_tokens.list_tokens(get_cell())
    if not rows:
        typer.echo("no web tokens (`dynocell web token create` makes one)")
        return
    for t in rows:
        if t["revoked_at"]:
            state = f"revoked {t['revoked_at']:%Y-%m-%d %H:%M}"
        elif t["expired"]:
            state = f"expired {t['expires_at']:%Y-%m-%d %H:%M}"
        else:
            state = f"live until {t['expires_at']:%Y-%m-%d %H:%M}" if t["expires_at"] else "live, never expires"
        label = printable(t["label"] or "-", limit=web_tokens.LABEL_MAX)
        typer.echo(f"{t['id']:>4}  {label:<20}  created {t['created_at']:%Y-%m-%d %H:%M}  {state}")


def token_revoke_cmd(
    token_id: int = typer.Argument(..., help="Token id (see `dynocell web token list`)."),
) -> None:
    """Revoke a web token: it stops logging in and its open sessions end at their next request.

    Example: dynocell web token revoke 1
    """
    from dynocell.runbooks import web_tokens

    web_tokens.revoke(get_cell(), token_id)
    typer.echo(f"revoked web token {token_id}")
