"""The store's tables, as SQLAlchemy 2 typed models.

Invariants:
- ``configs`` and ``engine_builds`` are content-addressed and immutable
  (insert-or-ignore by hash). Names are rows of ``config_labels``; a re-label
  adds a row, so history is kept (the newest row of a name wins).
- ``boots``, ``runs`` and everything under them are appended; only their final
  status columns are updated.
- Large artifacts (logs, traces) live on disk under the data directory of the
  host that made them; rows keep host, path, size (bytes) and sha256.
- ``host_id`` on boots, runs and profile runs is the ``hosts.id`` of the
  machine that wrote them (NULL for rows from before hosts were recorded).
  It is an indexed column, not a declared foreign key: declaring one on an
  existing SQLite table needs a table rebuild, which foreign keys pointing at
  ``boots``/``runs`` make unsafe on a populated store.
Times are UTC ``datetime``; durations are seconds (``*_s``) or milliseconds
(``*_ms``) as the column name says.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Optional

from sqlalchemy import (
    JSON, BigInteger, Boolean, DateTime, Float, ForeignKey, Index, Integer, MetaData, String, Text, UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    """Now, timezone-aware UTC."""
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON, datetime: DateTime(timezone=True)}


class Config(Base):
    """One canonical engine configuration, keyed by ``config_hash`` ("sha256:…")."""

    __tablename__ = "configs"
    config_hash: Mapped[str] = mapped_column(String(80), primary_key=True)
    engine: Mapped[str] = mapped_column(String(32))
    model_path: Mapped[str] = mapped_column(Text)
    canonical_json: Mapped[str] = mapped_column(Text)
    source_toml: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    #: True for a config reconstructed from what an engine or its log revealed (attach / import):
    #: its canonical JSON holds only the fields seen; the others are unknown, not defaulted.
    observed: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")


class ConfigLabel(Base):
    """A name pointing at a config hash; the newest row of a name is current."""

    __tablename__ = "config_labels"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), index=True)
    config_hash: Mapped[str] = mapped_column(ForeignKey("configs.config_hash"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ConfigTrust(Base):
    """An operator's mark that a config whose ``[env]`` injects code (``LD_PRELOAD``,
    ``PYTHONPATH`` …) may be booted from the web panel: who (OS user) and when."""

    __tablename__ = "config_trust"
    config_hash: Mapped[str] = mapped_column(ForeignKey("configs.config_hash"), primary_key=True)
    trusted_by: Mapped[str] = mapped_column(String(200))
    trusted_at: Mapped[datetime] = mapped_column(default=utcnow)


class EngineBuild(Base):
    """A content-addressed engine: base distribution + ordered patch set, built into ``path``."""

    __tablename__ = "engine_builds"
    build_hash: Mapped[str] = mapped_column(String(80), primary_key=True)
    base_dist: Mapped[str] = mapped_column(String(64))
    base_version: Mapped[str] = mapped_column(String(64))
    patches: Mapped[list[Any]] = mapped_column(JSON)
    manifest: Mapped[dict[str, Any]] = mapped_column(JSON)
    path: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Host(Base):
    """A machine that writes to the store (one row per machine id; a fleet shares one store).

    ``id``: the machine id (``/etc/machine-id``, a generated id kept in the data directory, or
    the ``machine_id`` setting). ``gpus``: ``[{index, name, memory_mib, driver, uuid}]``;
    ``engine_versions``: ``{distribution: version}``. ``last_seen_at`` moves each time a dynocell
    process of that machine opens the store or polls its boots.
    """

    __tablename__ = "hosts"
    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    hostname: Mapped[str] = mapped_column(String(255))
    os: Mapped[str] = mapped_column(Text)
    cpu: Mapped[str] = mapped_column(Text)
    cpu_count: Mapped[int]
    memory_bytes: Mapped[int] = mapped_column(BigInteger)
    gpus: Mapped[list[Any]] = mapped_column(JSON)
    cuda: Mapped[Optional[str]] = mapped_column(String(32))
    engine_versions: Mapped[dict[str, Any]] = mapped_column(JSON)
    first_seen_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow)


class Boot(Base):
    """One start of one config (and optional build) on one host.

    ``state``: starting, ready, stopping, stopped, failed, crashed, lost.
    ``stop_how``: graceful | killed. ``env`` has secrets redacted.
    ``supervisor_create_time`` / ``engine_create_time``: psutil ``create_time()`` (s since the epoch)
    of the supervising process and the engine, recorded at spawn: a pid whose create time differs
    is a recycled pid, not this boot's process (liveness reads these, never ``failure_detail``).
    ``kind``: started (dynocell owns the process) | attached (a running engine dynocell did not
    start: no pid ownership) | imported (reconstructed from log files; ``source_sha256`` names them).
    """

    __tablename__ = "boots"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    config_hash: Mapped[str] = mapped_column(ForeignKey("configs.config_hash"), index=True)
    build_hash: Mapped[Optional[str]] = mapped_column(ForeignKey("engine_builds.build_hash"))
    engine: Mapped[str] = mapped_column(String(32))
    hostname: Mapped[str] = mapped_column(String(255))
    host: Mapped[str] = mapped_column(String(255))
    host_id: Mapped[Optional[str]] = mapped_column(String(64), index=True)
    port: Mapped[Optional[int]]
    node_rank: Mapped[Optional[int]]
    argv: Mapped[str] = mapped_column(Text)
    env: Mapped[dict[str, Any]] = mapped_column(JSON)
    pid: Mapped[Optional[int]]
    pgid: Mapped[Optional[int]]
    supervisor_pid: Mapped[Optional[int]]
    supervisor_create_time: Mapped[Optional[float]] = mapped_column(Float)
    engine_create_time: Mapped[Optional[float]] = mapped_column(Float)
    state: Mapped[str] = mapped_column(String(16), index=True)
    last_phase: Mapped[Optional[str]] = mapped_column(String(64))
    log_path: Mapped[str] = mapped_column(Text)
    log_size: Mapped[Optional[int]]
    log_sha256: Mapped[Optional[str]] = mapped_column(String(64))
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    ready_at: Mapped[Optional[datetime]]
    ready_s: Mapped[Optional[float]] = mapped_column(Float)
    ended_at: Mapped[Optional[datetime]]
    exit_code: Mapped[Optional[int]]
    stop_how: Mapped[Optional[str]] = mapped_column(String(16))
    stop_s: Mapped[Optional[float]] = mapped_column(Float)
    zombies: Mapped[Optional[int]]
    failure_signature: Mapped[Optional[str]] = mapped_column(String(64))
    failure_detail: Mapped[Optional[dict[str, Any]]] = mapped_column(JSON)
    kind: Mapped[str] = mapped_column(String(16), default="started", server_default="started")
    source_sha256: Mapped[Optional[str]] = mapped_column(String(64))

    events: Mapped[list["BootEvent"]] = relationship(back_populates="boot", order_by="BootEvent.id")


class BootEvent(Base):
    """Something that happened to a boot: a phase reached (``kind`` phase) or a state transition."""

    __tablename__ = "boot_events"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    boot_id: Mapped[str] = mapped_column(ForeignKey("boots.id"), index=True)
    ts: Mapped[datetime] = mapped_column(default=utcnow)
    offset_s: Mapped[float] = mapped_column(Float)
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(64))
    detail: Mapped[Optional[dict[str, Any]]] = mapped_column(JSON)

    boot: Mapped[Boot] = relationship(back_populates="events")


class HealthCheck(Base):
    """One health verdict (healthy | degraded | down) with each check's result in ``checks``.

    ``checks``: list of ``{name, ok, latency_ms, reason}``.
    """

    __tablename__ = "health_checks"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    boot_id: Mapped[str] = mapped_column(ForeignKey("boots.id"), index=True)
    ts: Mapped[datetime] = mapped_column(default=utcnow)
    verdict: Mapped[str] = mapped_column(String(16))
    failed: Mapped[str] = mapped_column(Text, default="")
    checks: Mapped[list[Any]] = mapped_column(JSON)


class Run(Base):
    """One main-job (or bench / profile) run against a boot.

    ``kind``: run | bench | profile. ``state``: running, completed, failed, interrupted.
    ``step``: the step in flight or the one that failed.
    """

    __tablename__ = "runs"
    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16), default="run")
    config_hash: Mapped[str] = mapped_column(ForeignKey("configs.config_hash"), index=True)
    boot_id: Mapped[Optional[str]] = mapped_column(ForeignKey("boots.id"), index=True)
    build_hash: Mapped[Optional[str]] = mapped_column(ForeignKey("engine_builds.build_hash"))
    host_id: Mapped[Optional[str]] = mapped_column(String(64), index=True)
    state: Mapped[str] = mapped_column(String(16), index=True)
    step: Mapped[Optional[str]] = mapped_column(String(32))
    error: Mapped[Optional[str]] = mapped_column(Text)
    pid: Mapped[Optional[int]]
    workload: Mapped[Optional[str]] = mapped_column(Text)
    workload_sha256: Mapped[Optional[str]] = mapped_column(String(64))
    options: Mapped[Optional[dict[str, Any]]] = mapped_column(JSON)
    lossless: Mapped[Optional[str]] = mapped_column(String(16))
    lossless_detail: Mapped[Optional[dict[str, Any]]] = mapped_column(JSON)
    breakeven: Mapped[Optional[dict[str, Any]]] = mapped_column(JSON)
    summary: Mapped[Optional[dict[str, Any]]] = mapped_column(JSON)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    ended_at: Mapped[Optional[datetime]]


class RunStep(Base):
    """One step of a run (boot, health, bench, acceptance, lossless, profile, diagnose, stop).

    ``state``: running, completed, failed, skipped, interrupted.
    """

    __tablename__ = "run_steps"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    name: Mapped[str] = mapped_column(String(32))
    state: Mapped[str] = mapped_column(String(16))
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    ended_at: Mapped[Optional[datetime]]
    detail: Mapped[Optional[dict[str, Any]]] = mapped_column(JSON)
    error: Mapped[Optional[str]] = mapped_column(Text)


class BenchRun(Base):
    """One benchmark level (a concurrency, optionally one text class) of a run.

    Latencies in ms (p50/p90/p99); throughputs in req/s and tok/s.
    """

    __tablename__ = "bench_runs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    boot_id: Mapped[Optional[str]] = mapped_column(ForeignKey("boots.id"))
    text_class: Mapped[Optional[str]] = mapped_column(String(64))
    concurrency: Mapped[int]
    num_requests: Mapped[int]
    num_failed: Mapped[int] = mapped_column(default=0)
    length_mismatches: Mapped[int] = mapped_column(default=0)
    duration_s: Mapped[float] = mapped_column(Float)
    prompt_tokens: Mapped[int]
    completion_tokens: Mapped[int]
    request_throughput: Mapped[float] = mapped_column(Float)
    output_tok_s: Mapped[float] = mapped_column(Float)
    total_tok_s: Mapped[float] = mapped_column(Float)
    prefill_tok_s: Mapped[Optional[float]] = mapped_column(Float)
    decode_tok_s: Mapped[Optional[float]] = mapped_column(Float)
    ttft_ms: Mapped[dict[str, Any]] = mapped_column(JSON)
    tpot_ms: Mapped[dict[str, Any]] = mapped_column(JSON)
    itl_ms: Mapped[dict[str, Any]] = mapped_column(JSON)
    e2e_ms: Mapped[dict[str, Any]] = mapped_column(JSON)
    extra: Mapped[Optional[dict[str, Any]]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class AcceptanceCurve(Base):
    """Acceptance of one text class in one run: histogram h[k], k = 0..D, and its summary.

    ``tau`` = 1 + Σ k·h[k] / N; ``engine_tau`` the engine's own figure when known;
    ``disagreement_pct`` their relative difference, warned above 2 %.
    """

    __tablename__ = "acceptance_curves"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    text_class: Mapped[str] = mapped_column(String(64))
    num_drafts: Mapped[int]
    steps: Mapped[int]
    tau: Mapped[float] = mapped_column(Float)
    accept_rate: Mapped[float] = mapped_column(Float)
    histogram: Mapped[list[Any]] = mapped_column(JSON)
    completion_tokens: Mapped[int] = mapped_column(default=0)
    engine_tau: Mapped[Optional[float]] = mapped_column(Float)
    engine_source: Mapped[Optional[str]] = mapped_column(String(64))
    disagreement_pct: Mapped[Optional[float]] = mapped_column(Float)
    warning: Mapped[Optional[str]] = mapped_column(Text)
    # Each request's evidence (engine.acceptance.request_record), NULL before migration 0009 and for vLLM
    # (no per-request histogram): lets the doctor compare greedy curves on identical generated text.
    requests: Mapped[Optional[list[Any]]] = mapped_column(JSON)

    points: Mapped[list["AcceptancePoint"]] = relationship(order_by="AcceptancePoint.position")


class AcceptancePoint(Base):
    """Per-position acceptance: unconditional p_i and conditional a_i = p_i / p_{i−1}."""

    __tablename__ = "acceptance_points"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    curve_id: Mapped[int] = mapped_column(ForeignKey("acceptance_curves.id"), index=True)
    position: Mapped[int]
    p_uncond: Mapped[float] = mapped_column(Float)
    a_cond: Mapped[float] = mapped_column(Float)


class ProfileRun(Base):
    """A profiler window on a boot: trace files and totals.

    ``traces``: list of ``{rank, path, size, sha256}``. ``source``: kernel | cpu_op.
    ``state``: running, completed, failed.
    """

    __tablename__ = "profile_runs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[Optional[str]] = mapped_column(ForeignKey("runs.id"), index=True)
    boot_id: Mapped[Optional[str]] = mapped_column(ForeignKey("boots.id"))
    host_id: Mapped[Optional[str]] = mapped_column(String(64), index=True)
    state: Mapped[str] = mapped_column(String(16))
    error: Mapped[Optional[str]] = mapped_column(Text)
    trace_dir: Mapped[Optional[str]] = mapped_column(Text)
    traces: Mapped[Optional[list[Any]]] = mapped_column(JSON)
    source: Mapped[Optional[str]] = mapped_column(String(16))
    num_ranks: Mapped[Optional[int]]
    device_ms: Mapped[Optional[float]] = mapped_column(Float)
    window_ms: Mapped[Optional[float]] = mapped_column(Float)
    busy_pct: Mapped[Optional[float]] = mapped_column(Float)
    launches: Mapped[Optional[int]]
    graph_launches: Mapped[Optional[int]]
    output_tokens: Mapped[Optional[int]]
    ms_per_token: Mapped[Optional[float]] = mapped_column(Float)
    launches_per_token: Mapped[Optional[float]] = mapped_column(Float)
    rank_skew: Mapped[Optional[float]] = mapped_column(Float)
    warnings: Mapped[Optional[list[Any]]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ProfileSplit(Base):
    """Kernel (or CPU op) time of one category in a profile; ``rank`` −1 = all ranks combined."""

    __tablename__ = "profile_splits"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    profile_id: Mapped[int] = mapped_column(ForeignKey("profile_runs.id"), index=True)
    rank: Mapped[int] = mapped_column(default=-1)
    category: Mapped[str] = mapped_column(String(32))
    ms: Mapped[float] = mapped_column(Float)
    pct: Mapped[float] = mapped_column(Float)
    launches: Mapped[int]


class ProfileKernel(Base):
    """One of the top kernels of a profile (``rank`` −1 = combined), ordered by ``ms``."""

    __tablename__ = "profile_kernels"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    profile_id: Mapped[int] = mapped_column(ForeignKey("profile_runs.id"), index=True)
    rank: Mapped[int] = mapped_column(default=-1)
    name: Mapped[str] = mapped_column(Text)
    category: Mapped[str] = mapped_column(String(32))
    ms: Mapped[float] = mapped_column(Float)
    launches: Mapped[int]


class ProfilePhases(Base):
    """Where a profile window's speculative steps spent their time, per phase (issue 24 item 3;
    :func:`dynocell.engine.spec_phases.phase_report`). One row per profile, rewritten when recomputed.

    ``state``: ``split`` | ``unavailable`` (``reason`` says why: e.g. vLLM 0.26.0's traces carry no
    phase ranges). ``source``: gpu | cpu | mixed. ``total_ms``: the steps' time (every phase but
    ``outside``). ``phases``: ``[{phase, label, ms, pct, launches, launches_per_token, ranges}]``, the
    ranks combined; ``ranks``: ``[{rank, total_ms, phases}]`` for a window of several ranks, else ``[]``.
    """

    __tablename__ = "profile_phases"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    profile_id: Mapped[int] = mapped_column(ForeignKey("profile_runs.id"), index=True, unique=True)
    state: Mapped[str] = mapped_column(String(16))
    source: Mapped[Optional[str]] = mapped_column(String(16))
    total_ms: Mapped[Optional[float]] = mapped_column(Float)
    phases: Mapped[list[Any]] = mapped_column(JSON)
    ranks: Mapped[list[Any]] = mapped_column(JSON)
    reason: Mapped[Optional[str]] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class RunbookEntry(Base):
    """An indexed runbook entry (markdown with front matter); FTS5 table ``runbook_fts`` mirrors it."""

    __tablename__ = "runbook_entries"
    slug: Mapped[str] = mapped_column(String(128), primary_key=True)
    title: Mapped[str] = mapped_column(Text)
    kind: Mapped[str] = mapped_column(String(16))
    tags: Mapped[list[Any]] = mapped_column(JSON)
    origin: Mapped[str] = mapped_column(String(16))
    source_path: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(String(64))
    front_matter: Mapped[dict[str, Any]] = mapped_column(JSON)
    body: Mapped[str] = mapped_column(Text)
    indexed_at: Mapped[datetime] = mapped_column(default=utcnow)


class Finding(Base):
    """A doctor finding on a run: ``rule`` id, ``severity`` (info|warn|error), evidence numbers, linked slugs."""

    __tablename__ = "findings"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[Optional[str]] = mapped_column(ForeignKey("runs.id"), index=True)
    boot_id: Mapped[Optional[str]] = mapped_column(ForeignKey("boots.id"))
    rule: Mapped[str] = mapped_column(String(64))
    severity: Mapped[str] = mapped_column(String(16))
    message: Mapped[str] = mapped_column(Text)
    evidence: Mapped[dict[str, Any]] = mapped_column(JSON)
    entries: Mapped[list[Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Note(Base):
    """An operator's note on a target (``target_kind``: config, boot, run, entry, experiment)."""

    __tablename__ = "notes"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    target_kind: Mapped[str] = mapped_column(String(16))
    target_id: Mapped[str] = mapped_column(String(128))
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (Index("ix_notes_target", "target_kind", "target_id"),)


