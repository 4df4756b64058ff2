"""Rank processes of a multi-GPU engine: discover them in the process tree, judge them.

SGLang 0.5.17 names its processes with ``setproctitle`` (``sglang/srt/managers/
scheduler.py`` ``run_scheduler_process``; ``detokenizer_manager.py``):

- one scheduler per GPU rank: ``sglang::scheduler`` + ``_DP{d}`` (data parallel,
  when dp > 1) + ``_TP{t}`` (tp > 1) + ``_PP{p}`` (pp > 1) [+ ``_EP{e}``], e.g.
  ``sglang::scheduler_TP0``, ``sglang::scheduler_TP1`` for ``--tp-size 2``
  (the log prefixes ``[… TP0]`` / ``[… TP1]`` of
  tests/data/sglang-0.5.17-tp2/T.server.log); a single-GPU engine has a bare
  ``sglang::scheduler``;
- ``sglang::detokenizer``.

The title replaces ``/proc/PID/cmdline``; the kernel's ``comm`` (``ps -o comm``,
psutil ``name()``) keeps only 15 characters: ``sglang::schedul``,
``sglang::detoken``. A zombie has no cmdline any more, so a dead rank shows
only as ``[sglang::detoken] <defunct>`` (docs/h200/README.md): a truncated
scheduler name is reported as ``scheduler?`` (rank unknown). Zombies count
as dead.

vLLM (V1 engine, 0.26) runs the API server in the launched process and its engine
in a child titled ``VLLM::EngineCore`` (``VLLM::EngineCore_DP{d}`` per data-parallel
rank; ``vllm/utils/system_utils.py`` ``set_process_title``, prefix
``VLLM_PROCESS_NAME_PREFIX``), comm ``VLLM::EngineCor``. Each EngineCore is a rank here:
a dead EngineCore behind a live API server is ``none_alive`` → the oracle says ``down``.

Processes are matched on the cmdline OR the name, so test engines can mark
children through their argv.

API: :func:`expected_ranks` ``(cfg, node_rank=None) -> int``;
:func:`find_ranks` ``(pid, pgid) -> list[RankProc]``; :func:`rank_status`
``(pid, pgid, expected) -> RankStatus``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NamedTuple

import psutil

from dynocell.engine.supervisor import group_members

_TITLE = re.compile(r"sglang::(scheduler(?:_[A-Z]+\d+)*|detokenizer)|VLLM::(EngineCore(?:_DP\d+)?)")
_COMM = {"sglang::schedul": "scheduler?", "sglang::detoken": "detokenizer",  # 15-char comm
         "VLLM::EngineCor": "EngineCore?"}
#: Names of the processes that are ranks (the rest, e.g. SGLang's detokenizer, only count when dead).
_RANK_PREFIXES = ("scheduler", "EngineCore")


class RankProc(NamedTuple):
    """One engine process found: ``name`` (``scheduler_TP0``, ``detokenizer``,
    ``scheduler?`` when only the truncated comm is left), ``pid``, ``alive``
    (running and not a zombie)."""

    name: str
    pid: int
    alive: bool


@dataclass(frozen=True)
class RankStatus:
    """Rank processes of one engine against the expected count.

    ``found``: every scheduler/detokenizer process found (ordered by name, pid);
    ``expected``: scheduler ranks wanted (0 = not checked); ``missing``: how
    many of the expected schedulers were not found at all; ``dead``: names of
    found processes that are dead (zombies).
    """

    found: list[RankProc]
    expected: int
    missing: int
    dead: list[str]

    @property
    def schedulers(self) -> list[RankProc]:
        """The scheduler (rank) processes among ``found``."""
        return [r for r in self.found if r.name.startswith(_RANK_PREFIXES)]

    @property
    def alive(self) -> int:
        """Number of live scheduler ranks."""
        return sum(1 for r in self.schedulers if r.alive)

    @property
    def ok(self) -> bool:
        """No rank missing and nothing dead."""
        return self.missing == 0 and not self.dead

    @property
    def none_alive(self) -> bool:
        """True when ranks were expected and not one scheduler lives."""
        return self.expected > 0 and self.alive == 0

    @property
    def reason(self) -> str:
        """One line: ``2/2 ranks alive (scheduler_TP0, scheduler_TP1)`` or what is wrong."""
        names = ", ".join(r.name for r in self.schedulers if r.alive) or "none"
        head = f"{self.alive}/{self.expected} ranks alive ({names})"
        bad = []
        if self.dead:
            bad.append("dead: " + ", ".join(self.dead))
        if self.missing:
            bad.append(f"{self.missing} missing")
        return head + ("; " + "; ".join(bad) if bad else "")

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict."""
        return {"expected": self.expected, "missing": self.missing, "dead": list(self.dead),
                "found": [r._asdict() for r in self.found]}


