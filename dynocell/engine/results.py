"""Read the result files other benchmark tools and clients write: bench levels and per-request records.

Bench result files (:func:`read_bench`), recognised by their own keys:

- **SGLang** ``python -m sglang.bench_serving --output-file`` (JSON lines, one object
  per run): ``backend``, ``duration``, ``completed``, ``total_input_tokens``,
  ``total_output_tokens``, ``request_throughput``, ``output_throughput``,
  ``{mean,median,p99}_{ttft,tpot,itl,e2e_latency}_ms``, ``max_concurrency``,
  ``accept_length`` (speculative runs).
- **vLLM** ``vllm bench serve --save-result``: the same shape with ``model_id``,
  ``total_token_throughput``, ``{mean,median,p99}_e2el_ms`` and, with speculative
  decoding, ``spec_decode_acceptance_length`` / ``…_per_position_acceptance_rates``.
- **AIPerf** ``profile_export_aiperf.json``: one object per metric
  ``{"unit", "avg", "p50", "p90", "p99", …}`` (``time_to_first_token``,
  ``inter_token_latency``, ``request_latency``, ``request_throughput``,
  ``output_token_throughput``, ``benchmark_duration``, ``request_count``,
  ``total_isl``, ``total_osl``), concurrency in ``input_config.loadgen``.
- **GuideLLM** ``benchmarks.json``: ``benchmarks[].metrics.<name>.successful``
  distributions (``time_to_first_token_ms``, ``inter_token_latency_ms``,
  ``time_per_output_token_ms``, ``request_latency`` in s, ``requests_per_second``,
  ``output_tokens_per_second``, ``tokens_per_second``, ``prompt_token_count``,
  ``output_token_count``) and ``request_totals``; one level per benchmark.

What maps: concurrency, request counts, duration, token totals, throughputs and
the TTFT / TPOT / ITL / e2e percentiles dynocell keeps (p50, p90, p99, mean; a
percentile the tool did not write stays ``None``). What is lost is listed per
level in :attr:`BenchLevel.lost` (e.g. std, p95, goodput, per-request arrays,
GPU telemetry) and stored with the row.

Per-request files (:func:`read_requests`, JSON lines): SGLang ``/generate``
responses (``meta_info`` with ``prompt_tokens``, ``completion_tokens``,
``e2e_latency``, ``spec_verify_ct``, ``spec_correct_drafts_histogram`` …), OpenAI
completions (``usage``; vLLM's ``metrics.speculative_decoding`` with its
``acceptance_histogram``), or objects holding one of those under ``response``.

Refusals name the file, the line (JSON lines) and the reason. Pure: no store.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from dynocell.engine.acceptance import Curve, curve_from_meta_infos
from dynocell.errors import UserError, not_a_file
from dynocell.text import quoted_name

__all__ = ["BenchLevel", "RequestsReport", "ResultReadError", "read_bench", "read_requests"]

#: A result file larger than this is refused unread.
MAX_RESULT_BYTES = 256 << 20
KNOWN_TOOLS = ("sglang-bench-serving", "vllm-bench-serve", "aiperf", "guidellm")


class ResultReadError(UserError):
    """A result file dynocell cannot read: the message names file, line and reason."""


@dataclass
class BenchLevel:
    """One benchmark level as the tool reported it (latencies ms, throughputs req/s and tok/s)."""

    tool: str
    concurrency: int
    num_requests: int
    num_failed: int
    duration_s: float
    prompt_tokens: int
    completion_tokens: int
    request_throughput: float
    output_tok_s: float
    total_tok_s: float
    ttft_ms: dict[str, Any]
    tpot_ms: dict[str, Any]
    itl_ms: dict[str, Any]
    e2e_ms: dict[str, Any]
    accept_length: float | None = None
    position_rates: list[float] = field(default_factory=list)
    spec_drafts: int | None = None
    lost: list[str] = field(default_factory=list)
    label: str | None = None


def _load_json(path: Path) -> list[tuple[int, Any]]:
    """``[(line, value)]``: one JSON document, or JSON lines."""
    if not path.is_file():
        raise ResultReadError(f"{quoted_name(path)}: " + not_a_file(path),
                              "give the path of the result file")
    size = path.stat().st_size
    if size > MAX_RESULT_BYTES:
        raise ResultReadError(f"{path}: {size >> 20} MiB is more than the {MAX_RESULT_BYTES >> 20} MiB allowed")
    raw = path.read_bytes()
    nul = raw.find(b"\x00", 0, 65536)
    if nul >= 0:
        line_no = raw[:nul].count(b"\n") + 1
        raise ResultReadError(f"{path}: line {line_no}: binary content, not JSON", "give the tool's JSON result file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ResultReadError(f"{path}: line {line}: not UTF-8 text", "give the tool's JSON result file") from None
    if not text.strip():
        raise ResultReadError(f"{path}: line 1: the file is empty", "give the tool's JSON result file")
    try:
        return _decode(path, text)
    except RecursionError:  # json's parser recurses per level: a result file nests a handful
        raise ResultReadError(f"{path}: JSON nested too deeply (thousands of levels); not a result file",
                              "give the tool's JSON result file") from None


def _decode(path: Path, text: str) -> list[tuple[int, Any]]:
    """``text`` as one JSON document ``[(1, value)]``, else as JSON lines ``[(line, value)]``.
    Raises ResultReadError naming the first bad line (RecursionError passes through)."""
    try:
        return [(1, json.loads(text))]
    except json.JSONDecodeError as whole:
        out = []
        for i, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                out.append((i, json.loads(line)))
            except json.JSONDecodeError as exc:
                if len(out) == 0 and i == 1 and whole.lineno > 1:
                    raise ResultReadError(f"{path}: line {whole.lineno}: not JSON ({whole.msg})",
                                          "is the file cut short? give the tool's whole JSON result file") from None
                raise ResultReadError(f"{path}: line {i}: not JSON ({exc.msg} at column {exc.colno})",
                                      "is the file cut short? each line must be one JSON object") from None
        return out


def _kind(v: Any) -> str:
    """A JSON value's kind with its article, as an operator reads it ("a list", "a number")."""
    if isinstance(v, bool):
        return "true/false"
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "a list"
    return f"a {type(v).__name__}"


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _pct(p50: Any = None, p90: Any = None, p99: Any = None, mean: Any = None, scale: float = 1.0) -> dict[str, Any]:
    def s(v: Any) -> float | None:
        n = _num(v)
        return None if n is None else n * scale
    return {"p50": s(p50), "p90": s(p90), "p99": s(p99), "mean": s(mean), "n": None}


