"""The ``health`` step: the health oracle on the fresh boot, plus a canary generation.
"""

from __future__ import annotations

from typing import Any

from dynocell.db import runs as db_runs
from dynocell.runbooks import boots
from dynocell.runbooks.cell import Cell
from dynocell.runbooks.run.greedy import greedy_generate, text_sha256


def run_health(cell: Cell, live: boots.LiveBoot, d: dict[str, Any]) -> str:
    """Run the health oracle (with the canary once the config has a golden) and store the verdict."""
    from dynocell.engine import health as engine_health

    client = live.client(cell.settings.http_timeout_s)
    golden = db_runs.get_golden(cell.store, live.config_hash, "canary", text_sha256(CANARY_PROMPT), CANARY_TOKENS)
    canary = engine_health.Canary(CANARY_PROMPT, golden.output_text, CANARY_TOKENS) if golden else None
    verdict = engine_health.check_health(
        client, process_alive=live.supervisor.poll().value == "ready", stop_requested=False,
        expected=boots.expected_server(live.cfg), canary=canary, previous_progress=None,
        generate_timeout_s=cell.settings.health_generate_timeout_s,
        ranks=boots.rank_status_of(live.cfg, live.supervisor.pid, live.supervisor.pgid),
        **boots.oracle_kw(live.cfg),
    )
    boots.record_verdict(cell, live.boot_id, verdict)
    d.update(verdict=verdict.verdict, failed=list(verdict.failed), canary="checked" if canary else "none yet")
    if verdict.verdict == "healthy" and golden is None:
        # First qualification of this config: record the canary's greedy continuation.
        body = greedy_generate(client, CANARY_PROMPT, CANARY_TOKENS, cell.settings.request_timeout_s, live.cfg)
        db_runs.put_golden(cell.store, config_hash=live.config_hash, kind="canary",
                           prompt_sha256=text_sha256(CANARY_PROMPT), prompt=CANARY_PROMPT,
                           max_new_tokens=CANARY_TOKENS, output_text=body.get("text", ""),
                           output_ids=body.get("output_ids"))
        d["canary"] = "recorded"
    return verdict.verdict


CANARY_PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown"
CANARY_TOKENS = 16
