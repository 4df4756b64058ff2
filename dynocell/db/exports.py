"""Flat rows for a fleet export: runs, acceptance curves and profile splits started since a time.

Every function returns a list of plain dicts (one per row, columns as named in
``models``) joined with what a notebook needs to group them (host, config,
run); JSON columns stay Python lists/dicts — the writer decides how to encode.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select

from dynocell.db.tables import AcceptanceCurve, Host, ProfileRun, ProfileSplit, Run
from dynocell.db.session import Store

RUN_COLUMNS = ("id", "kind", "config_hash", "boot_id", "build_hash", "host_id", "state", "step", "error",
               "workload", "workload_sha256", "lossless", "summary", "breakeven", "started_at", "ended_at")
CURVE_COLUMNS = ("text_class", "num_drafts", "steps", "tau", "accept_rate", "histogram", "completion_tokens",
                 "engine_tau", "engine_source", "disagreement_pct")
SPLIT_COLUMNS = ("rank", "category", "ms", "pct", "launches")


def _runs_query(since: datetime, host_ids: list[str] | None):
    q = select(Run).where(Run.started_at >= since).order_by(Run.started_at, Run.id)
    if host_ids is not None:
        q = q.where(Run.host_id.in_(host_ids))
    return q


def runs_since(store: Store, since: datetime, host_ids: list[str] | None = None) -> list[dict[str, Any]]:
    """Runs started at or after ``since`` (UTC-aware), oldest first, each with ``hostname``."""
    with store.session() as s:
        names = {h.id: h.hostname for h in s.scalars(select(Host))}
        return [{**{c: getattr(r, c) for c in RUN_COLUMNS}, "hostname": names.get(r.host_id or "")}
                for r in s.scalars(_runs_query(since, host_ids))]


def curves_since(store: Store, since: datetime, host_ids: list[str] | None = None) -> list[dict[str, Any]]:
    """Acceptance curves of those runs: ``run_id``, ``host_id``, ``config_hash`` and :data:`CURVE_COLUMNS`."""
    with store.session() as s:
        runs = {r.id: r for r in s.scalars(_runs_query(since, host_ids))}
        if not runs:
            return []
        q = select(AcceptanceCurve).where(AcceptanceCurve.run_id.in_(list(runs))).order_by(AcceptanceCurve.id)
        return [{"run_id": c.run_id, "host_id": runs[c.run_id].host_id, "config_hash": runs[c.run_id].config_hash,
                 **{k: getattr(c, k) for k in CURVE_COLUMNS}} for c in s.scalars(q)]


def splits_since(store: Store, since: datetime, host_ids: list[str] | None = None) -> list[dict[str, Any]]:
    """Profile kernel-time splits of those runs: ``run_id``, ``profile_id``, ``host_id``, ``config_hash`` and
    :data:`SPLIT_COLUMNS` (``rank`` −1 = all ranks; ``ms`` milliseconds; ``pct`` percent of device time)."""
    with store.session() as s:
        runs = {r.id: r for r in s.scalars(_runs_query(since, host_ids))}
        if not runs:
            return []
        q = (select(ProfileSplit, ProfileRun).join(ProfileRun, ProfileSplit.profile_id == ProfileRun.id)
             .where(ProfileRun.run_id.in_(list(runs))).order_by(ProfileSplit.id))
        return [{"run_id": p.run_id, "profile_id": p.id, "host_id": p.host_id or runs[p.run_id].host_id,
                 "config_hash": runs[p.run_id].config_hash, **{k: getattr(sp, k) for k in SPLIT_COLUMNS}}
                for sp, p in s.execute(q).all()]