def _serving(obj: Mapping[str, Any], tool: str) -> BenchLevel:
    """SGLang bench_serving / vLLM bench serve: flat keys ``{mean,median,p99}_<metric>_ms``."""
    def m(metric: str) -> dict[str, Any]:
        return _pct(obj.get(f"median_{metric}_ms"), obj.get(f"p90_{metric}_ms"), obj.get(f"p99_{metric}_ms"),
                    obj.get(f"mean_{metric}_ms"))
    e2e = "e2el" if "mean_e2el_ms" in obj else "e2e_latency"
    completed = int(_num(obj.get("completed")) or 0)
    prompts = _num(obj.get("num_prompts"))
    dur = _num(obj.get("duration")) or 0.0
    out_tok = int(_num(obj.get("total_output_tokens")) or 0)
    in_tok = int(_num(obj.get("total_input_tokens")) or 0)
    total = _num(obj.get("total_token_throughput"))
    if total is None:
        total = (in_tok + out_tok) / dur if dur else 0.0
    conc = _num(obj.get("max_concurrency")) or _num(obj.get("concurrency")) or 0
    rates = obj.get("spec_decode_per_position_acceptance_rates") or []
    used = {"backend", "duration", "completed", "num_prompts", "total_input_tokens", "total_output_tokens",
            "request_throughput", "output_throughput", "total_token_throughput", "max_concurrency", "concurrency",
            "accept_length", "spec_decode_acceptance_length", "spec_decode_per_position_acceptance_rates",
            "spec_decode_num_drafts",
            "model_id", "date", "tokenizer_id", "request_rate", "burstiness"}
    for metric in ("ttft", "tpot", "itl", e2e):
        used |= {f"{k}_{metric}_ms" for k in ("mean", "median", "p90", "p99")}
    lost = sorted(k for k in obj if k not in used)
    return BenchLevel(
        tool=tool, concurrency=int(conc), num_requests=int(prompts if prompts is not None else completed),
        num_failed=max(0, int((prompts or completed) - completed)), duration_s=dur, prompt_tokens=in_tok,
        completion_tokens=out_tok, request_throughput=_num(obj.get("request_throughput")) or 0.0,
        output_tok_s=_num(obj.get("output_throughput")) or 0.0, total_tok_s=total,
        ttft_ms=m("ttft"), tpot_ms=m("tpot"), itl_ms=m("itl"), e2e_ms=m(e2e),
        accept_length=_num(obj.get("accept_length")) or _num(obj.get("spec_decode_acceptance_length")),
        position_rates=[float(x) for x in rates if _num(x) is not None], lost=lost,
        spec_drafts=int(_num(obj.get("spec_decode_num_drafts")) or 0) or None,
        label=str(obj.get("model_id") or obj.get("backend") or ""))


