"""Runbook knowledge: markdown entries with YAML front matter, their lint, index, search and links.

An entry is a markdown file whose first lines are YAML between ``---`` lines::

    ---
    slug: draft-parallel-config-copies-every-size     # [a-z0-9-], unique
    title: The draft model's parallel config must carry every parallel size
    kind: trap                                        # law | trap | fix | procedure
    tags: [speculative, parallel]
    engines: {sglang: ">=0.5.10,<0.6", vllm: ">=0.10"} # engine → version range (bundled entries: required)
    signatures:                                       # optional
      ids: [cuda_graph_no_valid_sizes]                # failure-signature rule ids (engine/rules)
      rules: [scales_with_parallel]                   # acceptance-doctor rule ids
      log: ["(?i)address already in use"]             # regexes over engine log lines
      metrics: [{metric: tau, le: 1.3}]               # conditions over run metrics
    applies_to:                                       # config selector, optional (see below)
      speculative.algorithm: {in: [EAGLE, NEXTN]}
      parallel.dcp_size: {gt: 1}
    sources:                                          # where the facts come from (see SOURCE_RE)
      - "vllm vllm/config/speculative.py @ v0.26.0"   # engine + file + version (tag or commit)
      - "https://github.com/vllm-project/vllm/pull/1" # or a public URL
      - "field report 001"                            # or a field report (tests/data/field_reports/NNN_*.txt)
    evidence:                                         # required, ≥ 1
      - {fact: "a claim with its numbers", source: 1} # a claim marked as fact: source = 1-based index(es) into sources
      - "a plain string: reasoning, not marked as fact"
    examples:                                         # real log lines; required with signatures.log / ids
      - "(EngineCore_DP0 pid=1) ValueError: No valid cudagraph sizes after rounding to multiple of 6 (…)"
    fix: ["what to try"]                              # required, ≥ 1
    ---
    markdown body

Lint refuses a claim marked as fact without a source, a source that is none of
the accepted forms, and an entry whose signatures (``log`` regexes, failure
signature ``ids``) match none of its own ``examples`` — each ``log`` regex must
match at least one example line, and with ``ids`` at least one example must
match one of those failure signatures' regexes (dynocell/engine/rules).

Selector language (no eval): a mapping of dotted :class:`EngineConfig` field
paths (``parallel.tp_size``, ``speculative.algorithm``, ``speculative.num_drafts``,
``env.NAME``, ``extra_args``, ``engine`` …) to a condition; all must hold.
A condition is a scalar (equality) or a mapping of operators ``eq ne in not_in
gt ge lt le exists contains``. The keys ``any`` (list of selectors, one must
hold), ``all`` (list, all hold) and ``not`` (a selector that must not hold)
combine selectors.

Bundled entries are the ``.md`` files of this package (``dynocell/runbooks/knowledge/``); the operator directory
(``settings.runbooks_dir``, default ``<home>/runbooks``) adds entries and
overrides bundled ones by slug.

One module per job: :mod:`.entry` (format), :mod:`.lint` (parsing and lint), :mod:`.regex` (regex safety),
:mod:`.selectors`, :mod:`.versions` (version ranges), :mod:`.loader` (the knowledge in effect),
:mod:`.search` (index and search), :mod:`.notes`.
"""

from __future__ import annotations

from dynocell.runbooks.knowledge.entry import (
    ADVERSARIAL_INPUTS, BUNDLED_DIR, DERIVED_PATHS, DOCTOR_RULES, ENGINES, KINDS, KNOWN_FIELDS, METRIC_OPS,
    OPERATORS, REGEX_TIME_LIMIT_S, SIGNATURE_KEYS, SLUG_RE, SOURCE_RE, Citation, Entry, LintError,
)
from dynocell.runbooks.knowledge.lint import (
    example_problems, lint_paths, operator_dir, parse_entry, parse_file, split_front_matter,
)
from dynocell.runbooks.knowledge.loader import (
    Knowledge, bundled_knowledge, knowledge_for, load_knowledge,
)
from dynocell.runbooks.knowledge.notes import (
    NOTE_KINDS, add_note, add_note_by_ref, list_notes, resolve_note_target,
)
from dynocell.runbooks.knowledge.regex import (
    regex_problem, regex_timing_problems, slow_patterns,
)
from dynocell.runbooks.knowledge.search import add_entry_file, search, sync_index
from dynocell.runbooks.knowledge.selectors import (
    selector_matches, selector_text, validate_selector,
)
from dynocell.runbooks.knowledge.versions import version_in_range, version_range_problem

__all__ = [
    "Citation",
    "ADVERSARIAL_INPUTS",
    "BUNDLED_DIR",
    "DERIVED_PATHS",
    "DOCTOR_RULES",
    "ENGINES",
    "Entry",
    "KINDS",
    "KNOWN_FIELDS",
    "Knowledge",
    "LintError",
    "METRIC_OPS",
    "NOTE_KINDS",
    "OPERATORS",
    "REGEX_TIME_LIMIT_S",
    "SIGNATURE_KEYS",
    "SLUG_RE",
    "SOURCE_RE",
    "add_entry_file",
    "add_note",
    "add_note_by_ref",
    "bundled_knowledge",
    "example_problems",
    "knowledge_for",
    "lint_paths",
    "list_notes",
    "load_knowledge",
    "operator_dir",
    "parse_entry",
    "parse_file",
    "regex_problem",
    "regex_timing_problems",
    "resolve_note_target",
    "search",
    "selector_matches",
    "selector_text",
    "slow_patterns",
    "split_front_matter",
    "sync_index",
    "validate_selector",
    "version_in_range",
    "version_range_problem",
]
