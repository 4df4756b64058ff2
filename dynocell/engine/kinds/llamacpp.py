"""The ``llamacpp`` engine kind: llama.cpp's ``llama-server`` (the one vendored in llama-cpp-python 0.3.36).

Everything here is read from that source (``tools/server/*.cpp``, ``common/arg.cpp``,
``common/speculative.cpp``): it is the contract.

Command line (``common/arg.cpp`` names): ``llama-server --model GGUF --host H --port P
[--alias NAME] [--ctx-size N] [--parallel N] [--cache-type-k T --cache-type-v T] [speculation]
--metrics EXTRA_ARGS…``. Speculation (``[speculative]``, D = ``num_steps``, else
``num_draft_tokens`` − 1):

- ``NGRAM`` → ``--spec-type ngram-simple [--spec-ngram-simple-size-m D]``: the m-gram that followed the
  last match of the current n-gram in the context is drafted, at most D tokens
  (``common_ngram_simple_draft``); the lookup length ``--spec-ngram-simple-size-n`` (default 12) and
  ``--spec-ngram-simple-min-hits`` go in ``extra_args``. Steps where no n-gram matched draft nothing.
- ``STANDALONE`` → ``--spec-type draft-simple --model-draft PATH [--spec-draft-n-max D]``.
- ``EAGLE3`` → ``--spec-type draft-eagle3 --model-draft PATH``; ``NEXTN`` → ``--spec-type draft-mtp``.

This build removed ``--draft-max``/``--draft-min`` (``arg_removed``: "use --spec-draft-n-max or
--spec-ngram-mod-n-max"), so they are never rendered.

Surface: ``GET /health`` (503 ``Loading model`` while loading, 200 once loaded), ``GET /v1/models``
(``data[0].id`` = the first ``--alias``, else the GGUF's file name; ``meta.n_ctx`` the slot context),
``GET /props`` (``model_path``, ``total_slots``), ``POST /v1/completions`` (OpenAI; the final answer —
the last stream event too — carries ``timings`` with ``draft_n`` / ``draft_n_accepted`` when the
request drafted), ``GET /metrics`` with ``--metrics`` (``llamacpp:`` families). No profiler endpoint.

Acceptance, two definitions (said in every report):

- per request (``timings``, :meth:`LlamaCppKind.request_acceptance`): accept rate =
  ``draft_n_accepted / draft_n``, the share of drafted tokens accepted; no per-position split and no
  step count (``tools/server/server-common.cpp`` ``server_slot_stats::to_json``);
- per class window (``/metrics`` deltas, :meth:`LlamaCppKind.class_acceptance`): N =
  Δ``spec_decode_num_drafts_total`` verify steps, τ = 1 + Δaccepted / N, p_i =
  Δ``…accepted_tokens_per_pos_total{position=i−1}`` / N — unconditional, vLLM's definition
  (``server-context.cpp``: every position below the step's accepted count is incremented). The counters
  move when a request finishes (``metrics_on_prediction``), so a window is read after its requests end.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dynocell.engine import health, metrics
from dynocell.engine.adapters import LaunchSpec, build_env, pick_free_port
from dynocell.engine.client import EngineClient
from dynocell.engine.config import EngineConfig
from dynocell.engine.kinds import ClassAcceptance, RequestAcceptance
from dynocell.errors import ConfigError

PREFIX = "llamacpp:"
#: ``[speculative] algorithm`` → ``--spec-type`` (``common/speculative.cpp`` type names).
SPEC_TYPES = {"NGRAM": "ngram-simple", "STANDALONE": "draft-simple", "EAGLE3": "draft-eagle3",
              "NEXTN": "draft-mtp"}
#: Every spelling (``common/arg.cpp``) of the flags this kind renders from a config field → the field.
OWNED_FLAGS = {
    "--model": "model_path", "-m": "model_path",
    "--host": "host", "--port": "port",
    "--alias": "served_model_name", "-a": "served_model_name",
    "--ctx-size": "memory.context_length", "-c": "memory.context_length",
    "--parallel": "memory.max_running_requests", "-np": "memory.max_running_requests",
    "--cache-type-k": "memory.kv_cache_dtype", "-ctk": "memory.kv_cache_dtype",
    "--cache-type-v": "memory.kv_cache_dtype", "-ctv": "memory.kv_cache_dtype",
    "--spec-type": "speculative.algorithm",
    "--spec-draft-model": "speculative.draft_model_path", "-md": "speculative.draft_model_path",
    "--model-draft": "speculative.draft_model_path",
    "--spec-draft-n-max": "speculative.num_steps", "--spec-ngram-simple-size-m": "speculative.num_steps",
}
#: Fields llama-server has no setting for (or dynocell does not render): refused, never dropped.
_NOT_HERE = (
    ("dtype", "a GGUF file fixes its weights' types", "remove dtype (pick the GGUF's quantisation instead)"),
    ("attention_backend", "llama-server has no attention-backend choice", "remove attention_backend"),
    ("memory.mem_fraction_static", "SGLang's GPU memory fraction", "remove it (llama-server sizes the KV cache "
                                                                    "from --ctx-size)"),
    ("memory.chunked_prefill_size", "SGLang-only", "remove it (llama-server: --batch-size in extra_args)"),
    ("cuda_graph.max_bs", "CUDA-graph knobs are SGLang's and vLLM's", "remove [cuda_graph]"),
    ("cuda_graph.mode", "CUDA-graph knobs are SGLang's and vLLM's", "remove [cuda_graph]"),
    ("serving.disable_overlap_schedule", "SGLang-only", "remove it"),
    ("serving.spec_v2", "SGLang-only", "remove it"),
    ("serving.surface", "llama-server speaks its own surface", "remove serving.surface"),
    ("dist_init_addr", "multi-node is SGLang's", "remove it"),
    ("speculative.eagle_topk", "llama-server drafts a chain", "remove eagle_topk"),
)
PROFILE_UNAVAILABLE = ("not available for this engine: llama-server has no profiler endpoint "
                       "(no /start_profile); profile it with perf or llama.cpp's GGML_SCHED debug output")
REQUEST_DEFINITION = ("per request: accept rate = timings.draft_n_accepted / timings.draft_n "
                      "(share of drafted tokens accepted; llama-server gives no per-position split per request)")
CLASS_DEFINITION = ("llama-server /metrics counter deltas: N = verify steps (spec_decode_num_drafts_total), "
                    "τ = 1 + accepted / N, p_i = accepted_per_pos{position=i−1} / N — unconditional (vLLM's "
                    "definition); n-gram steps that found no draft are plain decode steps, outside N")


def _value(cfg: Any, dotted: str) -> Any:
    node = cfg
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def num_drafts(cfg: EngineConfig) -> int | None:
    """D, the most tokens one step drafts: ``num_steps``, else ``num_draft_tokens`` − 1, else None."""
    s = cfg.speculative
    return s.num_steps if s.num_steps is not None else s.num_drafts


class LlamaCppKind:
    """llama.cpp's ``llama-server`` (see the module docstring for every field → flag and the surface)."""

    name = "llamacpp"
    api = "openai"
    rules = "llamacpp"
    #: Loading a GGUF of a few hundred MB on CPU takes seconds; 120 s leaves room on a loaded host.
    boot_timeout_s = 120.0
    profile_unavailable: str | None = PROFILE_UNAVAILABLE
    request_definition = REQUEST_DEFINITION
    class_definition = CLASS_DEFINITION

    def check_config(self, cfg: EngineConfig, source: str = "<config>") -> None:
        """Refuse fields llama-server has no flag for, parallel sizes > 1, disaggregation, nodes,
        patches on the config (a patched llama-server is a build: ``dynocell engine build llamacpp
        --patch``), speculative algorithms it lacks, and ``extra_args`` that set a flag the config owns
        (:data:`OWNED_FLAGS`, ``--flag value`` and ``--flag=value``). ConfigError names the field."""
        for dotted, why, fix in _NOT_HERE:
            if _value(cfg, dotted) not in (None, False):
                raise ConfigError(source, dotted, f"engine \"llamacpp\" has no such setting: {why}", fix)
        if cfg.cuda_graph.disable:
            raise ConfigError(source, "cuda_graph.disable", "engine \"llamacpp\" has no CUDA graphs to disable",
                              "remove [cuda_graph]")
        p = cfg.parallel
        if max(p.tp_size, p.pp_size, p.dp_size, p.ep_size, p.dcp_size) > 1:
            raise ConfigError(source, "parallel", "dynocell runs llama-server as one process on one device",
                              "set every parallel size to 1 (a GPU split is --split-mode/--tensor-split in extra_args)")
        if cfg.serving.topology in ("prefill", "decode") or cfg.nodes:
            raise ConfigError(source, "serving.topology" if cfg.serving.topology else "nodes",
                              "llama-server serves colocated on one host", "remove it")
        self._check_speculative(cfg, source)
        for i, arg in enumerate(cfg.extra_args):
            flag = arg.split("=", 1)[0]
            if flag in OWNED_FLAGS:
                raise ConfigError(source, f"extra_args[{i}]",
                                  f"{flag} is set by the config itself ({OWNED_FLAGS[flag]}); extra_args may not "
                                  "set it again", f"remove {flag} from extra_args and set {OWNED_FLAGS[flag]}")

    def _check_speculative(self, cfg: EngineConfig, source: str) -> None:
        s = cfg.speculative
        if s.algorithm is None:
            return
        if s.algorithm not in SPEC_TYPES:
            raise ConfigError(source, "speculative.algorithm", f"llama-server has no {s.algorithm} drafting",
                              f"use one of {', '.join(SPEC_TYPES)} with engine = \"llamacpp\"")
        if s.algorithm in ("STANDALONE", "EAGLE3") and not s.draft_model_path:
            raise ConfigError(source, "speculative.draft_model_path",
                              f"{s.algorithm} needs the draft GGUF (--model-draft)", "set draft_model_path")
        for field in ("prompt_lookup_min", "prompt_lookup_max", "draft_attention_backend", "draft_tp_size",
                      "draft_sample_method"):
            if getattr(s, field) is not None:
                raise ConfigError(source, f"speculative.{field}", "vLLM-only field",
                                  "for n-gram lookup length use extra_args = [\"--spec-ngram-simple-size-n\", \"N\"]")

    def args(self, cfg: EngineConfig, *, port: int) -> list[str]:
        """llama-server's arguments for ``cfg`` on ``port`` (without the program), in the module's order."""
        self.check_config(cfg)
        out = ["--model", cfg.model_path, "--host", cfg.host, "--port", str(port)]
        if cfg.served_model_name:
            out += ["--alias", cfg.served_model_name]
        m = cfg.memory
        for flag, value in (("--ctx-size", m.context_length), ("--parallel", m.max_running_requests),
                            ("--cache-type-k", m.kv_cache_dtype), ("--cache-type-v", m.kv_cache_dtype)):
            if value is not None:
                out += [flag, str(value)]
        s = cfg.speculative
        if s.algorithm is not None:
            out += ["--spec-type", SPEC_TYPES[s.algorithm]]
            if s.draft_model_path:
                out += ["--model-draft", s.draft_model_path]
            d = num_drafts(cfg)
            if d is not None:
                out += ["--spec-ngram-simple-size-m" if s.algorithm == "NGRAM" else "--spec-draft-n-max", str(d)]
        out.append("--metrics")
        return out + list(cfg.extra_args)

    def launch(self, cfg: EngineConfig, *, program: str, port: int | None, base_env: dict[str, str]) -> LaunchSpec:
        """``LaunchSpec`` of ``[program, *args]`` with ``base_env`` + ``[env]`` (never dynocell's environment).
        ``port`` None or 0: the config's, else a free one on ``cfg.host``."""
        port = port or cfg.port or pick_free_port(cfg.host)
        return LaunchSpec(argv=[program, *self.args(cfg, port=port)], env=build_env(cfg, base_env, None),
                          port=port, host=cfg.host, engine=self.name)

    def owned_flags(self) -> dict[str, str]:
        """A copy of :data:`OWNED_FLAGS`."""
        return dict(OWNED_FLAGS)

    def served_name(self, cfg: EngineConfig) -> str:
        """What ``/v1/models`` lists: the ``--alias``, else the ``--model`` path as given (llama.cpp of
        llama-cpp-python 0.3.36: ``server-context.cpp`` takes ``params.model.get_name()``, which
        ``common/common.h`` returns as ``path`` when no HF or docker repo is named; the file name only
        when that is empty)."""
        return cfg.served_model_name or cfg.model_path

    def expected(self, cfg: EngineConfig) -> health.ExpectedServer:
        """The oracle's expectation: model path (``/props``) and served name (``/v1/models``)."""
        return health.ExpectedServer(model_path=cfg.model_path, served_model_name=self.served_name(cfg),
                                     check_speculative=False)

    def surface_checks(self, client: EngineClient, expected: health.ExpectedServer | None,
                       canary: health.Canary | None, timeout_s: float) -> list[health.Check]:
        """``models`` + ``completion`` (a real one-token generation) + ``canary`` on the OpenAI surface
        (:func:`dynocell.engine.health.openai_checks`), then ``server_info`` from ``/props``: the
        ``model_path`` llama-server loaded must be the expected one."""
        checks = health.openai_checks(client, expected, canary, timeout_s)
        if expected is not None and expected.model_path:
            r = client.request("GET", "/props")
            got = r.body.get("model_path") if r.status == 200 and isinstance(r.body, dict) else None
            ok = got is not None and Path(str(got)).resolve() == Path(expected.model_path).resolve()
            checks.append(health.Check("server_info", ok, r.latency_ms,
                                       "model and key args match" if ok else
                                       f"model_path: expected {expected.model_path!r}, engine reports {got!r}"))
        return checks

    def recognise(self, models: Any, metric_families: set[str] | frozenset[str]) -> bool:
        """Whether an OpenAI server is llama-server: ``/v1/models`` ``owned_by`` ``"llamacpp"``
        (``server-context.cpp`` ``get_res_model_info``) or ``llamacpp:`` families in ``/metrics``."""
        data = models.get("data") if isinstance(models, Mapping) else None
        owned = [m.get("owned_by") for m in data if isinstance(m, Mapping)] if isinstance(data, list) else []
        return "llamacpp" in owned or PREFIX.rstrip(":") in metric_families

    def observe(self, client: EngineClient) -> dict[str, Any]:
        """What a running llama-server says of itself beyond ``/v1/models``, as config fields: ``model_path``
        (``/props``, the GGUF it loaded) and ``memory.max_running_requests`` (``total_slots``). Only values of
        the right type are kept (the answer is not trusted)."""
        r = client.request("GET", "/props")
        props = r.body if r.status == 200 and isinstance(r.body, dict) else {}
        out: dict[str, Any] = {}
        if isinstance(props.get("model_path"), str) and props["model_path"] and "\x00" not in props["model_path"]:
            out["model_path"] = props["model_path"][:4096]
        slots = props.get("total_slots")
        if isinstance(slots, int) and not isinstance(slots, bool) and 0 < slots <= 1 << 20:
            out["memory.max_running_requests"] = slots
        return out

    def progress_names(self) -> dict[str, tuple[str, ...]]:
        """llama-server's counters (``server-task.cpp`` ``to_metrics``): generated = tokens predicted (at
        request end) + ``n_decode_total`` (every ``llama_decode`` call, so a long request shows progress);
        prompt = prompt tokens; running = ``requests_processing``; queued = ``requests_deferred``."""
        return {"generated": (PREFIX + "tokens_predicted_total", PREFIX + "n_decode_total"),
                "prompt": (PREFIX + "prompt_tokens_total",),
                "running": (PREFIX + "requests_processing",), "queued": (PREFIX + "requests_deferred",)}

    def request_acceptance(self, meta_info: Mapping[str, Any]) -> RequestAcceptance | None:
        """From a response's ``timings`` (kept by the bench client in ``meta_info["timings"]``): None when
        the request drafted nothing (llama-server then leaves ``draft_n`` out) or the fields are not counts."""
        t = meta_info.get("timings") if isinstance(meta_info, Mapping) else None
        if not isinstance(t, Mapping):
            return None
        vals = [t.get("draft_n"), t.get("draft_n_accepted"), t.get("predicted_n")]
        counts = [v for v in vals if isinstance(v, int) and not isinstance(v, bool) and v >= 0]
        if len(counts) != len(vals):
            return None
        drafted, accepted, generated = counts
        if accepted > drafted:
            return None
        return RequestAcceptance(drafted, accepted, generated)

    def class_acceptance(self, before: metrics.MetricsSnapshot,
                         after: metrics.MetricsSnapshot) -> ClassAcceptance | None:
        """The window's curve from two scrapes (:func:`dynocell.engine.metrics.vllm_position_curve` with the
        ``llamacpp:`` prefix); None when no verify step happened. Raises MetricsError when a counter went
        down between the scrapes (the engine restarted) or the counts contradict each other."""
        if metrics.counter_decreases(before, after):
            raise metrics.MetricsError("the llama-server counters went down between the two scrapes (restarted?)",
                                       "measure the class again on one running engine")
        got = metrics.vllm_position_curve(metrics.delta(before, after), prefix=PREFIX)
        if got is None or not got[0].steps:
            return None
        return ClassAcceptance(got[0], got[1], CLASS_DEFINITION)

    def context_length(self, client: EngineClient) -> int | None:
        """A slot's context in tokens: ``/v1/models`` ``data[0].meta.n_ctx`` (``--ctx-size`` / ``--parallel``),
        None when the engine does not say."""
        r = client.models()
        data = r.body.get("data") if r.status == 200 and isinstance(r.body, dict) else None
        meta = data[0].get("meta") if isinstance(data, list) and data and isinstance(data[0], dict) else None
        n = meta.get("n_ctx") if isinstance(meta, dict) else None
        return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None

    def completion_kw(self, cfg: EngineConfig) -> dict[str, Any]:
        """``run_level(api="openai", model=<served name>)``: ``/v1/completions``, streamed."""
        return {"api": "openai", "model": self.served_name(cfg)}


KIND = LlamaCppKind()
