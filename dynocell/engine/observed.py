"""Configs reconstructed from what an engine reveals about itself: ``observed`` configs.

Sources (engine behaviour, not guesses):

- SGLang prints its whole ``ServerArgs`` dataclass once at start
  (``sglang/srt/server_args.py``; the log line ``server_args=ServerArgs(model_path='…', tp_size=1, …)``)
  and serves the same fields as JSON on ``GET /get_server_info``.
- vLLM prints only the arguments that differ from its defaults
  (``vllm/entrypoints/utils.py``: ``non-default args: {'model': '…', 'speculative_config': {…}}``)
  and serves ``GET /v1/models`` (id, root = model path, max_model_len) and ``GET /version``.

An :class:`ObservedConfig` keeps **only the fields the source revealed**, under
dynocell's dotted config names (``parallel.tp_size``, ``speculative.algorithm`` …)
plus the comparison fields engines reveal (``serving.engine_version``,
``cuda_graph.mode``, ``serving.disable_overlap_schedule``, ``serving.topology``)
— the same names a written config uses (:class:`dynocell.engine.config.Serving`). A field the source did
not reveal stays unknown: it is absent from the canonical JSON and is never filled with a default.
The hash is ``"sha256:" + hex(sha256(canonical JSON))`` of
``{"observed": true, "engine": …, "fields": {…}}`` — so an observed config never
collides with a written one, and two sources revealing the same fields share a hash.

vLLM's ``non-default args`` omit defaults: a vLLM field that is absent there is
unknown to dynocell (vLLM's default may change between versions), not "default".

Settings dynocell's config does not model are kept too, as observed extras under ``extra.<the engine's
own name>`` (issue 35): every other scalar vLLM non-default arg (``extra.enable_prefix_caching``,
``extra.cpu_offload_gb`` …), a speculative method dynocell has no name for (``extra.speculative_method``:
``dspark``, ``dflash``, ``suffix`` …) and SGLang's ``ServerArgs`` fields of the concepts the rules and
runbook ``applies_to`` read (:data:`SGLANG_EXTRA_CONCEPTS`: prefix/radix cache, offload, experts,
speculative extras, overlap, DP attention, torch.compile). They are hashed with the config; comparisons
count an extra only where both sides revealed it (:func:`dynocell.runbooks.doctor_model.differing_knobs`).

Pure functions; no I/O.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from dynocell.errors import UserError
from dynocell.text import shorten

__all__ = [
    "ObservedConfig",
    "ObservedConfigError",
    "cudagraph_mode",
    "from_server_args",
    "from_sglang_server_info",
    "from_vllm_args",
    "from_vllm_server",
    "parse_server_args_line",
    "parse_vllm_args_line",
]

#: SGLang ``ServerArgs`` field → dynocell dotted field.
SGLANG_FIELDS: dict[str, str] = {
    "model_path": "model_path",
    "dtype": "dtype",
    "served_model_name": "served_model_name",
    "host": "host",
    "port": "port",
    "attention_backend": "attention_backend",
    "tp_size": "parallel.tp_size",
    "pp_size": "parallel.pp_size",
    "dp_size": "parallel.dp_size",
    "ep_size": "parallel.ep_size",
    "dcp_size": "parallel.dcp_size",
    "speculative_algorithm": "speculative.algorithm",
    "speculative_num_steps": "speculative.num_steps",
    "speculative_eagle_topk": "speculative.eagle_topk",
    "speculative_num_draft_tokens": "speculative.num_draft_tokens",
    "speculative_draft_model_path": "speculative.draft_model_path",
    "mem_fraction_static": "memory.mem_fraction_static",
    "chunked_prefill_size": "memory.chunked_prefill_size",
    "context_length": "memory.context_length",
    "max_running_requests": "memory.max_running_requests",
    "kv_cache_dtype": "memory.kv_cache_dtype",
    "disable_cuda_graph": "cuda_graph.disable",
    "cuda_graph_max_bs": "cuda_graph.max_bs",
    "dist_init_addr": "dist_init_addr",
    "nnodes": "nnodes",
    "node_rank": "node_rank",
    "disable_overlap_schedule": "serving.disable_overlap_schedule",
    "disaggregation_mode": "serving.topology",
    "version": "serving.engine_version",
}

#: vLLM engine-arg name → dynocell dotted field (``speculative_config`` and
#: ``compilation_config`` are handled apart).
VLLM_FIELDS: dict[str, str] = {
    "model": "model_path",
    "dtype": "dtype",
    "host": "host",
    "port": "port",
    "attention_backend": "attention_backend",
    "tensor_parallel_size": "parallel.tp_size",
    "pipeline_parallel_size": "parallel.pp_size",
    "data_parallel_size": "parallel.dp_size",
    "decode_context_parallel_size": "parallel.dcp_size",
    "max_model_len": "memory.context_length",
    "max_num_seqs": "memory.max_running_requests",
    "kv_cache_dtype": "memory.kv_cache_dtype",
    "gpu_memory_utilization": "memory.gpu_memory_utilization",
    "enforce_eager": "cuda_graph.disable",
    "node_rank": "node_rank",
    "nnodes": "nnodes",
}

#: vLLM ``speculative_config.method`` → dynocell algorithm name (SGLang's).
VLLM_METHODS: dict[str, str] = {
    "eagle": "EAGLE", "eagle3": "EAGLE3", "draft_model": "STANDALONE", "ngram": "NGRAM",
    "mtp": "NEXTN", "deepseek_mtp": "NEXTN", "qwen3_next_mtp": "NEXTN", "ernie_mtp": "NEXTN",
}

# SGLang prints the algorithm's own name; dynocell's config knows these (config.SPEC_ALGORITHMS).
_SGLANG_ALGOS = {"EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"}

#: Prefix of the observed settings dynocell's config does not model (kept as seen, engine's own names).
EXTRA = "extra."
#: Substrings of SGLang ``ServerArgs`` names kept as extras when unmapped (SGLang prints ~200 fields;
#: these are the concepts rules and runbook entries read).
SGLANG_EXTRA_CONCEPTS = ("radix", "prefix", "offload", "expert", "moe", "speculative", "overlap",
                         "dp_attention", "torch_compile", "hicache")
#: vLLM args never kept as extras: places and names (no effect on what is computed), and the dicts
#: handled apart.
_VLLM_NOT_EXTRA = {"model", "model_tag", "served_model_name", "host", "port", "speculative_config",
                   "compilation_config", "kv_transfer_config", "api_key", "middleware", "chat_template"}


def _extra_value(v: Any) -> Any:
    """A revealed value as an extra: scalars as they are, short lists of scalars as lists; else None."""
    if isinstance(v, (bool, int, float)) or (isinstance(v, str) and len(v) <= 200):
        return v
    if isinstance(v, (list, tuple)) and len(v) <= 16 and all(isinstance(x, (bool, int, float, str)) for x in v):
        return [x for x in v]
    return None


class ObservedConfigError(UserError):
    """A config line that cannot be read (truncated, not the engine's shape)."""


@dataclass(frozen=True)
class ObservedConfig:
    """A config seen, not written: ``fields`` (dotted name → value) holds only what was revealed.

    ``native`` keeps the engine's own arguments as seen (JSON-able, for people;
    not hashed); ``source`` says where they were seen (``log line 12``, ``/get_server_info``);
    ``warnings``: revealed values dropped as nonsense (e.g. a ``port`` outside 1–65535), for
    the faces to say (not hashed).
    """

    engine: str
    fields: dict[str, Any]
    native: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    warnings: tuple[str, ...] = ()

    def canonical(self) -> dict[str, Any]:
        """``{"observed": true, "engine": …, "fields": {…}}`` — the hashed content."""
        return {"observed": True, "engine": self.engine, "fields": dict(sorted(self.fields.items()))}

    def canonical_json(self) -> str:
        """Canonical JSON text: sorted keys, no whitespace (the hashed bytes, UTF-8)."""
        return json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          default=str)

    @property
    def config_hash(self) -> str:
        """``"sha256:" + hex`` of :meth:`canonical_json`."""
        return "sha256:" + hashlib.sha256(self.canonical_json().encode()).hexdigest()

    @property
    def model_path(self) -> str:
        """The model path when revealed, else ``"unknown"``."""
        return str(self.fields.get("model_path") or "unknown")

    def merged(self, other: "ObservedConfig") -> "ObservedConfig":
        """Fields of both (``other`` wins on conflicts), e.g. a server's info plus its ``/version``."""
        return ObservedConfig(self.engine, {**self.fields, **other.fields}, {**self.native, **other.native},
                              ", ".join(s for s in (self.source, other.source) if s),
                              self.warnings + other.warnings)

    def source_text(self) -> str:
        """What is stored as the config's "source": comment lines (valid, empty TOML) with the native args."""
        lines = [f"# observed config of a {self.engine} engine ({self.source or 'unknown source'}):",
                 "# only the fields below were revealed; every other field is unknown."]
        for k, v in sorted(self.fields.items()):
            lines.append(f"#   {k} = {json.dumps(v, default=str)}")
        return "\n".join(_comment_safe(line) for line in lines) + "\n"


