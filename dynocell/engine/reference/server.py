"""The reference engine process: SGLang 0.5.17's HTTP surface over :mod:`.decoding`.

One worker thread owns the models: it admits queued requests (prefill), then
round-robins one decode / draft-and-verify step over every running request
(at most ``--max-running-requests``), pushing snapshots to the waiting HTTP
handlers. Log lines copy SGLang's shapes (``[YYYY-MM-DD HH:MM:SS] Load weight
begin…``, ``Decode batch, … accept len: X, accept rate: Y, … gen throughput
(token/s): Z, #queue-req: Q``, ``The server is fired up and ready to roll!``)
so the same phase rules match both engines. Endpoints and ``meta_info`` fields
follow SGLang's ``entrypoints/http_server.py`` / ``managers/io_struct.py`` and the
real responses in ``tests/data/sglang-0.5.17/*.result.json``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import psutil
import torch

from dynocell.errors import EngineError

from .args import ResolvedSpec
from .decoding import Generation, LoadedModel, SamplingParams, load_tokenizer

VERSION = "0.5.17-dynocell-reference"


def log(msg: str) -> None:
    """Print one SGLang-shaped log line ``[YYYY-MM-DD HH:MM:SS] msg`` to stdout, flushed."""
    try:
        sys.stdout.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {msg}\n")
        sys.stdout.flush()
    except (BrokenPipeError, OSError):
        # The supervisor that read our output is gone: keep serving until the
        # next dynocell command reconciles the boot and stops this engine.
        pass


class BadRequest(Exception):
    """A 4xx answer: ``status`` and ``message``."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message, self.status = message, status


@dataclass
class Req:
    """One queued / running generation and the channel back to its HTTP handler."""

    rid: str
    prompt_ids: list[int]
    sp: SamplingParams
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue
    stream: bool
    received: float = field(default_factory=time.time)
    gen: Generation | None = None
    first_token_t: float | None = None
    aborted: str | None = None
    stop_cut: int | None = None
    stop_matched: str | None = None


