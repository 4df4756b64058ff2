"""Procedures for the made-locally reference model pair (``dynocell model make-tiny``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dynocell.engine.reference.nets import ModelPair, ensure_pair, make_pair
from dynocell.settings import Settings


def make_tiny(settings: Settings, out_dir: Path | None = None,
              progress: Callable[[str], None] | None = None) -> ModelPair:
    """Make the reference pair with seed ``settings.model_seed``.

    ``out_dir`` None → the cached pair under ``settings.models_dir`` (made only if missing, see
    :func:`ensure_pair`); otherwise a fresh pair written to ``out_dir/{target,draft}``.
    Takes about 2.5-4 CPU minutes on 2 cores when it trains. Raises :class:`~dynocell.errors.UserError`
    for an unusable ``out_dir``, :class:`~dynocell.errors.EngineError` if training fails.
    """
    if out_dir is None:
        return ensure_pair(settings.models_dir, seed=settings.model_seed, progress=progress)
    return make_pair(Path(out_dir).expanduser().resolve(), seed=settings.model_seed, progress=progress)


def default_pair(settings: Settings, progress: Callable[[str], None] | None = None) -> ModelPair:
    """The default reference pair (cached in ``settings.models_dir``; made on first use)."""
    return ensure_pair(settings.models_dir, seed=settings.model_seed, progress=progress)


def make_eagle_head(settings: Settings, out_dir: Path, target: Path | None = None, steps: int | None = None,
                    progress: Callable[[str], None] | None = None, kind: str = "eagle") -> Path:
    """Train an EAGLE head (SGLang's ``LlamaForCausalLMEagle`` layout) for ``target`` — default: the
    default pair's target — into ``out_dir``; ``steps`` overrides the recipe's step count (a short
    run for a smoke test); ``kind`` "eagle3" makes an EAGLE-3 head (``LlamaForCausalLMEagle3``) instead,
    "mtp" the target in MiMo's layout with one trained MTP layer (a whole model folder).
    Seed ``settings.model_seed``. About 5-10 CPU minutes on 2 shared cores.
    Raises :class:`~dynocell.errors.UserError` for an unusable ``out_dir`` or ``target``, or an unknown ``kind``."""
    from dynocell.engine.reference.eagle import make_eagle
    from dynocell.engine.reference.eagle3 import make_eagle3
    from dynocell.engine.reference.mtp import make_mtp_target
    from dynocell.errors import UserError

    makers = {"eagle": make_eagle, "eagle3": make_eagle3, "mtp": make_mtp_target}
    if kind not in makers:
        raise UserError(f"unknown head kind {kind!r}", "use --kind eagle, eagle3 or mtp")

    tgt = Path(target).expanduser().resolve() if target is not None else default_pair(settings, progress).target
    recipe = {"steps": steps} if steps is not None else None
    return makers[kind](Path(out_dir).expanduser().resolve(), tgt, seed=settings.model_seed, recipe=recipe,
                        progress=progress)