def _aiperf(obj: Mapping[str, Any]) -> BenchLevel:
    def stat(name: str, key: str = "avg") -> float | None:
        v = obj.get(name)
        return _num(v.get(key)) if isinstance(v, Mapping) else None

    def dist(name: str) -> dict[str, Any]:
        v = obj.get(name)
        v = v if isinstance(v, Mapping) else {}
        scale = 1000.0 if str(v.get("unit", "ms")).lower() in ("s", "sec") else 1.0
        return _pct(v.get("p50"), v.get("p90"), v.get("p99"), v.get("avg"), scale)

    ic = obj.get("input_config")
    loadgen = ((ic or {}).get("loadgen") or {}) if isinstance(ic, Mapping) else {}
    count = int(stat("request_count") or 0)
    errors = int(_num(obj.get("error_request_count")) or 0)
    dur = stat("benchmark_duration") or 0.0
    isl, osl = int(stat("total_isl") or 0), int(stat("total_osl") or 0)
    used = {"request_throughput", "output_token_throughput", "time_to_first_token", "inter_token_latency",
            "request_latency", "benchmark_duration", "request_count", "total_isl", "total_osl",
            "error_request_count", "input_config"}
    lost = sorted(k for k in obj if k not in used)
    return BenchLevel(
        tool="aiperf", concurrency=int(_num(loadgen.get("concurrency")) or 0), num_requests=count + errors,
        num_failed=errors, duration_s=dur, prompt_tokens=isl, completion_tokens=osl,
        request_throughput=stat("request_throughput") or 0.0, output_tok_s=stat("output_token_throughput") or 0.0,
        total_tok_s=(isl + osl) / dur if dur else 0.0, ttft_ms=dist("time_to_first_token"),
        tpot_ms=dist("inter_token_latency"), itl_ms=dist("inter_token_latency"), e2e_ms=dist("request_latency"),
        lost=lost + ["per-metric p1/p5/p10/p25/p75/p95, min, max, std"])


def _guidellm(obj: Mapping[str, Any], path: Path) -> list[BenchLevel]:
    return [_guidellm_level(b, n, path) for n, b in enumerate(obj.get("benchmarks") or [])]


def _guidellm_level(b: Any, n: int, path: Path) -> BenchLevel:
    """One GuideLLM benchmark (``benchmarks[n]``) as a level; its ``metrics.*.successful`` stats."""
    if not isinstance(b, Mapping) or not isinstance(b.get("metrics"), Mapping):
        raise ResultReadError(f"{path}: benchmarks[{n}] has no metrics object", "is this a GuideLLM export?")
    met = b["metrics"]

    def succ(name: str) -> Mapping[str, Any]:
        v = met.get(name)
        v = v.get("successful") if isinstance(v, Mapping) else None
        return v if isinstance(v, Mapping) else {}

    def dist(name: str, scale: float = 1.0) -> dict[str, Any]:
        d = succ(name)
        pc = d.get("percentiles")
        pc = pc if isinstance(pc, Mapping) else d
        return _pct(pc.get("p50", d.get("median")), pc.get("p90"), pc.get("p99"), d.get("mean"), scale)

    totals = met.get("request_totals") if isinstance(met.get("request_totals"), Mapping) else {}
    ok = int(_num(totals.get("successful")) or 0)
    bad = int(_num(totals.get("errored")) or 0) + int(_num(totals.get("incomplete")) or 0)
    conc = succ("request_concurrency").get("mean")
    dur = _num(b.get("duration"))
    if dur is None and _num(b.get("end_time")) and _num(b.get("start_time")):
        dur = float(b["end_time"]) - float(b["start_time"])
    return BenchLevel(
        tool="guidellm", concurrency=int(round(_num(conc) or 0)), num_requests=ok + bad, num_failed=bad,
        duration_s=dur or 0.0, prompt_tokens=int(_num(succ("prompt_token_count").get("total_sum")) or 0),
        completion_tokens=int(_num(succ("output_token_count").get("total_sum")) or 0),
        request_throughput=_num(succ("requests_per_second").get("mean")) or 0.0,
        output_tok_s=_num(succ("output_tokens_per_second").get("mean")) or 0.0,
        total_tok_s=_num(succ("tokens_per_second").get("mean")) or 0.0,
        ttft_ms=dist("time_to_first_token_ms"), tpot_ms=dist("time_per_output_token_ms"),
        itl_ms=dist("inter_token_latency_ms"), e2e_ms=dist("request_latency", 1000.0),
        lost=["errored/incomplete distributions", "p001…p999 except p50/p90/p99", "std, variance, mode"],
        label=str((b.get("config") or {}).get("strategy") or (b.get("config") or {}).get("rate") or n)
        if isinstance(b.get("config"), Mapping) else str(n))


