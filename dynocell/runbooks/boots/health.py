"""Health of a boot: the oracle's verdict recorded, and ``dynocell health`` against a stored boot.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dynocell.db import boots as db_boots
from dynocell.engine import health as engine_health
from dynocell.engine import kinds
from dynocell.engine import ranks as engine_ranks
from dynocell.engine.adapters import engine_base_url
from dynocell.engine.client import EngineClient
from dynocell.engine.config import EngineConfig
from dynocell.errors import UserError
from dynocell.runbooks import events
from dynocell.runbooks.boots.live import resolve_boot
from dynocell.runbooks.boots.reconcile import refuse_foreign, reconcile
from dynocell.runbooks.boots.start import resolve_models
from dynocell.runbooks.cell import Cell


def expected_server(cfg: EngineConfig) -> "engine_health.ExpectedServer":
    """What /get_server_info must report for ``cfg`` (model path, tp size, speculative widths); a registered
    engine kind's own expectation (:mod:`dynocell.engine.kinds`) for its engines."""
    kind = kinds.get(cfg.engine)
    if kind is not None:
        return kind.expected(cfg)
    return engine_health.ExpectedServer.from_config(cfg)


def oracle_kw(cfg: EngineConfig) -> dict[str, Any]:
    """``check_health`` keywords of ``cfg``'s engine: its surface (``api``), and for a registered kind its
    surface checks and progress metric names."""
    kind = kinds.get(cfg.engine)
    if kind is None:
        return {"api": engine_health.api_of(cfg)}
    return {"api": kind.api, "surface_checks": kind.surface_checks, "progress_names": kind.progress_names()}


def record_verdict(cell: Cell, boot_id: str, verdict: Any) -> db_boots.HealthRow:
    """Store a health verdict and publish it."""
    checks = verdict.as_dict()["checks"]
    if verdict.progress is not None:
        checks.append({"name": "_progress_sample", "ok": True, "latency_ms": None, "reason": "",
                       "sample": dataclasses.asdict(verdict.progress)})
    row = db_boots.add_health(cell.store, boot_id, verdict.verdict, checks, ",".join(verdict.failed))
    events.publish("health.recorded", boot_id=boot_id, verdict=verdict.verdict, failed=list(verdict.failed))
    return row


def health(cell: Cell, boot_ref: str) -> db_boots.HealthRow:
    """Run the health oracle on a boot now and store the verdict.

    The progress check compares with the previous stored verdict's sample.
    Returns the stored row (``verdict``, ``checks``, ``failed``).
    """
    boot = reconcile(cell, resolve_boot(cell, boot_ref))
    refuse_foreign(boot, "probe its health")
    if boot["state"] not in db_boots.LIVE_STATES:
        raise UserError(f"boot {boot['id']} is {boot['state']}: there is no engine to probe",
                        f"see `dynocell show {boot['id']}` for how it ended, or boot it again")
    cfg = config_of_boot(cell, boot)
    from dynocell.runbooks.attach import attached_scheme

    client = EngineClient(engine_base_url(boot["host"], boot["port"], attached_scheme(boot.get("argv"))),
                          cell.settings.http_timeout_s)
    prev = db_boots.health_history(cell.store, boot["id"], limit=1)
    prev_sample = None
    if prev:
        for c in prev[0].checks:
            if c.get("name") == "_progress_sample" and c.get("sample"):
                prev_sample = engine_health.ProgressSample(**c["sample"])
    verdict = engine_health.check_health(
        client,
        process_alive=boot["engine_alive"],
        stop_requested=boot["state"] in ("stopping", "stopped"),
        expected=expected_server(resolve_models(cell, cfg)),
        canary=None,
        previous_progress=prev_sample,
        generate_timeout_s=cell.settings.health_generate_timeout_s,
        ranks=rank_status_of(cfg, boot["pid"], boot["pgid"] or boot["pid"]),
        **oracle_kw(cfg),
    )
    return record_verdict(cell, boot["id"], verdict)


def rank_status_of(cfg: EngineConfig, pid: int | None, pgid: int | None) -> engine_ranks.RankStatus | None:
    """The rank processes of a boot (issue 11) when ``cfg`` runs more than one rank, else None (not checked).

    vLLM is checked with one rank too: its engine is a child (EngineCore) of the API server.
    """
    expected = engine_ranks.expected_ranks(cfg)
    if not pid or expected == 0 or (expected == 1 and cfg.api != "vllm"):
        return None
    return engine_ranks.rank_status(pid, pgid, expected)


def config_of_boot(cell: Cell, boot: dict[str, Any]) -> EngineConfig:
    """The EngineConfig a boot (a :func:`reconcile` row) was started with (from its stored canonical JSON)."""
    from dynocell.runbooks.configs import config_by_hash

    return config_by_hash(cell, boot["config_hash"])
