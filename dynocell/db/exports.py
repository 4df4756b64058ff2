"""Flat rows for a fleet export: runs, acceptance curves, profile splits and phase splits started since a time.

Every function returns a list of plain dicts (one per row, columns as named in
``models``) joined with what a notebook needs to group them (host, config,
run); JSON columns stay Python lists/dicts — the writer decides how to encode.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select

from dynocell.db.tables import AcceptanceCurve, Host, ProfilePhases, ProfileRun, ProfileSplit, Run
from dynocell.db.session import Store

RUN_COLUMNS = ("id", "kind", "config_hash", "boot_id", "build_hash", "host_id", "state", "step", "error",
               "workload", "workload_sha256", "lossless", "summary", "breakeven", "started_at", "ended_at")
CURVE_COLUMNS = ("text_class", "num_drafts", "steps", "tau", "accept_rate", "histogram", "completion_tokens",
                 "engine_tau", "engine_source", "disagreement_pct")
SPLIT_COLUMNS = ("rank", "category", "ms", "pct", "launches")
PHASE_COLUMNS = ("state", "source", "reason", "rank", "total_ms", "phase", "label", "ms", "pct", "launches",
                 "launches_per_token")


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


def _per_profile(s: Any, table: Any, since: datetime, host_ids: list[str] | None) -> list[tuple[Any, dict[str, Any]]]:
    """Rows of ``table`` (a per-profile table: ``profile_id``, ``id``) under the profiles of the runs since
    ``since``, each with the keys a notebook groups by: ``run_id``, ``profile_id``, ``host_id``, ``config_hash``."""
    runs = {r.id: r for r in s.scalars(_runs_query(since, host_ids))}
    if not runs:
        return []
    q = (select(table, ProfileRun).join(ProfileRun, table.profile_id == ProfileRun.id)
         .where(ProfileRun.run_id.in_(list(runs))).order_by(table.id))
    return [(row, {"run_id": p.run_id, "profile_id": p.id, "host_id": p.host_id or runs[p.run_id].host_id,
                   "config_hash": runs[p.run_id].config_hash}) for row, p in s.execute(q).all()]


def splits_since(store: Store, since: datetime, host_ids: list[str] | None = None) -> list[dict[str, Any]]:
    """Profile kernel-time splits of those runs: ``run_id``, ``profile_id``, ``host_id``, ``config_hash`` and
    :data:`SPLIT_COLUMNS` (``rank`` −1 = all ranks; ``ms`` milliseconds; ``pct`` percent of device time)."""
    with store.session() as s:
        return [{**keys, **{k: getattr(sp, k) for k in SPLIT_COLUMNS}}
                for sp, keys in _per_profile(s, ProfileSplit, since, host_ids)]


def phases_since(store: Store, since: datetime, host_ids: list[str] | None = None) -> list[dict[str, Any]]:
    """The speculative step's phase split (``profile_phases``, migration 0008) of those runs' profiles,
    one row per (profile, rank, phase): ``run_id``, ``profile_id``, ``host_id``, ``config_hash`` and
    :data:`PHASE_COLUMNS`. ``rank`` −1 = the ranks combined (the stored ``phases``), else one rank of
    the stored ``ranks``; ``total_ms`` is that rank's (or the combined) step time, ``ms`` the phase's
    time in milliseconds and ``pct`` its percent of ``total_ms``. A split in state ``unavailable`` is
    one row with ``phase`` None and its ``reason`` (e.g. vLLM 0.26.0 traces carry no phase ranges)."""
    with store.session() as s:
        out: list[dict[str, Any]] = []
        for ph, keys in _per_profile(s, ProfilePhases, since, host_ids):
            head = {**keys, "state": ph.state, "source": ph.source, "reason": ph.reason}
            groups = [(-1, ph.total_ms, ph.phases or [])] + [
                (r.get("rank"), r.get("total_ms"), r.get("phases") or []) for r in (ph.ranks or [])]
            rows = [{**head, "rank": rank, "total_ms": total,
                     **{k: item.get(k) for k in PHASE_COLUMNS[5:]}}
                    for rank, total, items in groups for item in items]
            out.extend(rows or [{**head, "rank": -1, "total_ms": ph.total_ms,
                                 **dict.fromkeys(PHASE_COLUMNS[5:])}])
        return out
