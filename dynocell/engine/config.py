"""Engine configurations: the TOML people write, the frozen model dynocell uses, the hash that names it.

A config is one engine configuration with SGLang's server-arg names
(``sglang/srt/server_args.py``: ``tp_size``, ``speculative_num_steps``,
``mem_fraction_static`` …, grouped here in tables). It is canonicalised
(sorted keys, every default spelled out, ``[meta]`` left out) and hashed:
``config_hash = "sha256:" + hex(sha256(canonical JSON))`` — the algorithm is
named in the value so a later change of scheme is visible. Key order,
whitespace, comments and spelled-out defaults never change the hash; any
engine-relevant change does.

Model paths of the form ``dynocell:tiny`` / ``dynocell:tiny-draft`` name the
made-locally reference pair, and ``dynocell:smollm2-135m`` the pretrained GGUF that
``dynocell model fetch smollm2-135m`` puts in the model cache; they are resolved at boot, not here.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dynocell.errors import ConfigError, not_a_file

SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
#: Every engine a config may name. ``llamacpp`` (llama.cpp's ``llama-server``) is a registered kind
#: (:mod:`dynocell.engine.kinds`); this module calls no kind, so the name is listed here as data.
ENGINES = ("sglang", "reference", "vllm", "llamacpp")
#: vLLM ``--speculative-config`` ``method`` names (vLLM 0.26 ``SpeculativeConfig.method``) accepted in
#: ``[speculative] algorithm`` and the SGLang algorithm each one is the same idea as.
VLLM_METHODS = {"draft_model": "STANDALONE", "ngram": "NGRAM", "eagle": "EAGLE", "eagle3": "EAGLE3",
                "mtp": "NEXTN"}
BUILTIN_MODEL_PREFIX = "dynocell:"
#: The made-locally reference models a config may name (resolved at boot).
BUILTIN_MODELS = ("dynocell:tiny", "dynocell:tiny-draft", "dynocell:smollm2-135m")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")
#: A config file larger than this is refused unread (a real one is a few kB).
MAX_CONFIG_BYTES = 1 << 20
#: Upper bounds that keep absurd values out (no engine has more ranks, tokens or steps).
MAX_PARALLEL = 4096
MAX_SPEC_WIDTH = 1024
MAX_TOKENS = (1 << 31) - 1
MAX_BATCH = 1 << 20
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: A DNS host name (RFC 1123 labels: letters, digits, inner '-', 1–63 characters, dot-separated).
_HOST_NAME = re.compile(r"^(?=.{1,253}\.?$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
                        r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$")
HOST_RULE = "a host name (letters, digits, '-' and '.') or an IP address, e.g. \"127.0.0.1\" or \"node-1.lan\""


def check_host(value: str) -> str:
    """``value`` when it is a host name (RFC 1123) or an IPv4/IPv6 address (:mod:`ipaddress`; ``[::1]``
    brackets allowed), else ValueError naming :data:`HOST_RULE` — so a host printed in a plan or a log
    line can carry no newline, space or shell syntax."""
    import ipaddress

    if _HOST_NAME.match(value):
        return value
    try:
        ipaddress.ip_address(value.strip("[]") if value.startswith("[") and value.endswith("]") else value)
        return value
    except ValueError:
        raise ValueError(f"must be {HOST_RULE}, got {value!r}") from None


#: An env name whose value is a secret: ``HF_TOKEN``, ``*_PASSWORD``/``*_PASSWD``/``*_PASS``, ``*_KEY``,
#: ``*_SECRET``, ``*_TOKEN``, ``*_CREDENTIALS``, ``GH_PAT`` (a personal access token), ``*_AUTH`` —
#: matched anywhere in the name (``PASS``, ``PAT`` and ``AUTH`` as whole ``_``-separated words),
#: case-insensitively (redact when in doubt).
_SECRET_ENV_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSW(?:OR)?D|CREDENTIAL|(?:^|_)(?:PASS|PAT|AUTH)(?:_|$)",
                              re.IGNORECASE)
#: The password of a URL's user information (``postgresql://user:PASSWORD@host/db``, RFC 3986 §3.2.1).
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/@:\s]*):(?P<pw>[^@/\s]+)@")
#: Engine flags whose value is a secret (SGLang 0.5.17 ``--api-key``/``--admin-api-key``/
#: ``--ssl-keyfile-password``, vLLM 0.26 ``--api-key``, ``--hf-token``), in the spelling the engine's
#: parser reads (vLLM's ``--api_key`` is read as ``--api-key``).
SECRET_FLAGS = ("--api-key", "--admin-api-key", "--ssl-keyfile-password", "--hf-token")
#: Options of the engines that are a prefix of a secret flag but hold no secret (SGLang 0.5.17 and vLLM 0.26
#: ``--ssl-keyfile PATH`` beside ``--ssl-keyfile-password``): argparse reads them exactly.
_PUBLIC_PREFIX_FLAGS = frozenset({"--ssl-keyfile"})
#: What a secret value is shown as.
REDACTED = "***"


def injection_warning(env: Mapping[str, str]) -> str | None:
    """``"⚠ env sets LD_PRELOAD, PYTHONPATH"`` when :func:`injection_env_keys` finds any, else None."""
    keys = injection_env_keys(env)
    return f"⚠ env sets {', '.join(keys)}" if keys else None


def is_secret_env_name(name: str) -> bool:
    """Whether ``name`` holds a secret (see :data:`_SECRET_ENV_NAME`)."""
    return bool(_SECRET_ENV_NAME.search(name))


def redact_value(value: str) -> str:
    """``value`` with the password of every URL in it replaced by ``***``
    (``postgresql://u:pw@h/db`` → ``postgresql://u:***@h/db``)."""
    return _URL_PASSWORD.sub(lambda m: f"{m.group('head')}:{REDACTED}@", value)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Copy of ``env`` with the values of secret names (:func:`is_secret_env_name`) replaced by
    ``"***"`` and URL passwords in the other values by ``***`` (:func:`redact_value`) — the one
    redaction rule for storing and showing (the config hash covers the real value)."""
    return {k: (REDACTED if is_secret_env_name(k) else redact_value(v)) for k, v in env.items()}


#: The words of a field name (``admin_api_key``, ``sslKeyfilePassword``) that make its value a secret in an
#: engine's answers: whole words, so ``tokenizer_path``, ``max_total_tokens`` and ``ssl_keyfile`` are not.
_SECRET_WORDS = frozenset({"key", "apikey", "secret", "password", "passwd", "pass", "token", "credential",
                           "credentials", "pat", "auth"})


def is_secret_field(name: str) -> bool:
    """Whether a field ``name`` of an engine's JSON answer holds a secret (one of :data:`_SECRET_WORDS` as a
    word of it, ``_``/``-``/camelCase separated)."""
    words = re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(name)).lower())
    return any(w in _SECRET_WORDS for w in words)


def redact_tree(value: Any) -> Any:
    """A copy of a JSON value (an engine's answer, e.g. SGLang's ``/server_info``, which returns every
    ``ServerArgs`` field, ``admin_api_key`` included) with the non-empty string of every secret field
    (:func:`is_secret_field`) as ``***`` and URL passwords in other strings as ``***`` (:func:`redact_value`)."""
    if isinstance(value, dict):
        return {k: (REDACTED if is_secret_field(k) and isinstance(v, str) and v else redact_tree(v))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_tree(v) for v in value]
    return redact_value(value) if isinstance(value, str) else value


def secret_flag(arg: str) -> str | None:
    """The :data:`SECRET_FLAGS` entry ``arg`` (``--api-key``, ``--api_key=…``, ``--api-ke``) sets, or None.

    SGLang's, vLLM's and the reference engine's parsers are argparse with ``allow_abbrev`` on
    (:data:`dynocell.engine.adapters.ALLOW_ABBREV`): a unique prefix is read as the whole option, and a
    prefix shared with another option is an "ambiguous option" error. So every prefix of a secret flag
    (past ``--``) counts as that flag: hiding a value the engine would refuse anyway loses nothing."""
    if not arg.startswith("--") or len(arg) <= 2:
        return None
    name = "--" + arg[2:].split("=", 1)[0].replace("_", "-")
    if name in SECRET_FLAGS:
        return name
    if name in _PUBLIC_PREFIX_FLAGS:  # an option of its own, read exactly (argparse prefers an exact match)
        return None
    return next((f for f in SECRET_FLAGS if len(name) > 2 and f.startswith(name)), None)


def redact_args(args: list[str] | tuple[str, ...]) -> list[str]:
    """Copy of an argv with the value of every secret flag (:data:`SECRET_FLAGS`: ``--api-key KEY``,
    ``--api-key=KEY``) replaced by ``***``, and URL passwords in any item by ``***``."""
    out: list[str] = []
    hide_next = False
    for arg in args:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
        elif secret_flag(arg) and "=" in arg:
            out.append(arg.split("=", 1)[0] + "=" + REDACTED)
        else:
            hide_next = bool(secret_flag(arg))
            out.append(redact_value(arg))
    return out


def secret_values(cfg: "EngineConfig") -> list[str]:
    """Every secret a config holds, as written: secret ``[env]`` values, URL passwords in ``[env]``,
    and the values of secret flags in ``extra_args`` — what :func:`redact_config` hides."""
    out = [v for k, v in cfg.env.items() if v and is_secret_env_name(k)]
    out += [m.group("pw") for v in (*cfg.env.values(), *cfg.extra_args) for m in _URL_PASSWORD.finditer(v)]
    out += [a for a, shown in zip(cfg.extra_args, redact_args(cfg.extra_args)) if shown == REDACTED]
    out += [a.split("=", 1)[1] for a in cfg.extra_args if secret_flag(a) and "=" in a and a.split("=", 1)[1]]
    return [v for v in dict.fromkeys(out) if v and v != REDACTED]


def redact_config(cfg: "EngineConfig") -> "EngineConfig":
    """``cfg`` as every face shows it: :func:`redact_env` of ``[env]`` and :func:`redact_args` of
    ``extra_args`` (not validated again; its hash is not the stored one — show the stored hash)."""
    return cfg.model_copy(update={"env": redact_env(cfg.env), "extra_args": tuple(redact_args(cfg.extra_args))})


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Parallel(_Section):
    """Parallel sizes (SGLang ``--tp-size`` … ``--dcp-size``); all ≥ 1."""

    tp_size: int = Field(1, ge=1, le=MAX_PARALLEL)
    pp_size: int = Field(1, ge=1, le=MAX_PARALLEL)
    dp_size: int = Field(1, ge=1, le=MAX_PARALLEL)
    ep_size: int = Field(1, ge=1, le=MAX_PARALLEL)
    dcp_size: int = Field(1, ge=1, le=MAX_PARALLEL)


class Speculative(_Section):
    """Speculative decoding (SGLang ``--speculative-*``). ``algorithm`` None = off.

    With ``eagle_topk`` 1 the drafts form a chain: D = ``num_draft_tokens`` − 1
    drafts per verify step, so ``num_draft_tokens`` ≥ ``num_steps`` + 1.

    ``algorithm`` also takes vLLM's method names (:data:`VLLM_METHODS`: ``draft_model`` is
    STANDALONE, ``mtp`` is NEXTN …); for vLLM, k = ``num_speculative_tokens`` is ``num_steps``
    (or ``num_draft_tokens`` − 1). vLLM-only knobs of the drafter (``--speculative-config`` keys;
    None = not stated, left out of the canonical JSON so older configs keep their hash):
    ``draft_attention_backend`` (``attention_backend``: the draft does NOT inherit
    ``--attention-backend``), ``draft_tp_size`` (``draft_tensor_parallel_size``),
    ``prompt_lookup_min``/``prompt_lookup_max`` (ngram window), ``draft_sample_method``
    (``greedy`` | ``probabilistic``).
    """

    algorithm: str | None = None
    num_steps: int | None = Field(None, ge=1, le=MAX_SPEC_WIDTH)
    eagle_topk: int | None = Field(None, ge=1, le=MAX_SPEC_WIDTH)
    num_draft_tokens: int | None = Field(None, ge=1, le=MAX_SPEC_WIDTH)
    draft_model_path: str | None = None
    draft_attention_backend: str | None = None
    draft_tp_size: int | None = Field(None, ge=1, le=MAX_PARALLEL)
    prompt_lookup_min: int | None = Field(None, ge=1, le=MAX_SPEC_WIDTH)
    prompt_lookup_max: int | None = Field(None, ge=1, le=MAX_SPEC_WIDTH)
    draft_sample_method: Literal["greedy", "probabilistic"] | None = None

    @field_validator("algorithm", mode="before")
    @classmethod
    def _algorithm(cls, v: Any) -> Any:
        if v is None or (isinstance(v, str) and v.strip().lower() in ("", "none")):
            return None
        if isinstance(v, str) and v.strip().upper() in SPEC_ALGORITHMS:
            return v.strip().upper()
        if isinstance(v, str) and v.strip().lower() in VLLM_METHODS:
            return VLLM_METHODS[v.strip().lower()]
        raise ValueError(
            f"must be one of {', '.join(SPEC_ALGORITHMS)} (case-insensitive) or none, got {v!r} "
            f"(vLLM's {', '.join(VLLM_METHODS)} are accepted too)"
        )

    @model_validator(mode="after")
    def _widths(self) -> "Speculative":
        if self.algorithm is None:
            return self
        if self.algorithm in ("STANDALONE",) and not self.draft_model_path:
            raise ValueError("STANDALONE needs draft_model_path (the draft model's directory)")
        topk = self.eagle_topk if self.eagle_topk is not None else 1
        if (
            topk == 1
            and self.num_steps is not None
            and self.num_draft_tokens is not None
            and self.num_draft_tokens < self.num_steps + 1
        ):
            raise ValueError(
                f"num_draft_tokens ({self.num_draft_tokens}) must be at least num_steps + 1 "
                f"({self.num_steps + 1}) when eagle_topk is 1"
            )
        return self

    @property
    def num_drafts(self) -> int | None:
        """D, drafts proposed per verify step for a chain (``num_draft_tokens`` − 1), or None."""
        if self.algorithm is None or self.num_draft_tokens is None:
            return None
        return self.num_draft_tokens - 1

    @property
    def accept_depth(self) -> int | None:
        """Most drafts one verify step can accept on SGLang's EAGLE worker, or None when unknown.

        EAGLE, EAGLE3, NEXTN and STANDALONE draft ``num_steps`` levels deep, chain or tree
        (``eagle_topk`` > 1 widens the tree to ``num_draft_tokens`` nodes but not deeper), so a
        request's ``spec_correct_drafts_histogram`` has at most ``num_steps`` + 1 buckets
        (sglang 0.5.17 ``speculative/eagle_info.py`` verify: accept length ≤ ``spec_steps``).
        NGRAM and configs without ``num_steps`` give None (the histogram's own width is used).
        """
        if self.algorithm in (None, "NGRAM") or self.num_steps is None:
            return None
        return self.num_steps

    @property
    def num_speculative_tokens(self) -> int | None:
        """vLLM's k (``num_speculative_tokens``): ``num_steps``, else ``num_draft_tokens`` − 1, else None."""
        if self.algorithm is None:
            return None
        return self.num_steps if self.num_steps is not None else self.num_drafts


class Memory(_Section):
    """Memory knobs (SGLang ``--mem-fraction-static`` …). None = the engine's default.

    The two memory fractions are different ideas and each is one engine's field:
    ``mem_fraction_static`` (SGLang: fraction of GPU memory for weights + KV pool) and
    ``gpu_memory_utilization`` (vLLM: fraction of GPU memory the whole vLLM instance may use,
    activations and CUDA graphs included). A config for the other engine is refused.
    """

    mem_fraction_static: float | None = Field(None, gt=0, le=1)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    chunked_prefill_size: int | None = Field(None, ge=1, le=MAX_TOKENS)
    context_length: int | None = Field(None, ge=1, le=MAX_TOKENS)
    max_running_requests: int | None = Field(None, ge=1, le=MAX_TOKENS)
    kv_cache_dtype: str | None = None


class CudaGraph(_Section):
    """CUDA-graph knobs: ``disable`` (``--disable-cuda-graph``), ``max_bs`` (``--cuda-graph-max-bs``),
    ``mode`` (off | piecewise | full | full_and_piecewise; vLLM's ``compilation_config.cudagraph_mode``,
    SGLang's graphs are ``full`` for decode, ``piecewise`` with its piecewise CUDA graph). ``mode`` None = not
    stated: left out of the canonical JSON, so configs that do not state it keep their hash."""

    disable: bool = False
    max_bs: int | None = Field(None, ge=1, le=MAX_BATCH)
    mode: Literal["off", "piecewise", "full", "full_and_piecewise"] | None = None
    #: vLLM ``compilation_config.cudagraph_capture_sizes`` (None = not stated, left out of the hash).
    capture_sizes: tuple[int, ...] | None = None

    @field_validator("capture_sizes")
    @classmethod
    def _sizes(cls, v: tuple[int, ...] | None) -> tuple[int, ...] | None:
        if v is not None and (not v or any(not 1 <= s <= MAX_BATCH for s in v)):
            raise ValueError(f"must be a non-empty list of batch sizes 1..{MAX_BATCH}, got {list(v)}")
        return v

    @model_validator(mode="after")
    def _mode(self) -> "CudaGraph":
        if self.disable and self.mode not in (None, "off"):
            raise ValueError(f"disable = true contradicts mode = {self.mode!r}: CUDA graphs are either off or not")
        return self


class Serving(_Section):
    """How the engine serves, for comparisons (issue 17): ``topology`` colocated | prefill | decode
    (SGLang ``--disaggregation-mode``; vLLM ``kv_transfer_config.kv_role``), ``disable_overlap_schedule``
    (SGLang ``--disable-overlap-schedule``), ``spec_v2`` (SGLang's ``SGLANG_ENABLE_SPEC_V2``
    speculative-v2 / overlap path), ``engine_version`` (the distribution and version the config is for,
    e.g. ``sglang 0.5.17``; the patched build is the boot's ``build_hash``). None = not stated; unstated
    fields are left out of the canonical JSON (an unchanged config keeps its hash)."""

    topology: Literal["colocated", "prefill", "decode"] | None = None
    #: The HTTP surface the engine speaks (issue 21): "sglang" (native /generate …) or "vllm"
    #: (OpenAI routes, vllm: metrics, profiler dir fixed at launch). Only the reference engine can
    #: choose (``--surface``); SGLang speaks sglang, vLLM vllm. None = the engine's own.
    surface: Literal["sglang", "vllm"] | None = None
    disable_overlap_schedule: bool | None = None
    spec_v2: bool | None = None
    engine_version: str | None = None


class Node(_Section):
    """One host of a multi-node engine: ``host``, ``node_rank`` (0-based), ``gpus`` on it."""

    host: str
    node_rank: int = Field(ge=0, le=MAX_PARALLEL)
    gpus: int = Field(ge=1, le=MAX_PARALLEL)

    @field_validator("host")
    @classmethod
    def _host(cls, v: str) -> str:
        return check_host(v)


class Meta(_Section):
    """Labels for people; not part of the hash."""

    name: str | None = None
    notes: str | None = None


class EngineConfig(_Section):
    """One engine configuration (frozen). See the module docstring for hashing."""

    engine: Literal["sglang", "reference", "vllm", "llamacpp"] = "sglang"
    model_path: str
    #: ``--dtype`` (SGLang and vLLM: auto | half | float16 | bfloat16 | float32); None = not stated.
    dtype: str | None = None
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(0, ge=0, le=65535)
    attention_backend: str | None = None
    parallel: Parallel = Parallel()
    speculative: Speculative = Speculative()
    memory: Memory = Memory()
    cuda_graph: CudaGraph = CudaGraph()
    serving: Serving = Serving()
    env: dict[str, str] = {}
    extra_args: tuple[str, ...] = ()
    patches: tuple[str, ...] = ()
    dist_init_addr: str | None = None
    nodes: tuple[Node, ...] = ()
    meta: Meta = Meta()

    @field_validator("engine", mode="before")
    @classmethod
    def _engine(cls, v: Any) -> Any:
        return v.strip().lower() if isinstance(v, str) else v

    @field_validator("host")
    @classmethod
    def _host(cls, v: str) -> str:
        return check_host(v)

    @field_validator("patches")
    @classmethod
    def _patches(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for p in v:
            if not p or any(ord(ch) < 32 or ord(ch) == 127 for ch in p):
                raise ValueError(f"a patch is a bundled id or a folder path without control characters, got {p!r}")
        return v

    @property
    def name(self) -> str | None:
        """The ``[meta] name`` label, if any."""
        return self.meta.name

    @property
    def speculative_enabled(self) -> bool:
        """True when a speculative algorithm is set."""
        return self.speculative.algorithm is not None

    @property
    def api(self) -> str:
        """The HTTP surface dynocell talks to: ``"vllm"`` for vLLM or a reference engine with
        ``serving.surface = "vllm"``, else ``"sglang"``."""
        return "vllm" if self.engine == "vllm" or self.serving.surface == "vllm" else "sglang"

    def canonical(self) -> dict[str, Any]:
        """Engine-relevant content as plain JSON values: defaults explicit, ``meta`` excluded.

        The comparison fields added later (``serving.*``, ``cuda_graph.mode``) appear only when
        stated, so every config written before them keeps its hash.
        """
        data = self.model_dump(mode="json", exclude={"meta"})
        serving = {k: v for k, v in data.pop("serving").items() if v is not None}
        if serving:
            data["serving"] = serving
        for section, key in _UNSTATED_LEFT_OUT:
            table = data if section is None else data[section]
            if table.get(key) is None:
                table.pop(key, None)
        return data

    @model_validator(mode="after")
    def _spec_v2_once(self) -> "EngineConfig":
        if self.serving.spec_v2 is not None and "SGLANG_ENABLE_SPEC_V2" in self.env:
            raise ValueError("serving.spec_v2 and env.SGLANG_ENABLE_SPEC_V2 say the same thing: keep one "
                             "(serving.spec_v2)")
        return self

    def canonical_json(self) -> str:
        """Canonical JSON text: sorted keys, no whitespace (the hashed bytes, UTF-8)."""
        return json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    @property
    def config_hash(self) -> str:
        """``"sha256:" + hex`` of :meth:`canonical_json`."""
        return "sha256:" + hashlib.sha256(self.canonical_json().encode()).hexdigest()

    def with_changes(self, **changes: Any) -> "EngineConfig":
        """A new validated config with dotted-path changes (``speculative.algorithm=None``)."""
        data = self.model_dump(mode="json")
        for dotted, value in changes.items():
            node = data
            *parents, leaf = dotted.replace("__", ".").split(".")
            for p in parents:
                node = node.setdefault(p, {})
            node[leaf] = value
        return EngineConfig.model_validate(data)


#: Fields added after configs were hashed: left out of the canonical JSON while None (not stated),
#: so every config written before them keeps its hash.
_UNSTATED_LEFT_OUT = (
    ("cuda_graph", "mode"), ("cuda_graph", "capture_sizes"), (None, "dtype"),
    ("memory", "gpu_memory_utilization"),
    ("speculative", "draft_attention_backend"), ("speculative", "draft_tp_size"),
    ("speculative", "prompt_lookup_min"), ("speculative", "prompt_lookup_max"),
    ("speculative", "draft_sample_method"),
)


# ---------------------------------------------------------------- environment the engine inherits

#: ``[env]`` names known to make the engine's process load or run code the config author chooses: the
#: dynamic loader (``LD_PRELOAD``, ``LD_LIBRARY_PATH``, ``LD_AUDIT``), glibc's iconv modules
#: (``GCONV_PATH``), Python's start-up (``PYTHONPATH``, ``PYTHONSTARTUP``, ``PYTHONHOME``,
#: ``PYTHONUSERBASE``'s site-packages, ``PYTHONWARNINGS`` and ``PYTHONBREAKPOINT`` import a module they
#: name), shells' start-up files (``BASH_ENV``, ``ENV``), the command search path (``PATH``), Node's
#: ``NODE_OPTIONS`` (``--require``), the compilers Triton/Inductor/JIT builds call (``CC``, ``CXX``,
#: ``TRITON_PTXAS_PATH``, ``CUDA_HOME``'s ``nvcc``), and caches whose content is imported or loaded
#: (``TORCHINDUCTOR_CACHE_DIR``: compiled kernels; ``HF_HOME``: ``modules/`` of remote code). Named first
#: in the marks; every name not in :data:`WEB_SAFE_ENV_KEYS` is marked too.
INJECTION_ENV_KEYS = ("LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "GCONV_PATH", "PYTHONPATH", "PYTHONSTARTUP",
                      "PYTHONHOME", "PYTHONUSERBASE", "PYTHONWARNINGS", "PYTHONBREAKPOINT", "BASH_ENV", "ENV",
                      "PATH", "NODE_OPTIONS", "CC", "CXX", "TRITON_PTXAS_PATH", "CUDA_HOME",
                      "TORCHINDUCTOR_CACHE_DIR", "HF_HOME")
#: The ``[env]`` names a config may set without a trust decision (an allow-list: a deny-list is always
#: one name short): switches and numbers of NCCL, CUDA, PyTorch, SGLang, vLLM and the Hugging Face
#: libraries that name no file, directory, program or module. Every other name is marked on every face
#: (``⚠ env sets …``) and the web panel boots such a config only once trusted from the CLI.
WEB_SAFE_ENV_KEYS = frozenset({
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING", "CUDA_DEVICE_MAX_CONNECTIONS",
    "CUDA_MODULE_LOADING", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_NVLS_ENABLE", "NCCL_P2P_DISABLE",
    "NCCL_P2P_LEVEL", "NCCL_IB_DISABLE", "NCCL_SHM_DISABLE", "NCCL_CUMEM_ENABLE", "NCCL_ALGO", "NCCL_PROTO",
    "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_SOCKET_IFNAME", "NCCL_GRAPH_REGISTER",
    "NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_BLOCKING_WAIT",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST", "PYTORCH_CUDA_ALLOC_CONF", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    "TOKENIZERS_PARALLELISM", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_TOKEN",
    "SGLANG_ENABLE_SPEC_V2", "SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH", "SGLANG_IS_FLASHINFER_AVAILABLE",
    "SGLANG_ENABLE_JIT_DEEPGEMM", "SGLANG_ENABLE_TORCH_COMPILE", "VLLM_USE_FLASHINFER_SAMPLER",
    "VLLM_NO_USAGE_STATS", "VLLM_LOG_STATS_INTERVAL", "VLLM_LOGGING_LEVEL", "VLLM_ATTENTION_BACKEND",
    "VLLM_USE_V1", "VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_WORKER_MULTIPROC_METHOD", "PYTHONUNBUFFERED",
    "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE", "PYTHONFAULTHANDLER",
})


def injection_env_keys(env: Mapping[str, str]) -> list[str]:
    """The names in ``env`` that need a trust decision: every one not in :data:`WEB_SAFE_ENV_KEYS`
    (exact, case-sensitive), the known code-injection names (:data:`INJECTION_ENV_KEYS`) first in
    that order, then the others sorted; ``[]`` when none."""
    known = [k for k in INJECTION_ENV_KEYS if k in env]
    return known + sorted(k for k in env if k not in WEB_SAFE_ENV_KEYS and k not in INJECTION_ENV_KEYS)


def is_loopback_host(host: str) -> bool:
    """Whether binding ``host`` keeps the engine on this machine: ``localhost`` or a loopback address
    (``127.0.0.0/8``, ``::1``; :mod:`ipaddress`). ``0.0.0.0``, ``::``, a LAN address or a name is not."""
    import ipaddress

    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


def outside_patches(cfg: "EngineConfig") -> list[str]:
    """The ``patches`` of ``cfg`` named by a folder path (``/…``, ``./…``, ``a/b``) rather than a bundled
    patch id: code from outside dynocell's bundled set (``engine/builds.py resolve_patches`` loads a path
    as a patch folder), a trust decision."""
    return [p for p in cfg.patches if "/" in p or p.startswith(".") or "\\" in p]


#: Engine options that make the engine import and run code the config names: a model folder's own Python
#: (``--trust-remote-code``, SGLang 0.5.17 and vLLM 0.26), a class or plugin by qualified name or path
#: (vLLM 0.26 ``EngineArgs``: ``--worker-cls``, ``--worker-extension-cls``, ``--scheduler-cls``,
#: ``--logits-processors``, ``--io-processor-plugin``, ``--reasoning-parser-plugin``; its OpenAI server's
#: ``--tool-parser-plugin``), or code sent with each request (SGLang ``--enable-custom-logit-processor``).
CODE_FLAGS = ("--trust-remote-code", "--worker-cls", "--worker-extension-cls", "--scheduler-cls",
              "--logits-processors", "--io-processor-plugin", "--reasoning-parser-plugin", "--tool-parser-plugin",
              "--enable-custom-logit-processor")


def code_flags(args: list[str] | tuple[str, ...]) -> list[str]:
    """The :data:`CODE_FLAGS` an argv sets, by their full names (``--trust_remote_code``, a unique prefix
    such as ``--trust-rem`` and ``--worker-cls=pkg.Mod`` count: the engines' argparse reads them so)."""
    out = []
    for a in args:
        if not a.startswith("--") or len(a) <= 2:
            continue
        name = "--" + a[2:].split("=", 1)[0].replace("_", "-")
        hit = name if name in CODE_FLAGS else next(
            (f for f in CODE_FLAGS if len(name) > len("--tru") and f.startswith(name)), None)
        if hit:
            out.append(hit)
    return list(dict.fromkeys(out))


def trust_concerns(cfg: "EngineConfig") -> list[str]:
    """What in ``cfg`` is a trust decision, one phrase each (``[]`` when none): ``[env]`` names off the
    allow-list (:func:`injection_env_keys`), patch folders outside the bundled set
    (:func:`outside_patches`), engine options that run code the config names (:func:`code_flags`), a
    ``host`` that is not loopback (:func:`is_loopback_host`: the engine
    serves every network it binds, without authentication). The web panel boots a config with any
    only once it is trusted from the CLI (``dynocell config trust``)."""
    out = []
    keys = injection_env_keys(cfg.env)
    if keys:
        out.append(f"env sets {', '.join(keys)}")
    patches = outside_patches(cfg)
    if patches:
        out.append(f"patches from outside the bundled set: {', '.join(patches)}")
    flags = code_flags(cfg.extra_args)
    if flags:
        out.append(f"extra_args {', '.join(flags)}: the engine runs code the config names (a model folder's "
                   "Python, a class or a plugin)")
    if not is_loopback_host(cfg.host):
        out.append(f"host {cfg.host} is not loopback: the engine is reachable from other machines, "
                   "without authentication")
    return out


def trust_warning(cfg: "EngineConfig") -> str | None:
    """``"⚠ env sets LD_PRELOAD; host 0.0.0.0 is not loopback: …"`` for :func:`trust_concerns`, else None."""
    concerns = trust_concerns(cfg)
    return "⚠ " + "; ".join(concerns) if concerns else None


# ---------------------------------------------------------------- parsing

def _sections() -> dict[str | None, type[BaseModel]]:
    return {
        None: EngineConfig,
        "parallel": Parallel,
        "speculative": Speculative,
        "memory": Memory,
        "cuda_graph": CudaGraph,
        "serving": Serving,
        "meta": Meta,
    }


def _check_keys(data: dict[str, Any], source: str) -> None:
    """Reject unknown keys with a did-you-mean suggestion (before pydantic, for a better message)."""
    for section, model in _sections().items():
        table = data if section is None else data.get(section)
        if not isinstance(table, dict):
            continue
        known = list(model.model_fields)
        for key in table:
            if key in known:
                continue
            field = key if section is None else f"{section}.{key}"
            # A key of a sub-table written at top level, or vice versa, gets a precise hint.
            home = next(
                (s for s, m in _sections().items() if s and key in m.model_fields), None
            )
            if section is None and home:
                hint = f"move it into the [{home}] table"
            else:
                close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
                hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(known)}"
            raise ConfigError(source, field, "unknown key", hint)
    for i, node in enumerate(data.get("nodes") or []):
        if isinstance(node, dict):
            for key in node:
                if key not in Node.model_fields:
                    close = difflib.get_close_matches(key, list(Node.model_fields), n=1)
                    hint = f"did you mean '{close[0]}'?" if close else "keys: host, node_rank, gpus"
                    raise ConfigError(source, f"nodes[{i}].{key}", "unknown key", hint)


_TYPE_MESSAGES = {
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a quoted string",
    "tuple_type": "must be a list",
    "list_type": "must be a list",
    "dict_type": "must be a table",
    "model_type": "must be a table",
    "model_attributes_type": "must be a table",
}


def _hint_for(loc: str, msg: str, kind: str = "") -> str:
    if loc == "host" or loc.endswith(".host"):
        return f"write {HOST_RULE}"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return "write a whole number without quotes"
    if kind in ("bool_type", "bool_parsing"):
        return "write true or false (no quotes)"
    if kind == "string_type":
        return "write a quoted string"
    if kind in ("tuple_type", "list_type"):
        return 'write a TOML list, e.g. ["a", "b"]'
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"write it as a [{loc}] table" if "." not in loc else "write it as a table"
    if loc.endswith("port"):
        return "use 0 (pick a free port at boot) or 1–65535"
    if kind in ("less_than_equal", "less_than") and not loc.endswith("mem_fraction_static"):
        m = re.search(r"less than (?:or equal to )?(\S+)", msg)
        return f"use a value of at most {m.group(1).rstrip(',')}" if m else "use a smaller value"
    if "greater than or equal to 1" in msg or "greater than 0" in msg or "less than or equal to 1" in msg:
        return "use a positive number" if "less than" not in msg else "use a fraction in (0, 1]"
    if "algorithm" in loc:
        return "e.g. algorithm = \"STANDALONE\", or remove it to turn speculation off"
    if "num_draft_tokens" in msg:
        return "raise num_draft_tokens or lower num_steps"
    if "draft_model_path" in msg:
        return "add draft_model_path under [speculative]"
    if "engine" in loc:
        return "engine = \"sglang\", \"vllm\", \"llamacpp\" or \"reference\""
    return "see examples/tiny.toml for a valid config"


def _format_loc(parts: tuple[Any, ...]) -> str:
    out = ""
    for p in parts:
        if p == "__root__":
            continue
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
    return out


def _from_validation_error(err: ValidationError, source: str) -> ConfigError:
    first = err.errors()[0]
    loc = _format_loc(tuple(first["loc"]))
    kind = first["type"]
    msg = first["msg"].removeprefix("Value error, ")
    if kind in _TYPE_MESSAGES:
        msg = f"{_TYPE_MESSAGES[kind]}, got {first.get('input')!r}"
    elif kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than", "literal_error"):
        msg = f"{msg.replace('Input should be', 'must be')}, got {first.get('input')!r}"
    field = loc or None
    if field and field.startswith("speculative") and "num_draft_tokens" in msg:
        field = "speculative.num_draft_tokens"
    elif field == "speculative" and "draft_model_path" in msg:
        field = "speculative.draft_model_path"
    return ConfigError(source, field, msg, _hint_for(field or "", msg, kind))


def _is_local_path(path: str) -> bool:
    if path.startswith(BUILTIN_MODEL_PREFIX):
        return False
    if path.startswith(("/", "./", "../", "~")):
        return True
    return not _HUB_ID.match(path)


def _resolve_model_path(value: str | None, base: Path | None, source: str, field: str) -> str | None:
    if value is not None and value.startswith(BUILTIN_MODEL_PREFIX) and value not in BUILTIN_MODELS:
        raise ConfigError(source, field, f"unknown built-in model {value!r}",
                          f"use {' or '.join(BUILTIN_MODELS)} (check for stray or look-alike characters)")
    if value is None or not _is_local_path(value):
        return value
    p = Path(value).expanduser()
    if not p.is_absolute() and base is not None:
        p = base / p
    # A path missing here is fine for a config meant for another host (the GPU host the operator
    # manages from here): :func:`missing_model_paths` warns at add/plan, :func:`require_model_paths`
    # refuses at boot.
    return str(p.resolve())


def missing_model_paths(cfg: EngineConfig) -> list[tuple[str, str]]:
    """``(field, path)`` of each local model path of ``cfg`` that does not exist on this machine.

    Built-in (``dynocell:tiny``) and hub ids (``org/name``) are not local paths and never listed.
    """
    out = []
    for field, value in (("model_path", cfg.model_path),
                         ("speculative.draft_model_path", cfg.speculative.draft_model_path)):
        if value and _is_local_path(value) and not Path(value).expanduser().exists():
            out.append((field, value))
    return out


def require_model_paths(cfg: EngineConfig, source: str) -> None:
    """Raise :class:`ConfigError` naming the first local model path of ``cfg`` missing here (before a boot)."""
    for field, path in missing_model_paths(cfg):
        raise ConfigError(source, field, f"model path does not exist on this machine: {path}",
                          "boot it on the host that has the model, fix the path, or use dynocell:tiny "
                          "for the made-locally reference model")


def draft_head_problem(cfg: EngineConfig) -> str | None:
    """Why ``cfg``'s speculative algorithm cannot serve its draft folder's head, or None (issue 35 item 4).

    The head is read from the draft's ``config.json`` ``architectures``
    (:func:`dynocell.engine.model_window.draft_head_kind`): an EAGLE-3 head (``LlamaForCausalLMEagle3``) under
    ``EAGLE`` gets no auxiliary hidden states, its fc projection (3 × hidden_size in) is skipped and every
    draft is rejected — SGLang serves it without an error or a warning, accept length 1.00
    (sgl-project/sglang#21272, closed unmerged: the engine does not check it); an EAGLE head under ``EAGLE3``
    is fed layers it was not trained on. A folder not on this machine, or an architecture that names no EAGLE
    head, is not judged (None)."""
    from dynocell.engine.model_window import draft_head_kind, read_model_config

    s = cfg.speculative
    alg = (s.algorithm or "").upper()
    if alg not in ("EAGLE", "EAGLE3") or not s.draft_model_path or not _is_local_path(s.draft_model_path):
        return None
    data, where = read_model_config(s.draft_model_path)
    head = draft_head_kind(data) if data else None
    if data is None or head is None or head == alg:
        return None
    archs = ", ".join(str(a) for a in data.get("architectures") or [])
    return (f"the draft model is an {head} head ({archs} in {where}) but algorithm = {alg!r}: "
            + ("EAGLE mode captures no auxiliary hidden states and skips the head's fc projection, so every draft "
               "is rejected (accept length 1.00) and the engine says nothing (sgl-project/sglang#21272)"
               if head == "EAGLE3" else "EAGLE3 mode feeds the head auxiliary hidden states it was not trained on"))


def require_draft_head(cfg: EngineConfig, source: str) -> None:
    """Raise :class:`ConfigError` on ``speculative.algorithm`` when it cannot serve the draft's head
    (:func:`draft_head_problem`), before a boot spends minutes loading weights to accept nothing."""
    why = draft_head_problem(cfg)
    if why:
        want = "EAGLE3" if (cfg.speculative.algorithm or "").upper() == "EAGLE" else "EAGLE"  # the head's own
        raise ConfigError(source, "speculative.algorithm", why,
                          f"set [speculative] algorithm = \"{want}\" (SGLang --speculative-algorithm {want}, vLLM "
                          f"\"method\": \"{want.lower()}\"), or point draft_model_path at a head of the algorithm")


def _check_strings(data: Any, source: str, path: str = "") -> None:
    """Refuse NUL characters anywhere an engine would see them, and env names a process cannot carry.

    ``[meta]`` is a label for people and never reaches the engine, so it is not checked.
    """
    if isinstance(data, dict):
        for key, value in data.items():
            here = f"{path}.{key}" if path else str(key)
            if not path and key == "meta":
                continue
            if path == "env" and not (isinstance(key, str) and _ENV_NAME.match(key)):
                raise ConfigError(source, f"env.{key!r}", "not a valid environment variable name",
                                  "use ASCII letters, digits and _ , not starting with a digit "
                                  "(e.g. CUDA_VISIBLE_DEVICES)")
            _check_strings(value, source, here)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            _check_strings(value, source, f"{path}[{i}]")
    elif isinstance(data, str) and "\x00" in data:
        raise ConfigError(source, path or None, "contains a NUL character (\\u0000)",
                          "remove it: no path, argument or environment value can hold NUL")


def parse_config(text: str, source: str = "<string>", base_dir: Path | None = None) -> EngineConfig:
    """Parse TOML ``text`` into a validated :class:`EngineConfig`.

    ``source`` names the file in messages; relative local model paths resolve
    against ``base_dir``. Raises :class:`~dynocell.errors.ConfigError` naming the
    source, the field and the fix (TOML syntax errors carry line and column;
    absurdly deep nesting, NUL characters, bad env names and ``extra_args`` that set a flag
    the config owns — :func:`~dynocell.engine.adapters.check_extra_args` — are refused too). A leading UTF-8
    byte-order mark (U+FEFF, as Windows editors save "UTF-8 with BOM") is read as the start of the text, not
    as TOML (tomllib refuses it with "Invalid statement at line 1, column 1").
    """
    text = text.removeprefix("\ufeff")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, None, f"TOML syntax error: {exc}", "fix the line and column shown") from None
    except RecursionError:
        raise ConfigError(source, None, "TOML nested too deeply to read",
                          "a config has a few flat tables; see examples/tiny.toml") from None
    if "model_path" not in data:
        raise ConfigError(source, "model_path", "missing", "add model_path = \"/path/to/model\" (or dynocell:tiny)")
    _check_keys(data, source)
    _check_strings(data, source)
    # Strict: TOML has real types, so "8000" for a port or 1 for a boolean is a mistake, not a
    # value to coerce. Lists become tuples first (strict mode accepts only tuples for tuple fields).
    data = {k: tuple(v) if isinstance(v, list) and k in ("extra_args", "patches", "nodes") else v
            for k, v in data.items()}
    cg = data.get("cuda_graph")
    if isinstance(cg, dict) and isinstance(cg.get("capture_sizes"), list):
        data["cuda_graph"] = {**cg, "capture_sizes": tuple(cg["capture_sizes"])}
    try:
        cfg = EngineConfig.model_validate(data, strict=True)
    except ValidationError as err:
        raise _from_validation_error(err, source) from None
    updates: dict[str, Any] = {}
    mp = _resolve_model_path(cfg.model_path, base_dir, source, "model_path")
    dp = _resolve_model_path(cfg.speculative.draft_model_path, base_dir, source, "speculative.draft_model_path")
    if mp != cfg.model_path:
        updates["model_path"] = mp
    if dp != cfg.speculative.draft_model_path:
        updates["speculative.draft_model_path"] = dp
    if cfg.engine == "reference" and cfg.speculative.algorithm not in (None, "STANDALONE", "NGRAM", "EAGLE", "EAGLE3",
                                                                      "NEXTN"):
        raise ConfigError(
            source, "speculative.algorithm",
            f"the reference engine does not implement {cfg.speculative.algorithm}",
            "use STANDALONE, NGRAM, EAGLE, EAGLE3 or NEXTN with engine = \"reference\"",
        )
    if cfg.engine == "reference" and cfg.speculative.algorithm in ("EAGLE", "EAGLE3", "NEXTN") \
            and not cfg.speculative.draft_model_path:
        raise ConfigError(source, "speculative.draft_model_path",
                          f"{cfg.speculative.algorithm} needs the {cfg.speculative.algorithm} head's folder",
                          "make one with `dynocell model make-eagle DIR` and set draft_model_path = \"DIR\"")
    _check_nodes(cfg, source)
    check_sglang_pp_speculative(cfg, source)
    check_engine_fields(cfg, source)
    if cfg.extra_args:
        from dynocell.engine.adapters import check_extra_args  # the adapters know which flags they render

        check_extra_args(cfg, source)
    return cfg.with_changes(**updates) if updates else cfg


