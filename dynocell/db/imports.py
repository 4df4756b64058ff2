"""Imported evidence in one transaction: a config, a boot with its events, a run with its
bench levels and acceptance curves, a profile — and the ``imports`` row naming the source.

:func:`record_import` writes all of it or nothing (an importer that fails half way
leaves no row). :func:`find_import` is the "same file imported twice is one
record" lookup by ``(kind, sha256)``. Values in are plain dicts (columns); the import row comes
back as an :class:`ImportRow` record.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from dynocell.db import rows
from dynocell.db.rows import row_dict
from dynocell.db.tables import (
    AcceptanceCurve, AcceptancePoint, BenchRun, Boot, BootEvent, Config, ImportRecord, ProfileKernel, ProfilePhases,
    ProfileRun, ProfileSplit, Run,
)
from dynocell.db.session import Store

__all__ = ["ImportRow", "find_import", "list_imports", "record_attached", "record_import"]


@dataclass(frozen=True)
class ImportRow(rows.Record):
    """One row of ``imports``: ``kind`` (log, metrics, requests, bench, trace), the source ``sha256``,
    ``files`` (``[{path, size, sha256}]``), the rows it made (``config_hash``, ``boot_id``, ``run_id``,
    ``profile_id``), the importer's ``summary`` and ``created_at`` (UTC)."""

    id: int
    kind: str
    sha256: str
    files: list[Any]
    config_hash: str | None
    boot_id: str | None
    run_id: str | None
    profile_id: int | None
    summary: dict[str, Any]
    created_at: datetime


def find_import(store: Store, kind: str, sha256: str) -> ImportRow | None:
    """The import of ``kind`` with this source ``sha256``, or None."""
    with store.session() as s:
        row = s.scalar(select(ImportRecord).where(ImportRecord.kind == kind, ImportRecord.sha256 == sha256))
        return ImportRow.of(row) if row else None


def list_imports(store: Store, limit: int = 100) -> list[ImportRow]:
    """Imports, newest first."""
    with store.session() as s:
        return [ImportRow.of(r)
                for r in s.scalars(select(ImportRecord).order_by(ImportRecord.id.desc()).limit(limit))]


def record_import(
    store: Store,
    *,
    kind: str,
    sha256: str,
    files: list[dict[str, Any]],
    summary: dict[str, Any],
    config: dict[str, Any] | None = None,
    boots: list[dict[str, Any]] = (),  # type: ignore[assignment]
    events: list[dict[str, Any]] = (),  # type: ignore[assignment]
    run: dict[str, Any] | None = None,
    bench: list[dict[str, Any]] = (),  # type: ignore[assignment]
    curves: list[dict[str, Any]] = (),  # type: ignore[assignment]
    profile: dict[str, Any] | None = None,
) -> tuple[ImportRow, bool]:
    """Write one import in one transaction; returns ``(import row, created)``.

    ``config``: ``Config`` columns (insert-or-ignore by hash). ``boots``: ``Boot``
    columns. ``events``: ``BootEvent`` columns. ``run``: ``Run`` columns.
    ``bench``: ``BenchRun`` columns (``run_id`` filled in). ``curves``:
    ``AcceptanceCurve`` columns plus ``points`` = ``[(position, p, a)]``.
    ``profile``: ``ProfileRun`` columns plus ``splits`` / ``kernels`` lists and an optional
    ``phase_split`` (``ProfilePhases`` columns: the speculative step's phase split).
    When ``(kind, sha256)`` is already stored nothing is written and the stored
    row is returned with ``created`` False.
    """
    existing = find_import(store, kind, sha256)
    if existing is not None:
        return existing, False
    try:
        with store.session() as s:
            if config is not None and s.get(Config, config["config_hash"]) is None:
                s.add(Config(**config))
                s.flush()
            for b in boots:
                s.add(Boot(**b))
            s.flush()
            for e in events:
                s.add(BootEvent(**e))
            if run is not None:
                s.add(Run(**run))
                s.flush()
            for b in bench:
                s.add(BenchRun(**b))
            for c in curves:
                c = dict(c)
                points = c.pop("points", ())
                curve = AcceptanceCurve(**c)
                s.add(curve)
                s.flush()
                for pos, p, a in points:
                    s.add(AcceptancePoint(curve_id=curve.id, position=pos, p_uncond=p, a_cond=a))
            profile_id = None
            if profile is not None:
                prof = dict(profile)
                splits, kernels = prof.pop("splits", ()), prof.pop("kernels", ())
                phases = prof.pop("phase_split", None)
                row = ProfileRun(**prof)
                s.add(row)
                s.flush()
                profile_id = row.id
                for sp in splits:
                    s.add(ProfileSplit(profile_id=row.id, **sp))
                for k in kernels:
                    s.add(ProfileKernel(profile_id=row.id, **k))
                if phases:
                    s.add(ProfilePhases(profile_id=row.id, **phases))
            rec = ImportRecord(kind=kind, sha256=sha256, files=files, summary=summary,
                               config_hash=config["config_hash"] if config else (run or {}).get("config_hash"),
                               boot_id=boots[0]["id"] if boots else (run or {}).get("boot_id"),
                               run_id=run["id"] if run else None, profile_id=profile_id)
            s.add(rec)
            s.flush()
            return ImportRow.of(rec), True
    except IntegrityError:  # a concurrent import of the same file won
        again = find_import(store, kind, sha256)
        if again is None:
            raise
        return again, False


def record_attached(store: Store, *, config: dict[str, Any] | None, boot: dict[str, Any],
                    event: dict[str, Any]) -> dict[str, Any]:
    """Write an attached boot in one transaction: its config (insert-or-ignore by hash, when
    given), the boot row and its first event. Returns the boot row."""
    with store.session() as s:
        if config is not None and s.get(Config, config["config_hash"]) is None:
            s.add(Config(**config))
            s.flush()
        row = Boot(**boot)
        s.add(row)
        s.flush()
        s.add(BootEvent(**event))
        return row_dict(row)
