"""Engine adapters: an :class:`~dynocell.engine.config.EngineConfig` → the exact command and environment.

One adapter per engine kind; both speak SGLang's argument names
(``sglang/srt/server_args.py`` of 0.5.17; the argv actually used on the H200
host is in ``tests/data/sglang-0.5.17/*.result.json``):

- :class:`SGLangAdapter` → ``PYTHON -m sglang.launch_server --model-path … --host
  … --port … [--served-model-name] [--tp-size/--pp-size/--dp-size/--ep-size when
  > 1] [--dcp-size when > 1] [--speculative-*] [--mem-fraction-static]
  [--chunked-prefill-size] [--context-length] [--max-running-requests]
  [--kv-cache-dtype] [--disable-cuda-graph | --cuda-graph-max-bs]
  [--attention-backend] --enable-metrics EXTRA_ARGS…``
- :class:`VLLMAdapter` → ``PYTHON -m vllm.entrypoints.cli.main serve MODEL`` with vLLM
  0.26.0's names (``vllm/engine/arg_utils.py``; the argv that booted on the H200 is in
  ``docs/h200/VLLM.md`` and ``tests/data/vllm-0.26.0/*.result.json``).
- :class:`ReferenceAdapter` → ``PYTHON -m dynocell.engine.reference`` with the
  subset the reference engine understands (``--model-path --host --port
  --served-model-name --context-length --speculative-algorithm
  --speculative-num-steps --speculative-eagle-topk --speculative-num-draft-tokens
  --speculative-draft-model-path --enable-metrics --disable-cuda-graph``) plus
  ``extra_args``.

Only knobs the config sets are rendered (None = the engine's default), so the
argv shows what the operator chose. ``extra_args`` are appended verbatim.

The child's environment is explicit, never a copy of ``os.environ``:
``base_env`` (given by the caller, e.g. PATH/HOME/CUDA_VISIBLE_DEVICES chosen by
the runbook) + the config's ``[env]`` + ``PYTHONPATH`` with the engine build's
directory first (``build_pythonpath``) so every process the engine spawns sees
the build's code. ``PYTHONUNBUFFERED=1`` is added unless set, so the engine's
lines reach the supervisor's log as they are printed.

Model paths: ``dynocell:tiny`` style names are rendered as written; the caller
resolves them first (``cfg.with_changes(model_path=...)``) when the engine
needs a directory.

API: :func:`render` ``(cfg, *, python, port, base_env, build_pythonpath=None) ->
LaunchSpec``; :func:`render_nodes` for multi-node configs (one LaunchSpec per
node); :func:`adapter_for` ``(engine)``; :func:`pick_free_port` ``(host)``;
:func:`redact_env` ``(env)``; :func:`argv_string` ``(argv)``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import shlex
import socket
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, cast

from pydantic import BaseModel

from dynocell.engine.config import (  # noqa: F401 - REDACTED, redact_env re-exported
    REDACTED,
    EngineConfig,
    Speculative,
    check_engine_fields,
    fields_not_of,
    redact_args,
    redact_env,
)
from dynocell.engine.builds import PROBE_CWD, SAFE_PATH_ENV, safe_path_env  # noqa: F401 - re-exported
from dynocell.errors import ConfigError, UserError


def engine_base_url(host: str | None, port: int | None, scheme: str = "http") -> str:
    """``scheme://host:port`` to reach an engine bound to ``host``: a wildcard bind (``0.0.0.0``, ``::``,
    empty) is reached on loopback, an IPv6 address goes in brackets (RFC 3986). ``scheme`` is ``http``
    (every engine dynocell starts) or ``https`` (an attached engine behind TLS). The one place an
    engine's base URL is built (boots, health probes, the supervisor, attached engines)."""
    h = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1", None: "127.0.0.1"}.get(host, host) or "127.0.0.1"
    if ":" in h:
        h = f"[{h}]"
    return f"{scheme}://{h}:{port}"


@dataclass(frozen=True)
class LaunchSpec:
    """What to spawn: ``argv`` (list, argv[0] the interpreter), ``env`` (the child's
    complete environment), ``host``/``port`` the HTTP server binds (port resolved,
    never 0). For multi-node plans ``node_rank`` and ``node_host`` (the machine
    that runs this process) are set; single-node specs leave them None."""

    argv: list[str]
    env: dict[str, str]
    port: int
    host: str
    node_rank: int | None = None
    node_host: str | None = None
    engine: str = "sglang"

    @property
    def argv_string(self) -> str:
        """``shlex.join(argv)`` with secret flag values as ``***`` (:func:`redact_args`): the command as
        stored and shown, copy-pasteable into a shell once the secret is put back."""
        return argv_string(redact_args(self.argv))

    @property
    def redacted_env(self) -> dict[str, str]:
        """``env`` with secret-looking values replaced (see :func:`redact_env`)."""
        return redact_env(self.env)

    @property
    def base_url(self) -> str:
        """``http://host:port`` to reach the engine (see :func:`engine_base_url`)."""
        return engine_base_url(self.host, self.port)