#: Fields only one engine has: (dotted field, the engine that has it, the other engine's field if any).
_ONE_ENGINE_FIELDS = (
    ("memory.mem_fraction_static", "sglang", "memory.gpu_memory_utilization"),
    ("memory.chunked_prefill_size", "sglang", None),
    ("serving.disable_overlap_schedule", "sglang", None),
    ("serving.spec_v2", "sglang", None),
    ("memory.gpu_memory_utilization", "vllm", "memory.mem_fraction_static"),
    ("cuda_graph.capture_sizes", "vllm", None),
    ("speculative.draft_attention_backend", "vllm", None),
    ("speculative.draft_tp_size", "vllm", None),
    ("speculative.prompt_lookup_min", "vllm", None),
    ("speculative.prompt_lookup_max", "vllm", None),
    ("speculative.draft_sample_method", "vllm", None),
)


def fields_not_of(engine: str) -> tuple[str, ...]:
    """The dotted fields ``engine`` does not have (:func:`check_engine_fields` refuses them when set)."""
    if engine == "vllm":
        return tuple(d for d, owner, _ in _ONE_ENGINE_FIELDS if owner != "vllm")
    return tuple(d for d, owner, _ in _ONE_ENGINE_FIELDS if owner == "vllm")


def _field_value(cfg: EngineConfig, dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def check_engine_fields(cfg: EngineConfig, source: str = "<config>") -> None:
    """Refuse a field the config's engine does not have (ConfigError naming the field and the fix).

    ``mem_fraction_static`` (SGLang) and ``gpu_memory_utilization`` (vLLM) are not the same fraction,
    so one is never translated into the other. The reference engine speaks SGLang's names and ignores
    the memory knobs (it runs on CPU), so only vLLM-only fields are refused for it. For vLLM also:
    ``parallel.ep_size`` (vLLM has no EP size: ``--enable-expert-parallel`` uses TP × DP), a
    disaggregated ``serving.topology`` (needs a ``kv_transfer_config`` connector: use ``extra_args``),
    ``eagle_topk`` > 1 (vLLM drafts a chain), and CUDA-graph capture sizes that vLLM rejects at boot.
    """
    for dotted, owner, other in _ONE_ENGINE_FIELDS:
        if owner == "sglang" and cfg.engine != "vllm":
            continue
        if owner == "vllm" and cfg.engine == "vllm":
            continue
        value = _field_value(cfg, dotted)
        if value is None or value is False:
            continue
        hint = (f"use {other} (it holds {cfg.engine}'s meaning, a different fraction)" if other
                else f"remove it, or set engine = \"{owner}\"")
        raise ConfigError(source, dotted, f"{owner}-only field; engine {cfg.engine!r} has no such setting", hint)
    surface = cfg.serving.surface
    if surface is not None and cfg.engine != "reference" and surface != ("vllm" if cfg.engine == "vllm" else "sglang"):
        raise ConfigError(source, "serving.surface", f"engine {cfg.engine!r} speaks its own HTTP surface",
                          "remove serving.surface (only the reference engine can speak either)")
    if cfg.engine == "vllm":
        _check_vllm(cfg, source)


def _check_vllm(cfg: EngineConfig, source: str) -> None:
    if cfg.parallel.ep_size > 1:
        raise ConfigError(source, "parallel.ep_size", "vLLM has no expert-parallel size (EP = TP × DP)",
                          "set ep_size = 1 and add \"--enable-expert-parallel\" to extra_args")
    if cfg.serving.topology in ("prefill", "decode"):
        raise ConfigError(source, "serving.topology", "a disaggregated vLLM role needs a kv_transfer_config",
                          "leave serving.topology unset and pass --kv-transfer-config in extra_args")
    s = cfg.speculative
    if s.algorithm is None:
        return
    if s.eagle_topk is not None and s.eagle_topk > 1:
        raise ConfigError(source, "speculative.eagle_topk", "vLLM drafts a chain (top-k 1)",
                          "remove eagle_topk or set it to 1 with engine = \"vllm\"")
    k = s.num_speculative_tokens
    if k is None and s.algorithm != "NGRAM":
        raise ConfigError(source, "speculative.num_steps", "vLLM needs num_speculative_tokens",
                          "set num_steps = k (vLLM's num_speculative_tokens)")
    cg = cfg.cuda_graph
    if k is not None and not cg.disable and cg.mode != "off":
        # vLLM CompilationConfig.adjust_cudagraph_sizes_for_spec_decode: sizes are rounded up to a
        # multiple of k + 1 and kept if ≤ the largest capture size; none left →
        # "No valid cudagraph sizes after rounding to multiple of k+1" at boot.
        largest = max(cg.capture_sizes) if cg.capture_sizes else cg.max_bs
        if largest is not None and largest < k + 1:
            field = "cuda_graph.capture_sizes" if cg.capture_sizes else "cuda_graph.max_bs"
            raise ConfigError(source, field,
                              f"largest CUDA-graph capture size {largest} is below num_speculative_tokens + 1 "
                              f"= {k + 1}: vLLM refuses the boot (\"No valid cudagraph sizes\")",
                              f"capture at least one size ≥ {k + 1} (e.g. max_num_seqs × {k + 1})")


#: The SGLang version dynocell's sglang engine means when a config does not state ``serving.engine_version``.
SGLANG_PINNED_VERSION = "0.5.17"
#: SGLang 0.5.17 ``sglang/srt/server_args.py`` (``ServerArgs.check_server_args``), verbatim:
#: ``if self.pp_size > 1: assert (self.disable_overlap_schedule and self.speculative_algorithm is None),
#: "Pipeline parallelism is not compatible with overlap schedule, speculative decoding"``.
SGLANG_PP_SPEC_RULE = "Pipeline parallelism is not compatible with overlap schedule, speculative decoding"


def _sglang_version(cfg: EngineConfig) -> str:
    """The SGLang version a config is for: ``serving.engine_version`` without its ``sglang`` prefix,
    else :data:`SGLANG_PINNED_VERSION`."""
    stated = (cfg.serving.engine_version or "").strip()
    if not stated:
        return SGLANG_PINNED_VERSION
    return stated.split(None, 1)[1].strip() if stated.lower().startswith("sglang ") else stated


def check_sglang_pp_speculative(cfg: EngineConfig, source: str = "<config>") -> None:
    """Refuse ``pp_size > 1`` with a speculative algorithm on SGLang 0.5.17 (ConfigError on ``parallel.pp_size``).

    SGLang 0.5.17 asserts :data:`SGLANG_PP_SPEC_RULE` in ``server_args.py`` (the overlap schedule
    part is met by SGLang itself: ``_pipeline_parallel_overlap_disable`` turns it off under PP, so
    speculation is what fails the boot, after minutes of loading on a real model). The field
    report this project is built from (TP4 × PP2 + EAGLE, 3 steps / top-k 1 / 4 draft tokens) ran
    patched SGLang code that lifts the assertion; a build that does so states a version other than
    ``0.5.17`` in ``serving.engine_version`` (e.g. ``"sglang 0.5.17+pp-spec"``) and is let through.
    """
    if cfg.engine != "sglang" or cfg.parallel.pp_size <= 1 or cfg.speculative.algorithm is None:
        return
    if _sglang_version(cfg) != SGLANG_PINNED_VERSION:
        return
    raise ConfigError(
        source, "parallel.pp_size",
        f"pp_size = {cfg.parallel.pp_size} with [speculative] algorithm = {cfg.speculative.algorithm!r}: "
        f"SGLang {SGLANG_PINNED_VERSION} refuses it at boot (server_args.py asserts \"{SGLANG_PP_SPEC_RULE}\"); "
        f"the field report's PP2 + EAGLE ran patched SGLang code that lifts this assertion",
        "set pp_size = 1 (speculation over tp_size only) or remove [speculative]; for a patched build "
        "that lifts the assertion, state it in [serving] engine_version (e.g. \"sglang 0.5.17+pp-spec\")",
    )


def _check_nodes(cfg: EngineConfig, source: str) -> None:
    if not cfg.nodes:
        return
    ranks = sorted(n.node_rank for n in cfg.nodes)
    if ranks != list(range(len(cfg.nodes))):
        raise ConfigError(
            source, "nodes", f"node ranks must be 0..{len(cfg.nodes) - 1} each exactly once, got {ranks}",
            "number the [[nodes]] node_rank 0, 1, 2, …",
        )
    gpus = sum(n.gpus for n in cfg.nodes)
    need = cfg.parallel.tp_size * cfg.parallel.pp_size
    if gpus != need:
        raise ConfigError(
            source, "nodes", f"tp_size × pp_size = {need} but the nodes have {gpus} GPUs in all",
            "make the GPUs of all nodes add up to tp_size × pp_size",
        )
    if len(cfg.nodes) > 1 and not cfg.dist_init_addr:
        raise ConfigError(source, "dist_init_addr", "required when more than one node is named",
                          "add dist_init_addr = \"HOST:PORT\" of node 0")


def load_config(path: str | Path) -> EngineConfig:
    """Read and parse the config file at ``path``.

    Raises ConfigError for a missing file, one over :data:`MAX_CONFIG_BYTES`,
    non-UTF-8 bytes, or any error of :func:`parse_config`.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(str(p), None, not_a_file(p, "config file"),
                          "give the path of a .toml config")
    size = p.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(str(p), None, f"file is {size / 1e6:.1f} MB; a config may be at most "
                          f"{MAX_CONFIG_BYTES // 1024} KiB", "a config is a few kB of TOML: is this the right file?")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(str(p), None, "not UTF-8 text", "save the config as UTF-8 TOML") from None
    return parse_config(text, source=str(p), base_dir=p.parent.resolve())


def config_from_canonical(canonical_json: str, meta: dict[str, Any] | None = None) -> EngineConfig:
    """Rebuild a config from its stored canonical JSON (plus optional ``meta``).

    An observed config (``{"observed": true, "engine", "fields"}``, see
    :mod:`dynocell.engine.observed`) gives a runtime view: the revealed fields
    set, every other field at dynocell's default (used to probe the engine, never
    stored); fields dynocell's config does not have (``engine_version`` …) are left out.
    An engine of :data:`ENGINES` keeps its engine (so an attached vLLM is probed on vLLM's surface,
    an attached llama-server on its own); any other (a generic OpenAI server) is probed as the
    SGLang-compatible HTTP surface (the stored row keeps the real engine name).
    """
    data = json.loads(canonical_json)
    if isinstance(data, dict) and data.get("observed"):
        data = _observed_runtime(data)
        try:
            return EngineConfig.model_validate(data)
        except ValidationError as exc:  # a value dynocell's model cannot hold: that field stays unknown here
            for err in exc.errors():
                node: Any = data  # a dict or list of the JSON; loc parts are keys or indexes
                for part in err["loc"][:-1]:
                    node = node.get(part, {}) if isinstance(node, dict) else {}
                if isinstance(node, dict):
                    node.pop(err["loc"][-1], None)
    if meta:
        data["meta"] = meta
    return EngineConfig.model_validate(data)


def _observed_runtime(data: dict[str, Any]) -> dict[str, Any]:
    engine = data.get("engine")
    out: dict[str, Any] = {"engine": engine if engine in ENGINES else "sglang",
                           "model_path": "unknown"}
    sections = _sections()
    for dotted, value in (data.get("fields") or {}).items():
        *parents, leaf = dotted.split(".")
        model = sections.get(parents[0] if parents else None)
        if len(parents) > 1 or model is None or leaf not in model.model_fields or value is None:
            continue
        (out.setdefault(parents[0], {}) if parents else out)[leaf] = value
    return out


def to_toml(cfg: EngineConfig) -> str:
    """Render ``cfg`` as TOML (every field explicit; ``meta`` included when set)."""
    data = cfg.model_dump(mode="json", exclude_none=True)
    if not data.get("meta"):
        data.pop("meta", None)
    if not data.get("serving"):
        data.pop("serving", None)
    return _dump_toml(data)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        # JSON string escapes are TOML basic-string escapes; DEL and C1 controls (8-bit CSI/OSC) escaped too.
        return re.sub("[\x7f-\x9f]", lambda m: f"\\u{ord(m.group()):04x}", json.dumps(v, ensure_ascii=False))
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(type(v))


def _dump_toml(data: dict[str, Any]) -> str:
    lines: list[str] = []
    tables: list[tuple[str, dict[str, Any]]] = []
    arrays: list[tuple[str, list[dict[str, Any]]]] = []
    for k, v in data.items():
        if isinstance(v, dict):
            tables.append((k, v))
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            arrays.append((k, v))
        else:
            lines.append(f"{k} = {_toml_value(v)}")
    for k, v in tables:
        lines.append("")
        lines.append(f"[{k}]")
        for kk, vv in v.items():
            lines.append(f"{_toml_value(kk) if not re.match(r'^[A-Za-z0-9_-]+$', kk) else kk} = {_toml_value(vv)}")
    for k, items in arrays:
        for item in items:
            lines.append("")
            lines.append(f"[[{k}]]")
            for kk, vv in item.items():
                lines.append(f"{kk} = {_toml_value(vv)}")
    return "\n".join(lines) + "\n"


def diff_configs(a: EngineConfig, b: EngineConfig) -> list[tuple[str, Any, Any]]:
    """Field-by-field differences as ``(dotted_field, value_a, value_b)``, only fields that differ."""
    fa, fb = _flatten(a.canonical()), _flatten(b.canonical())
    return [(k, fa.get(k), fb.get(k)) for k in sorted(set(fa) | set(fb)) if fa.get(k) != fb.get(k)]


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and k != "env":
            out.update(_flatten(v, key + "."))
        elif k == "env" and isinstance(v, dict):
            for ek, ev in v.items():
                out[f"{key}.{ek}"] = ev
        else:
            out[key] = v
    return out
