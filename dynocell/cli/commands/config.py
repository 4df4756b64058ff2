"""``dynocell config add|list|show|diff``: engine configurations in the store."""

from __future__ import annotations

from pathlib import Path

import typer

from dynocell.cli.common import (
    JSON_OPTION_HELP,
    add_row,
    err_console,
    fmt_value,
    get_cell,
    human_ago,
    human_time,
    out,
    print_json,
    say,
    table,
)

config_app = typer.Typer(
    help="Engine configurations: TOML files stored by content hash, with names as labels.\n\n"
    "Example: dynocell config add examples/tiny.toml && dynocell config show tiny",
    no_args_is_help=True,
)

REF_HELP = "A config name, a hash or unique hash prefix (≥ 6 hex digits), or a .toml path."


@config_app.command("add")
def add(
    file: Path = typer.Argument(..., help="The TOML config file.", dir_okay=False),
    name: str = typer.Option(None, "--name", "-n", help="Label to give it (default: meta.name, else the file name)."),
    json_out: bool = typer.Option(False, "--json", help=JSON_OPTION_HELP),
) -> None:
    """Validate a config file and store it by its hash; point a name at it.

    The same content is stored once (same hash); a name that pointed elsewhere is moved and its history kept.

    A bad file is refused with one message naming the file, the field and the fix (exit code 2); nothing is written.

    Example: dynocell config add examples/tiny.toml --name tiny
    """
    from dynocell.runbooks.configs import add_config

    rec = add_config(get_cell(), file, name)
    for w in rec.warnings:
        err_console.print(f"warning: {w}", markup=False, highlight=False)
    if json_out:
        print_json({"hash": rec.hash, "name": rec.name, "created": rec.created, "relabelled": rec.relabelled,
                    "previous": rec.previous, "injection_env": list(rec.injection_env),
                    "concerns": list(rec.concerns), "warnings": list(rec.warnings)})
        return
    what = "stored" if rec.created else "already stored"
    label = f"; {rec.name} now points at it" if rec.relabelled else f"; named {rec.name}"
    say(f"{what} {rec.hash}{label}")  # wrapped at a space: the hash stays whole, to copy
    if rec.moved:
        out(f"label {rec.name}: {short_ref(rec.previous)} → {short_ref(rec.hash)}")
    if rec.concerns:
        say(f"⚠ {'; '.join(rec.concerns)} (a trust decision: the web panel boots it only after "
            f"`dynocell config trust {rec.name}`)")


@config_app.command("list")
def list_(json_out: bool = typer.Option(False, "--json", help=JSON_OPTION_HELP)) -> None:
    """List stored configs, newest first, with the names pointing at each.

    Example: dynocell config list --json
    """
    from dynocell.runbooks.configs import list_configs

    rows = list_configs(get_cell(read_only=True))
    if json_out:
        print_json(rows)
        return
    if not rows:
        out("no configs yet — add one with: dynocell config add examples/tiny.toml")
        return
    t = table("hash", "names", "engine", "model", "spec", "added")
    for r in rows:
        add_row(t, r["short"], ", ".join(r["names"]) or "-", r["engine"], r["model_path"],
                r["algorithm"] or "off", human_ago(r["created_at"]))
    out(t)