class EngineAdapter(Protocol):
    """Renders one engine kind's command line from a config."""

    engine: str
    module: str

    def args(self, cfg: EngineConfig, *, port: int, profile_dir: str | None = None) -> list[str]:
        """Engine arguments (without interpreter and ``-m module``) for ``cfg`` on ``port``.

        ``profile_dir``: where the engine writes torch traces, for engines that fix it at boot
        (vLLM's ``--profiler-config``); SGLang and the reference engine take it per request.
        """
        ...


def _opt(out: list[str], flag: str, value: object | None) -> None:
    if value is not None:
        out += [flag, str(value)]


def _speculative_flags(out: list[str], s: Speculative) -> None:
    """SGLang's speculative server args (``--speculative-algorithm``, ``-draft-model-path``, ``-num-steps``,
    ``-eagle-topk``, ``-num-draft-tokens``; python/sglang/srt/server_args.py), spoken by SGLang and by the
    reference engine alike: appended to ``out`` when ``s.algorithm`` is set, each only when given."""
    if not s.algorithm:
        return
    out += ["--speculative-algorithm", s.algorithm]
    _opt(out, "--speculative-draft-model-path", s.draft_model_path)
    _opt(out, "--speculative-num-steps", s.num_steps)
    _opt(out, "--speculative-eagle-topk", s.eagle_topk)
    _opt(out, "--speculative-num-draft-tokens", s.num_draft_tokens)


class SGLangAdapter:
    """``python -m sglang.launch_server`` with SGLang 0.5.17 argument names."""

    engine = "sglang"
    module = "sglang.launch_server"

    def args(self, cfg: EngineConfig, *, port: int, profile_dir: str | None = None) -> list[str]:
        check_engine_fields(cfg)
        out = ["--model-path", cfg.model_path]
        _opt(out, "--served-model-name", cfg.served_model_name)
        _opt(out, "--dtype", cfg.dtype)
        out += ["--host", cfg.host, "--port", str(port)]
        p = cfg.parallel
        for flag, value in (("--tp-size", p.tp_size), ("--pp-size", p.pp_size),
                            ("--dp-size", p.dp_size), ("--ep-size", p.ep_size),
                            ("--dcp-size", p.dcp_size)):
            if value > 1:
                out += [flag, str(value)]
        _speculative_flags(out, cfg.speculative)
        m = cfg.memory
        _opt(out, "--mem-fraction-static", m.mem_fraction_static)
        _opt(out, "--chunked-prefill-size", m.chunked_prefill_size)
        _opt(out, "--context-length", m.context_length)
        _opt(out, "--max-running-requests", m.max_running_requests)
        _opt(out, "--kv-cache-dtype", m.kv_cache_dtype)
        if cfg.cuda_graph.disable:
            out.append("--disable-cuda-graph")
        else:
            _opt(out, "--cuda-graph-max-bs", cfg.cuda_graph.max_bs)
        _opt(out, "--attention-backend", cfg.attention_backend)
        sv = cfg.serving
        if sv.topology in ("prefill", "decode"):
            out += ["--disaggregation-mode", sv.topology]
        if sv.disable_overlap_schedule:
            out.append("--disable-overlap-schedule")
        out.append("--enable-metrics")
        out += list(cfg.extra_args)
        return out


class ReferenceAdapter:
    """``python -m dynocell.engine.reference``: the subset of SGLang's flags it implements.

    Knobs it cannot honour (parallel sizes > 1, memory knobs, attention
    backend) are refused with ConfigError rather than silently dropped —
    except ``mem_fraction_static``/``chunked_prefill_size``/``kv_cache_dtype``/
    ``max_running_requests``/``cuda_graph.max_bs`` which have no meaning on CPU
    and are ignored (documented here, visible in the stored config).
    """

    engine = "reference"
    module = "dynocell.engine.reference"

    def args(self, cfg: EngineConfig, *, port: int, profile_dir: str | None = None) -> list[str]:
        check_engine_fields(cfg)
        if cfg.dtype is not None:
            raise ConfigError("<config>", "dtype", "the reference engine computes in float32 on CPU",
                              "remove dtype with engine = \"reference\"")
        p = cfg.parallel
        if max(p.tp_size, p.pp_size, p.dp_size, p.ep_size, p.dcp_size) > 1:
            raise ConfigError("<config>", "parallel", "the reference engine runs on one device",
                              "set every parallel size to 1 with engine = \"reference\"")
        if cfg.serving.topology in ("prefill", "decode"):
            raise ConfigError("<config>", "serving.topology", "the reference engine serves colocated only",
                              "leave serving.topology unset (or \"colocated\") with engine = \"reference\"")
        out = ["--model-path", cfg.model_path, "--host", cfg.host, "--port", str(port)]
        _opt(out, "--served-model-name", cfg.served_model_name)
        _opt(out, "--context-length", cfg.memory.context_length)
        _speculative_flags(out, cfg.speculative)
        out.append("--enable-metrics")
        if cfg.cuda_graph.disable:
            out.append("--disable-cuda-graph")
        if cfg.serving.surface == "vllm":  # vLLM's metric names, log lines and profiler layout
            out += ["--surface", "vllm"]
            if profile_dir is not None:
                out += ["--profiler-config", _json(vllm_profiler_config(profile_dir))]
        out += list(cfg.extra_args)
        return out