#: The largest number a benchmark level may report (tok/s, ms, counts): far past any real run.
MAX_REPORTED = 1e15
_CORRUPT_HINT = "the file is corrupt or edited: use the result file the benchmark tool wrote"


def _levels(p: Path, line: int, obj: Mapping[str, Any]) -> tuple[str, list[BenchLevel]]:
    """``(tool, levels)`` of one JSON object of a result file; ResultReadError for an unknown tool."""
    if isinstance(obj.get("benchmarks"), list):
        return "guidellm", _guidellm(obj, p)
    if isinstance(obj.get("time_to_first_token"), Mapping) and "unit" in obj["time_to_first_token"]:
        return "aiperf", [_aiperf(obj)]
    if "mean_e2el_ms" in obj or ("model_id" in obj and "mean_ttft_ms" in obj):
        return "vllm-bench-serve", [_serving(obj, "vllm-bench-serve")]
    if "mean_ttft_ms" in obj and ("mean_e2e_latency_ms" in obj or "backend" in obj):
        return "sglang-bench-serving", [_serving(obj, "sglang-bench-serving")]
    keys = ", ".join(sorted(map(str, obj))[:12])
    raise ResultReadError(f"{p}: line {line}: not a result file of a benchmark tool dynocell knows "
                          f"(keys: {keys})",
                          f"known: {', '.join(KNOWN_TOOLS)}; for per-request responses use "
                          "`dynocell import requests`")


def _check_level(p: Path, line: int, lvl: BenchLevel) -> None:
    """Refuse a level with a negative, non-finite or absurd number (ResultReadError naming the
    field as :class:`BenchLevel` calls it): no benchmark measures -435 tok/s or 1.7e308 ms."""
    values: list[tuple[str, Any]] = [(f, getattr(lvl, f)) for f in (
        "concurrency", "num_requests", "num_failed", "duration_s", "prompt_tokens", "completion_tokens",
        "request_throughput", "output_tok_s", "total_tok_s", "accept_length")]
    for f in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        values += [(f"{f}.{k}", v) for k, v in getattr(lvl, f).items()]
    values += [(f"position_rates[{i}]", v) for i, v in enumerate(lvl.position_rates)]
    for name, v in values:
        if v is not None and not 0 <= v <= MAX_REPORTED:
            raise ResultReadError(f"{p}: line {line}: {name} is {v:.6g}; a benchmark reports numbers from 0 "
                                  f"to {MAX_REPORTED:.0e}", _CORRUPT_HINT)


def read_bench(path: str | Path) -> tuple[str, list[BenchLevel]]:
    """``(tool, levels)`` of a benchmark result file (see the module docstring for the tools).

    Raises :class:`ResultReadError` for a file that is not JSON, empty, or of a tool
    dynocell does not know (naming the keys it found).
    """
    p = Path(path)
    docs = _load_json(p)
    levels: list[BenchLevel] = []
    tool = None
    for line, obj in docs:
        if not isinstance(obj, Mapping):
            raise ResultReadError(f"{p}: line {line}: {_kind(obj)}, not a JSON object",
                                  "give the benchmark tool's result file (one JSON object, or one per line)")
        try:
            t, lv = _levels(p, line, obj)
        except OverflowError:  # int() of a count the file gives as 1e400 (JSON's inf)
            raise ResultReadError(f"{p}: line {line}: a count is infinite (a number like 1e400)",
                                  _CORRUPT_HINT) from None
        for lvl in lv:
            _check_level(p, line, lvl)
        if tool is not None and t != tool:
            raise ResultReadError(f"{p}: line {line}: a {t} result after {tool} results; one tool per file")
        tool = t
        levels.extend(lv)
    if not levels:
        raise ResultReadError(f"{p}: no benchmark level in the file")
    return tool or "", levels


