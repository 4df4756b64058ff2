"""The selector language (no eval): ``applies_to`` conditions over dotted config paths, validated, put in
words, and matched against an :class:`~dynocell.engine.config.EngineConfig`.
"""

from __future__ import annotations

from typing import Any

from dynocell.runbooks.knowledge.entry import DERIVED_PATHS, OPERATORS

# ------------------------------------------------------------------ selector

def _config_field_paths() -> set[str]:
    from pydantic import BaseModel

    from dynocell.engine.config import EngineConfig

    paths: set[str] = set()

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, f in model.model_fields.items():
            ann = f.annotation
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                walk(ann, prefix + name + ".")
            else:
                paths.add(prefix + name)

    walk(EngineConfig, "")
    return paths | set(DERIVED_PATHS)


def _known_path(path: str, paths: set[str]) -> bool:
    return path in paths or (path.startswith("env.") and len(path) > 4)


_OP_WORDS = {"eq": "=", "ne": "≠", "gt": ">", "ge": "≥", "lt": "<", "le": "≤", "in": "one of",
             "not_in": "none of", "contains": "contains"}


def selector_text(selector: Any) -> str:
    """An ``applies_to`` selector in words, e.g. ``speculative.algorithm one of EAGLE, NEXTN and
    parallel.dcp_size > 1`` (for people; :func:`selector_matches` is what decides). '' when empty."""
    if not isinstance(selector, dict) or not selector:
        return ""
    parts = []
    for key, cond in selector.items():
        if key in ("any", "all") and isinstance(cond, list):
            joined = (" or " if key == "any" else " and ").join(f"({selector_text(c)})" for c in cond)
            parts.append(joined)
        elif key == "not":
            parts.append(f"not ({selector_text(cond)})")
        elif isinstance(cond, dict):
            for op, v in cond.items():
                if op == "exists":
                    parts.append(f"{key} {'is set' if v else 'is not set'}")
                else:
                    val = ", ".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v).lower() \
                        if isinstance(v, bool) else str(v)
                    parts.append(f"{key} {_OP_WORDS.get(op, op)} {val}")
        else:
            parts.append(f"{key} = {str(cond).lower() if isinstance(cond, bool) else cond}")
    return " and ".join(parts)


def _operator_problems(cond: dict[Any, Any], here: str) -> list[tuple[str, str]]:
    """Problems of one condition mapping ``{op: value}`` at ``here``."""
    errors = []
    for op, val in cond.items():
        if op not in OPERATORS:
            errors.append((f"{here}.{op}", f"unknown operator; use one of {', '.join(OPERATORS)}"))
        elif op in ("in", "not_in") and not isinstance(val, list):
            errors.append((f"{here}.{op}", "must be a list"))
        elif op in ("gt", "ge", "lt", "le") and (not isinstance(val, (int, float)) or isinstance(val, bool)):
            errors.append((f"{here}.{op}", "must be a number"))
        elif op == "exists" and not isinstance(val, bool):
            errors.append((f"{here}.{op}", "must be true or false"))
    return errors


def validate_selector(selector: Any, where: str = "applies_to") -> list[tuple[str, str]]:
    """Problems of a selector as ``(dotted field, message)``; empty when valid."""
    errors: list[tuple[str, str]] = []
    if selector is None:
        return errors
    if not isinstance(selector, dict):
        return [(where, "must be a mapping of config field to condition")]
    paths = _config_field_paths()
    for key, cond in selector.items():
        here = f"{where}.{key}"
        if key in ("any", "all"):
            if not isinstance(cond, list) or not cond:
                errors.append((here, "must be a non-empty list of selectors"))
                continue
            for i, sub in enumerate(cond):
                errors.extend(validate_selector(sub, f"{here}[{i}]"))
            continue
        if key == "not":
            errors.extend(validate_selector(cond, here))
            continue
        if not isinstance(key, str) or not _known_path(key, paths):
            import difflib

            close = difflib.get_close_matches(str(key), sorted(paths), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            errors.append((here, f"unknown config field{hint}"))
            continue
        if isinstance(cond, dict):
            errors.extend(_operator_problems(cond, here))
        elif isinstance(cond, list):
            errors.append((here, "a list is ambiguous; write {in: [...]}"))
    return errors


#: Concepts an ``applies_to`` may name instead of one engine's flag spelling (issue 35 item 8): each is the
#: command-line flags that mean it in every engine (matched in ``extra_args`` as ``--flag`` or ``--flag=…``)
#: and the observed settings an imported config keeps for them (``extra.<name>``, true when set and not 0/false).
#: ``expert_offload``: MoE experts kept in CPU memory — llama.cpp ``--n-cpu-moe N`` / ``--cpu-moe``, vLLM
#: ``--cpu-offload-gb`` (weights, experts included), vLLM forks' ``--enable-expert-offload``, SGLang's
#: KTransformers ``--kt-num-gpu-experts`` and ``--cpu-offload-gb``.
CONCEPTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "expert_offload": (("--n-cpu-moe", "-ncmoe", "--cpu-moe", "-cmoe", "--cpu-offload-gb", "--enable-expert-offload",
                        "--kt-num-gpu-experts"),
                       ("extra.n_cpu_moe", "extra.cpu_moe", "extra.cpu_offload_gb", "extra.enable_expert_offload",
                        "extra.kt_num_gpu_experts")),
}