#: ``[cuda_graph] mode`` → vLLM ``compilation_config.cudagraph_mode`` (``CUDAGraphMode`` names).
_VLLM_GRAPH_MODES = {"off": "NONE", "piecewise": "PIECEWISE", "full": "FULL",
                     "full_and_piecewise": "FULL_AND_PIECEWISE"}
#: ``[speculative] algorithm`` (SGLang's names, how the config stores them) → vLLM ``method``.
_VLLM_METHOD = {"STANDALONE": "draft_model", "NGRAM": "ngram", "EAGLE": "eagle", "EAGLE3": "eagle3",
                "NEXTN": "mtp"}


def _json(value: dict[str, object]) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=False)


def vllm_speculative_config(cfg: EngineConfig) -> dict[str, object] | None:
    """The ``--speculative-config`` object of ``cfg`` (None when speculation is off).

    Keys are vLLM 0.26's ``SpeculativeConfig`` fields: ``method``, ``model`` (the draft),
    ``num_speculative_tokens`` (k), ``attention_backend`` (the draft's own: it does not inherit
    ``--attention-backend``), ``draft_tensor_parallel_size``, ``prompt_lookup_min``/``_max``,
    ``draft_sample_method``.
    """
    s = cfg.speculative
    if s.algorithm is None:
        return None
    spec: dict[str, object] = {"method": _VLLM_METHOD[s.algorithm]}
    if s.draft_model_path:
        spec["model"] = s.draft_model_path
    if s.num_speculative_tokens is not None:
        spec["num_speculative_tokens"] = s.num_speculative_tokens
    for key, value in (("attention_backend", s.draft_attention_backend),
                       ("draft_tensor_parallel_size", s.draft_tp_size),
                       ("prompt_lookup_min", s.prompt_lookup_min), ("prompt_lookup_max", s.prompt_lookup_max),
                       ("draft_sample_method", s.draft_sample_method)):
        if value is not None:
            spec[key] = value
    return spec


def vllm_profiler_config(profile_dir: str) -> dict[str, object]:
    """``--profiler-config`` for torch traces under ``profile_dir`` (VLLM.md: the recipe's keys).

    With it vLLM serves ``POST /start_profile`` / ``/stop_profile`` and writes
    ``profile_dir/rank<N>.<id>.pt.trace.json.gz``; without it those routes do not exist.
    """
    return {"profiler": "torch", "torch_profiler_dir": profile_dir, "torch_profiler_with_stack": False,
            "ignore_frontend": True}


class VLLMAdapter:
    """``python -m vllm.entrypoints.cli.main serve MODEL`` with vLLM 0.26.0 argument names.

    Field → flag: parallel sizes → ``--tensor-/--pipeline-/--data-/--decode-context-parallel-size``
    (when > 1); ``memory.gpu_memory_utilization`` → ``--gpu-memory-utilization``;
    ``memory.context_length`` → ``--max-model-len``; ``memory.max_running_requests`` →
    ``--max-num-seqs``; ``kv_cache_dtype``, ``attention_backend``, ``dtype`` as named;
    ``cuda_graph.disable`` → ``--enforce-eager``, else ``mode``/``capture_sizes``/``max_bs`` →
    ``--compilation-config {"cudagraph_mode", "cudagraph_capture_sizes",
    "max_cudagraph_capture_size"}``; ``[speculative]`` → ``--speculative-config`` JSON
    (:func:`vllm_speculative_config`); ``profile_dir`` → ``--profiler-config``
    (:func:`vllm_profiler_config`). SGLang-only fields are refused (ConfigError naming the field,
    :func:`~dynocell.engine.config.check_engine_fields`). vLLM serves ``/metrics`` always.
    """

    engine = "vllm"
    module = "vllm.entrypoints.cli.main"

    def args(self, cfg: EngineConfig, *, port: int, profile_dir: str | None = None) -> list[str]:
        check_engine_fields(cfg)
        out = ["serve", cfg.model_path, "--host", cfg.host, "--port", str(port)]
        _opt(out, "--served-model-name", cfg.served_model_name)
        p = cfg.parallel
        for flag, size in (("--tensor-parallel-size", p.tp_size), ("--pipeline-parallel-size", p.pp_size),
                           ("--data-parallel-size", p.dp_size), ("--decode-context-parallel-size", p.dcp_size)):
            if size > 1:
                out += [flag, str(size)]
        m = cfg.memory
        for name, value in (("--dtype", cfg.dtype), ("--gpu-memory-utilization", m.gpu_memory_utilization),
                            ("--max-model-len", m.context_length), ("--max-num-seqs", m.max_running_requests),
                            ("--kv-cache-dtype", m.kv_cache_dtype)):
            _opt(out, name, value)
        cg = cfg.cuda_graph
        if cg.disable:
            out.append("--enforce-eager")
        else:
            comp: dict[str, object] = {}
            if cg.mode is not None:
                comp["cudagraph_mode"] = _VLLM_GRAPH_MODES[cg.mode]
            if cg.capture_sizes is not None:
                comp["cudagraph_capture_sizes"] = sorted(set(cg.capture_sizes))
            if cg.max_bs is not None:
                comp["max_cudagraph_capture_size"] = cg.max_bs
            if comp:
                out += ["--compilation-config", _json(comp)]
        _opt(out, "--attention-backend", cfg.attention_backend)
        spec = vllm_speculative_config(cfg)
        if spec is not None:
            out += ["--speculative-config", _json(spec)]
        if profile_dir is not None:
            out += ["--profiler-config", _json(vllm_profiler_config(profile_dir))]
        out += list(cfg.extra_args)
        return out


