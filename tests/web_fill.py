"""Store filling for the web-panel tests.

``fill_store(cell)`` first tries the REAL main job (``dynocell.runbooks.run.run_job`` on
``examples/tiny.toml``, reference engine) and falls back to STAND-IN rows written through the
db models when the procedures are not complete yet. The stand-in rows have the shapes the real
job writes (two configs, runs with bench levels, acceptance curves per text class, a profile
split, findings, a failed boot with a signature, a live boot, a log with a ``<script>`` line,
a runbook entry with a ``<script>`` in its body).  # lead: switch to the real run when it works
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

from dynocell.db import tables as m
from dynocell.engine.config import parse_config

REPO = Path(__file__).resolve().parents[1]
XSS = "<script>window.__pwned = 1</script>"
CATEGORIES = [("gemm", 41.0), ("attention", 22.0), ("elementwise", 14.0), ("norm", 8.0), ("sampling", 6.0),
              ("memcpy/gather", 5.0), ("other", 4.0)]


def _hist_to_p(h: list[int]) -> list[float]:
    n = sum(h)
    d = len(h) - 1
    return [sum(h[k] for k in range(i, d + 1)) / n for i in range(1, d + 1)]


def add_config(cell, toml_text: str, label: str) -> str:
    cfg = parse_config(toml_text, "<test>")
    with cell.store.session() as s:
        if s.get(m.Config, cfg.config_hash) is None:
            s.add(m.Config(config_hash=cfg.config_hash, engine=cfg.engine, model_path=cfg.model_path,
                           canonical_json=cfg.canonical_json(), source_toml=toml_text))
            s.flush()
        s.add(m.ConfigLabel(name=label, config_hash=cfg.config_hash))
    return cfg.config_hash


STAND_IN_PIDS: set[int] = set()
"""Pids of the stand-in engines this process started (they live until exit: see :func:`live_children`)."""


def live_children() -> list:
    """This process's live (non-zombie) descendants, less the stand-in engines of filled stores, which
    live for the whole test session on purpose, and the session's reaper (tests/conftest.py starts it as
    a child of the owning pytest): what a leak check should find."""
    import psutil

    out = []
    for c in psutil.Process().children(recursive=True):
        try:
            if (c.pid not in STAND_IN_PIDS and c.status() != psutil.STATUS_ZOMBIE
                    and not any(a.endswith("session_reaper.py") for a in c.cmdline())):  # conftest's
                out.append(c)
        except psutil.NoSuchProcess:
            pass
    return out


def _stand_in_engine() -> tuple[int, float]:
    """A real process standing in for a live boot's engine (its own session, like an engine; killed
    at exit): ``(pid, create time)``. A live row must name a live process, or reconciling (which
    every dashboard poll does, as `dynocell ps`) rightly settles it as ``lost``."""
    import atexit
    import subprocess
    import sys

    import psutil

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(86400)"], start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    atexit.register(lambda: proc.poll() is None and proc.kill())
    STAND_IN_PIDS.add(proc.pid)
    threading.Thread(target=proc.wait, daemon=True).start()  # reap it when stopped
    return proc.pid, psutil.Process(proc.pid).create_time()


def add_boot(cell, config_hash: str, state: str = "stopped", signature: str | None = None,
             log_lines: list[str] | None = None) -> str:
    bid = "b" + uuid.uuid4().hex[:11]
    home = Path(cell.settings.home)
    d = home / "boots" / bid
    d.mkdir(parents=True, exist_ok=True)
    log = d / "engine.log"
    lines = log_lines or [
        "[reference] loading target model", "[reference] loading draft model",
        f"[reference] weird model output {XSS}", "[reference] capturing graphs",
        "[reference] server ready on port 41234",
    ]
    log.write_text("\n".join(lines) + "\n")
    (d / "traces").mkdir(exist_ok=True)
    (d / "traces" / "rank0.trace.json.gz").write_bytes(b"\x1f\x8b fake")
    start = datetime.now(timezone.utc) - timedelta(minutes=7)
    pid, ctime = 4242, None
    if state in ("ready", "starting"):
        # live: a real stand-in engine, supervised by this (test) process
        pid, ctime = _stand_in_engine()
    with cell.store.session() as s:
        b = m.Boot(id=bid, config_hash=config_hash, engine="reference",
                   hostname=socket.gethostname() if ctime else "testhost", host="127.0.0.1",
                   supervisor_pid=os.getpid() if ctime else None, engine_create_time=ctime,
                   port=41234, argv="python -m dynocell.engine.reference", env={}, pid=pid, pgid=pid,
                   state=state, last_phase="ready" if not signature else "load_weights", log_path=str(log),
                   started_at=start, ready_at=None if signature else start + timedelta(seconds=6.5),
                   ready_s=None if signature else 6.5,
                   ended_at=None if state in ("ready", "starting") else start + timedelta(minutes=2),
                   exit_code=None if state == "ready" else (1 if signature else 0),
                   stop_how=None if state == "ready" or signature else "graceful",
                   failure_signature=signature, failure_detail={"line": "RuntimeError: CUDA out of memory"}
                   if signature else None)
        s.add(b)
        s.flush()
        phases = [("spawn", 0.0), ("import", 0.4), ("load_weights", 1.2), ("load_draft", 3.1), ("capture_graphs", 4.0),
                  ("ready", 6.5)]
        if signature:
            phases = phases[:3]
        for name, off in phases:
            s.add(m.BootEvent(boot_id=bid, offset_s=off, kind="phase", name=name, ts=start + timedelta(seconds=off)))
        if not signature:
            for i, verdict in enumerate(("healthy", "healthy")):
                s.add(m.HealthCheck(boot_id=bid, verdict=verdict, ts=start + timedelta(seconds=7 + i * 30), checks=[
                    {"name": "process", "ok": True, "latency_ms": 0.2, "reason": None},
                    {"name": "health", "ok": True, "latency_ms": 3.1, "reason": None},
                    {"name": "health_generate", "ok": True, "latency_ms": 48.0, "reason": None},
                    {"name": "server_info", "ok": True, "latency_ms": 2.4, "reason": None}]))
    return bid


def add_run(cell, config_hash: str, boot_id: str, *, scale: float = 1.0,
            hists: dict[str, list[int]] | None = None) -> str:
    rid = "r" + uuid.uuid4().hex[:11]
    hists = hists or {"code": [10, 12, 18, 60], "prose": [25, 20, 25, 30]}
    start = datetime.now(timezone.utc) - timedelta(minutes=5)
    with cell.store.session() as s:
        s.add(m.Run(id=rid, kind="run", config_hash=config_hash, boot_id=boot_id, state="completed", step="diagnose",
                    lossless="pass", lossless_detail={"prompts": 4, "mismatches": 0},
                    breakeven={"tau": 2.5, "spec_step_ms": 21.0, "plain_step_ms": 11.0, "breakeven_ms": 27.5,
                               "margin_pct": 23.6},
                    started_at=start, ended_at=start + timedelta(seconds=48)))
        s.flush()
        for name in ("config", "build", "boot", "health", "bench", "acceptance", "lossless", "profile", "breakeven",
                     "stop", "diagnose"):
            s.add(m.RunStep(run_id=rid, name=name, state="completed", started_at=start, ended_at=start))
        for conc in (1, 4, 16):
            out = 120.0 * conc ** 0.7 * scale
            s.add(m.BenchRun(run_id=rid, boot_id=boot_id, concurrency=conc, num_requests=8 * conc, duration_s=4.0,
                             prompt_tokens=900 * conc, completion_tokens=512 * conc,
                             request_throughput=2.0 * conc ** 0.7,
                             output_tok_s=out, total_tok_s=out * 2.7, prefill_tok_s=3000.0, decode_tok_s=out * 1.1,
                             ttft_ms={"p50": 12.0 * conc, "p90": 15.0 * conc, "p99": 19.0 * conc},
                             tpot_ms={"p50": 8.0, "p90": 9.5, "p99": 12.0}, itl_ms={"p50": 20.0, "p90": 25.0,
                                                                                    "p99": 31.0},
                             e2e_ms={"p50": 410.0 * conc ** 0.3, "p90": 480.0, "p99": 560.0}))
        for tc, h in hists.items():
            n = sum(h)
            tau = 1 + sum(k * v for k, v in enumerate(h)) / n
            c = m.AcceptanceCurve(run_id=rid, text_class=tc, num_drafts=len(h) - 1, steps=n, tau=tau,
                                  accept_rate=(tau - 1) / (len(h) - 1), histogram=h, completion_tokens=int(tau * n),
                                  engine_tau=round(tau * 1.003, 4), engine_source="meta_info",
                                  disagreement_pct=0.3)
            s.add(c)
            s.flush()
            prev = 1.0
            for i, p in enumerate(_hist_to_p(h), start=1):
                s.add(m.AcceptancePoint(curve_id=c.id, position=i, p_uncond=p, a_cond=p / prev if prev else 0.0))
                prev = p
        pr = m.ProfileRun(run_id=rid, boot_id=boot_id, state="completed", source="cpu_op", num_ranks=1,
                          device_ms=812.0 * scale, window_ms=1000.0, busy_pct=81.2, launches=5400, output_tokens=256,
                          ms_per_token=3.17, launches_per_token=21.1)
        s.add(pr)
        s.flush()
        for i, (cat, pct) in enumerate(CATEGORIES):
            pct = pct * (1 + 0.1 * (scale - 1) * (1 if i % 2 else -1))
            s.add(m.ProfileSplit(profile_id=pr.id, rank=-1, category=cat, ms=8.12 * pct, pct=pct,
                                 launches=300 + i * 50))
        for i, (name, cat) in enumerate([("aten::addmm", "gemm"), ("aten::_scaled_dot_product_attention", "attention"),
                                         ("aten::mul", "elementwise"), (f"aten::rms_norm {XSS}", "norm"),
                                         ("aten::argmax", "sampling")]):
            s.add(m.ProfileKernel(profile_id=pr.id, rank=-1, name=name, category=cat, ms=300.0 / (i + 1),
                                  launches=900 - i * 100))
        s.add(m.Finding(run_id=rid, rule="depth_decay", severity="warn",
                        message="acceptance decays with depth: a_3 is well below a_1", evidence={"a1": 0.9, "a3": 0.5},
                        entries=["acceptance-definitions"]))
        s.add(m.Note(target_kind="run", target_id=rid, text="baseline on the tiny pair"))
    return rid


def fill_stand_in(cell) -> dict[str, object]:
    """STAND-IN store content (see module docstring). Returns the ids tests use."""
    tiny_toml = (REPO / "examples" / "tiny.toml").read_text()
    h1 = add_config(cell, tiny_toml, "tiny")
    h2 = add_config(cell, tiny_toml.replace("num_draft_tokens = 4", "num_draft_tokens = 3")
                    .replace("num_steps = 3", "num_steps = 2"), "tiny-d2")
    b1 = add_boot(cell, h1)
    r1 = add_run(cell, h1, b1)
    b2 = add_boot(cell, h2)
    r2 = add_run(cell, h2, b2, scale=1.2, hists={"code": [20, 30, 50], "prose": [30, 30, 40]})
    failed = add_boot(cell, h1, state="failed", signature="cuda-oom")
    live = add_boot(cell, h1, state="ready")
    with cell.store.session() as s:
        s.add(m.RunbookEntry(slug="test-xss-entry", title="An entry with a script", kind="trap", tags=["test"],
                             origin="operator", source_path="/dev/null", sha256="0" * 64, front_matter={},
                             body=f"# Hello\n\nText {XSS} and <img src=x onerror=alert(1)> end.\n"))
    return {"configs": [h1, h2], "runs": [r1, r2], "boots": [b1, b2], "failed_boot": failed, "live_boot": live,
            "mode": "stand-in"}
