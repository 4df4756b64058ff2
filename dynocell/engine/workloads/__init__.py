"""Benchmark workloads as data: text classes, length ladders, levels, seeds.

A workload is a TOML file (bundled: ``default.toml`` for the CPU reference
engine, ``long.toml`` with the 128 / 2k / 8k ladder for GPU hosts; operators
point at their own). It expands into *levels* (:class:`LevelSpec`): one
``acceptance`` level (every text class, grouped by class so per-class engine
counters can be diffed around each group) and one throughput level per
(input length, concurrency) pair. ``Workload.requests(level, context_length)``
turns a level into concrete :class:`BenchRequest` prompts, deterministically
for the workload's seed.

Input lengths are in the engine's tokens. Without calibration the bench assumes
one token per UTF-8 byte — an upper bound for byte-level tokenizers and
byte-level BPEs (the reference pair's included), so a capped prompt
never overflows the context; pass per-class ``tokens_per_byte`` measured from
the server's own ``prompt_tokens`` (``dynocell.engine.bench.measure_tokens_per_byte``)
to hit targets on BPE engines, per call or once with :meth:`Workload.calibrated`.

Public API: :func:`load_workload`, :func:`bundled_path`, :data:`BUNDLED`,
:class:`Workload`, :class:`LevelSpec`, :class:`BenchRequest`,
:func:`default_temperature`.
"""

from __future__ import annotations

import hashlib
import json
import random
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from dynocell.errors import UserError

HERE = Path(__file__).resolve().parent
#: Names of the workload files shipped with dynocell (``<name>.toml`` next to this module).
BUNDLED = ("default", "long", "ladder")
#: Temperature used when neither the workload nor the reference engine says otherwise.
FALLBACK_TEMPERATURE = 0.8
#: Upper bounds that keep a typo (an extra zero or ten) from expanding into billions of requests or tokens.
MAX_INPUT_TOKENS = 1 << 22
MAX_OUTPUT_TOKENS = 1 << 20
MAX_CONCURRENCY = 4096
MAX_REQUESTS = 100_000


def default_temperature() -> float:
    """Sampling temperature for workloads that omit ``temperature``.

    The reference engine's made-locally pair documents its acceptance curve at
    ``dynocell.engine.reference.nets.DEFAULT_TEMPERATURE``; that value is used
    when the module is importable, else :data:`FALLBACK_TEMPERATURE` (0.8).
    """
    try:
        from dynocell.engine.reference.nets import DEFAULT_TEMPERATURE
    except Exception:  # the reference extra may be absent; its module must not break the bench
        return FALLBACK_TEMPERATURE
    return float(DEFAULT_TEMPERATURE)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TextClass(_Strict):
    """One text class: ``prompts`` (sent last, one per request) and ``material`` (padding to reach a length)."""

    description: str = ""
    material: str = Field(min_length=1)
    prompts: list[str] = Field(min_length=1)

    @field_validator("prompts")
    @classmethod
    def _non_empty(cls, v: list[str]) -> list[str]:
        if any(not p.strip() for p in v):
            raise ValueError("prompts must not be empty strings")
        return v


class AcceptanceSection(_Strict):
    """The acceptance level: every class × every input length × ``requests_per_class``."""

    input_tokens: list[int] = Field(default_factory=lambda: [128], min_length=1)
    output_tokens: int = Field(64, ge=1, le=MAX_OUTPUT_TOKENS)
    requests_per_class: int = Field(3, ge=1, le=MAX_REQUESTS)
    concurrency: int = Field(1, ge=1, le=MAX_CONCURRENCY)
    classes: list[str] | None = None

    @field_validator("input_tokens")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if any(x < 1 for x in v):
            raise ValueError("input lengths must be >= 1 token")
        if any(x > MAX_INPUT_TOKENS for x in v):
            raise ValueError(f"input lengths must be <= {MAX_INPUT_TOKENS} tokens")
        return v


