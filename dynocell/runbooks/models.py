"""Procedures for the made-locally reference model pair (``dynocell model make-tiny``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dynocell.engine.reference.models import ModelPair, ensure_pair, make_pair
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