@dataclass
class RequestsReport:
    """Per-request responses: counts, token totals, latencies (ms), the acceptance curve where present
    and each request's own τ (``per_request_tau``: SGLang ``spec_accept_length`` or completion
    tokens / ``spec_verify_ct``; vLLM ``mean_acceptance_length``; None where the response has none)."""

    format: str
    requests: int
    failed: int
    prompt_tokens: int
    completion_tokens: int
    e2e_ms: list[float]
    curve: Curve | None
    engine_tau: float | None
    model: str | None
    per_request_tau: list[float | None] = field(default_factory=list)
    #: the generated text of each successful response (SGLang ``text``; OpenAI ``choices[0].text`` or
    #: ``choices[0].message.content``), so the doctor can judge what the engine served
    texts: list[str] = field(default_factory=list)


def _text(r: Mapping[str, Any]) -> str | None:
    if isinstance(r.get("text"), str):
        return r["text"]
    choices = r.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        c = choices[0]
        if isinstance(c.get("text"), str):
            return c["text"]
        msg = c.get("message")
        if isinstance(msg, Mapping) and isinstance(msg.get("content"), str):
            return msg["content"]
    return None


#: ``object`` of an OpenAI completion (``/v1/completions``) and chat completion (``/v1/chat/completions``)
OPENAI_OBJECTS = ("text_completion", "chat.completion")


def _openai_completion(r: Mapping[str, Any]) -> bool:
    """An OpenAI completion without ``usage`` (a client that saved ``choices`` only, or a streamed answer put
    back together: OpenAI-compatible servers such as vLLM send usage in a stream only with
    ``stream_options.include_usage``): its ``object`` is one of :data:`OPENAI_OBJECTS` and its first choice
    carries text. The token counts stay unknown (0), the text is kept for the output rules."""
    return r.get("object") in OPENAI_OBJECTS and _text(r) is not None


