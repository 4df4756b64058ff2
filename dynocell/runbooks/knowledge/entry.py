"""The runbook entry format: its fields, kinds, source forms, and the :class:`Entry` / :class:`LintError` records.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dynocell.engine.config import ENGINES as CONFIG_ENGINES

BUNDLED_DIR = Path(__file__).parent  # the bundled entries are the .md files of this package
KINDS = ("law", "trap", "fix", "procedure")
SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9-]{1,126}$")
KNOWN_FIELDS = ("slug", "title", "kind", "tags", "engines", "signatures", "applies_to", "sources", "evidence",
                "examples", "fix")
#: Engines dynocell does not run whose incidents and logs the knowledge still speaks of (imported logs).
FOREIGN_ENGINES = ("trtllm",)
#: Engines an entry may name in ``engines``: every engine a config may name, and :data:`FOREIGN_ENGINES`.
ENGINES = (*CONFIG_ENGINES, *FOREIGN_ENGINES)
#: One source (string form): a public URL; ``<engine or project> <file path> @ <version tag or commit>``; a field
#: report (``field report 004``: tests/data/field_reports); or a file or folder of this repository
#: (``tests/data/…`` — dynocell's measured engine artifacts —, ``docs/…`` — docs/h200 holds the facts measured on
#: the H200 host —, ``gpu/…``), optionally followed by a note. Nothing outside the repository.
SOURCE_RE = re.compile(
    r"^(?:https?://\S+"
    r"|[a-z][\w.-]* \S+ @ (?:v?\d[\w.+-]*|[0-9a-f]{7,40})\b"
    r"|field report \d{3}\b"
    r"|(?:tests/data|docs|gpu)/[\w./-]+\b)")
#: Repository paths a string source may name (checked to exist by tests/test_knowledge_versions.py).
REPO_SOURCE_RE = re.compile(r"^((?:tests/data|docs|gpu)/[\w./-]*[\w-])")
#: A version-exact citation of an engine's released source (issue 36): a mapping in ``sources``,
#: ``{package, file, versions, at, quote}`` — the pip distribution, the file path inside its wheel, the version
#: range the claim states, the exact released versions in that range whose file holds the quote, and the quote
#: (one string or a list; each an exact substring of that file at each of those versions).
#: ``benchmarks/knowledge_sources.py`` downloads those wheels and checks every quote.
CITATION_KEYS = ("package", "file", "versions", "at", "quote")
#: Distributions a citation may name (the engines dynocell boots; their wheels are on PyPI).
CITED_PACKAGES = ("sglang", "vllm")
EXACT_VERSION_RE = re.compile(r"^\d+(?:\.\d+){1,3}$")
QUOTE_MAX = 240
SIGNATURE_KEYS = ("ids", "rules", "log", "metrics")
OPERATORS = ("eq", "ne", "in", "not_in", "gt", "ge", "lt", "le", "exists", "contains")
METRIC_OPS = ("eq", "ne", "gt", "ge", "lt", "le")
#: Doctor rule ids an entry may name in ``signatures.rules`` (see runbooks/doctor.py).
DOCTOR_RULES = (
    "pinned_near_one", "recursive_collapse", "position_cliff", "depth_decay", "zero_past_length",
    "scales_with_parallel",
    "graph_vs_eager", "no_net_win", "definitions_mismatch", "independence", "garbage_output",
    "engine_vs_oracle",
    # issue 22
    "baseline_regression", "confounded_comparison", "tau_up_throughput_down", "spread_collapse", "concurrency_loss",
    "corrupt_output", "lossless_near_tie", "length_cliff", "rate_above_one", "skipped_steps_average",
    "health_lies", "stalled_queue", "nccl_startup_skew", "nccl_serving_timeout", "profile_no_trace",
    "graph_launches_missing", "capture_size_miss", "config_smell", "length_breakeven", "draft_window_short",
    "lossless_margin_unknown",
    # issue 35
    "engine_hang", "engine_crash_serving", "acceptance_decay",
    "prefix_cache_lost_to_spec", "draft_head_mismatch",
    "dummy_weights",
)
#: Derived (property) paths a selector may name besides model fields.
DERIVED_PATHS = ("speculative.num_drafts", "speculative_enabled", "name", "config_hash",
                 "expert_offload")  # a concept: selectors.CONCEPTS
REGEX_TIME_LIMIT_S = 0.25
ADVERSARIAL_INPUTS = (
    "a" * 10_000 + "!",
    " " * 10_000 + "!",
    "0" * 10_000 + "x",
    "ab" * 5_000 + "!",
    "a " * 5_000 + "\n",
    "-" * 10_000 + "\x00",
)


@dataclass(frozen=True)
class LintError:
    """One problem in one entry file: ``path``, dotted ``field`` (None = the file), ``message``."""

    path: str
    field: str | None
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.field}: {self.message}" if self.field else f"{self.path}: {self.message}"


@dataclass(frozen=True)
class Citation:
    """One version-exact citation (see :data:`CITATION_KEYS`).

    ``package`` is a pip distribution (``sglang``, ``vllm``); ``file`` a ``/``-separated path inside its wheel
    (``sglang/srt/server_args.py``); ``versions`` the range the claim states (``>=0.5.14,<0.6``); ``at`` the exact
    released versions in that range whose file was read; ``quotes`` exact substrings of that file at each of them.
    """

    package: str
    file: str
    versions: str
    at: tuple[str, ...]
    quotes: tuple[str, ...]

    def label(self) -> str:
        """The display string (one line): ``sglang <file> @ 0.5.14, 0.5.17 (>=0.5.14,<0.6): "quote" …``."""
        quoted = " … ".join(f'"{q}"' for q in self.quotes)
        return f"{self.package} {self.file} @ {', '.join(self.at)} ({self.versions}): {quoted}"


@dataclass(frozen=True)
class Entry:
    """A parsed, validated runbook entry.

    ``origin`` is ``bundled`` or ``operator``; ``sha256`` hashes the file's bytes;
    ``signatures`` is ``{ids, rules, log, metrics}`` (lists, possibly empty).
    ``evidence`` holds display strings (a fact ends with its source numbers, e.g.
    ``… [1, 2]``); ``facts`` the claims marked as fact with their 1-based
    indexes into ``sources``; ``examples`` real log lines the signatures match;
    ``citations`` the version-exact engine citations among the sources (``sources`` holds their labels).
    """

    slug: str
    title: str
    kind: str
    tags: tuple[str, ...]
    engines: dict[str, str]
    signatures: dict[str, list[Any]]
    applies_to: dict[str, Any]
    evidence: tuple[str, ...]
    fix: tuple[str, ...]
    body: str
    path: str
    origin: str
    sha256: str
    front_matter: dict[str, Any] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    facts: tuple[tuple[str, tuple[int, ...]], ...] = ()
    citations: tuple[Citation, ...] = ()

    def as_row(self) -> dict[str, Any]:
        """The entry as the plain dict :func:`dynocell.db.knowledge.upsert_entries` stores."""
        return {
            "slug": self.slug, "title": self.title, "kind": self.kind, "tags": list(self.tags),
            "origin": self.origin, "source_path": self.path, "sha256": self.sha256,
            "front_matter": self.front_matter, "body": self.body,
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field."""
        return {
            "slug": self.slug, "title": self.title, "kind": self.kind, "tags": list(self.tags),
            "engines": self.engines, "signatures": self.signatures, "applies_to": self.applies_to,
            "evidence": list(self.evidence), "fix": list(self.fix), "body": self.body,
            "sources": list(self.sources), "examples": list(self.examples),
            "path": self.path, "origin": self.origin, "sha256": self.sha256,
        }