@config_app.command("show")
def show(
    ref: str = typer.Argument(..., help=REF_HELP, metavar="NAME|HASH"),
    json_out: bool = typer.Option(False, "--json", help=JSON_OPTION_HELP),
    toml_out: bool = typer.Option(False, "--toml", help="Print the config as TOML (every field explicit)."),
) -> None:
    """Show one config: hash, names and their history, and every field (defaults included).

    Example: dynocell config show tiny --json
    """
    from dynocell.runbooks.configs import show_config

    data = show_config(get_cell(), ref)
    if json_out:
        print_json(data)
        return
    if toml_out:
        out(data["toml"].rstrip("\n"))
        return
    out(f"config {data['hash']}")
    out(f"  names    {', '.join(data['names']) or '-'}")
    out(f"  added    {human_time(data['created_at'])}")
    if data["warning"]:
        out(f"  {data['warning']}")
    if data["trusted"]:
        out(f"  trusted  by {data['trusted']['by']}, {human_time(data['trusted']['at'])}")
    if data["meta"].get("notes"):
        out(f"  notes    {data['meta']['notes']}")
    if data.get("command") or data.get("command_error"):
        out(f"  command  {data['command'] or data['command_error']}")
    for lab in data["labels"]:
        if len(lab["history"]) > 1 or not lab["current"]:
            moves = " → ".join(h["config_hash"].removeprefix("sha256:")[:12] for h in lab["history"])
            out(f"  label {lab['name']}: {moves}{'' if lab['current'] else ' (moved away)'}")
    t = table("field", "value")
    for field, value in _flat(data["canonical"]):
        add_row(t, field, value)
    out(t)


@config_app.command("trust")
def trust_cmd(
    ref: str = typer.Argument(..., help="A stored config's name, hash or unique hash prefix.", metavar="NAME|HASH"),
    json_out: bool = typer.Option(False, "--json", help=JSON_OPTION_HELP),
) -> None:
    """Mark a stored config trusted, recording who (your OS user) and when.

    A config whose \\[env] sets a name off the allow-list (LD_PRELOAD, PYTHONPATH,
    PATH, CC …), names a patch folder outside the bundled set, or binds a
    non-loopback host (0.0.0.0, ::, a LAN address) runs code of its author's
    choosing or exposes the engine; the web panel boots it only once it is
    trusted. Read it first with `dynocell config show NAME`.

    Example: dynocell config trust tiny-patched
    """
    from dynocell.runbooks.configs import trust_ref

    rec = trust_ref(get_cell(), ref)
    if json_out:
        print_json(rec)
        return
    was = "trusted" if rec["created"] else "already trusted"
    out(f"{was}: {rec['hash']} by {rec['trusted_by']}, {human_time(rec['trusted_at'])}")
    if rec["concerns"]:
        out(f"⚠ {'; '.join(rec['concerns'])}")


@config_app.command("diff")
def diff(
    a: str = typer.Argument(..., help=REF_HELP, metavar="A"),
    b: str = typer.Argument(..., help=REF_HELP, metavar="B"),
    json_out: bool = typer.Option(False, "--json", help=JSON_OPTION_HELP),
) -> None:
    """Compare two configs field by field; print only the fields that differ.

    Example: dynocell config diff tiny tiny-plain
    """
    from dynocell.runbooks.configs import diff_configs

    d = diff_configs(get_cell(), a, b)
    if json_out:
        print_json(d)
        return
    if not d["differences"]:
        out(f"same config ({d['a']['hash']})")
        return
    t = table("field", a, b)
    for row in d["differences"]:
        add_row(t, row["field"], fmt_value(row["a"]), fmt_value(row["b"]))
    out(t)


def short_ref(config_hash: str | None) -> str:
    """``sha256:0123456789ab…`` (12 hex digits) for a hash; ``-`` for None."""
    if not config_hash:
        return "-"
    return "sha256:" + config_hash.removeprefix("sha256:")[:12] + "…"


def _flat(d: dict, prefix: str = "") -> list[tuple[str, object]]:
    rows: list[tuple[str, object]] = []
    for k in sorted(d):
        v = d[k]
        if isinstance(v, dict) and v and k != "env":
            rows.extend(_flat(v, f"{prefix}{k}."))
        else:  # an empty table or list reads as "-" like an unset field, not as {} or []
            rows.append((f"{prefix}{k}", v if v or v in (0, False) else None))
    return rows


def register(app: typer.Typer) -> None:
    """Add the ``config`` group to the root app."""
    app.add_typer(config_app, name="config")