def _comment_safe(line: str) -> str:
    return "".join(ch if ch.isprintable() else "?" for ch in line)


def _jsonable(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple, set)):
        return [_jsonable(x) for x in v]
    if isinstance(v, Mapping):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return str(v)


def _tcp_port(value: Any) -> int | None:
    """``value`` as a TCP port (an int, or digits, from 1 to 65535), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    return value if isinstance(value, int) and 1 <= value <= 65535 else None


def _checked_port(fields: dict[str, Any], source: str) -> tuple[str, ...]:
    """Drop a revealed ``port`` that is no TCP port (a hostile or broken server: -1, 0, 70000, "x")
    from ``fields``; returns the warning saying so (empty when the port is fine or absent)."""
    if "port" not in fields:
        return ()
    port = _tcp_port(fields["port"])
    if port is not None:
        fields["port"] = port
        return ()
    bad = fields.pop("port")
    shown = shorten(json.dumps(bad, default=str, ensure_ascii=True), 40)
    return (f"{source or 'the engine'} reports port {shown}, not a TCP port (1–65535): ignored",)


def _put(fields: dict[str, Any], name: str, value: Any) -> None:
    if value is None:
        return
    if name == "served_model_name" and isinstance(value, list):
        value = value[0] if len(value) == 1 else ",".join(map(str, value))
    fields[name] = _jsonable(value)


def from_server_args(args: Mapping[str, Any], source: str = "") -> ObservedConfig:
    """Observed config of SGLang from its ``ServerArgs`` fields (log line or ``/get_server_info``).

    A field printed as ``None`` means "the engine's automatic choice" and stays unknown.
    ``speculative_algorithm`` outside dynocell's known names is kept only in ``native``.
    """
    fields: dict[str, Any] = {}
    for name, dotted in SGLANG_FIELDS.items():
        if name not in args:
            continue
        v = args[name]
        if name == "version":
            if v:
                fields[dotted] = f"sglang {v}"
            continue
        if name == "speculative_algorithm":
            if v is None or str(v).upper() in ("", "NONE"):
                fields[dotted] = None  # revealed: speculation off
                continue
            if str(v).upper() not in _SGLANG_ALGOS:
                continue
            v = str(v).upper()
        _put(fields, dotted, v)
    if str(args.get("speculative_algorithm") or "").upper() not in (*_SGLANG_ALGOS, "", "NONE"):
        fields[EXTRA + "speculative_method"] = str(args["speculative_algorithm"]).lower()
    _put_extras(fields, {k: v for k, v in args.items()
                         if k not in SGLANG_FIELDS and any(c in k for c in SGLANG_EXTRA_CONCEPTS)})
    cg = args.get("cuda_graph_config")
    graphs_off = isinstance(cg, str) and "backend='disabled'" in cg and "decode=PhaseConfig(backend='disabled'" in cg
    if fields.get("cuda_graph.disable") is True or graphs_off:
        fields["cuda_graph.mode"] = "off"
    if "disaggregation_mode" in args:
        mode = args.get("disaggregation_mode")
        fields["serving.topology"] = "colocated" if mode in (None, "null", "") else str(mode)
    warnings = _checked_port(fields, source)
    return ObservedConfig("sglang", fields, _jsonable(dict(args)), source, warnings)


def from_sglang_server_info(info: Mapping[str, Any], source: str = "/get_server_info") -> ObservedConfig:
    """Observed config from SGLang's ``/get_server_info`` body (ServerArgs fields + ``version``)."""
    return from_server_args(info, source)


