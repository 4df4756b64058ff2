"""``dynocell model …``: the made-locally reference model pair."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add the ``model`` command group (``make-tiny``) to ``app``."""
    model_app = typer.Typer(help="The made-locally reference model pair (target + draft).\n\n"
                                 "Example: dynocell model make-tiny", no_args_is_help=True)

    @model_app.command("make-tiny")
    def make_tiny_cmd(
        dir: Path | None = typer.Argument(None, help="Output folder (default: the cache in the data directory)."),
        seed: int | None = typer.Option(None, "--seed", help="Seed of the pair (default: the model_seed setting)."),
        as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    ) -> None:
        """Make (or find cached) the small target + draft pair in Hugging Face layout, offline and deterministic.

        Example: dynocell model make-tiny /tmp/pair --seed 0
        """
        from rich.console import Console

        from dynocell.errors import DynocellError
        from dynocell.runbooks.models import make_tiny
        from dynocell.settings import load_settings

        console = Console(stderr=True)
        settings = load_settings()
        if seed is not None:
            settings = settings.model_copy(update={"model_seed": seed})
        t = time.monotonic()
        try:
            with console.status("making the reference model pair…") as status:
                def progress(msg: str) -> None:
                    status.update(msg)
                    if not as_json:
                        console.log(msg)
                pair = make_tiny(settings, dir, progress=progress)
        except DynocellError as exc:
            console.print(f"Error: {exc}")
            raise typer.Exit(exc.exit_code) from exc
        out = {"target": str(pair.target), "draft": str(pair.draft), "seed": settings.model_seed,
               "seconds": round(time.monotonic() - t, 1)}
        if as_json:
            typer.echo(json.dumps(out))
        else:
            Console().print(f"target: {pair.target}\ndraft:  {pair.draft}\n({out['seconds']} s)")

    app.add_typer(model_app, name="model")