class ThroughputSection(_Strict):
    """Throughput levels: one per (input length, concurrency); ``requests_per_level`` 0 means 5 × concurrency."""

    input_tokens: list[int] = Field(default_factory=lambda: [128], min_length=1)
    output_tokens: int = Field(64, ge=1, le=MAX_OUTPUT_TOKENS)
    concurrency: list[int] = Field(default_factory=lambda: [1, 4], min_length=1)
    requests_per_level: int = Field(0, ge=0, le=MAX_REQUESTS)
    classes: list[str] | None = None

    @field_validator("input_tokens", "concurrency")
    @classmethod
    def _positive(cls, v: list[int], info: Any) -> list[int]:
        if any(x < 1 for x in v):
            raise ValueError("values must be >= 1")
        top = MAX_INPUT_TOKENS if info.field_name == "input_tokens" else MAX_CONCURRENCY
        if any(x > top for x in v):
            raise ValueError(f"values must be <= {top}")
        return v


class Workload(_Strict):
    """A validated workload file. ``temperature`` is resolved at load (see :func:`default_temperature`)."""

    name: str
    description: str = ""
    seed: int = 0
    temperature: float = Field(default_factory=default_temperature, ge=0, le=100)
    ignore_eos: bool = True
    warmup: int = Field(1, ge=0, le=MAX_REQUESTS)
    context_margin: int = Field(8, ge=0, le=MAX_INPUT_TOKENS)
    extra_sampling_params: dict[str, Any] = Field(default_factory=dict)
    acceptance: AcceptanceSection | None = Field(default_factory=AcceptanceSection)
    throughput: ThroughputSection | None = Field(default_factory=ThroughputSection)
    classes: dict[str, TextClass] = Field(min_length=1)
    _tokens_per_byte: dict[str, float] | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _known_classes(self) -> Workload:
        for sec_name in ("acceptance", "throughput"):
            sec = getattr(self, sec_name)
            for c in (sec.classes or []) if sec else []:
                if c not in self.classes:
                    raise ValueError(
                        f"{sec_name}.classes names unknown class {c!r} (known: {', '.join(self.classes)})"
                    )
        return self

    def calibrated(self, tokens_per_byte: dict[str, float]) -> Workload:
        """A copy whose :meth:`requests` use ``tokens_per_byte`` (engine tokens per UTF-8 byte, per text
        class; a missing class keeps 1.0) when the call passes none — the ratios the bench measured
        from the server's own ``prompt_tokens`` (``engine.bench.measure_tokens_per_byte``). The
        fields, and so :attr:`sha256`, are the same as this workload's."""
        copy = self.model_copy()
        copy._tokens_per_byte = dict(tokens_per_byte)
        return copy

    @property
    def tokens_per_byte(self) -> dict[str, float] | None:
        """The per-class ratios given to :meth:`calibrated`, or None (uncalibrated: 1 token per byte)."""
        return None if self._tokens_per_byte is None else dict(self._tokens_per_byte)

    @property
    def sha256(self) -> str:
        """sha256 (hex) of the canonical JSON of the validated workload (sorted keys, resolved temperature)."""
        canon = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canon.encode()).hexdigest()

    def levels(self) -> list[LevelSpec]:
        """The levels in run order: ``acceptance`` first (if any), then throughput by input length, concurrency."""
        out: list[LevelSpec] = []
        if self.acceptance:
            a = self.acceptance
            classes = tuple(a.classes or self.classes)
            out.append(
                LevelSpec(
                    name="acceptance",
                    purpose="acceptance",
                    concurrency=a.concurrency,
                    input_tokens=tuple(a.input_tokens),
                    output_tokens=a.output_tokens,
                    num_requests=a.requests_per_class * len(classes) * len(a.input_tokens),
                    warmup=self.warmup,
                    classes=classes,
                )
            )
        if self.throughput:
            t = self.throughput
            classes = tuple(t.classes or self.classes)
            for length in t.input_tokens:
                for c in t.concurrency:
                    name = f"c{c}" if len(t.input_tokens) == 1 else f"in{length}-c{c}"
                    out.append(
                        LevelSpec(
                            name=name,
                            purpose="throughput",
                            concurrency=c,
                            input_tokens=(length,),
                            output_tokens=t.output_tokens,
                            num_requests=t.requests_per_level or 5 * c,
                            warmup=self.warmup,
                            classes=classes,
                        )
                    )
        return out

    def level(self, name: str) -> LevelSpec:
        """The level called ``name``; raises UserError listing the known names."""
        for lv in self.levels():
            if lv.name == name:
                return lv
        known = ", ".join(lv.name for lv in self.levels())
        raise UserError(f"workload {self.name!r} has no level {name!r}", f"known levels: {known}")

    def requests(
        self,
        level: LevelSpec | str,
        context_length: int | None,
        tokens_per_byte: float | dict[str, float] | None = None,
    ) -> list[BenchRequest]:
        """Concrete requests of one level; deterministic for (workload, level, context_length, tokens_per_byte).

        ``context_length`` (tokens; None = unlimited) caps every prompt at
        ``context_length - output_tokens - context_margin`` estimated tokens
        (the prompt's head is cut when even the bare prompt is longer).
        ``tokens_per_byte``: engine tokens per UTF-8 byte, one number or per
        class (missing classes: 1.0). Acceptance requests are grouped by class
        in workload order; throughput requests cycle through a seeded
        permutation of the classes. Raises UserError when the context cannot
        hold the output plus a minimal prompt. Without ``tokens_per_byte``, a :meth:`calibrated`
        workload uses its own ratios.
        """
        lv = self.level(level) if isinstance(level, str) else level
        tokens_per_byte = tokens_per_byte or self._tokens_per_byte
        cap: int | None = None
        if context_length is not None:
            cap = context_length - lv.output_tokens - self.context_margin
            if cap < 16:
                raise UserError(
                    f"workload {self.name!r} level {lv.name!r}: output_tokens={lv.output_tokens} does not fit "
                    f"context_length={context_length}",
                    "lower output_tokens in the workload or boot the engine with a longer context_length",
                )
        rng = random.Random(f"{self.seed}:{lv.name}")

        def ratio(cls: str) -> float:
            if tokens_per_byte is None:
                return 1.0
            if isinstance(tokens_per_byte, dict):
                return float(tokens_per_byte.get(cls, 1.0))
            return float(tokens_per_byte)

        plan: list[tuple[str, int]] = []  # (class, target length)
        if lv.purpose == "acceptance":
            per = lv.num_requests // (len(lv.classes) * len(lv.input_tokens))
            for cls in lv.classes:
                for length in lv.input_tokens:
                    plan += [(cls, length)] * per
        else:
            order = list(lv.classes)
            rng.shuffle(order)
            plan = [(order[i % len(order)], lv.input_tokens[i % len(lv.input_tokens)]) for i in range(lv.num_requests)]

        prompt_cursor = {c: rng.randrange(len(self.classes[c].prompts)) for c in lv.classes}
        out: list[BenchRequest] = []
        for i, (cls, target) in enumerate(plan):
            tc = self.classes[cls]
            prompt = tc.prompts[prompt_cursor[cls] % len(tc.prompts)]
            prompt_cursor[cls] += 1
            eff = min(target, cap) if cap is not None else target
            text = _build_text(tc.material, prompt, eff, ratio(cls), rng, hard_cap=cap)
            out.append(
                BenchRequest(
                    index=i,
                    level=lv.name,
                    text_class=cls,
                    prompt=text,
                    input_tokens_target=target,
                    input_tokens_capped=eff,
                    est_prompt_tokens=_est(text, ratio(cls)),
                    max_new_tokens=lv.output_tokens,
                    temperature=self.temperature,
                    ignore_eos=self.ignore_eos,
                    extra_sampling_params=dict(self.extra_sampling_params),
                )
            )
        return out

    def calibration_texts(self, context_length: int | None = None) -> dict[str, str]:
        """One text of at most 1,024 UTF-8 bytes per class (its material) to measure tokens per byte.

        ``context_length`` (tokens): the text is also cut to ``context_length − 8`` bytes, so it fits
        the model whatever its tokenizer (a byte-level BPE gives at most one token per byte; the 8
        leave room for special tokens and the one generated token). Cuts fall on character
        boundaries. Issue 20: 1,024 *characters* of Chinese material were 1,287 tokens, over a
        1,024-token context, on the H200.
        """
        limit = 1024 if context_length is None else max(16, min(1024, context_length - 8))
        out = {}
        for name, tc in self.classes.items():
            raw = (tc.material * (1 + limit // max(1, len(tc.material.encode())))).encode()[:limit]
            out[name] = raw.decode("utf-8", errors="ignore")
        return out


@dataclass(frozen=True)
class LevelSpec:
    """One level of a workload: ``num_requests`` measured requests at ``concurrency`` after ``warmup`` ones.

    ``purpose``: ``acceptance`` (per-class histograms matter) or ``throughput``.
    ``input_tokens``: target lengths (tokens); ``output_tokens``: max_new_tokens.
    """

    name: str
    purpose: Literal["acceptance", "throughput"]
    concurrency: int
    input_tokens: tuple[int, ...]
    output_tokens: int
    num_requests: int
    warmup: int
    classes: tuple[str, ...]


@dataclass(frozen=True)
class BenchRequest:
    """One request of a level. ``prompt`` is the full text sent; lengths are in engine tokens.

    ``input_tokens_target``: the workload's target; ``input_tokens_capped``: after
    the context cap; ``est_prompt_tokens``: estimate of the text actually built.
    """

    index: int
    level: str
    text_class: str
    prompt: str
    input_tokens_target: int
    input_tokens_capped: int
    est_prompt_tokens: int
    max_new_tokens: int
    temperature: float
    ignore_eos: bool
    extra_sampling_params: dict[str, Any] = field(default_factory=dict)

    def payload(self, api: Literal["generate", "openai"] = "generate", model: str = "default") -> dict[str, Any]:
        """The JSON body: SGLang ``/generate`` (``text`` + ``sampling_params``) or OpenAI ``/v1/completions``."""
        if api == "openai":
            body: dict[str, Any] = {
                "model": model,
                "prompt": self.prompt,
                "max_tokens": self.max_new_tokens,
                "temperature": self.temperature,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            if self.ignore_eos:
                body["ignore_eos"] = True  # SGLang's OpenAI server accepts it as an extra field
            body.update(self.extra_sampling_params)
            return body
        sp: dict[str, Any] = {
            "max_new_tokens": self.max_new_tokens,
            "temperature": self.temperature,
            "ignore_eos": self.ignore_eos,
        }
        sp.update(self.extra_sampling_params)
        return {"text": self.prompt, "sampling_params": sp, "stream": True}


def _est(text: str, ratio: float) -> int:
    return int(round(len(text.encode()) * ratio))


def _cut_bytes(text: str, nbytes: int, keep_tail: bool = False) -> str:
    raw = text.encode()
    if len(raw) <= nbytes:
        return text
    part = raw[-nbytes:] if keep_tail else raw[:nbytes]
    return part.decode("utf-8", errors="ignore")


def _build_text(material: str, prompt: str, target: int, ratio: float, rng: random.Random, hard_cap: int | None) -> str:
    """Material (from a seeded offset, repeated) padded before ``prompt`` up to ``target`` estimated tokens."""
    ratio = ratio if ratio > 0 else 1.0
    need = target - _est(prompt, ratio)
    if need <= 0:
        if hard_cap is not None and _est(prompt, ratio) > hard_cap:
            return _cut_bytes(prompt, int(hard_cap / ratio), keep_tail=True)
        return prompt
    budget = int(need / ratio) - 2  # the "\n\n" between filler and prompt
    paras = [p.strip("\n") for p in material.split("\n\n") if p.strip()] or [material]
    start = rng.randrange(len(paras))
    unit = "\n\n".join(paras[start:] + paras[:start]) + "\n\n"
    reps = budget // max(1, len(unit.encode())) + 1
    filler = _cut_bytes(unit * reps, max(0, budget))
    if budget < 24:  # a few stray bytes of padding read worse than none
        return prompt
    for sep in ("\n", " "):  # end the padding at a line, else word, boundary when that loses little
        cut = filler.rfind(sep)
        if cut > len(filler) // 2:
            filler = filler[:cut]
            break
    filler = filler.rstrip("\n")
    return filler + "\n\n" + prompt if filler else prompt


def bundled_path(name: str = "default") -> Path:
    """Path of a bundled workload file (``default`` or ``long``); raises NotFound-style UserError otherwise."""
    if name not in BUNDLED:
        raise UserError(f"no bundled workload {name!r}",
                        f"bundled workloads: {', '.join(BUNDLED)}; or pass a file path")
    return HERE / f"{name}.toml"


#: How many ``extends`` links one workload may follow (a chain, not a tree).
MAX_EXTENDS = 4


def _resolve(path: str | Path | None, relative_to: Path | None = None) -> Path:
    """The file a workload reference names: ``None`` = bundled ``default``; a bundled name
    (``long``) unless a file of that name exists; else a path (relative to ``relative_to``)."""
    if path is None:
        return bundled_path("default")
    if isinstance(path, str) and path in BUNDLED:
        local = (relative_to / path) if relative_to else Path(path)
        if not local.exists():
            return bundled_path(path)
    p = Path(path)
    return p if p.is_absolute() or relative_to is None else relative_to / p


def _read_toml(p: Path) -> dict[str, Any]:
    """Parse one workload file; UserError naming the file for unreadable or invalid TOML."""
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise UserError(f"cannot read workload file {p}: {e.strerror or e}",
                        f"check the path, or name a bundled workload: {', '.join(BUNDLED)}") from e
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{p}: not valid TOML: {e}", "fix the syntax (see the bundled default.toml)") from None
    except RecursionError:
        raise UserError(f"{p}: not valid TOML: nested too deeply to read",
                        "a workload has a few flat tables (see the bundled default.toml)") from None


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``: tables merge key by key (recursively), any other value replaces."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _with_bases(p: Path, data: dict[str, Any]) -> dict[str, Any]:
    """Follow ``extends = "NAME or PATH"``: the base's tables with this file's keys on top.

    A path is relative to the extending file; a bundled name (``default``, ``long``) works too.
    Raises UserError naming the file for a non-string ``extends``, a loop, or a chain longer
    than :data:`MAX_EXTENDS`.
    """
    chain, seen, cur_path, cur = [data], [p.resolve()], p, data
    while "extends" in cur:
        ref = cur.pop("extends")
        if not isinstance(ref, str) or not ref:
            raise UserError(f"{cur_path}: extends must be a workload name or a path, got {ref!r}",
                            'e.g. extends = "default" (bundled) or extends = "base.toml" (beside this file)')
        base_path = _resolve(ref, relative_to=cur_path.parent)
        if base_path.resolve() in seen:
            raise UserError(f"{cur_path}: extends {ref!r} loops back to a file already in the chain",
                            "make one workload the base of the others, not each other's")
        if len(chain) > MAX_EXTENDS:
            raise UserError(f"{p}: more than {MAX_EXTENDS} workloads chained by extends",
                            "extend the bundled default directly")
        seen.append(base_path.resolve())
        try:
            base = _read_toml(base_path)
        except UserError as e:
            raise UserError(f"{cur_path}: extends {ref!r}: {e.message}", e.hint) from None
        cur_path, cur = base_path, base
        chain.append(cur)
    merged: dict[str, Any] = {}
    for d in reversed(chain):
        merged = _merge(merged, d)
    return merged


def load_workload(path: str | Path | None = None) -> Workload:
    """Load and validate a workload file; ``None`` = bundled ``default``, a bare bundled name (``long``) works too.

    A file may start from another with ``extends = "default"`` (a bundled name) or
    ``extends = "base.toml"`` (relative to the file) and set only what differs: its tables
    merge key by key over the base's (``[classes.x]`` adds or replaces one class).

    Raises UserError naming the file (and the dotted field path for schema
    errors) with a hint, for a missing file, bad TOML, a bad ``extends``, or invalid fields.
    """
    p = _resolve(path)
    data = _with_bases(p, _read_toml(p))
    try:
        # Strict: TOML has real types, so "4" for a concurrency is a mistake, not a value to coerce.
        return Workload.model_validate(data, strict=True)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        msg = first["msg"].removeprefix("Value error, ").replace("Input should be", "must be")
        if first["type"] == "extra_forbidden":
            msg = "unknown key"
        elif "input" in first and first["type"] not in ("missing", "value_error"):
            got = repr(first["input"])
            msg += f", got {got if len(got) <= 80 else got[:77] + '...'}"
        more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
        raise UserError(
            f"{p}: {loc + ': ' if loc else ''}{msg}{more}",
            "see the schema at the top of dynocell/engine/workloads/default.toml",
        ) from e