_ADAPTERS: dict[str, EngineAdapter] = {"sglang": SGLangAdapter(), "reference": ReferenceAdapter(),
                                       "vllm": VLLMAdapter()}


def adapter_for(engine: str) -> EngineAdapter:
    """The adapter of ``engine`` ("sglang" | "reference" | "vllm"); UserError for anything else."""
    try:
        return _ADAPTERS[engine]
    except KeyError:
        raise UserError(f"unknown engine {engine!r}", f"use one of: {', '.join(_ADAPTERS)}") from None


# ---------------------------------------------------------------- flags the config owns

#: SGLang 0.5.17's other spellings of flags the adapters render (``server_args.py``:
#: ``add_argument("--tensor-parallel-size", "--tp-size", …)``); the reference engine's are read
#: from its own parser. argparse in SGLang also takes unique prefixes (``--tp``, ``--mem-frac``).
SGLANG_ALIASES = {
    "--model-path": ("--model",),
    "--tp-size": ("--tensor-parallel-size", "--tp"),
    "--pp-size": ("--pipeline-parallel-size", "--pp"),
    "--dp-size": ("--data-parallel-size", "--dp"),
    "--ep-size": ("--expert-parallel-size", "--ep"),
    "--dcp-size": ("--decode-context-parallel-size", "--dcp"),
}
#: vLLM 0.26's short spellings of flags the vLLM adapter renders (``vllm/engine/arg_utils.py``:
#: ``add_argument("--tensor-parallel-size", "-tp", …)``; ``-O`` is its compilation-config shorthand).
VLLM_ALIASES: dict[str, tuple[str, ...]] = {
    "--tensor-parallel-size": ("-tp",),
    "--pipeline-parallel-size": ("-pp",),
    "--data-parallel-size": ("-dp",),
    "--decode-context-parallel-size": ("-dcp",),
    "--compilation-config": ("-O",),
}
#: Flags dynocell renders itself, not from a config field: vLLM's trace directory is fixed at boot
#: (``--profiler-config``, :func:`vllm_profiler_config`), so an ``extra_args`` one would send the
#: profile window's traces elsewhere.
DYNOCELL_FLAGS = {"--profiler-config": "profile"}
#: Flags implied by a config field although no adapter renders them: the tokenizer is the model's.
IMPLIED_FLAGS = {"--tokenizer-path": "model_path"}
#: The multi-node flags :func:`render_nodes` adds, and the config field each comes from.
NODE_FLAGS = {"--nnodes": "nodes", "--node-rank": "nodes", "--dist-init-addr": "dist_init_addr"}


def _probe_sections(flag_bools: bool) -> EngineConfig:
    """A config (not validated: ``model_construct``) with every scalar field set to a value unique
    to it — ints from a counter, strings ``probe-<field>``, every bool ``flag_bools`` — so each
    value in a rendered argv names the field it came from."""
    counter = iter(range(2, 10_000))

    def build(model: type[BaseModel], prefix: str) -> BaseModel:
        values: dict[str, object] = {}
        for name, info in model.model_fields.items():
            dotted = prefix + name
            kinds = set(typing.get_args(info.annotation)) or {info.annotation}
            default = info.default
            if isinstance(default, BaseModel):
                values[name] = build(type(default), dotted + ".")
            elif bool in kinds:
                values[name] = flag_bools
            elif int in kinds:
                values[name] = next(counter)
            elif float in kinds:
                values[name] = next(counter) / 10_000
            elif str in kinds:
                values[name] = f"probe-{dotted}"
            else:
                values[name] = default
        return model.model_construct(None, **values)

    cfg = cast(EngineConfig, build(EngineConfig, ""))  # build constructs the model class it is given
    return cfg.model_copy(update={"extra_args": (), "nodes": (), "env": {}})


