"""CLI command modules.

Each module defines ``register(app: typer.Typer) -> None`` and is listed in
``dynocell.cli.app.COMMAND_MODULES``. Modules import only Typer and
``dynocell.cli.common`` at top level; procedures (``dynocell.runbooks``) are
imported inside the command functions so ``dynocell --help`` stays fast.
"""
