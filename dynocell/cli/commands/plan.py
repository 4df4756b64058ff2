"""``dynocell plan CONFIG``: the exact command to run on each node of a (multi-node) config."""

from __future__ import annotations

import shlex

import typer

from dynocell.cli.common import JSON_OPTION_HELP, out, print_json


def plan_cmd(
    config: str = typer.Argument(..., help="A .toml path (not stored) or a stored config name, hash or prefix."),
    port: int = typer.Option(0, "--port", min=0, max=65535,
                             help="HTTP port of node 0 (default: the config's; for port = 0, "
                                  "which dynocell picks at boot, SGLang's 30000)."),
    json_out: bool = typer.Option(False, "--json", help=JSON_OPTION_HELP),
) -> None:
    """Print the command each node runs: NCCL and other \\[env] settings as KEY=VALUE, then the argv.

    Multi-node configs name \\[\\[nodes]] (host, node_rank, gpus) and a dist_init_addr.

    Every node gets --nnodes, --node-rank and --dist-init-addr.

    A bad plan (rank missing or twice, GPUs ≠ tp_size × pp_size, no dist_init_addr) is refused, naming the field.

    Example: dynocell plan examples/two-nodes.toml --json
    """
    from dynocell.cli.common import err_console, get_cell
    from dynocell.runbooks.plan import plan, plan_warnings

    # a .toml path is read, never stored (the store is opened only for a stored config's name)
    rows = plan(get_cell(), config, port=port or None)
    warnings = plan_warnings(get_cell(), config)
    for w in warnings:
        err_console.print(f"warning: {w}", markup=False, highlight=False)
    if json_out:
        print_json(rows)
        return
    # `dynocell plan … | sh` must run only the commands: every comment is one line (printable folds a
    # newline), every value in it shell-quoted; the commands are shlex-quoted by plan_config
    if rows and rows[0].get("warning"):
        out(comment(rows[0]["warning"]))
    if rows and rows[0].get("port_note"):
        out(comment(rows[0]["port_note"]))
    for r in rows:
        out(comment(f"node {r['node_rank']} on {shlex.quote(r['host'])}"))
        out(r["command"])
        out("")


def comment(text: str) -> str:
    """``# text`` as one shell comment line: newlines, carriage returns and escapes made ``?``
    (:func:`~dynocell.text.printable`), so nothing after it runs when the plan is piped to ``sh``."""
    from dynocell.text import printable

    return "# " + printable(text)


def register(app: typer.Typer) -> None:
    """Add the ``plan`` command to the root app."""
    app.command("plan")(plan_cmd)