def concept_holds(cfg: Any, concept: str) -> bool:
    """Whether ``cfg`` (an EngineConfig or flattened doctor knobs) has ``concept`` (:data:`CONCEPTS`) in any
    engine's spelling: a flag in ``extra_args`` (``--cpu-offload-gb 0`` is no offload) or an observed extra."""
    flags, extras = CONCEPTS[concept]
    args = [str(a) for a in (_resolve(cfg, "extra_args") or ())]
    for i, a in enumerate(args):
        name, eq, val = a.partition("=")
        if name in flags:
            value = val if eq else (args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("-") else "")
            if value.strip().lower() not in ("0", "0.0", "false"):
                return True
    return any(_resolve(cfg, k) not in (None, 0, 0.0, False, "", "0") for k in extras)


def _resolve(cfg: Any, path: str) -> Any:
    if path in CONCEPTS:
        return concept_holds(cfg, path)
    if isinstance(cfg, dict) and path in cfg:  # a flattened config (doctor knobs): {"parallel.tp_size": 4, …}
        return cfg[path]
    if path.startswith("env."):
        return (getattr(cfg, "env", {}) or {}).get(path[4:])
    node = cfg
    for part in path.split("."):
        if node is None:
            return None
        node = node.get(part) if isinstance(node, dict) else getattr(node, part, None)
    return node


def _norm(v: Any) -> Any:
    return v.upper() if isinstance(v, str) else v


def cond_holds(value: Any, cond: Any) -> bool:
    """Whether ``value`` meets a selector condition: a plain value (equal; strings case-insensitively) or a
    table of operators (``exists``, ``eq``, ``ne``, ``in``, ``not_in``, ``contains``, … all must hold)."""
    if not isinstance(cond, dict):
        if isinstance(value, str) and isinstance(cond, str):
            return value.upper() == cond.upper()
        return value == cond
    for op, want in cond.items():
        if op == "exists":
            ok = (value is not None and value != "" and value != ()) == bool(want)
        elif op == "eq":
            ok = cond_holds(value, want)
        elif op == "ne":
            ok = not cond_holds(value, want)
        elif op == "in":
            ok = _norm(value) in [_norm(w) for w in want]
        elif op == "not_in":
            ok = _norm(value) not in [_norm(w) for w in want]
        elif op == "contains":
            items = value if isinstance(value, (list, tuple)) else [value]
            ok = value is not None and any(str(want) in str(x) for x in items)
        else:
            if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
                return False
            ok = {"gt": value > want, "ge": value >= want, "lt": value < want, "le": value <= want}[op]
        if not ok:
            return False
    return True


def selector_matches(selector: dict[str, Any] | None, cfg: Any) -> bool:
    """True when ``cfg`` (an EngineConfig, or any object/dict with the same attribute paths) satisfies ``selector``.

    An empty or missing selector matches nothing (an entry without ``applies_to``
    is not a "known trap" of any particular config).
    """
    if not selector:
        return False
    return _all_hold(selector, cfg)


def _all_hold(selector: dict[str, Any], cfg: Any) -> bool:
    for key, cond in selector.items():
        if key == "any":
            if not any(_all_hold(s, cfg) for s in cond):
                return False
        elif key == "all":
            if not all(_all_hold(s, cfg) for s in cond):
                return False
        elif key == "not":
            if _all_hold(cond, cfg):
                return False
        elif not cond_holds(_resolve(cfg, key), cond):
            return False
    return True