class Experiment(Base):
    """An experiment: an incumbent config, arms, a workload, repeats. ``state``: created, running, done."""

    __tablename__ = "experiments"
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    incumbent_hash: Mapped[str] = mapped_column(ForeignKey("configs.config_hash"))
    arms: Mapped[list[Any]] = mapped_column(JSON)
    workload: Mapped[Optional[str]] = mapped_column(Text)
    repeats: Mapped[int]
    state: Mapped[str] = mapped_column(String(16))
    verdicts: Mapped[Optional[dict[str, Any]]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ExperimentRun(Base):
    """One slot of an experiment's interleaved schedule: ``(seq, arm config_hash, repeat)`` → run."""

    __tablename__ = "experiment_runs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    experiment: Mapped[str] = mapped_column(ForeignKey("experiments.name"), index=True)
    seq: Mapped[int]
    config_hash: Mapped[str] = mapped_column(ForeignKey("configs.config_hash"))
    role: Mapped[str] = mapped_column(String(16))
    repeat: Mapped[int]
    run_id: Mapped[Optional[str]] = mapped_column(ForeignKey("runs.id"))
    state: Mapped[str] = mapped_column(String(16))


class Pin(Base):
    """A production pin: config (+ build) with its evidence; the newest row is current."""

    __tablename__ = "pins"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    config_hash: Mapped[str] = mapped_column(ForeignKey("configs.config_hash"))
    build_hash: Mapped[Optional[str]] = mapped_column(ForeignKey("engine_builds.build_hash"))
    note: Mapped[str] = mapped_column(Text)
    evidence: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class WebToken(Base):
    """A web-panel access token, stored as a salted hash (the token itself is printed once)."""

    __tablename__ = "web_tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    token_hash: Mapped[str] = mapped_column(String(200))
    label: Mapped[Optional[str]] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[Optional[datetime]]
    expires_at: Mapped[Optional[datetime]]  # migration 0010; None: never expires


class Golden(Base):
    """A recorded greedy continuation of a prompt by a config: the canary and the lossless reference.

    ``kind``: canary | lossless. ``output_ids`` are token ids when the engine returned them.
    """

    __tablename__ = "goldens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    config_hash: Mapped[str] = mapped_column(ForeignKey("configs.config_hash"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    prompt_sha256: Mapped[str] = mapped_column(String(64))
    prompt: Mapped[str] = mapped_column(Text)
    max_new_tokens: Mapped[int]
    output_text: Mapped[str] = mapped_column(Text)
    output_ids: Mapped[Optional[list[Any]]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ImportRecord(Base):
    """One imported piece of evidence (``kind``: log, metrics, requests, bench, trace).

    ``sha256`` is of the file (several files: of their sorted sha256s joined by ``,``), so a
    re-import of the same evidence finds this row instead of adding another. ``files``:
    list of ``{path, size, sha256}``; ``boot_id`` / ``run_id`` / ``profile_id`` the rows it made.
    """

    __tablename__ = "imports"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(16))
    sha256: Mapped[str] = mapped_column(String(64))
    files: Mapped[list[Any]] = mapped_column(JSON)
    config_hash: Mapped[Optional[str]] = mapped_column(ForeignKey("configs.config_hash"))
    boot_id: Mapped[Optional[str]] = mapped_column(ForeignKey("boots.id"))
    run_id: Mapped[Optional[str]] = mapped_column(ForeignKey("runs.id"))
    profile_id: Mapped[Optional[int]] = mapped_column(ForeignKey("profile_runs.id"))
    summary: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (UniqueConstraint("kind", "sha256", name="uq_imports_kind_sha256"),)