def _response(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    inner = obj.get("response")
    return inner if isinstance(inner, Mapping) else obj


def _request_records(docs: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
    """``(line, record)`` of every request in the parsed documents: a list's items, a probe
    file's ``acceptance[*].requests``, else the document itself."""
    records: list[tuple[int, Any]] = []
    for line, obj in docs:
        if isinstance(obj, list):
            records.extend((line, o) for o in obj)
        elif isinstance(obj, Mapping) and isinstance(obj.get("acceptance"), list):  # a probe file: runs of requests
            for run in obj["acceptance"]:
                records.extend((line, r) for r in (run.get("requests") or []) if isinstance(run, Mapping))
        else:
            records.append((line, obj))
    return records


def _vllm_request_curve(p: Path, vhists: list[tuple[int, Mapping[str, Any]]]) -> tuple[Curve, float | None]:
    """The curve of the summed vLLM per-request acceptance histograms, and the engine's τ
    (``mean_acceptance_length`` weighted by ``num_spec_steps``; None without steps)."""
    width = {len(s["acceptance_histogram"]) for _l, s in vhists}
    if len(width) > 1:
        raise ResultReadError(f"{p}: line {vhists[-1][0]}: acceptance histograms of different widths {sorted(width)}")
    total = [sum(col) for col in zip(*(s["acceptance_histogram"] for _l, s in vhists))]
    curve = Curve.from_histogram(total)
    taus = [(s.get("mean_acceptance_length"), s.get("num_spec_steps")) for _l, s in vhists]
    steps = sum(int(n or 0) for _t, n in taus)
    engine_tau = (sum(float(t) * int(n or 0) for t, n in taus if t is not None) / steps) if steps else None
    return curve, engine_tau


def _check_request(p: Path, line: int, rec: Mapping[str, Any], r: Mapping[str, Any]) -> None:
    """Refuse a response whose counts or times (the fields :func:`read_requests` reads) are negative,
    non-finite (JSON's 1e400) or past :data:`MAX_REPORTED`: ResultReadError naming line and field."""
    meta = r.get("meta_info")
    meta = meta if isinstance(meta, Mapping) else {}
    usage = r.get("usage")
    usage = usage if isinstance(usage, Mapping) else {}
    fields = [(f"meta_info.{k}", meta.get(k)) for k in
              ("prompt_tokens", "completion_tokens", "e2e_latency", "spec_accept_length", "spec_verify_ct")]
    fields += [(f"usage.{k}", usage.get(k)) for k in ("prompt_tokens", "completion_tokens")]
    for name, raw in [*fields, ("seconds", rec.get("seconds"))]:
        v = _num(raw)
        if v is not None and not 0 <= v <= MAX_REPORTED:
            raise ResultReadError(f"{p}: line {line}: {name} is {v:.6g}; a response reports numbers from 0 "
                                  f"to {MAX_REPORTED:.0e}", "the file is corrupt or edited: save the engine's "
                                  "own JSON responses")


def read_requests(path: str | Path) -> RequestsReport:
    """Read per-request responses (JSON lines, or one JSON list / probe file holding them).

    SGLang ``meta_info`` histograms are summed (:func:`curve_from_meta_infos`);
    vLLM's per-request ``metrics.speculative_decoding.acceptance_histogram`` is
    summed the same way (index k = verify steps that accepted k drafts). Raises
    :class:`ResultReadError` naming the line of a record that is neither.
    """
    p = Path(path)
    records = _request_records(_load_json(p))
    metas, vhists, e2e, per_tau, texts = [], [], [], [], []
    fmt = None
    failed = prompt = completion = 0
    model = None
    for line, rec in records:
        if not isinstance(rec, Mapping):
            raise ResultReadError(f"{p}: line {line}: {_kind(rec)}, not a response object",
                                  "save the engine's whole JSON response per request (a list of them, or one per line)")
        if isinstance(rec.get("status"), int) and rec["status"] != 200:
            failed += 1
            continue
        r = _response(rec)
        _check_request(p, line, rec, r)
        text = _text(r)
        if text is not None:
            texts.append(text)
        if isinstance(r.get("meta_info"), Mapping):
            meta = r["meta_info"]
            fmt = fmt or "sglang-meta_info"
            metas.append(meta)
            tau_r = _num(meta.get("spec_accept_length"))
            if tau_r is None and _num(meta.get("spec_verify_ct")):
                tau_r = (_num(meta.get("completion_tokens")) or 0) / float(meta["spec_verify_ct"])
            per_tau.append(tau_r)
            prompt += int(_num(meta.get("prompt_tokens")) or 0)
            completion += int(_num(meta.get("completion_tokens")) or 0)
            if _num(meta.get("e2e_latency")) is not None:
                e2e.append(float(meta["e2e_latency"]) * 1000)
        elif isinstance(r.get("usage"), Mapping) or _openai_completion(r):
            usage: Mapping[str, Any] = r["usage"] if isinstance(r.get("usage"), Mapping) else {}
            fmt = fmt or ("openai-usage" if usage else "openai-no-usage")
            model = model or r.get("model")
            prompt += int(_num(usage.get("prompt_tokens")) or 0)
            completion += int(_num(usage.get("completion_tokens")) or 0)
            metrics = r.get("metrics")
            spec = (metrics or {}).get("speculative_decoding") if isinstance(metrics, Mapping) else None
            if isinstance(spec, Mapping) and isinstance(spec.get("acceptance_histogram"), list):
                vhists.append((line, spec))
            per_tau.append(_num(spec.get("mean_acceptance_length")) if isinstance(spec, Mapping) else None)
            if _num(rec.get("seconds")) is not None:
                e2e.append(float(rec["seconds"]) * 1000)
        else:
            raise ResultReadError(f"{p}: line {line}: neither an SGLang response (meta_info) nor an OpenAI "
                                  "completion (usage, or choices with text)",
                                  "save the engine's whole JSON response per request")
    if not records:
        raise ResultReadError(f"{p}: no request record in the file")
    curve, engine_tau = curve_from_meta_infos(metas), None
    if curve is None and vhists:
        curve, engine_tau = _vllm_request_curve(p, vhists)
    return RequestsReport(fmt or "unknown", len(records), failed, prompt, completion, e2e, curve, engine_tau, model,
                          per_tau, texts)