def cudagraph_mode(comp: Any) -> str | None:
    """CUDA-graph mode from vLLM's ``compilation_config`` (a dict, or the text of a log line holding
    ``'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>``): off | piecewise | full |
    full_and_piecewise, or None when absent."""
    if isinstance(comp, Mapping):
        raw = comp.get("cudagraph_mode")
    elif isinstance(comp, str):
        m = re.search(r"cudagraph_mode['\"]?\s*[:=]\s*['\"<]?(?:CUDAGraphMode\.)?([A-Z_]+)", comp)
        raw = m.group(1) if m else None
    else:
        raw = None
    if raw is None:
        return None
    raw = str(raw).upper()
    if raw == "NONE":
        return "off"
    if "FULL" in raw and "PIECEWISE" in raw:
        return "full_and_piecewise"
    return raw.lower()


def from_vllm_args(args: Mapping[str, Any], source: str = "") -> ObservedConfig:
    """Observed config of vLLM from its ``non-default args`` dict (only non-defaults are printed).

    ``speculative_config`` {method, num_speculative_tokens k, model} becomes
    algorithm (``VLLM_METHODS``), num_steps = k, num_draft_tokens = k + 1,
    eagle_topk = 1 (vLLM drafts a chain) and draft_model_path. Keys may also be flag spellings
    (``-tp``, ``--tensor-parallel-size``, from an observed command line): they map as vLLM's
    argparse maps them (:func:`dynocell.engine.vllm_argv.dest_of`).
    """
    from dynocell.engine.vllm_argv import dest_of

    args = {dest_of(str(k)): v for k, v in args.items()}
    fields: dict[str, Any] = {}
    for name, dotted in VLLM_FIELDS.items():
        if name in args:
            _put(fields, dotted, args[name])
    if "model" not in args and "model_tag" in args:
        _put(fields, "model_path", args["model_tag"])
    if "served_model_name" in args:
        _put(fields, "served_model_name", args["served_model_name"])
    _vllm_speculative(fields, args.get("speculative_config"))
    if args.get("enforce_eager") is True:
        fields["cuda_graph.mode"] = "off"
    mode = cudagraph_mode(args.get("compilation_config"))
    if mode:
        fields["cuda_graph.mode"] = mode
    role = _kv_role(args.get("kv_transfer_config"))
    if role:
        fields["serving.topology"] = role
    _put_extras(fields, {k: v for k, v in args.items() if k not in VLLM_FIELDS and k not in _VLLM_NOT_EXTRA})
    warnings = _checked_port(fields, source)
    return ObservedConfig("vllm", fields, _jsonable(dict(args)), source, warnings)