def expected_ranks(cfg: Any, node_rank: int | None = None) -> int:
    """Scheduler processes an engine of ``cfg`` (an EngineConfig) runs on one node; 0 = not checked.

    SGLang: tp × pp × dp (SGLang's data-parallel controller starts dp replicas
    of tp × pp schedulers), or tp × pp with ``--enable-dp-attention`` in
    ``extra_args`` (dp lives inside tp then). With ``[[nodes]]`` the count is
    the share of ``node_rank``'s GPUs (``gpus × dp``; dp-attention: ``gpus``);
    ``node_rank`` None with several nodes means node 0. vLLM: one EngineCore per
    data-parallel rank (dp), also for the reference engine's vLLM surface (its stand-in
    EngineCore child). The reference engine otherwise (one process, no ranks) → 0.
    """
    if getattr(cfg, "api", None) == "vllm":  # vLLM, or the reference engine's vLLM surface (one EngineCore)
        return max(1, cfg.parallel.dp_size)
    if getattr(cfg, "engine", None) != "sglang":
        return 0
    p = cfg.parallel
    dp = 1 if "--enable-dp-attention" in list(cfg.extra_args) else max(1, p.dp_size)
    nodes = list(getattr(cfg, "nodes", []) or [])
    if len(nodes) > 1:
        want = 0 if node_rank is None else node_rank
        for n in nodes:
            if n.node_rank == want:
                return n.gpus * dp
        return 0
    return p.tp_size * p.pp_size * dp


def _label(p: psutil.Process) -> tuple[str, bool] | None:
    try:
        status = p.status()
        name = p.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    alive = status != psutil.STATUS_ZOMBIE
    try:
        cmd = " ".join(p.cmdline()) if alive else ""
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        cmd = ""
    m = _TITLE.search(cmd) or _TITLE.search(name)
    if m:
        return m.group(1) or m.group(2), alive
    for prefix, label in _COMM.items():
        if name.startswith(prefix):
            return label, alive
    return None


def find_ranks(pid: int | None, pgid: int | None) -> list[RankProc]:
    """Scheduler/detokenizer processes among ``pgid``'s members and ``pid``'s descendants
    (zombies included), ordered by (name, pid). Never raises for vanished processes."""
    procs: dict[int, psutil.Process] = {}
    if pgid:
        for p in group_members(pgid):
            procs.setdefault(p.pid, p)
    if pid:
        try:
            root = psutil.Process(pid)
            procs.setdefault(root.pid, root)
            for c in root.children(recursive=True):
                procs.setdefault(c.pid, c)
        except psutil.NoSuchProcess:
            pass
    out = []
    for p in procs.values():
        lab = _label(p)
        if lab is not None:
            out.append(RankProc(lab[0], p.pid, lab[1]))
    return sorted(out, key=lambda r: (r.name, r.pid))


def rank_status(pid: int | None, pgid: int | None, expected: int) -> RankStatus:
    """Find the rank processes of the engine ``pid``/``pgid`` and judge them against ``expected``.

    ``missing`` = expected − schedulers found (dead ones included, so a zombie
    counts as dead, not missing); ``dead`` lists every found scheduler or
    detokenizer that is a zombie. See the module docstring for the names.
    """
    found = find_ranks(pid, pgid)
    sched = [r for r in found if r.name.startswith(_RANK_PREFIXES)]
    dead = [f"{r.name} (pid {r.pid})" for r in found if not r.alive]
    return RankStatus(found=found, expected=expected, missing=max(0, expected - len(sched)), dead=dead)