class Engine:
    """Models, queue, worker thread, counters, metrics and profiler of one engine process."""

    def __init__(self, args, spec: ResolvedSpec) -> None:
        self.args, self.spec = args, spec
        self.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.ready = False
        self.stopping = False
        self.lock = threading.Condition()
        self.waiting: deque[Req] = deque()
        self.running: list[Req] = []
        self.commands: deque = deque()
        self.t0 = time.time()
        # cumulative counters
        self.prompt_tokens_total = 0
        self.gen_tokens_total = 0
        self.requests_total = 0
        self.verify_steps_total = 0
        self.correct_total = 0
        self.proposed_total = 0
        self.spec_tokens_total = 0  # tokens emitted by verify steps (accepted + bonus)
        self.at_position = [0] * (spec.num_drafts + 1)  # index i: verify steps with ≥ i accepted
        self.last_gen_throughput = 0.0
        self.forward_steps = 0
        self._interval = self._new_interval()
        self.profile: dict | None = None
        self.last_profile: dict | None = None
        self.ttft: list[float] = []
        self.e2e: list[float] = []

    # -- loading ----------------------------------------------------------------------------
    def _avail_gb(self) -> float:
        if self.device.startswith("cuda"):
            return torch.cuda.mem_get_info()[0] / 2**30
        return psutil.virtual_memory().available / 2**30

    def _load(self, path: Path) -> LoadedModel:
        import transformers  # noqa: F401 - import cost is not load time
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        before = self._avail_gb()
        if self.vllm_surface:  # vLLM 0.26's wording (gpu_model_runner / model_runner)
            log(f"Starting to load model {path}...")
        else:
            log(f"Load weight begin. avail mem={before:.2f} GB")
        t = time.time()
        m = LoadedModel(path, self.device)
        after = self._avail_gb()
        usage = m.num_params * 4 / 2**30
        if self.vllm_surface:
            log(f"Model loading took {usage:.4f} GiB memory and {time.time() - t:.6f} seconds")
        else:
            log(f"Load weight end. elapsed={time.time() - t:.2f} s, type={m.architecture}, "
                f"avail mem={after:.2f} GB, mem usage={usage:.2f} GB.")
        return m

    def load(self) -> None:
        """Load tokenizer, target and draft (STANDALONE), log SGLang's loading lines. Raises on bad paths."""
        a = self.args
        if a.random_seed is not None:
            torch.manual_seed(a.random_seed)
        self.model_path = str(a.model_path)
        self.served_model_name = a.served_model_name or self.model_path
        self.tokenizer = load_tokenizer(Path(a.tokenizer_path or a.model_path))
        if self.vllm_surface:
            log(f"Initializing a V1 LLM engine (v0.26.0+dynocell.reference) with config: model={self.model_path!r}, "
                f"speculative_config={self.spec.algorithm!r}, max_seq_len={a.context_length}")
        else:
            log("Init torch distributed begin.")
            log("Init torch distributed ends. elapsed=0.00 s, mem usage=0.00 GB")
        self.target = self._load(Path(a.model_path))
        self.draft = None
        self.head = None
        if self.spec.algorithm == "STANDALONE":
            self.draft = self._load(Path(a.speculative_draft_model_path))
            if self.draft.config.vocab_size != self.target.config.vocab_size:
                raise SystemExit(f"draft vocab {self.draft.config.vocab_size} != target vocab "
                                 f"{self.target.config.vocab_size}: the draft must share the tokenizer")
        elif self.spec.algorithm in ("EAGLE", "EAGLE3", "NEXTN"):
            from dynocell.engine.reference.eagle import load_head

            log(f"Load weight begin (draft). {self.spec.algorithm} head {a.speculative_draft_model_path}")
            self.head = load_head(Path(a.speculative_draft_model_path), self.target.model)
            eagle3 = self.spec.algorithm == "EAGLE3"
            want = "LlamaForCausalLMEagle3" if eagle3 else "LlamaForCausalLMEagle or an MTP layer (MiMoMTP)"
            if (self.head.architecture == "LlamaForCausalLMEagle3") != eagle3:
                raise SystemExit(f"--speculative-algorithm {self.spec.algorithm} needs a {want} head, "
                                 f"{a.speculative_draft_model_path} holds {self.head.architecture}")
            log(f"Load weight end (draft). type={self.head.architecture}, "
                f"eagle_topk={self.spec.eagle_topk}, num_draft_tokens={self.spec.num_draft_tokens}")
        cfg = self.target.config
        self.context_length = a.context_length or int(getattr(cfg, "max_position_embeddings", 2048))
        eos = cfg.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos]) if eos is not None else set()
        gcfg = Path(a.model_path) / "generation_config.json"
        self.gen_defaults = json.loads(gcfg.read_text()) if gcfg.is_file() else {}
        self.max_total_tokens = self.context_length * a.max_running_requests
        for m in [self.target] + ([self.draft] if self.draft else []):
            c = m.config
            head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
            size = self.max_total_tokens * c.num_hidden_layers * c.num_key_value_heads * head_dim * 4 / 2**30
            if self.vllm_surface:
                log(f"GPU KV cache size: {self.max_total_tokens:,} tokens")
                continue
            log(f"KV Cache is allocated. dtype: torch.float32, #tokens: {self.max_total_tokens}, "
                f"K size: {size:.2f} GB, V size: {size:.2f} GB")
            log(f"Memory pool end. avail mem={self._avail_gb():.2f} GB")
        self.worker = threading.Thread(target=self._worker, name="reference-worker", daemon=True)
        self.worker.start()

    # -- request intake ----------------------------------------------------------------------
    def submit(self, req: Req) -> None:
        with self.lock:
            if self.stopping:
                raise BadRequest("the server is shutting down", 503)
            self.waiting.append(req)
            self.lock.notify()

    def run_command(self, fn) -> Any:
        """Run ``fn()`` on the worker thread (between steps) and wait for its result."""
        box: dict = {}
        done = threading.Event()

        def wrapped():
            try:
                box["v"] = fn()
            except BaseException as exc:  # noqa: BLE001 - returned to the caller
                box["e"] = exc
            done.set()

        with self.lock:
            self.commands.append(wrapped)
            self.lock.notify()
        if not done.wait(120):
            raise BadRequest("the engine worker did not answer in 120 s", 503)
        if "e" in box:
            raise box["e"]
        return box.get("v")

    def begin_shutdown(self) -> None:
        """Stop accepting, abort queued and running requests (their handlers answer at once)."""
        with self.lock:
            self.stopping = True
            self.ready = False
            for r in list(self.waiting) + list(self.running):
                r.aborted = "server shutting down"
            self.lock.notify()

    # -- worker --------------------------------------------------------------------------------
    @staticmethod
    def _new_interval() -> dict:
        return {"t": time.time(), "steps": 0, "tokens": 0, "verify": 0, "spec_tokens": 0, "correct": 0,
                "proposed": 0, "prompt": 0, "at_position": {}}

    @property
    def vllm_surface(self) -> bool:
        """True with ``--surface vllm`` (vLLM 0.26's metric names and log lines)."""
        return getattr(self.args, "surface", "sglang") == "vllm"

    def _push(self, req: Req, kind: str, payload: Any = None) -> None:
        with contextlib.suppress(RuntimeError):  # the handler's loop is gone
            req.loop.call_soon_threadsafe(req.events.put_nowait, (kind, payload))

    def snapshot(self, req: Req) -> dict:
        """SGLang ``/generate`` response body for the request's current state."""
        g = req.gen
        ids = list(g.output_ids) if g else []
        text = self.tokenizer.decode(ids, skip_special_tokens=True) if ids else ""
        finish: dict[str, Any] | None = None
        if req.aborted:
            finish = {"type": "abort", "message": req.aborted}
        elif g and g.finished:
            finish = dict(g.finished)
        if req.stop_cut is not None:
            text = text[:req.stop_cut]
            finish = {"type": "stop", "matched": req.stop_matched}
        now = time.time()
        meta: dict[str, Any] = {
            "id": req.rid,
            "finish_reason": finish,
            "prompt_tokens": len(req.prompt_ids),
            "weight_version": "default",
            "completion_tokens": len(ids),
            "cached_tokens": 0,
            "e2e_latency": now - req.received,
            "request_received_ts": req.received,
        }
        if g is not None:
            meta.update(g.meta())
        elif self.spec.algorithm:
            meta.update({"spec_verify_ct": 0, "spec_correct_drafts_histogram": [0] * (self.spec.num_drafts + 1)})
        return {"text": text, "output_ids": ids, "meta_info": meta}

    def _finish(self, req: Req) -> None:
        snap = self.snapshot(req)
        self.e2e.append(time.time() - req.received)
        self._push(req, "done", snap)

    def _check_stop_strings(self, req: Req) -> None:
        gen = req.gen
        if gen is None or not req.sp.stop or gen.finished:
            return
        text = self.tokenizer.decode(gen.output_ids, skip_special_tokens=True)
        best = None
        for s in req.sp.stop:
            i = text.find(s)
            if i >= 0 and (best is None or i < best[0]):
                best = (i, s)
        if best:
            req.stop_cut, req.stop_matched = best
            gen.finished = {"type": "stop", "matched": best[1]}

    def _generation(self, req) -> Generation:
        s = self.spec
        if s.algorithm in ("EAGLE", "EAGLE3", "NEXTN"):
            from dynocell.engine.reference.eagle_decoding import EagleGeneration

            if s.num_steps is None or s.eagle_topk is None or s.num_draft_tokens is None:  # args sets all three
                raise EngineError(f"{s.algorithm} without num_steps, eagle_topk and num_draft_tokens",
                                  "resolve the speculative arguments with dynocell.engine.reference.args.parse")
            return EagleGeneration(req.prompt_ids, req.sp, self.target, self.head, s.algorithm, s.num_steps,
                                   s.eagle_topk, s.num_draft_tokens, self.args.speculative_draft_mode,
                                   self.eos_ids, self.context_length)
        g = Generation(req.prompt_ids, req.sp, self.target, self.draft, s.algorithm, s.num_drafts,
                       self.args.speculative_draft_mode, self.eos_ids, self.context_length)
        g.draft_corrupt = float(getattr(self.args, "draft_corrupt", 0.0) or 0.0)
        return g

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.args.max_running_requests:
            req = self.waiting.popleft()
            if req.aborted:
                self._finish(req)
                continue
            t = time.time()
            req.gen = self._generation(req)
            try:
                kept = req.gen.step()  # prefill
            except Exception as exc:  # noqa: BLE001 - reported to the client
                req.aborted = f"internal error: {exc!r}"
                self._finish(req)
                continue
            self.forward_steps += 1
            self._profile_tick()
            dt = max(time.time() - t, 1e-9)
            log(f"Prefill batch, #new-seq: 1, #new-token: {len(req.prompt_ids)}, #cached-token: 0, "
                f"token usage: {self._usage():.2f}, #running-req: {len(self.running)}, "
                f"#queue-req: {len(self.waiting)}, #pending-token: 0, cuda graph: False, "
                f"input throughput (token/s): {len(req.prompt_ids) / dt:.2f}")
            self.requests_total += 1
            self.prompt_tokens_total += len(req.prompt_ids)
            self._interval["prompt"] += len(req.prompt_ids)
            req.first_token_t = time.time()
            self.ttft.append(req.first_token_t - req.received)
            self._account(req, kept, verify=False)
            if req.gen.finished:
                self._finish(req)
            else:
                self.running.append(req)
                if req.stream:
                    self._push(req, "update", self.snapshot(req))

    def _usage(self) -> float:
        return sum(len(r.gen.tokens) for r in self.running if r.gen) / max(self.max_total_tokens, 1)

    def _account(self, req: Req, kept: list[int], verify: bool) -> None:
        self.gen_tokens_total += len(kept)
        self._interval["tokens"] += len(kept)
        self._check_stop_strings(req)

    def _decode_round(self) -> None:
        iv = self._interval
        for req in list(self.running):
            if req.aborted:
                self.running.remove(req)
                self._finish(req)
                continue
            g = cast(Generation, req.gen)  # _admit sets it before a request joins self.running
            vc, cc, pc = g.verify_ct, g.num_correct, g.num_proposed
            hist_before = list(g.histogram)
            t_step = time.perf_counter()
            try:
                kept = g.step()
            except Exception as exc:  # noqa: BLE001 - reported to the client
                req.aborted = f"internal error: {exc!r}"
                self.running.remove(req)
                self._finish(req)
                continue
            slow = float(getattr(self.args, "step_slowdown", 1.0) or 1.0)
            if slow > 1.0:  # --step-slowdown: a planted, proportional slowdown (benchmarks/reproducibility.py)
                time.sleep((slow - 1.0) * (time.perf_counter() - t_step))
            if g.verify_ct > vc:
                k = next(i for i, (a, b) in enumerate(zip(g.histogram, hist_before)) if a != b)
                self.verify_steps_total += 1
                self.correct_total += g.num_correct - cc
                self.proposed_total += g.num_proposed - pc
                self.spec_tokens_total += k + 1
                for i in range(k + 1):
                    self.at_position[i] += 1
                    iv["at_position"][i] = iv["at_position"].get(i, 0) + 1
                iv["verify"] += 1
                iv["spec_tokens"] += k + 1
                iv["correct"] += g.num_correct - cc
                iv["proposed"] += g.num_proposed - pc
            self._account(req, kept, verify=True)
            if g.finished:
                self.running.remove(req)
                self._finish(req)
            elif req.stream:
                self._push(req, "update", self.snapshot(req))
        iv["steps"] += 1
        self.forward_steps += 1
        self._profile_tick()
        if iv["steps"] >= max(1, self.args.decode_log_interval):
            self._log_decode()

    def _log_decode(self) -> None:
        iv = self._interval
        dt = max(time.time() - iv["t"], 1e-9)
        thr = iv["tokens"] / dt
        self.last_gen_throughput = thr
        ntok = sum(len(r.gen.tokens) for r in self.running if r.gen)
        if self.vllm_surface:
            self._log_vllm_interval(iv, dt, thr, ntok)
            self._interval = self._new_interval()
            return
        spec = ""
        if self.spec.algorithm:
            al = iv["spec_tokens"] / iv["verify"] if iv["verify"] else 1.0
            ar = iv["correct"] / iv["proposed"] if iv["proposed"] else 0.0
            spec = f"accept len: {al:.2f}, accept rate: {ar:.2f}, "
        log(f"Decode batch, #running-req: {len(self.running)}, #token: {ntok}, "
            f"token usage: {ntok / max(self.max_total_tokens, 1):.2f}, {spec}cuda graph: False, "
            f"gen throughput (token/s): {thr:.2f}, #queue-req: {len(self.waiting)}")
        self._interval = self._new_interval()

    def _log_vllm_interval(self, iv: dict, dt: float, thr: float, ntok: int) -> None:
        """vLLM 0.26's interval lines (``vllm/v1/metrics/loggers.py``, ``vllm/v1/spec_decode/metrics.py``;
        real ones in tests/data/vllm-0.26.0/C_draft_graph.server.log). Per-position rates are
        unconditional: drafts whose first i tokens were all accepted / drafts."""
        log(f"Engine 000: Avg prompt throughput: {iv['prompt'] / dt:.1f} tokens/s, Avg generation throughput: "
            f"{thr:.1f} tokens/s, Running: {len(self.running)} reqs, Waiting: {len(self.waiting)} reqs, "
            f"GPU KV cache usage: {100.0 * ntok / max(self.max_total_tokens, 1):.1f}%, Prefix cache hit rate: 0.0%")
        n, d = iv["verify"], self.spec.num_drafts if self.spec.algorithm else 0
        if not (n and d):
            return
        rates = ", ".join(f"{iv['at_position'].get(i, 0) / n:.3f}" for i in range(1, d + 1))
        log(f"SpecDecoding metrics: Mean acceptance length: {1 + iv['correct'] / n:.2f}, Accepted throughput: "
            f"{iv['correct'] / dt:.2f} tokens/s, Drafted throughput: {iv['proposed'] / dt:.2f} tokens/s, "
            f"Accepted: {iv['correct']} tokens, Drafted: {iv['proposed']} tokens, Per-position acceptance rate: "
            f"{rates}, Avg Draft acceptance rate: {100.0 * iv['correct'] / max(iv['proposed'], 1):.1f}%")

    def _worker(self) -> None:
        torch.set_grad_enabled(False)
        while True:
            if self.vllm_surface and self._interval["steps"] and not (self.waiting or self.running):
                self._log_decode()  # vLLM logs the last busy interval too
            with self.lock:
                while not (self.waiting or self.running or self.commands or self.stopping):
                    self.lock.wait(0.5)
                cmds = list(self.commands)
                self.commands.clear()
            for c in cmds:
                c()
            if self.stopping:
                with self.lock:
                    for r in list(self.waiting) + list(self.running):
                        r.aborted = r.aborted or "server shutting down"
                        self._finish(r)
                    self.waiting.clear()
                    self.running.clear()
                with contextlib.suppress(BadRequest):  # already logged; shutting down anyway
                    self._stop_profile()
                return
            with self.lock:
                self._admit()
            if self.running:
                self._decode_round()
            elif self._interval["steps"]:
                self._log_decode()

    # -- profiler --------------------------------------------------------------------------------
    def _vllm_profiler_dir(self) -> Path | None:
        """``torch_profiler_dir`` of ``--profiler-config`` (vLLM's flag), else None. BadRequest for a bad one."""
        raw = getattr(self.args, "profiler_config", None)
        if not raw:
            return None
        try:
            cfg = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise BadRequest(f"--profiler-config is not JSON: {exc}") from None
        if not isinstance(cfg, dict) or cfg.get("profiler") != "torch" or not cfg.get("torch_profiler_dir"):
            raise BadRequest('--profiler-config needs {"profiler": "torch", "torch_profiler_dir": DIR}')
        return Path(str(cfg["torch_profiler_dir"]))

    def profile_target(self, body: dict) -> tuple[Path, str, str]:
        """``(output directory, profile_id, profile_prefix)`` of a ``/start_profile`` body, confined to
        the directory given at launch (``--profile-dir``).

        ``output_dir`` (absolute, or relative to that directory) must resolve inside it, symlinks
        followed; ``profile_id`` and ``profile_prefix`` become part of a file name, so a ``/``,
        ``\\``, NUL, a leading ``.`` or ``..`` is refused. Raises BadRequest (400) naming the field.
        """
        root = Path(self.args.profile_dir).resolve()
        given = body.get("output_dir")
        if given is not None and (not isinstance(given, str) or "\x00" in given):
            raise BadRequest("output_dir must be a path string")
        out = (root / given).resolve() if given else root
        if not out.is_relative_to(root):
            raise BadRequest(f"output_dir {given!r} is outside the profile directory {root} given at launch "
                             "(--profile-dir / SGLANG_TORCH_PROFILER_DIR); profile output stays inside it")
        names = []
        for key, default in (("profile_id", str(time.time())), ("profile_prefix", "")):
            value = body.get(key)
            value = default if value in (None, "") else value
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise BadRequest(f"{key} must be a string")
            value = str(value)
            if value and (any(c in value for c in "/\\\x00") or value.startswith(".") or ".." in value
                          or os.path.isabs(value)):
                raise BadRequest(f"{key} {value!r} must be a plain file-name part: no '/', '\\', '..', "
                                 "leading '.' or absolute path")
            names.append(value)
        return out, names[0], names[1]

    def start_profile(self, body: dict) -> str:
        """Start torch.profiler on the worker thread (SGLang ``ProfileReq`` fields). Returns a message.

        Output is confined by :meth:`profile_target` (BadRequest 400 before anything is created); with
        vLLM's ``--profiler-config`` the directory fixed at launch is used and the body names none."""
        vllm_dir = self._vllm_profiler_dir()
        if vllm_dir is not None:  # vLLM: the directory is fixed at launch, the request names none
            out, pid, prefix = vllm_dir, str(time.time_ns()), ""
        else:
            out, pid, prefix = self.profile_target(body)
        req = body

        def start():
            body = req
            if self.profile is not None:
                raise BadRequest("Profiling is already in progress. Call /stop_profile first.")
            acts = [str(a).upper() for a in (body.get("activities") or ["CPU", "GPU"])]
            activities = [torch.profiler.ProfilerActivity.CPU]
            if self.device.startswith("cuda") and ("GPU" in acts or "CUDA" in acts):
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            out.mkdir(parents=True, exist_ok=True)
            prof = torch.profiler.profile(activities=activities, record_shapes=bool(body.get("record_shapes")),
                                          with_stack=bool(body.get("with_stack")))
            prof.__enter__()
            self.profile = {"prof": prof, "dir": out, "id": pid, "prefix": prefix,
                            "num_steps": body.get("num_steps"), "steps": 0, "file": None,
                            "vllm": vllm_dir is not None}
            log(f"Profiling starts. Traces will be saved to: {out} (with profile id: {pid})")
        self.run_command(start)
        return "Start profiling.\n"

    def _profile_tick(self) -> None:
        p = self.profile
        if p is None:
            return
        p["steps"] += 1
        if p["num_steps"] and p["steps"] >= int(p["num_steps"]):
            # logged; the worker thread must keep decoding (a later /stop_profile says so)
            with contextlib.suppress(BadRequest):
                self._stop_profile()

    def _stop_profile(self) -> Path | None:
        p = self.profile
        if p is None:
            return None
        self.profile = None
        prof = p["prof"]
        prof.__exit__(None, None, None)
        name = (f"rank0.{p['id']}.pt.trace.json.gz" if p.get("vllm")  # vLLM 0.26's torch profiler layout
                else f"{p['prefix']}{p['id']}-TP-0.trace.json.gz")
        final = p["dir"] / name
        try:
            with tempfile.TemporaryDirectory() as td:
                raw = Path(td) / "trace.json"
                prof.export_chrome_trace(str(raw))
                if not raw.is_file():
                    # torch's exporter only logs "Failed to write to log file!" and leaves nothing.
                    raise OSError(f"torch.profiler wrote no trace into {td}")
                with open(raw, "rb") as src, gzip.open(final, "wb") as dst:
                    shutil.copyfileobj(src, dst)
        except OSError as exc:
            final.unlink(missing_ok=True)  # never leave a truncated trace for a reader to trip on
            msg = (f"could not write the trace {final}: {exc} (disk full, a quota or a file-size limit?); "
                   "the profile is lost, the engine keeps serving")
            log(f"Profiling failed: {msg}")
            self.last_profile = {**p, "file": None, "error": msg}
            raise BadRequest(msg, 507) from exc
        p["file"] = final
        self.last_profile = p
        log(f"Profiling done. Traces are saved to: {p['dir']}")
        return final

    def stop_profile(self) -> str:
        def stop():
            if self.profile is None:
                if self.last_profile is not None and self.last_profile.get("error"):
                    raise BadRequest(self.last_profile["error"], 507)
                if self.last_profile is not None:
                    return f"Profiling already stopped after num_steps; trace: {self.last_profile['file']}\n"
                raise BadRequest("Profiling is not in progress. Call /start_profile first.")
            f = self._stop_profile()
            return f"Stop profiling. This will take some time.\nTrace: {f}\n"
        return self.run_command(stop)

    # -- info ----------------------------------------------------------------------------------
    def server_args(self) -> dict:
        a, s = self.args, self.spec
        return {
            "model_path": self.model_path, "tokenizer_path": a.tokenizer_path or self.model_path,
            "served_model_name": self.served_model_name, "host": a.host, "port": a.port,
            "context_length": a.context_length, "dtype": "float32", "device": self.device,
            "tp_size": 1, "pp_size": 1, "dp_size": 1, "ep_size": 1,
            "max_running_requests": a.max_running_requests, "max_total_tokens": None,
            "enable_metrics": a.enable_metrics, "disable_cuda_graph": True,
            "log_level": a.log_level, "decode_log_interval": a.decode_log_interval,
            "random_seed": a.random_seed, "load_format": a.load_format, "kv_cache_dtype": a.kv_cache_dtype,
            "mem_fraction_static": a.mem_fraction_static, "chunked_prefill_size": a.chunked_prefill_size,
            "attention_backend": a.attention_backend, "sampling_backend": a.sampling_backend,
            "speculative_algorithm": s.algorithm,
            "speculative_draft_model_path": (a.speculative_draft_model_path
                                             if s.algorithm in ("STANDALONE", "EAGLE", "EAGLE3", "NEXTN") else None),
            "speculative_num_steps": s.num_steps, "speculative_eagle_topk": s.eagle_topk,
            "speculative_num_draft_tokens": s.num_draft_tokens,
            "speculative_draft_mode": a.speculative_draft_mode,
        }

    def avg_accept_length(self) -> float:
        """Mean accept length since start (emitted tokens per verify step, bonus included); 1.0 without steps."""
        return self.spec_tokens_total / self.verify_steps_total if self.verify_steps_total else 1.0

    def server_info(self) -> dict:
        args = self.server_args()
        internal = dict(args)
        internal.update({"avg_spec_accept_length": self.avg_accept_length(),
                         "last_gen_throughput": self.last_gen_throughput,
                         "effective_max_running_requests_per_dp": self.args.max_running_requests})
        return {**args, "status": "ready" if self.ready else "starting",
                "max_total_num_tokens": self.max_total_tokens, "max_req_input_len": self.context_length - 1,
                "internal_states": [internal], "version": VERSION, "engine": "dynocell-reference"}

    def metrics_text(self) -> bytes:
        """Prometheus exposition text with SGLang's metric names (gauges are cumulative since start);
        vLLM's with ``--surface vllm``."""
        from prometheus_client import CollectorRegistry, generate_latest
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        eng = self
        base = {"engine_type": "unified", "model_name": self.served_model_name, "pp_rank": "0", "tp_rank": "0",
                "moe_ep_rank": "0"}
        lk, lv = list(base), list(base.values())
        with self.lock:
            running, queued = len(self.running), len(self.waiting)
            ntok = sum(len(r.gen.tokens) for r in self.running if r.gen)

        def hist(name, doc, values, buckets):
            h = HistogramMetricFamily(name, doc, labels=["engine_type", "model_name"])
            vals = list(values)
            cum = [(str(b), float(sum(1 for v in vals if v <= b))) for b in buckets] + [("+Inf", float(len(vals)))]
            h.add_metric(["unified", eng.served_model_name], cum, float(sum(vals)))
            return h

        class V:
            """vLLM 0.26's names (``vllm/v1/metrics/loggers.py``; real scrape:
            tests/data/vllm-0.26.0/C_draft_graph.metrics.txt), labels engine="0", model_name."""

            def collect(self):
                vk, vv = ["engine", "model_name"], ["0", eng.served_model_name]
                for name, doc, v in (("vllm:num_requests_running", "Number of requests in model execution batches.",
                                      running),
                                     ("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                                      queued),
                                     ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                                      ntok / max(eng.max_total_tokens, 1))):
                    m = GaugeMetricFamily(name, doc, labels=vk)
                    m.add_metric(vv, float(v))
                    yield m
                for name, doc, v in (
                    ("vllm:prompt_tokens", "Number of prefill tokens processed.", eng.prompt_tokens_total),
                    ("vllm:generation_tokens", "Number of generation tokens processed.", eng.gen_tokens_total),
                    ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", eng.verify_steps_total),
                    ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", eng.proposed_total),
                    ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", eng.correct_total),
                ):
                    m = CounterMetricFamily(name, doc, labels=vk)
                    m.add_metric(vv, float(v))
                    yield m
                if eng.spec.algorithm:
                    m = CounterMetricFamily("vllm:spec_decode_num_accepted_tokens_per_pos",
                                            "Accepted tokens per draft position.", labels=vk + ["position"])
                    for i in range(1, eng.spec.num_drafts + 1):
                        m.add_metric(vv + [str(i - 1)], float(eng.at_position[i] if i < len(eng.at_position) else 0))
                    yield m

        class C:
            def collect(self):
                def g(name, doc, v):
                    m = GaugeMetricFamily(name, doc, labels=lk)
                    m.add_metric(lv, float(v))
                    return m
                yield g("sglang:num_running_reqs", "The number of running requests.", running)
                yield g("sglang:num_queue_reqs", "The number of requests in the waiting queue.", queued)
                yield g("sglang:num_used_tokens", "The number of used tokens.", ntok)
                yield g("sglang:token_usage", "The token usage.", ntok / max(eng.max_total_tokens, 1))
                yield g("sglang:gen_throughput", "The generation throughput (token/s).", eng.last_gen_throughput)
                yield g("sglang:spec_accept_length", "Mean acceptance length of speculative decoding "
                        "(accepted drafts + bonus token per forward).",
                        eng.avg_accept_length() if eng.spec.algorithm else 0.0)
                yield g("sglang:spec_accept_rate", "Accepted drafts / proposed drafts.",
                        eng.correct_total / eng.proposed_total if eng.proposed_total else 0.0)
                yield g("sglang:spec_num_steps", "speculative_num_steps.", eng.spec.num_steps or 0)
                yield g("sglang:spec_num_draft_tokens", "speculative_num_draft_tokens.",
                        eng.spec.num_draft_tokens or 0)
                ck = ["engine_type", "model_name"]
                cv = ["unified", eng.served_model_name]
                for name, doc, v in (
                    ("sglang:prompt_tokens", "Number of prefill tokens processed.", eng.prompt_tokens_total),
                    ("sglang:generation_tokens", "Number of generation tokens processed.", eng.gen_tokens_total),
                    ("sglang:num_requests", "Number of requests processed.", eng.requests_total),
                    ("sglang:spec_verify_steps", "Speculative verify steps (target forwards over drafts).",
                     eng.verify_steps_total),
                    ("sglang:spec_accepted_drafts", "Accepted draft tokens.", eng.correct_total),
                    ("sglang:spec_proposed_drafts", "Proposed draft tokens.", eng.proposed_total),
                ):
                    m = CounterMetricFamily(name, doc, labels=ck)
                    m.add_metric(cv, float(v))
                    yield m
                m = CounterMetricFamily("sglang:spec_accepted_drafts_at_position",
                                        "Verify steps whose accepted drafts were >= position "
                                        "(p_i = this / spec_verify_steps_total).", labels=ck + ["position"])
                for i in range(1, len(eng.at_position)):
                    m.add_metric(cv + [str(i)], float(eng.at_position[i]))
                yield m
                yield hist("sglang:time_to_first_token_seconds", "Time to first token (s).", eng.ttft,
                           [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10])
                yield hist("sglang:e2e_request_latency_seconds", "End-to-end request latency (s).", eng.e2e,
                           [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60])

        reg = CollectorRegistry()
        reg.register(V() if self.vllm_surface else C())
        return generate_latest(reg)