def _put_extras(fields: dict[str, Any], args: Mapping[str, Any]) -> None:
    """Each revealed setting of ``args`` (already filtered to the unmodelled ones) as ``extra.<name>``."""
    for name, v in args.items():
        ev = _extra_value(v)
        if ev is not None and not str(name).startswith("-"):
            fields[EXTRA + str(name)] = ev


def _vllm_speculative(fields: dict[str, Any], spec: Any) -> None:
    """vLLM's ``speculative_config`` (a dict, or its JSON text) into ``fields``."""
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except ValueError:
            spec = None
    if isinstance(spec, Mapping):
        method = str(spec.get("method") or "").lower()
        if method in VLLM_METHODS:
            fields["speculative.algorithm"] = VLLM_METHODS[method]
        elif method:
            fields[EXTRA + "speculative_method"] = method  # dspark, dflash, suffix …: kept, not dropped
        k = spec.get("num_speculative_tokens")
        if isinstance(k, int) and k >= 1:
            fields["speculative.num_steps"] = k
            fields["speculative.num_draft_tokens"] = k + 1
            fields["speculative.eagle_topk"] = 1
        if spec.get("model") and method not in ("ngram",):
            fields["speculative.draft_model_path"] = str(spec["model"])


def _kv_role(kv: Any) -> str | None:
    if isinstance(kv, str):
        try:
            kv = json.loads(kv)
        except ValueError:
            return None
    if not isinstance(kv, Mapping):
        return None
    role = str(kv.get("kv_role") or "")
    return {"kv_producer": "prefill", "kv_consumer": "decode"}.get(role)  # kv_both: no single role


