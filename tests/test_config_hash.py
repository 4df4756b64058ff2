"""Hash stability, property-based: how a config is written never changes its hash; what it says does.

A random valid config is drawn as nested plain data, then written as TOML in
many equivalent ways (key and table order, comments, blank lines, spacing,
inline tables, dotted keys, defaults spelled out or left out, algorithm case).
Every spelling must hash the same; changing any engine field must change the
hash; changing ``[meta]`` must not.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dynocell.errors import ConfigError
from dynocell.engine.config import SPEC_ALGORITHMS, EngineConfig, parse_config, to_toml

DEFAULTS: dict[str, Any] = {
    "engine": "sglang",
    "host": "127.0.0.1",
    "port": 0,
    "extra_args": [],
    "patches": [],
    "parallel": {"tp_size": 1, "pp_size": 1, "dp_size": 1, "ep_size": 1, "dcp_size": 1},
    "cuda_graph": {"disable": False},
    "env": {},
}
TABLES = ("parallel", "speculative", "memory", "cuda_graph", "env", "meta")
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=8)


def _speculative(draw, engine: str | None) -> dict[str, Any] | None:
    """A ``[speculative]`` table for ``engine`` (EAGLE-family algorithms on SGLang only), or None."""
    algos: list[str | None] = [None, "STANDALONE", "NGRAM"]
    if engine in (None, "sglang"):
        algos += ["EAGLE", "EAGLE3", "NEXTN"]
    algo = draw(st.sampled_from(algos))
    if not algo:
        return None
    steps = draw(st.integers(1, 5))
    topk = draw(st.sampled_from([1, 1, 2, 4]))
    spec: dict[str, Any] = {"algorithm": algo, "num_steps": steps, "eagle_topk": topk,
                            "num_draft_tokens": steps + 1 + draw(st.integers(0, 4))}
    if algo == "STANDALONE" or draw(st.booleans()):
        spec["draft_model_path"] = draw(st.sampled_from(["dynocell:tiny-draft", "org/draft-b"]))
    return spec


def _memory(draw) -> dict[str, Any]:
    """A ``[memory]`` table of the chosen keys (empty when none was chosen)."""
    mem: dict[str, Any] = {}
    if draw(st.booleans()):
        mem["mem_fraction_static"] = draw(st.sampled_from([0.2, 0.5, 0.85, 1.0]))
    if draw(st.booleans()):
        mem["chunked_prefill_size"] = draw(st.integers(1, 16384))
    if draw(st.booleans()):
        mem["kv_cache_dtype"] = draw(st.sampled_from(["auto", "fp8_e5m2"]))
    return mem


@st.composite
def configs(draw) -> dict[str, Any]:
    """A valid config as nested plain data (only keys that were chosen)."""
    d: dict[str, Any] = {"model_path": draw(st.sampled_from(["dynocell:tiny", "org/model-a", "Qwen/Qwen3-0.6B"]))}
    engine = draw(st.sampled_from(["sglang", "reference", None]))
    if engine:
        d["engine"] = engine
    if draw(st.booleans()):
        d["port"] = draw(st.integers(0, 65535))
    if draw(st.booleans()):
        d["host"] = draw(st.sampled_from(["127.0.0.1", "0.0.0.0", "localhost"]))
    if draw(st.booleans()):
        d["served_model_name"] = draw(words)
    if draw(st.booleans()):
        d["attention_backend"] = draw(st.sampled_from(["triton", "fa3", "flashinfer"]))
    par = {k: draw(st.integers(1, 8)) for k in DEFAULTS["parallel"] if draw(st.booleans())}
    if par:
        d["parallel"] = par
    spec = _speculative(draw, engine)
    if spec:
        d["speculative"] = spec
        if engine in (None, "sglang") and d.get("parallel", {}).get("pp_size", 1) > 1:
            d["parallel"]["pp_size"] = 1  # SGLang 0.5.17 refuses pipeline stages with speculation (a ConfigError)
    mem = _memory(draw)
    if mem:
        d["memory"] = mem
    if draw(st.booleans()):
        max_bs = {"max_bs": draw(st.integers(1, 64))} if draw(st.booleans()) else {}
        d["cuda_graph"] = {"disable": draw(st.booleans()), **max_bs}
    env = draw(st.dictionaries(st.sampled_from(["NCCL_DEBUG", "FOO", "SGLANG_X"]), words, max_size=3))
    if env:
        d["env"] = env
    if draw(st.booleans()):
        d["extra_args"] = draw(st.lists(st.sampled_from(["--enable-metrics", "--sampling-backend", "pytorch"]),
                                        max_size=3))
    if draw(st.booleans()):
        d["patches"] = draw(st.lists(words, max_size=2))
    if draw(st.booleans()):
        d["meta"] = {"name": draw(words), "notes": draw(st.text(max_size=20))}
    return d


def _v(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list):
        return "[" + ", ".join(_v(x) for x in value) + "]"
    raise TypeError(value)


@st.composite
def spellings(draw, data: dict[str, Any]) -> str:
    """One TOML text meaning ``data``: orders, comments, spacing, inline tables, dotted keys."""
    def eq() -> str:
        return draw(st.sampled_from(["=", " = ", "   =  ", "\t= "]))

    def comment() -> str:
        return draw(st.sampled_from(["", "", "  # a comment", " #x = 1 [not a table]"]))

    def blank() -> list[str]:
        return draw(st.sampled_from([[], [""], ["# comment line"], ["", "   "]]))

    scalars = [k for k in data if not isinstance(data[k], dict)]
    tables = [k for k in data if isinstance(data[k], dict)]
    scalars = draw(st.permutations(scalars))
    tables = draw(st.permutations(tables))
    lines: list[str] = []
    table_lines: list[str] = []
    for k in scalars:
        lines += blank()
        lines.append(f"{k}{eq()}{_v(data[k])}{comment()}")
    for t in tables:
        body = data[t]
        keys = draw(st.permutations(list(body)))
        style = draw(st.sampled_from(["table", "inline", "dotted"]))
        if t == "env":
            style = draw(st.sampled_from(["table", "inline"]))
        if style == "inline":
            inner = ", ".join(f"{k} = {_v(body[k])}" for k in keys)
            lines.append(f"{t}{eq()}{{{inner}}}{comment()}")
        elif style == "dotted":
            for k in keys:
                lines.append(f"{t}.{k}{eq()}{_v(body[k])}{comment()}")
        else:
            table_lines += blank()
            table_lines.append(f"[{t}]{comment()}")
            for k in keys:
                table_lines.append(f"{k}{eq()}{_v(body[k])}{comment()}")
    return "\n".join(lines + table_lines) + draw(st.sampled_from(["\n", "", "\n\n"]))


def with_defaults_spelled_out(data: dict[str, Any], which: list[str]) -> dict[str, Any]:
    out = json.loads(json.dumps(data))
    for key in which:
        if key not in DEFAULTS:
            continue
        default = DEFAULTS[key]
        if isinstance(default, dict) and default:
            tbl = out.setdefault(key, {})
            for k, v in default.items():
                tbl.setdefault(k, v)
        else:
            out.setdefault(key, default)
    # spelled-out None-ish things: algorithm "none" means off
    if "speculative" not in out and "speculative" in which:
        out["speculative"] = {"algorithm": "none"}
    return out


@SETTINGS
@given(data=st.data(), cfg=configs())
def test_spelling_never_changes_the_hash(data, cfg):
    base = parse_config(to_toml_plain(cfg)).config_hash
    text = data.draw(spellings(cfg))
    assert parse_config(text).config_hash == base, text
    spelled = with_defaults_spelled_out(cfg, data.draw(st.lists(st.sampled_from([*DEFAULTS, "speculative"]),
                                                                unique=True)))
    text2 = data.draw(spellings(spelled))
    assert parse_config(text2).config_hash == base, text2
    if "speculative" in cfg:
        lower = json.loads(json.dumps(cfg))
        lower["speculative"]["algorithm"] = lower["speculative"]["algorithm"].lower()
        assert parse_config(data.draw(spellings(lower))).config_hash == base


def to_toml_plain(cfg: dict[str, Any]) -> str:
    lines = [f"{k} = {_v(v)}" for k, v in cfg.items() if not isinstance(v, dict)]
    for k, v in cfg.items():
        if isinstance(v, dict):
            lines.append(f"[{k}]")
            lines += [f"{kk} = {_v(vv)}" for kk, vv in v.items()]
    return "\n".join(lines) + "\n"


def _mutations(cfg: EngineConfig) -> list[tuple[str, Any]]:
    """One changed value for every engine field (dotted path, new value)."""
    c = cfg.canonical()
    spec = c["speculative"]
    out: list[tuple[str, Any]] = [
        ("engine", "reference" if c["engine"] == "sglang" else "sglang"),
        ("model_path", c["model_path"] + "-other" if ":" not in c["model_path"] else "org/other"),
        ("served_model_name", (c["served_model_name"] or "") + "z"),
        ("host", c["host"] + ".x"),
        ("port", (c["port"] + 1) % 65536),
        ("attention_backend", (c["attention_backend"] or "") + "z"),
        ("dist_init_addr", (c["dist_init_addr"] or "h") + ":1"),
        ("env", {**c["env"], "NEW_VAR": "1"}),
        ("extra_args", [*c["extra_args"], "--x"]),
        ("patches", [*c["patches"], "p"]),
        ("cuda_graph.disable", not c["cuda_graph"]["disable"]),
        ("cuda_graph.max_bs", (c["cuda_graph"]["max_bs"] or 0) + 1),
        ("memory.mem_fraction_static", 0.33 if c["memory"]["mem_fraction_static"] != 0.33 else 0.34),
        ("memory.chunked_prefill_size", (c["memory"]["chunked_prefill_size"] or 0) + 1),
        ("memory.context_length", (c["memory"]["context_length"] or 0) + 1),
        ("memory.max_running_requests", (c["memory"]["max_running_requests"] or 0) + 1),
        ("memory.kv_cache_dtype", (c["memory"]["kv_cache_dtype"] or "") + "z"),
        ("speculative.draft_model_path", (spec["draft_model_path"] or "org/d") + "z"),
        ("speculative.num_draft_tokens", (spec["num_draft_tokens"] or 1) + 1),
        ("speculative.eagle_topk", (spec["eagle_topk"] or 1) + 1),
    ]
    out += [(f"parallel.{k}", v + 1) for k, v in c["parallel"].items()]
    if spec["algorithm"] is None:
        out.append(("speculative.algorithm", "NGRAM"))
    else:
        out.append(("speculative.algorithm", None))
        out.append(("speculative.num_steps", 1 if spec["num_steps"] != 1 else 2))
    return out


@SETTINGS
@given(cfg=configs())
def test_changing_any_engine_field_changes_the_hash(cfg):
    base = parse_config(to_toml_plain(cfg))
    changed = 0
    for path, value in _mutations(base):
        try:
            other = base.with_changes(**{path: value})
            # parse_config is the gate (it has checks beyond the model's, e.g. engine × algorithm)
            reparsed = parse_config(to_toml(other))
        except (ValueError, ConfigError):  # this change is not valid for this config
            continue
        assert other.config_hash != base.config_hash, path
        assert reparsed.config_hash == other.config_hash, path
        changed += 1
    assert changed >= 20


@SETTINGS
@given(cfg=configs(), name=words, notes=st.text(max_size=40))
def test_meta_never_changes_the_hash(cfg, name, notes):
    base = parse_config(to_toml_plain(cfg))
    other = base.with_changes(**{"meta.name": name, "meta.notes": notes})
    assume(other.meta != base.meta)
    assert other.config_hash == base.config_hash


def test_every_field_is_covered_by_mutations():
    """If someone adds an engine field, this test asks for a mutation of it."""
    cfg = parse_config('model_path = "org/m"\n')
    flat = set()
    for k, v in cfg.canonical().items():
        if isinstance(v, dict) and k != "env":
            flat |= {f"{k}.{kk}" for kk in v}
        else:
            flat.add(k)
    covered = {p for p, _ in _mutations(cfg)} | {"speculative.num_steps", "nodes"}
    assert flat <= covered, flat - covered
    assert set(SPEC_ALGORITHMS) == {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"}


def test_stated_later_fields_enter_the_canonical_form():
    """examples/tiny-vllm.toml states serving.surface: it is hashed under "serving"; a stated cuda_graph.mode
    and dtype (left out while unstated) are hashed too."""
    from pathlib import Path

    from dynocell.engine.config import load_config

    cfg = load_config(Path(__file__).resolve().parents[1] / "examples" / "tiny-vllm.toml")
    assert cfg.canonical()["serving"] == {"surface": "vllm"}
    assert cfg.config_hash == "sha256:b5a367314c8fe77594a75c056f1282df6489f589906169c9b92d30c55d9c234b"
    assert "mode" not in cfg.canonical()["cuda_graph"] and "dtype" not in cfg.canonical()
    stated = cfg.with_changes(cuda_graph={"mode": "full"}, dtype="bfloat16")
    assert stated.canonical()["cuda_graph"]["mode"] == "full" and stated.canonical()["dtype"] == "bfloat16"