def _field_values(cfg: BaseModel, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for name in type(cfg).model_fields:
        value = getattr(cfg, name)
        if isinstance(value, BaseModel):
            out.update(_field_values(value, prefix + name + "."))
        else:
            out[prefix + name] = value
    return out


def _reference_aliases() -> dict[str, tuple[str, ...]]:
    from dynocell.engine.reference.args import build_parser

    out: dict[str, tuple[str, ...]] = {}
    for action in build_parser()._actions:  # argparse keeps each flag's spellings together here
        for flag in action.option_strings:
            out[flag] = tuple(f for f in action.option_strings if f != flag)
    return out


#: The option that makes SGLang 0.5.17 (``prepare_server_args``: ``ConfigArgumentMerger``) and vLLM 0.26
#: (``FlexibleArgumentParser._pull_args_from_config``) read more options from a YAML file: any owned flag
#: could hide in it.
CONFIG_FILE_FLAG = "--config"
#: The engine families whose parsers read one argv the same way: the reference engine speaks SGLang's
#: names (its argv is checked as SGLang reads it), vLLM its own.
_FAMILIES = {"sglang": ("sglang", "reference"), "reference": ("sglang", "reference"), "vllm": ("vllm",)}
#: Whether the family's parser takes a unique prefix of a long option as that option (argparse's
#: ``allow_abbrev``, on by default): SGLang's ``prepare_server_args`` builds a plain
#: ``argparse.ArgumentParser(prog="sglang serve")``; vLLM's ``FlexibleArgumentParser`` does not turn it
#: off. (The reference engine's own parser does, but its argv is judged as SGLang's.)
ALLOW_ABBREV = {"sglang": True, "reference": True, "vllm": True}


def owned_flags(engine: str | None = None) -> dict[str, str]:
    """Engine flag → the config field (dotted) that owns it, for ``engine``'s family (see
    :data:`_FAMILIES`), or for every engine when None. Computed once per process; a copy each call."""
    if engine is None:
        out: dict[str, str] = {}
        for e in ("sglang", "vllm"):
            for flag, field in _owned_flags(e).items():
                out.setdefault(flag, field)
        return out
    return dict(_owned_flags(engine))


@functools.lru_cache(maxsize=None)
def _owned_flags(engine: str) -> dict[str, str]:
    """Every flag a config field owns → that field (dotted), for ``engine``'s family and all its
    spellings. Derived by rendering probe configs through each of the family's adapters (a flag whose
    value is a field's unique probe value, or that appears only when a boolean field is true, belongs
    to that field), so it cannot drift from what is rendered; plus the aliases (:data:`SGLANG_ALIASES`
    and the reference parser's for SGLang's family, :data:`VLLM_ALIASES` and ``--no-FLAG`` of every
    boolean flag — vLLM's ``BooleanOptionalAction`` — for vLLM's), :data:`IMPLIED_FLAGS` and
    :data:`NODE_FLAGS` (SGLang's), :data:`DYNOCELL_FLAGS` and :data:`CONFIG_FILE_FLAG`. Flags no field
    controls (``--enable-metrics``) are not owned.
    """
    owned: dict[str, str] = {}
    bool_flags: set[str] = set()
    for adapter in (_ADAPTERS[e] for e in _FAMILIES[engine]):
        on, off = _probe_for(adapter, True), _probe_for(adapter, False)
        port = 65_001
        for cfg in (on, off):
            values = {str(v): f for f, v in _field_values(cfg).items() if not isinstance(v, bool)}
            values[str(port)] = "port"
            argv = adapter.args(cfg, port=port)
            for flag, value in zip(argv, argv[1:] + [""]):
                if flag.startswith("--") and value in values:
                    owned.setdefault(flag, values[value])
                elif flag.startswith("--") and value.startswith("{"):  # vLLM's JSON flags: a section's
                    section = _json_section(value, values)
                    if section is not None:
                        owned.setdefault(flag, section)
        bools = {f for f, v in _field_values(on).items() if isinstance(v, bool)}
        only_on = set(adapter.args(on, port=port)) - set(adapter.args(off, port=port))
        for flag in only_on:
            if flag.startswith("--"):
                bool_flags.add(flag)
                owned.setdefault(flag, next(iter(bools)) if len(bools) == 1
                                 else _bool_field_of(adapter, flag, bools))
    owned.update(DYNOCELL_FLAGS)
    owned[CONFIG_FILE_FLAG] = "config file"
    if engine == "vllm":
        aliases = dict(VLLM_ALIASES)
        for flag in bool_flags:
            owned.setdefault("--no-" + flag[2:], owned[flag])
    else:
        owned.update(IMPLIED_FLAGS)
        owned.update(NODE_FLAGS)
        aliases = dict(_reference_aliases())
        for flag, more in SGLANG_ALIASES.items():
            aliases[flag] = tuple(set(aliases.get(flag, ())) | set(more))
    for flag, field in list(owned.items()):
        for alias in aliases.get(flag, ()):
            owned.setdefault(alias, field)
    return owned


def engine_reads_flag(engine: str, arg: str) -> str | None:
    """The option name ``engine``'s parser looks up for one ``extra_args`` item, or None when the item
    is not an option (a value, ``--``, a negative number).

    ``--name=value`` is read as ``--name``. vLLM 0.26 (``FlexibleArgumentParser.parse_args``) first turns
    underscores into dashes up to the first ``.`` (``--tensor_parallel_size`` is
    ``--tensor-parallel-size``), then folds dotted keys into their JSON flag
    (``--speculative-config.num_speculative_tokens=5`` sets ``--speculative-config``; a trailing ``+``
    appends to a list), and reads ``-O3``/``-O.key=v`` as ``-O``. SGLang's argparse reads names as given.
    """
    if not arg.startswith("-") or arg in ("-", "--") or arg[1:2].isdigit() or arg[1:2] == ".":
        return None
    name = arg.split("=", 1)[0]
    if engine == "vllm":
        if name.startswith("--"):
            head = name[2:].split(".", 1)[0].replace("_", "-")
            name = "--" + head.rstrip("+")
        elif name.startswith("-O"):
            name = "-O"
    return name


def _json_section(value: str, values: dict[str, str]) -> str | None:
    """The config section a JSON flag value (``--speculative-config {…}``) renders: that of the
    first probe value found in it; None when it holds none."""
    try:
        obj = json.loads(value)
    except ValueError:
        return None
    for v in obj.values() if isinstance(obj, dict) else ():
        field = values.get(str(v))
        if field is not None and "." in field:
            return field.split(".", 1)[0]
    return None


def _set_field(cfg: EngineConfig, dotted: str, value: object) -> EngineConfig:
    section, _, leaf = dotted.rpartition(".")
    if not section:
        return cfg.model_copy(update={leaf: value})
    sub = getattr(cfg, section)
    return cfg.model_copy(update={section: sub.model_copy(update={leaf: value})})


def _probe_for(adapter: EngineAdapter, flag_bools: bool) -> EngineConfig:
    """:func:`_probe_sections` as ``adapter`` can render it: its engine, without the fields that
    engine does not have (:func:`~dynocell.engine.config.fields_not_of`). The reference engine
    runs one device only, so its parallel sizes stay 1 (they are not its flags), computes in its
    own dtype and speaks vLLM's surface here (so ``--surface`` shows up); vLLM has no EP size,
    drafts a chain and takes a known method (its ``[speculative]`` becomes one JSON flag)."""
    cfg = _probe_sections(flag_bools).model_copy(update={"engine": adapter.engine})
    for dotted in fields_not_of(adapter.engine):
        cfg = _set_field(cfg, dotted, None)
    if adapter.engine == "reference":
        p = type(cfg.parallel).model_construct(None, **{k: 1 for k in type(cfg.parallel).model_fields})
        cfg = cfg.model_copy(update={"parallel": p, "dtype": None})
        cfg = _set_field(cfg, "serving.surface", "vllm")
    elif adapter.engine == "vllm":
        cfg = _set_field(cfg, "parallel.ep_size", 1)
        cfg = _set_field(cfg, "speculative.eagle_topk", None)
        cfg = _set_field(cfg, "speculative.algorithm", "EAGLE")
    return cfg


def _bool_field_of(adapter: EngineAdapter, flag: str, bools: set[str]) -> str:
    """Which boolean field turns ``flag`` on: render with only that field true."""
    base = _probe_for(adapter, False)
    for field in sorted(bools):
        section, _, leaf = field.rpartition(".")
        sub = getattr(base, section) if section else base
        sub = sub.model_copy(update={leaf: True})
        cfg = base.model_copy(update={section: sub}) if section else sub
        if flag in adapter.args(cfg, port=65_001):
            return field
    return "?"  # pragma: no cover - every boolean flag comes from one field


def check_extra_args(cfg: EngineConfig, source: str = "<config>") -> None:
    """Refuse ``extra_args`` that set a flag the config owns (:func:`owned_flags` of its engine), as
    the engine's own parser would read them (:func:`engine_reads_flag`).

    ``--flag value`` and ``--flag=value``, every spelling of the engine's family, vLLM's underscore and
    dotted forms (``--tensor_parallel_size 8``, ``--compilation-config.cudagraph_mode=FULL``), a
    ``--config FILE.yaml`` (it may set any owned flag) and, where the parser takes them
    (:data:`ALLOW_ABBREV`), unique prefixes of an owned flag such as ``--hos`` or ``--ho``. Raises
    ConfigError naming the flag and the config field to use instead: e.g. ``extra_args = ["--host",
    "0.0.0.0"]`` would make the engine listen elsewhere than the boot records.
    """
    if cfg.engine not in _FAMILIES:
        return  # an engine kind's own check_config refuses its owned flags (dynocell.engine.kinds)
    owned = _owned_flags(cfg.engine)
    for i, arg in enumerate(cfg.extra_args):
        flag = engine_reads_flag(cfg.engine, arg)
        if flag is None:
            continue
        field = owned.get(flag)
        if field is None and ALLOW_ABBREV.get(cfg.engine) and flag.startswith("--") and len(flag) > 2:
            # argparse reads a unique prefix as the whole option; one shared with other options is an
            # "ambiguous option" error, so refusing every prefix of an owned flag loses nothing
            field = next((f for o, f in sorted(owned.items()) if o.startswith(flag)), None)
        if field is not None:
            shown = flag if flag == arg.split("=", 1)[0] else f"{arg.split('=', 1)[0]} (read as {flag})"
            raise ConfigError(
                source, f"extra_args[{i}]",
                f"{shown} is set by the config itself ({field}); extra_args may not set it again",
                f"remove {arg.split('=', 1)[0]} from extra_args and set {_field_hint(field)} instead",
            )


def _field_hint(field: str) -> str:
    section, _, leaf = field.rpartition(".")
    if field == "nodes":
        return "the [[nodes]] tables"
    if field == "profile":
        return "nothing: dynocell gives it at boot so `dynocell profile` finds the traces"
    if field == "config file":
        return "the config's own fields (a --config file can set any flag the config owns)"
    if not section and isinstance(getattr(EngineConfig.model_fields.get(field), "default", None), BaseModel):
        return f"the [{field}] table"
    return f"{leaf} under [{section}]" if section else f"{field} (top level)"


def pick_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` right now (the OS picks it by binding port 0).

    Another process may take it before the engine binds; the engine then
    fails with the ``port_in_use`` signature.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def argv_string(argv: list[str]) -> str:
    """``shlex.join(argv)``."""
    return shlex.join(argv)


def build_env(cfg: EngineConfig, base_env: dict[str, str], build_pythonpath: str | None) -> dict[str, str]:
    """The child's environment: ``base_env`` + ``cfg.env`` + the build's PYTHONPATH first, and
    ``PYTHONSAFEPATH=1`` (:data:`SAFE_PATH_ENV`, over any ``[env]`` value).

    ``build_pythonpath`` is prepended to any PYTHONPATH already in base/cfg env.
    """
    env = dict(base_env)
    env.update(cfg.env)
    env = safe_path_env(env)
    if cfg.serving.spec_v2 is not None:  # SGLang reads it at start (speculative v2 / overlap path)
        env["SGLANG_ENABLE_SPEC_V2"] = "1" if cfg.serving.spec_v2 else "0"
    env.setdefault("PYTHONUNBUFFERED", "1")  # line-buffered engine output, so logs are timely
    if build_pythonpath:
        rest = env.get("PYTHONPATH")
        env["PYTHONPATH"] = build_pythonpath + (":" + rest if rest else "")
    return env


#: vLLM 0.26 reads its API key from ``VLLM_API_KEY`` when ``--api-key`` is not given
#: (``vllm/entrypoints/openai/api_server.py``: ``args.api_key or envs.VLLM_API_KEY``).
VLLM_API_KEY_ENV = "VLLM_API_KEY"


def _key_off_argv(engine: str, argv: list[str], env: dict[str, str]) -> list[str]:
    """For vLLM, one ``--api-key KEY`` (``--api-key=KEY``, ``--api_key``) of ``extra_args`` moved from
    the argv — readable by every local user in ``/proc/PID/cmdline`` — into ``env`` as
    :data:`VLLM_API_KEY_ENV` (``/proc/PID/environ`` is the owner's only). Other engines have no such
    variable (SGLang 0.5.17 reads ``--api-key`` from its argv or a ``--config`` file only): unchanged."""
    if engine != "vllm":
        return argv
    at = [i for i, a in enumerate(argv) if "--" + a[2:].split("=", 1)[0].replace("_", "-") == "--api-key"
          and a.startswith("--")]
    if len(at) != 1:
        return argv
    i = at[0]
    if "=" in argv[i]:
        env[VLLM_API_KEY_ENV] = argv[i].split("=", 1)[1]
        return argv[:i] + argv[i + 1:]
    if i + 1 >= len(argv):
        return argv
    env[VLLM_API_KEY_ENV] = argv[i + 1]
    return argv[:i] + argv[i + 2:]


#: The file a boot's SGLang secret flags go to (``--config FILE``, in the boot's 0700 folder, 0600). SGLang
#: 0.5.17 reads a YAML file of its options from ``--config`` (``server_args.py prepare_server_args`` →
#: ``server_args_config_parser.ConfigArgumentMerger``: each ``key: value`` becomes ``--key value``, before
#: the command line's own) and has no environment variable for ``--api-key``/``--admin-api-key``.
SGLANG_SECRETS_FILE = "engine-secrets.yaml"


def secret_args_to_file(spec: LaunchSpec, folder: Path) -> LaunchSpec:
    """``spec`` with SGLang's secret flags (:data:`~dynocell.engine.config.SECRET_FLAGS`: ``--api-key KEY``,
    ``--api-key=KEY``, ``--api_key``) taken off its argv — which every local user reads in
    ``/proc/PID/cmdline`` and ``ps`` — and written to ``folder/``:data:`SGLANG_SECRETS_FILE` (created 0600;
    JSON, which is YAML) that the argv names with ``--config``. Unchanged for other engines (vLLM's key
    already left for ``VLLM_API_KEY``) and for an argv with no secret flag."""
    from dynocell.engine.config import secret_flag

    if spec.engine != "sglang":
        return spec
    argv, secrets, i = [], {}, 0
    while i < len(spec.argv):
        arg, flag = spec.argv[i], secret_flag(spec.argv[i]) if i > 2 else None
        if flag and "=" in arg:
            secrets[flag[2:]] = arg.split("=", 1)[1]
        elif flag and i + 1 < len(spec.argv):
            secrets[flag[2:]] = spec.argv[i + 1]
            i += 1
        else:
            argv.append(arg)
        i += 1
    if not secrets:
        return spec
    import os

    path = Path(folder) / SGLANG_SECRETS_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps(secrets, ensure_ascii=True) + "\n")
    return dataclasses.replace(spec, argv=[*argv, CONFIG_FILE_FLAG, str(path)])


def render(
    cfg: EngineConfig,
    *,
    python: str,
    port: int | None = None,
    base_env: dict[str, str],
    build_pythonpath: str | None = None,
    profile_dir: str | None = None,
) -> LaunchSpec:
    """Render the single-node launch of ``cfg``.

    ``profile_dir``: the trace directory for an engine that fixes it at boot (vLLM
    ``--profiler-config``; ignored by the others, which take it per ``/start_profile``).
    ``python``: interpreter path (``settings.engine_python``). ``port``: the
    port to use; None or 0 means ``cfg.port``, and if that is 0 a free port is
    picked on ``cfg.host``. Raises UserError for an unknown engine,
    ConfigError for a config the adapter cannot run, and UserError for a
    multi-node config (use :func:`render_nodes`).
    """
    if len(cfg.nodes) > 1:
        raise UserError("this config names several nodes", "render it with render_nodes() (one launch per node)")
    adapter = adapter_for(cfg.engine)
    check_extra_args(cfg)
    port = port or cfg.port or pick_free_port(cfg.host)
    argv = [python, "-m", adapter.module, *adapter.args(cfg, port=port, profile_dir=profile_dir)]
    env = build_env(cfg, base_env, build_pythonpath)
    argv = _key_off_argv(cfg.engine, argv, env)
    return LaunchSpec(argv=argv, env=env, port=port, host=cfg.host, engine=cfg.engine)


def render_nodes(
    cfg: EngineConfig,
    *,
    python: str,
    port: int | None = None,
    base_env: dict[str, str],
    build_pythonpath: str | None = None,
) -> list[LaunchSpec]:
    """One LaunchSpec per ``[[nodes]]`` entry (ordered by node_rank) for a multi-node SGLang engine.

    Each argv adds ``--nnodes N --node-rank R --dist-init-addr cfg.dist_init_addr``
    (SGLang's multi-node flags); ``node_host`` says where to run it. Every node
    gets the same HTTP port (only node 0 serves HTTP in SGLang). A config with
    no nodes renders one local spec. Raises ConfigError without
    ``dist_init_addr`` when there are 2+ nodes, UserError for the reference engine.
    """
    if not cfg.nodes:
        return [render(cfg, python=python, port=port, base_env=base_env, build_pythonpath=build_pythonpath)]
    if cfg.engine != "sglang":
        raise UserError("multi-node plans need engine = \"sglang\"",
                        f"remove [[nodes]] for engine {cfg.engine!r} (vLLM multi-node: use extra_args)")
    if len(cfg.nodes) > 1 and not cfg.dist_init_addr:
        raise ConfigError("<config>", "dist_init_addr", "required when more than one node is named",
                          "add dist_init_addr = \"HOST:PORT\" of node 0")
    adapter = adapter_for(cfg.engine)
    check_extra_args(cfg)
    port = port or cfg.port or pick_free_port(cfg.host)
    env = build_env(cfg, base_env, build_pythonpath)
    specs = []
    for node in sorted(cfg.nodes, key=lambda n: n.node_rank):
        args = adapter.args(cfg, port=port)
        core, extra = args[: len(args) - len(cfg.extra_args)], list(cfg.extra_args)
        argv = [python, "-m", adapter.module, *core]
        nnodes, node_rank, dist_init = NODE_FLAGS  # the flags check_extra_args knows as owned
        argv += [nnodes, str(len(cfg.nodes)), node_rank, str(node.node_rank)]
        if cfg.dist_init_addr:
            argv += [dist_init, cfg.dist_init_addr]
        argv += extra  # extra_args stay last, verbatim
        specs.append(LaunchSpec(argv=argv, env=dict(env), port=port, host=cfg.host,
                                node_rank=node.node_rank, node_host=node.host, engine=cfg.engine))
    return specs