def from_vllm_server(models: Any, version: Any = None, source: str = "/v1/models") -> ObservedConfig:
    """Observed config from vLLM's (or any OpenAI server's) ``/v1/models`` and ``/version`` bodies.

    Reveals the served model name (``id``), the model path (``root``, vLLM only),
    ``max_model_len`` and the engine version. Raises :class:`ObservedConfigError`
    for a body without a model list.
    """
    data = models.get("data") if isinstance(models, Mapping) else None
    if not isinstance(data, list) or not data or not isinstance(data[0], Mapping):
        raise ObservedConfigError(f"{source} has no model list (expected {{\"data\": [{{\"id\": …}}]}})",
                                  "is this an OpenAI-compatible server? try the URL of its API root")
    first = data[0]
    fields: dict[str, Any] = {}
    _put(fields, "served_model_name", first.get("id"))
    _put(fields, "model_path", first.get("root") or first.get("id"))
    if isinstance(first.get("max_model_len"), int):
        fields["memory.context_length"] = first["max_model_len"]
    owner = str(first.get("owned_by") or "")
    engine = "vllm" if owner == "vllm" or version is not None else "openai"
    if isinstance(version, Mapping) and version.get("version"):
        fields["serving.engine_version"] = f"vllm {version['version']}"
    return ObservedConfig(engine, fields, {"models": _jsonable(models), "version": _jsonable(version)}, source)


# ---------------------------------------------------------------- log lines

_SERVER_ARGS = re.compile(r"server_args=ServerArgs\((?P<body>.*)\)\s*$")
_VLLM_ARGS = re.compile(r"non-default args:\s*(?P<body>\{.*\})\s*$")


def _literal_kwargs(body: str, where: str) -> dict[str, Any]:
    try:
        call = ast.parse(f"f({body})", mode="eval").body
    except (SyntaxError, ValueError, RecursionError) as exc:
        why = exc.msg if hasattr(exc, "msg") else exc
        raise ObservedConfigError(f"{where}: the ServerArgs(...) line does not parse ({why}); "
                                  "is the line cut short?", "import the whole log, or pass --config") from None
    out: dict[str, Any] = {}
    assert isinstance(call, ast.Call)
    for kw in call.keywords:
        if kw.arg is not None:
            out[kw.arg] = _value(kw.value)  # a nested config object (CudaGraphConfig(...)) stays text
    return out


def parse_server_args_line(line: str, where: str = "log") -> dict[str, Any] | None:
    """The fields of an SGLang ``server_args=ServerArgs(...)`` line, or None for another line.

    Values are Python literals as SGLang's dataclass repr prints them; a value
    that is not a literal (a nested config object) is kept as its text.
    Raises :class:`ObservedConfigError` (naming ``where``) for a cut-off line.
    """
    m = _SERVER_ARGS.search(line)
    if not m:
        if "server_args=ServerArgs(" in line:
            raise ObservedConfigError(f"{where}: the ServerArgs(...) line is cut short (no closing parenthesis)",
                                      "import the whole log, or pass --config")
        return None
    return _literal_kwargs(m.group("body"), where)


def _vllm_literal(text: str) -> str:
    # vLLM prints enums and some objects by repr (<CUDAGraphMode.FULL: 2>); make them strings.
    return re.sub(r"<([\w.]+):[^<>]*>", r"'\1'", text)


def _value(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, RecursionError):
        if isinstance(node, ast.Dict):
            return {(_value(k) if k is not None else "**"): _value(v) for k, v in zip(node.keys, node.values)}
        return ast.unparse(node)  # an object repr (ProfilerConfig(...)): kept as its text


def parse_vllm_args_line(line: str, where: str = "log") -> dict[str, Any] | None:
    """The dict of a vLLM ``non-default args: {...}`` line, or None for another line.

    Values that are not Python literals (``ProfilerConfig(...)``) are kept as text.
    Raises :class:`ObservedConfigError` (naming ``where``) for a dict that does not parse.
    """
    m = _VLLM_ARGS.search(line)
    if not m:
        if "non-default args: {" in line:
            raise ObservedConfigError(f"{where}: the non-default args line is cut short (no closing brace)",
                                      "import the whole log, or pass --config")
        return None
    try:
        node = ast.parse(_vllm_literal(m.group("body")), mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        raise ObservedConfigError(f"{where}: the non-default args dict does not parse (is the line cut short?)",
                                  "import the whole log, or pass --config") from None
    value = _value(node)
    if not isinstance(value, dict):
        raise ObservedConfigError(f"{where}: non-default args is not a dict")
    return value
