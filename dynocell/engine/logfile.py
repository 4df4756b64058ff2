"""Read an engine's server log that dynocell did not write: the evidence of an imported boot.

One pass over the lines gives (:func:`read_log`):

- the engine (SGLang, vLLM, llama.cpp, reference) from the log's own shapes;
- the config line (SGLang ``server_args=ServerArgs(...)``, vLLM ``non-default args: {...}``)
  as an :class:`~dynocell.engine.observed.ObservedConfig`;
- the boot timeline: phases by the engine's phase rules (``engine/rules/<engine>.toml``),
  each at its offset from the log's first timestamp (SGLang ``[YYYY-mm-dd HH:MM:SS]``;
  vLLM ``INFO MM-DD HH:MM:SS`` — vLLM prints no year, so vLLM times are placed in
  the year given, default the current one);
- the failure signature (:func:`dynocell.engine.rules.classify_log`);
- acceptance samples: SGLang ``Decode batch … accept len … accept rate …`` (old
  ``Decode batch.`` and new ``Decode batch,`` shapes), vLLM V1 ``SpecDecoding metrics:
  Mean acceptance length … Per-position acceptance rate …``, vLLM V0 ``Speculative
  metrics: Draft acceptance rate … System efficiency … Number of speculative tokens …``;
- runtime events after the engine was ready: a scheduler exception while serving,
  and stats lines with waiting > 0 while running = 0 (a queue that does not move);
- the node rank (``--node-rank`` / SGLang ``node_rank=``) and whether the log ends
  mid-line (truncated).

Refusals (:class:`LogReadError`) name the file, the line and the reason: binary
content, nothing an engine prints, a cut-off config line. Persists nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Sequence

from dynocell.engine.acceptance import (
    AcceptanceError, Curve, merge, parse_decode_line, parse_vllm_spec_line, parse_vllm_spec_window, windows_curve,
)
from dynocell.engine.observed import (
    ObservedConfig, ObservedConfigError, cudagraph_mode, from_server_args, from_vllm_args,
    parse_server_args_line, parse_vllm_args_line,
)
from dynocell.engine.log_signs import ENGINE_EXCEPTION, VLLM_STATS
from dynocell.engine.rules import classify_log, match_phase, match_text, strip_prefix
from dynocell.errors import UserError, not_a_file
from dynocell.text import quoted_name

__all__ = ["ENGINES", "LogReadError", "LogReport", "RuntimeEvent", "V0SpecSample", "parse_v0_spec_line", "read_log",
           "check_engine_name", "split_lines"]

#: Engines whose logs are read (``--engine`` names one of these).
ENGINES = ("sglang", "vllm", "llamacpp", "trtllm", "reference")
#: A log larger than this is refused unread (server logs of days are far smaller).
MAX_LOG_BYTES = 512 << 20

_SGLANG_TS = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
_VLLM_TS = re.compile(r"\b(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\s+(\d\d-\d\d \d\d:\d\d:\d\d)")
_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"

_ENGINE_MARKS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("vllm", re.compile(r"\(APIServer pid=|\(EngineCore(?:_DP\d+)? pid=|non-default args:|vLLM API server|"
                        r"SpecDecoding metrics:|Speculative metrics:|vllm\.entrypoints|Initializing a V1 LLM engine|"
                        r"Initializing an LLM engine \(v|llm_engine\.py|vllm\.engine|vllm\.executor|"
                        r"Avg prompt throughput: .* Avg generation throughput")),
    ("llamacpp", re.compile(r"llama_model_loader|llama_new_context|server is listening|slot +\w+: +id|"
                            r"statistics +draft|srv +\w+:|update_slots")),
    ("sglang", re.compile(r"server_args=ServerArgs|Decode batch[.,]|Prefill batch[.,]|sglang|"
                          r"The server is fired up and ready to roll")),
    # TensorRT-LLM's own tags: "[TensorRT-LLM][ERROR] Assertion failed: …" (C++), "[TRT-LLM] [I] …" (Python)
    ("trtllm", re.compile(r"\[TensorRT-LLM\]|\[TRT-LLM\]|tensorrt_llm/|tensorrtllm_backend")),
)

_EXCEPTION = re.compile(ENGINE_EXCEPTION + r"|Traceback \(most recent call last\)")
_VLLM_GEN = re.compile(rf"Avg generation throughput:\s*({_NUM})\s*tokens/s")
# llama.cpp: one verify round per line ("accepted 3/4 draft tokens"), and the aggregate statistics line
_LCPP_ROUND = re.compile(r"accepted (\d+)/(\d+) draft tokens")
_LCPP_POS = re.compile(rf"#acc rate/pos = \(((?:{_NUM}\s*,\s*)*{_NUM})\)")
_LCPP_DRAFTS = re.compile(r"#gen drafts =\s*(\d+)")
_LCPP_MEAN = re.compile(rf"#mean acc len =\s*({_NUM})")
# llama-server's per-request lines at a slot's end (tools/server/server-context.cpp print_timings):
# "draft acceptance = 0.52381 (   22 accepted /    42 generated), mean len =  1.88" and
# "       eval time =  812.21 ms /    64 tokens (   12.69 ms per token,    78.80 tokens per second)".
_LCPP_SLOT = re.compile(rf"draft acceptance = ({_NUM}) \(\s*(\d+) accepted /\s*(\d+) generated\), "
                        rf"mean len =\s*({_NUM})")
_LCPP_EVAL = re.compile(rf"(?<!prompt )eval time =\s*{_NUM} ms /\s*\d+ tokens \(\s*{_NUM} ms per token,\s*"
                        rf"({_NUM}) tokens per second\)")
_NODE_RANK = re.compile(r"node_rank[=:]\s*(\d+)|--node-rank[ =](\d+)")

_V0_RATE = re.compile(rf"Draft acceptance rate:\s*({_NUM})")
_V0_EFF = re.compile(rf"System efficiency:\s*({_NUM})")
_V0_K = re.compile(r"Number of speculative tokens:\s*(\d+)")
_V0_ACC = re.compile(r"Number of accepted tokens:\s*(\d+)")
_V0_DRAFT = re.compile(r"Number of draft tokens:\s*(\d+)")
_V0_EMIT = re.compile(r"Number of emitted tokens:\s*(\d+)")


class LogReadError(UserError):
    """An engine log dynocell cannot read: the message names file, line and reason."""


@dataclass(frozen=True)
class V0SpecSample:
    """One vLLM V0 ``Speculative metrics:`` line (vLLM ``spec_decode/metrics.py``).

    ``draft_acceptance_rate`` α = accepted / draft tokens; ``system_efficiency`` =
    emitted / (steps · (k + 1)), so τ = efficiency · (k + 1); ``k`` the
    speculative tokens per step; token counts when printed (cumulative since start).
    """

    draft_acceptance_rate: float
    system_efficiency: float | None
    k: int
    accepted: int | None
    draft_tokens: int | None
    emitted: int | None

    def to_curve(self) -> Curve:
        """:meth:`Curve.from_summary` with τ = efficiency · (k + 1) (or 1 + α·k without efficiency); its
        ``steps`` = draft tokens / k when the line prints the count (V0 proposes k tokens per step), so the
        doctor knows how much evidence there is (issue 22: 15 draft tokens are 3 steps, too few to judge)."""
        import dataclasses

        tau = (self.system_efficiency * (self.k + 1) if self.system_efficiency is not None
               else 1.0 + self.draft_acceptance_rate * self.k)
        curve = Curve.from_summary(max(1.0, tau), self.draft_acceptance_rate, self.k)
        if self.draft_tokens is not None and self.k:
            curve = dataclasses.replace(curve, steps=self.draft_tokens // self.k)
        return curve


#: vLLM's offline speculative scripts (``examples/offline_inference/spec_decode.py``, ``eagle.py``) print their
#: totals one per line — ``num_drafts: 675``, ``num_draft_tokens: 2025``, ``num_accepted_tokens: 1722``,
#: ``mean acceptance length: 3.55``, ``acceptance at token 0: 0.85`` (vllm-ascend PR 7290, vllm #26191) — and
#: benchmark scripts print a bare accept length (SGLang's ``Acceptance length: 5.39``, ``Accpt Len: 2.08``).
_OFFLINE_COUNT = re.compile(r"^\s*(num_drafts|num_draft_tokens|num_accepted_tokens|total_num_output_tokens):"
                            r"\s*(\d+)\s*$")
_OFFLINE_POS = re.compile(r"^\s*acceptance at token (\d+):\s*([\d.]+)\s*$")
_ACCEPT_LEN_ONLY = re.compile(r"(?i)(?:mean acceptance length|acceptance length|accpt len|accept length)"
                              r"\W{0,4}\s*([\d.]+)")


def offline_sample(counts: dict[str, int]) -> V0SpecSample | None:
    """The offline script's totals as one acceptance sample (k = draft tokens / drafts, α = accepted / draft
    tokens, so τ = 1 + accepted / drafts, vLLM's mean acceptance length); None without the three counts."""
    drafts, dt, acc = counts.get("num_drafts"), counts.get("num_draft_tokens"), counts.get("num_accepted_tokens")
    if not drafts or not dt or acc is None or dt % drafts:
        return None
    return V0SpecSample(acc / dt, None, dt // drafts, acc, dt, None)


def parse_v0_spec_line(line: str) -> V0SpecSample | None:
    """Parse a vLLM V0 ``Speculative metrics: Draft acceptance rate: 0.651, System efficiency:
    0.570, Number of speculative tokens: 4, Number of accepted tokens: …, Number of draft
    tokens: …, Number of emitted tokens: …`` line; None for any other line."""
    if "Speculative metrics:" not in line:
        return None
    rate, k = _V0_RATE.search(line), _V0_K.search(line)
    if not rate or not k or int(k.group(1)) < 1:
        return None
    eff, acc, dr, em = (rx.search(line) for rx in (_V0_EFF, _V0_ACC, _V0_DRAFT, _V0_EMIT))
    return V0SpecSample(float(rate.group(1)), float(eff.group(1)) if eff else None, int(k.group(1)),
                        int(acc.group(1)) if acc else None, int(dr.group(1)) if dr else None,
                        int(em.group(1)) if em else None)


@dataclass(frozen=True)
class RuntimeEvent:
    """Something that happened while the engine served: ``kind`` scheduler_exception | queue_stall."""

    kind: str
    line: int
    offset_s: float | None
    text: str


@dataclass
class LogReport:
    """What :func:`read_log` found in one log. Offsets are seconds from ``first_ts``."""

    path: str
    engine: str
    lines: int
    first_ts: datetime | None
    last_ts: datetime | None
    phases: list[dict[str, Any]] = field(default_factory=list)
    config: ObservedConfig | None = None
    config_line: int | None = None
    signature: dict[str, Any] | None = None
    last_phase: str | None = None
    ready: bool = False
    ready_s: float | None = None
    acceptance: dict[str, Any] | None = None
    decode: dict[str, Any] | None = None
    events: list[RuntimeEvent] = field(default_factory=list)
    node_rank: int | None = None
    truncated: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def duration_s(self) -> float | None:
        """Seconds from the first to the last timestamped line."""
        if self.first_ts and self.last_ts:
            return (self.last_ts - self.first_ts).total_seconds()
        return None


def _runtime_signs(lines: list[str]) -> bool:
    """Whether the doctor's runtime rules find something in these lines (an NCCL timeout, a truncated
    capture size, a rank that waited for the others' weights …): such an excerpt is evidence too."""
    from dynocell.engine.log_signs import scan_lines

    s = scan_lines(lines)
    return bool(s["nccl"] or s["capture_truncations"] or s["rank_load_wait"] or s["weight_load_s"]
                or s["profile"]["disabled"] or s["hangs"] or s["gen_stalls"])


def _printable(text: str, limit: int = 200) -> str:
    return "".join(ch if ch.isprintable() else "?" for ch in text[:limit])


def _decode(path: Path, data: bytes) -> list[str]:
    nul = data.find(b"\x00", 0, 65536)
    if nul >= 0:
        line_no = data[:nul].count(b"\n") + 1
        raise LogReadError(f"{path}: line {line_no}: binary content (NUL byte), not a text log",
                           "give the engine's server log (text)")
    text = data.decode("utf-8", errors="replace")
    bad = text.count("\ufffd")
    if bad > max(16, len(text) // 20):
        first = text.index("\ufffd")
        raise LogReadError(f"{path}: line {text[:first].count(chr(10)) + 1}: not UTF-8 text "
                           f"({bad} undecodable bytes)", "give the engine's server log (text)")
    return split_lines(text)


def split_lines(text: str) -> list[str]:
    """The physical lines of a log's text: split on ``\\n`` only (a ``\\r\\n`` ending counts as one), so
    line *n* is what ``sed -n np`` and ``grep -n`` show. ``str.splitlines`` also splits on a bare
    ``\\r`` (tqdm progress bars rewrite one line with it), ``\\f``, ``\\x1c``… and so numbered the
    lines after a progress bar too high (issue 22: a scheduler exception on line 66 reported as 141)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def _segments(lines: list[str]) -> list[tuple[int, str]]:
    """``(physical line number, text)`` of each ``\\r``-separated piece of each line: a progress bar's
    redraws are read one by one, as the terminal showed them, under the line they are on."""
    return [(i, seg) for i, line in enumerate(lines, start=1) for seg in line.split("\r")]


def _detect(lines: list[str]) -> str | None:
    scores = {name: 0 for name, _ in _ENGINE_MARKS}
    for line in lines[:20000]:
        for name, rx in _ENGINE_MARKS:
            if rx.search(line):
                scores[name] += 1
    best = max(scores, key=lambda k: scores[k])
    return best if scores[best] else None


def _check_engine(p: Path, engine: str | None, detected: str | None) -> None:
    """Refuse ``--engine`` naming another engine than the log's own lines show (LogReadError naming both).

    The reference engine speaks SGLang's or vLLM's log shapes on purpose (``--surface``), so
    ``--engine reference`` is taken as given; a log whose engine is not recognised takes ``--engine``.
    """
    if engine is None or detected is None or engine == "reference" or engine == detected:
        return
    raise LogReadError(f"--engine: {engine!r}, but {p} is a {detected} log (its own lines are {detected}'s)",
                       f"leave --engine out (detected: {detected}) or pass --engine {detected}; "
                       "give the log of the engine you meant")


#: The earliest timestamp a log line may carry to count (no engine dynocell reads is older).
EARLIEST_TS = datetime(2000, 1, 1)
#: How far past now a timestamp may be (clock skew, time zones) to count.
FUTURE_SLACK = timedelta(days=1)


def sane_timestamp(ts: datetime, now: datetime | None = None) -> bool:
    """True when ``ts`` (naive, the engine's local time) lies between :data:`EARLIEST_TS` and ``now`` +
    :data:`FUTURE_SLACK` (``now``: this machine's local time). A year-0001 or year-9999 line would
    otherwise make phase offsets and ``ready_s`` of billions of seconds."""
    return EARLIEST_TS <= ts <= (now or datetime.now()) + FUTURE_SLACK


def _timestamp(line: str, year: int) -> datetime | None:
    m = _SGLANG_TS.search(line)
    if m:
        return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
    m = _VLLM_TS.search(line)
    if m:
        try:
            return datetime.strptime(f"{year}-{m.group(1)}", "%Y-%m-%d %H:%M:%S")
        except ValueError:
            return None
    return None


def _vllm_command(lines: list[str], i: int) -> tuple[int, dict[str, Any]] | None:
    """``(line, args)`` of a vLLM launch command starting at line ``i`` (1-based; shell ``\\``
    continuations joined, up to 64 lines), or None (:func:`dynocell.engine.vllm_argv.parse_vllm_command`)."""
    from dynocell.engine.vllm_argv import parse_vllm_command

    text, j = lines[i - 1], i
    while text.rstrip().endswith("\\") and j < len(lines) and j - i < 64:
        text = text.rstrip()[:-1] + " " + lines[j]
        j += 1
    args = parse_vllm_command(text)
    return (i, args) if args else None


def check_engine_name(engine: str | None) -> None:
    """LogReadError when ``engine`` (``--engine``) is given and is not one of :data:`ENGINES`."""
    if engine is not None and engine not in ENGINES:
        raise LogReadError(f"--engine: {engine!r} is not one of {', '.join(ENGINES)}", "or leave it out (detected)")


def _read_text(p: Path, engine: str | None) -> tuple[bytes, list[str]]:
    """The bytes and lines of log ``p``; LogReadError for an unknown ``engine``, a missing or
    too large (> MAX_LOG_BYTES) file, an empty, binary or non-UTF-8 one."""
    check_engine_name(engine)
    if not p.is_file():
        raise LogReadError(f"{quoted_name(p)}: " + not_a_file(p),
                           "give the path of an engine's server log")
    size = p.stat().st_size
    if size > MAX_LOG_BYTES:
        raise LogReadError(f"{p}: {size >> 20} MiB is more than the {MAX_LOG_BYTES >> 20} MiB a log may be",
                           "cut the log to the boot you want (e.g. with sed -n)")
    data = p.read_bytes()
    if not data.strip():
        raise LogReadError(f"{p}: line 1: the file is empty", "give the engine's server log")
    return data, _decode(p, data)


class _Scan:
    """One pass over a log's lines, filling ``rep`` (config, phases, node rank, runtime events)
    and collecting the acceptance and decode lines :func:`read_log` turns into figures."""

    def __init__(self, p: Path, rep: LogReport, rules_engine: str | None, year: int, lines: list[str],
                 config_given: bool = False) -> None:
        self.p, self.rep, self.rules_engine, self.year, self.lines = p, rep, rules_engine, year, lines
        self.n_lines, self.config_given = len(lines), config_given
        self.command: tuple[int, dict[str, Any]] | None = None  # a vLLM launch command (fallback config)
        self.counts: dict[str, int] = {}
        self.v1: list = []
        #: every vLLM V1 acceptance window, per-position rates or not: (line, offset s or None, SpecWindow)
        self.windows: list = []
        self.v0: list = []
        self.summary: list = []
        self.rounds: list = []
        self.lcpp: list = []
        self.lcpp_slots: list[tuple[int, int, int, float]] = []  # (line, accepted, drafted, mean len)
        self.decode_tp: list[float] = []
        self.last_ts: datetime | None = None
        self.ready_seen = False
        self.now = datetime.now()
        self.insane: list[tuple[int, datetime]] = []  # (line, timestamp) of lines out of the sane window
        self.graph_mode: str | None = None  # vLLM prints the effective cudagraph_mode in its engine-init line
        self.offline: dict[str, int] = {}  # an offline script's totals (offline_sample)
        self.accept_len_lines = 0  # bare accept lengths of benchmark scripts (no k: τ alone, not a curve)

    def line(self, i: int, raw: str) -> None:
        """Line ``i`` (1-based) of the log, as read."""
        rep = self.rep
        if rep.engine == "vllm" and self.command is None and "vllm" in raw:
            self.command = _vllm_command(self.lines, i)
        if self.graph_mode is None and "'cudagraph_mode'" in raw:
            self.graph_mode = cudagraph_mode(raw)
        line = match_text(raw)
        ts = _timestamp(line, self.year)
        insane = ts is not None and not sane_timestamp(ts, self.now)
        if insane and ts is not None:  # insane implies a timestamp
            self.insane.append((i, ts))
        elif ts:
            self.last_ts = ts
            rep.first_ts = rep.first_ts or ts
        # a line whose own time is nonsense has no offset (its phase, e.g. ready, gets no time)
        off = (self.last_ts - rep.first_ts).total_seconds() if (self.last_ts and rep.first_ts and not insane) else None
        if rep.config is None and ("server_args=ServerArgs(" in raw or "non-default args: {" in raw):
            self._config(i, raw)
        if self.rules_engine:
            self._phase(i, line, off)
        node = _NODE_RANK.search(line) if rep.node_rank is None else None
        if node:
            rep.node_rank = int(node.group(1) or node.group(2))
        serving = self.ready_seen or not rep.phases  # a fragment cut after the boot is serving from its first line
        if rep.engine == "llamacpp" and self._llamacpp(i, line):
            return
        if self._spec_or_decode(i, line, off, serving):
            return
        if self._offline(line):
            return
        if serving and _EXCEPTION.search(line) and (
                not rep.events or rep.events[-1].kind != "scheduler_exception" or i - rep.events[-1].line > 50):
            rep.events.append(RuntimeEvent("scheduler_exception", i, off, _printable(line)))

    def _config(self, i: int, raw: str) -> None:
        p, rep = self.p, self.rep
        full = strip_prefix(raw)  # the whole line: match_text cuts long lines, a config line is long
        try:
            args = parse_server_args_line(full, f"line {i}")
            if args is not None:
                rep.config, rep.config_line = from_server_args(args, f"{p.name} line {i}"), i
            else:
                vargs = parse_vllm_args_line(full, f"line {i}")
                if vargs is not None:
                    rep.config, rep.config_line = from_vllm_args(vargs, f"{p.name} line {i}"), i
        except ObservedConfigError as exc:
            # a config line cut short (as reports paste it) refuses nothing (issue 35): the rest of the log
            # still counts; the config stays unknown unless --config names it
            rep.config_line = rep.config_line or i  # a config line was there, cut: this is an engine's log
            if not self.config_given:
                rep.warnings.append(f"{exc.message}: the configuration stays unknown (pass --config to name it)")

    def _phase(self, i: int, line: str, off: float | None) -> None:
        if self.rules_engine is None:  # the caller calls only with an engine's rules
            return
        hit = match_phase(line, self.rules_engine)
        if hit:
            rep = self.rep
            self.counts[hit.name] = self.counts.get(hit.name, 0) + 1
            rep.phases.append({"name": hit.name, "offset_s": off, "line": i, "detail": dict(hit.detail),
                               "occurrence": self.counts[hit.name]})
            rep.last_phase = hit.name
            if hit.name == "ready" and not self.ready_seen:
                self.ready_seen, rep.ready_s = True, off

    def _llamacpp(self, i: int, line: str) -> bool:
        """A llama.cpp speculative line (a round's "accepted a/D", or the statistics line): kept, True."""
        slot = _LCPP_SLOT.search(line)
        if slot:
            self.lcpp_slots.append((i, int(slot.group(2)), int(slot.group(3)), float(slot.group(4))))
            return True
        ev = _LCPP_EVAL.search(line)
        if ev:
            self.decode_tp.append(float(ev.group(1)))
            return True
        rd = _LCPP_ROUND.search(line)
        if rd:
            self.rounds.append((int(rd.group(1)), int(rd.group(2))))
            return True
        pos = _LCPP_POS.search(line)
        if pos:
            drafts, mean = _LCPP_DRAFTS.search(line), _LCPP_MEAN.search(line)
            self.lcpp.append((i, [float(x) for x in re.findall(_NUM, pos.group(1))],
                              int(drafts.group(1)) if drafts else None, float(mean.group(1)) if mean else None))
            return True
        return False

    def _offline(self, line: str) -> bool:
        """An offline script's total or a benchmark script's bare accept length: kept, True."""
        m = _OFFLINE_COUNT.search(line)
        if m:
            self.offline[m.group(1)] = int(m.group(2))
            return True
        if _OFFLINE_POS.search(line):
            return True
        if _ACCEPT_LEN_ONLY.search(line):
            self.accept_len_lines += 1
            return True
        return False

    def _spec_or_decode(self, i: int, line: str, off: float | None, serving: bool) -> bool:
        """A vLLM V1/V0 acceptance line, an SGLang decode line or a vLLM stats line: kept (a queue
        stall while serving becomes a runtime event), True."""
        try:
            w = parse_vllm_spec_window(line)
        except AcceptanceError as e:
            raise LogReadError(f"{self.p}: line {i}: {e}", "the line is edited or corrupt") from None
        if w is not None:
            self.windows.append((i, off, w))
        s = parse_vllm_spec_line(line) if "Per-position acceptance rate" in line else None
        if s is not None:
            self.v1.append((i, s))
            return True
        if w is not None:
            return True
        s0 = parse_v0_spec_line(line)
        if s0 is not None:
            self.v0.append((i, s0))
            return True
        d = parse_decode_line(line)
        if d is not None:
            if d.gen_throughput is not None:
                self.decode_tp.append(d.gen_throughput)
            if d.accept_len is not None:
                self.summary.append((i, d))
            if serving and d.running_req == 0 and (d.queue_req or 0) > 0:
                self.rep.events.append(RuntimeEvent("queue_stall", i, off, _printable(line)))
            return True
        st = VLLM_STATS.search(line)
        if st:
            gen = _VLLM_GEN.search(line)
            if gen:
                self.decode_tp.append(float(gen.group(1)))
            if serving and int(st.group(1)) == 0 and int(st.group(2)) > 0:
                self.rep.events.append(RuntimeEvent("queue_stall", i, off, _printable(line)))
            return True
        return False


def read_log(path: str | Path, *, engine: str | None = None, year: int | None = None,
             node_rank: int | None = None, config_given: bool = False) -> LogReport:
    """Read one engine log file into a :class:`LogReport`.

    ``engine`` names the engine (else detected; one the log's own lines contradict is refused);
    ``year`` places vLLM's
    year-less stamps; ``node_rank`` overrides the rank the log states;
    ``config_given`` (the caller names the config) lets a config line that is cut
    short pass unread. Raises :class:`LogReadError` (file, line, reason) for a
    missing, binary, empty or foreign file, an ``engine`` other than the detected one
    and, unless ``config_given``, for a config line that is cut short.
    """
    p = Path(path)
    data, lines = _read_text(p, engine)
    truncated = not data.endswith(b"\n")
    detected = _detect(lines)
    _check_engine(p, engine, detected)
    eng = engine or detected
    if eng is None:
        raise LogReadError(f"{p}: line 1: no line of this file is something SGLang, vLLM, llama.cpp or "
                           f"TensorRT-LLM prints (it starts with {_printable(lines[0], 80)!r})",
                           "give the engine's server log, or name the engine with --engine")
    rep = LogReport(str(p), eng, len(lines), None, None, truncated=truncated)
    rules_engine = eng if eng in ENGINES else None
    scan = _Scan(p, rep, rules_engine, year or datetime.now().year, lines, config_given)
    segments = _segments(lines)
    for i, raw in segments:
        scan.line(i, raw)
    texts = [seg for _i, seg in segments]
    v1, v0, summary, rounds, lcpp, decode_tp = scan.v1, scan.v0, scan.summary, scan.rounds, scan.lcpp, scan.decode_tp
    last_ts, ready_seen, graph_mode, command = scan.last_ts, scan.ready_seen, scan.graph_mode, scan.command
    rep.last_ts = last_ts
    rep.ready = ready_seen
    if scan.insane:
        line_no, ts = scan.insane[0]
        rep.warnings.append(f"{len(scan.insane)} line(s) carry a timestamp outside {EARLIEST_TS:%Y-%m-%d} … now + 1 "
                            f"day (first: line {line_no}, {ts.isoformat(sep=' ')}): not used for phase times"
                            + ("" if rep.ready_s is not None or not ready_seen else "; ready time unknown"))
    if rep.config is None and command is not None:  # no non-default args line: the command line says
        rep.config, rep.config_line = from_vllm_args(command[1], f"{p.name} line {command[0]} (command)"), command[0]
    if rep.config is not None and graph_mode and "cuda_graph.mode" not in rep.config.fields:
        rep.config = ObservedConfig(rep.config.engine, {**rep.config.fields, "cuda_graph.mode": graph_mode},
                                    rep.config.native, rep.config.source)
    version = next((ph["detail"].get("version") for ph in rep.phases if ph["detail"].get("version")), None)
    if rep.config is not None and version and "serving.engine_version" not in rep.config.fields:
        rep.config = ObservedConfig(rep.config.engine, {**rep.config.fields,
                                                        "serving.engine_version": f"{rep.engine} {version}"},
                                    rep.config.native, rep.config.source)
    if node_rank is not None:
        rep.node_rank = node_rank
    if rules_engine:
        match, _last, _ready = classify_log(texts, engine=rules_engine)
        if match.known:
            rep.signature = match.as_dict()
    # an excerpt of only the failing lines (what an issue thread quotes) is evidence too
    off_s = offline_sample(scan.offline)
    if off_s is not None and not (v1 or v0):
        v0 = [(len(lines), off_s)]
    if rep.config is None and rep.config_line is None and not rep.phases and rep.signature is None and not (
            v1 or v0 or summary or decode_tp or rounds or lcpp or rep.events or scan.accept_len_lines or scan.windows
            or scan.offline) and not _runtime_signs(texts):
        raise LogReadError(f"{p}: line {len(lines)}: no boot phase, config line, decode line or known failure "
                           f"found in {len(lines)} lines of a {eng} log",
                           "is this the engine's server log (stdout/stderr)?")
    rep.acceptance = (_acceptance(v1, v0, summary) or _windows_acceptance(scan.windows)
                      or _llamacpp_acceptance(rounds, lcpp, scan.lcpp_slots))
    if rep.acceptance is not None and scan.windows:
        rep.acceptance["windows"] = [{"line": i, "offset_s": off, "tau": w.tau, "accepted": w.accepted,
                                      "drafted": w.drafted} for i, off, w in scan.windows]
    if decode_tp:
        rep.decode = {"samples": len(decode_tp), "gen_throughput_max": max(decode_tp),
                      "gen_throughput_mean": sum(decode_tp) / len(decode_tp)}
    return rep


def _windows_acceptance(windows: list[tuple[int, float | None, Any]]) -> dict[str, Any] | None:
    """vLLM V1 acceptance lines without per-position rates (:func:`dynocell.engine.acceptance.windows_curve`):
    one summary curve whose D is derived from the counts; None without windows. With nothing accepted in
    any window D cannot be read, so the curve is None but the windows are kept (τ = 1.00 at any k)."""
    if not windows:
        return None
    ws = [w for _i, _o, w in windows]
    return {"format": "vllm-v1-summary", "samples": len(ws), "curve": windows_curve(ws),
            "lines": [i for i, _o, _w in windows], "engine_tau": [w.tau for w in ws],
            "accepted": sum(w.accepted for w in ws), "drafted": sum(w.drafted for w in ws)}


def _llamacpp_acceptance(rounds: list[tuple[int, int]], stats: list[tuple[int, list[float], int | None,
                                                                           float | None]],
                         slots: Sequence[tuple[int, int, int, float]] = ()) -> dict[str, Any] | None:
    """llama.cpp: the last statistics line's per-position rates (cumulative), else a histogram of
    the per-round "accepted a/D" lines of the widest D (rounds that drafted fewer are counted apart),
    else llama-server's per-request "draft acceptance" lines (:func:`_llamacpp_slots`)."""
    if not stats and not rounds and slots:
        return _llamacpp_slots(slots)
    if stats:
        i, p, drafts, mean = stats[-1]
        return {"format": "llamacpp-stats", "samples": len(stats), "curve": Curve.from_positions(p, steps=drafts),
                "lines": [s[0] for s in stats], "engine_tau": [mean]}
    if rounds:
        d = max(w for _a, w in rounds)
        hist = [0] * (d + 1)
        for a, w in rounds:
            if w == d:
                hist[min(a, d)] += 1
        return {"format": "llamacpp-rounds", "samples": len(rounds), "curve": Curve.from_histogram(hist),
                "lines": [], "engine_tau": [], "narrower_rounds": sum(1 for _a, w in rounds if w != d)}
    return None


def _llamacpp_slots(slots: Sequence[tuple[int, int, int, float]]) -> dict[str, Any] | None:
    """One summary curve over llama-server's per-request lines ``draft acceptance = r (A accepted / G generated),
    mean len = m`` (``server-context.cpp`` ``print_timings``: G = draft tokens, m = 1 + A / verify steps).
    Each request's steps are A / (m − 1) (m is printed with 2 decimals, so steps are estimates); τ = 1 + ΣA /
    Σsteps, accept rate = ΣA / ΣG (per drafted token), D = round(ΣG / Σsteps) (n-gram drafts vary in length).
    None when no request accepted anything (no step count can be read)."""
    acc = sum(a for _i, a, _g, _m in slots)
    gen = sum(g for _i, _a, g, _m in slots)
    steps = sum(a / (m - 1.0) for _i, a, _g, m in slots if m > 1.0 and a)
    if not steps or not gen:
        return None
    curve = Curve.from_summary(1.0 + acc / steps, acc / gen, max(1, round(gen / steps)))
    return {"format": "llamacpp-slots", "samples": len(slots), "curve": curve, "lines": [s[0] for s in slots],
            "engine_tau": [m for _i, _a, _g, m in slots], "accepted": acc, "drafted": gen,
            "steps_estimated": round(steps)}


def _acceptance(v1: list[tuple[int, Any]], v0: list[tuple[int, V0SpecSample]],
                summary: list[tuple[int, Any]]) -> dict[str, Any] | None:
    """One curve over the log's acceptance lines, with each line's own figures kept."""
    if v1:
        curves = [s.curve for _i, s in v1]
        widths = {c.num_drafts for c in curves}
        # steps of a line = drafts proposed = drafted tokens / D (vLLM counts D tokens per draft)
        weighted = [c if c.steps is not None else Curve.from_positions(c.p, steps=(s.drafted or 0) // c.num_drafts)
                    for (_i, s), c in zip(v1, curves)]
        total = merge(weighted) if len(widths) == 1 else None
        acc = sum(s.accepted or 0 for _i, s in v1)
        drafted = sum(s.drafted or 0 for _i, s in v1)
        return {"format": "vllm-v1", "samples": len(v1), "curve": total, "lines": [i for i, _s in v1],
                "engine_tau": [s.mean_acceptance_length for _i, s in v1], "accepted": acc, "drafted": drafted,
                "per_line": [s.curve.as_dict() for _i, s in v1]}
    if v0:
        last = v0[-1][1]  # V0 prints cumulative counts: the last line covers the whole run
        return {"format": "vllm-v0", "samples": len(v0), "curve": last.to_curve(), "lines": [i for i, _s in v0],
                "engine_tau": [s.to_curve().tau for _i, s in v0], "accepted": last.accepted,
                "drafted": last.draft_tokens, "per_line": [s.to_curve().as_dict() for _i, s in v0]}
    if summary:
        taus = [d.accept_len for _i, d in summary]
        rates = [d.accept_rate for _i, d in summary if d.accept_rate is not None]
        tau = sum(taus) / len(taus)
        rate = sum(rates) / len(rates) if rates else None
        try:
            curve = Curve.from_summary(tau, rate) if rate else None
        except Exception:  # noqa: BLE001 - a width that cannot be derived: keep the figures, no curve
            curve = None
        return {"format": "sglang-decode", "samples": len(summary), "curve": curve,
                "lines": [i for i, _d in summary], "engine_tau": taus, "accept_rate_mean": rate,
                "tau_mean": tau}
    return None
