"""Spawn, watch and stop one engine process group; log to file first; report through events.

The engine layer persists nothing: a :class:`Supervisor` reports what happens
through an ``on_event`` callback and return values, and the runbook layer
records them (boot row, event rows, log digest).

Lifecycle of one boot (one ``Supervisor``)::

    sup = Supervisor("sglang", on_event=record)   # record(event) gets every event
    sup.start(spec, log_path)                     # spawn in its own session / process group
    res = sup.wait_ready(timeout_s=900)           # ReadyResult: ready, or failed (+signature)
    ...                                           # sup.poll() / events: ready → crashed
    stop = sup.stop(grace_s=30)                   # StopResult: graceful | killed | gone

Spawning: ``subprocess.Popen(spec.argv, env=spec.env, cwd=<log_path's folder>, start_new_session=True,
stdout=PIPE, stderr=STDOUT, stdin=DEVNULL)`` — never ``shell=True``, never
dynocell's own environment, never the caller's working directory (a ``uvicorn.py`` planted where
the operator ran ``dynocell boot`` is not imported: the boot directory is the engine's cwd and
``PYTHONSAFEPATH=1`` keeps it off ``sys.path`` too). The child is a session leader, so its pid is its
process-group id (pgid).

Logging: a pump thread reads the merged output line by line, writes each line
as ``<UTC ISO time, ms>Z | <text>\\n`` to ``log_path`` and flushes *before*
parsing, so the log survives a crash of dynocell itself. Then the line is
matched against the engine's phase rules (``rules/<engine>.toml``).

Events (dataclasses, all with ``offset_s`` = seconds since spawn and ``at`` =
UTC datetime): :class:`PhaseReached` (``name``, ``detail``, ``occurrence``,
``line``), :class:`StateChanged` (``old``, ``new``, ``reason``,
``signature``), and optionally :class:`LogLine` (``emit_lines=True``).

Threads: ``on_event`` is called from the pump thread (phases, log lines), the
exit-watcher thread (``failed``/``crashed`` when the child dies) or the thread
that called ``wait_ready``/``stop``/``poll`` (their transitions). Calls are
serialised by the supervisor's lock, so events arrive in order and one at a
time; the callback must be quick and must not block on another thread that
uses the same supervisor (it may read the supervisor's properties).

State machine (:data:`TRANSITIONS`; an illegal transition raises
:class:`IllegalTransition`)::

    starting → ready | failed | stopping | lost
    ready    → stopping | crashed | lost
    stopping → stopped | lost
    failed, crashed, stopped, lost: terminal

``lost`` is never entered by a Supervisor; it is for the runbook layer (a boot
whose supervisor vanished and whose pid is gone) and is listed so the same
:func:`check_transition` guards it. ``stop()`` on a terminal boot (failed,
crashed) still kills what is left of the group but does not change the state.

Readiness (:meth:`Supervisor.wait_ready`): before every ``/health`` probe the
child is checked alive; a dead child fails the boot *at once* with its exit
code, the last 50 log lines and a failure signature — never a timeout. 503 or a
refused connection = still starting; 200 = ready (``ready_s`` recorded). Past
``timeout_s`` (counted from spawn) the boot fails with signature
``boot.timeout`` naming the last phase reached. After a failure the leftover
group is stopped (``stop_on_failure``).

Stop discipline (:func:`stop_process_group`, usable by a process that did not
start the engine): collect the group's members and all descendants with psutil
*before* signalling (children may re-parent), SIGTERM the group (and
descendants outside it) → wait ``grace_s`` → SIGKILL → verify with psutil that
nothing survives. Zombies count as dead but are reported (a real SGLang leaves
``[sglang::detoken] <defunct>``, see docs/h200/README.md).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Callable

import psutil

from dynocell.engine.adapters import LaunchSpec
from dynocell.engine.client import EngineClient, EngineUnreachable
from dynocell.engine.rules import (
    PhaseMatcher,
    Signature,
    SignatureMatch,
    classify,
    strip_prefix,
)
from dynocell.boot_states import TERMINAL, TRANSITIONS, BootState  # noqa: F401 - defined once, re-exported
from dynocell.errors import EngineError, UserError
from dynocell.fsmodes import open_private, private_dir

TAIL_LINES = 50  # lines reported with a failure
TAIL_LINE_CHARS = 2000  # longer lines are cut in the reported tail (the log file keeps them whole)
_KEEP_LINES = 400  # lines kept in memory for classification


S = BootState


class IllegalTransition(EngineError):
    """A boot state change the state machine forbids (a bug in the caller, not the engine)."""


def check_transition(old: BootState | str, new: BootState | str) -> None:
    """Raise :class:`IllegalTransition` unless ``old → new`` is in :data:`TRANSITIONS`."""
    o, n = BootState(old), BootState(new)
    if n not in TRANSITIONS[o]:
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[o])) or "nothing (terminal)"
        raise IllegalTransition(f"boot state {o.value} → {n.value} is not allowed",
                                f"from {o.value} only: {allowed}")


# ---------------------------------------------------------------- events

def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class PhaseReached:
    """A phase line was seen: ``name`` (rule name), ``offset_s`` since spawn, ``detail``
    (named groups of the rule, strings), ``occurrence`` (1 for the first hit of this
    name in the boot), ``line`` (engine text), ``at`` (UTC)."""

    name: str
    offset_s: float
    detail: dict[str, str]
    occurrence: int = 1
    line: str = ""
    at: datetime = field(default_factory=_utcnow)


@dataclass(frozen=True)
class StateChanged:
    """The boot moved ``old → new`` (BootState values) because of ``reason``;
    ``signature`` is set for failed/crashed; ``offset_s`` since spawn."""

    old: str
    new: str
    reason: str
    offset_s: float
    signature: SignatureMatch | None = None
    at: datetime = field(default_factory=_utcnow)


@dataclass(frozen=True)
class LogLine:
    """One engine output line (only with ``emit_lines=True``)."""

    text: str
    offset_s: float
    at: datetime = field(default_factory=_utcnow)


Event = PhaseReached | StateChanged | LogLine


# ---------------------------------------------------------------- results

@dataclass(frozen=True)
class ProcInfo:
    """A process seen during stop: ``pid``, ``name``, psutil ``status`` (e.g. "zombie")."""

    pid: int
    name: str
    status: str


@dataclass(frozen=True)
class StopResult:
    """How a stop ended.

    ``exit_code``: the engine process's return code (negative = killed by that
    signal) when the stopper is its parent, else None. ``how``: ``graceful``
    (everything exited within the grace after SIGTERM), ``killed`` (SIGKILL
    was needed), ``gone`` (nothing was alive when the stop began).
    ``seconds``: wall time of the stop. ``survivors``: processes still alive
    after SIGKILL (should be empty — anything here needs a person).
    ``zombies``: dead-but-unreaped processes (counted dead, reported).
    ``signalled``: pids that were alive when the stop began.
    """

    exit_code: int | None
    how: str
    seconds: float
    survivors: list[ProcInfo]
    zombies: list[ProcInfo]
    signalled: list[int] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """True when no process survived."""
        return not self.survivors


@dataclass(frozen=True)
class ReadyResult:
    """Outcome of :meth:`Supervisor.wait_ready`.

    ``ok``: ready. ``state``: the boot state after waiting. ``ready_s``:
    seconds from spawn to the first ``/health`` 200 (None unless ok).
    ``exit_code``: set when the child died. ``last_phase``: last phase reached.
    ``tail``: last 50 log lines (engine text) on failure. ``signature``: the
    failure signature (``boot.timeout`` for a timeout, ``unknown`` when no
    rule matched). ``reason``: one line. ``stop``: the cleanup StopResult
    when the leftover group was stopped after a failure.
    """

    ok: bool
    state: str
    ready_s: float | None
    exit_code: int | None
    last_phase: str | None
    tail: list[str]
    signature: SignatureMatch | None
    reason: str
    stop: StopResult | None = None


@dataclass(frozen=True)
class FileDigest:
    """``size_bytes`` and ``sha256`` (hex) of a file."""

    size_bytes: int
    sha256: str


def file_digest(path: str | Path) -> FileDigest:
    """Size (bytes) and sha256 (hex) of ``path``, read in 1 MiB blocks. Raises UserError if missing."""
    h = hashlib.sha256()
    size = 0
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
                size += len(chunk)
    except FileNotFoundError:
        raise UserError(f"log file not found: {path}", "was the boot's data directory moved or cleaned?") from None
    return FileDigest(size, h.hexdigest())


def format_log_line(text: str, when: datetime | None = None) -> str:
    """``"<YYYY-mm-ddTHH:MM:SS.mmm>Z | text\\n"`` — the supervisor's log-file line format (UTC)."""
    when = when or _utcnow()
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z | {text}\n"


def parse_log_line(line: str) -> tuple[datetime | None, str]:
    """Split a log-file line into (UTC time or None, engine text)."""
    text = strip_prefix(line)
    if text == line.rstrip("\r\n"):
        return None, text
    stamp = line.split(" | ", 1)[0]
    try:
        return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc), text
    except ValueError:
        return None, text


def timeout_signature(last_phase: str | None, timeout_s: float) -> SignatureMatch:
    """The ``boot.timeout`` pseudo-signature naming the last phase reached."""
    return SignatureMatch(
        "boot.timeout",
        f"Boot timed out after {timeout_s:g} s (last phase: {last_phase or 'none'})",
        "the engine was alive but never answered /health 200: read the log from the last phase on "
        "(first boots of a fresh host compile for minutes; raise the timeout with --timeout)",
        {"last_phase": last_phase or "none", "timeout_s": f"{timeout_s:g}"},
    )


# ---------------------------------------------------------------- process helpers

def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _info(p: psutil.Process) -> ProcInfo:
    try:
        with p.oneshot():
            return ProcInfo(p.pid, p.name(), p.status())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return ProcInfo(p.pid, "?", "gone")


def process_alive(pid: int, create_time: float | None = None) -> bool:
    """True when ``pid`` runs and is not a zombie.

    With ``create_time`` (``psutil.Process(pid).create_time()`` recorded at
    spawn, seconds since the epoch) a recycled pid of another process counts
    as dead.
    """
    try:
        p = psutil.Process(pid)
        if create_time is not None and abs(p.create_time() - create_time) > 0.5:
            return False
        return p.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def process_create_time(pid: int) -> float | None:
    """psutil create time of ``pid`` (s since the epoch), None if gone — store it to guard pid reuse."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.NoSuchProcess:
        return None


def group_members(pgid: int) -> list[psutil.Process]:
    """All processes (zombies included) whose process group is ``pgid``."""
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid:
                out.append(p)
        except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
            continue
    return out


def _collect(pid: int | None, pgid: int, known: dict[int, psutil.Process]) -> dict[int, psutil.Process]:
    procs = dict(known)
    roots = group_members(pgid)
    if pid is not None:
        with contextlib.suppress(psutil.NoSuchProcess):
            roots.append(psutil.Process(pid))
    for r in roots:
        procs.setdefault(r.pid, r)
        try:
            for c in r.children(recursive=True):
                procs.setdefault(c.pid, c)
        except psutil.NoSuchProcess:
            pass
    return procs


def _signal_all(pgid: int, procs: dict[int, psutil.Process], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    for p in procs.values():  # descendants that left the group (setsid) and members
        if _alive(p):
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                p.send_signal(sig)


def find_marked(name: str, value: str) -> list[psutil.Process]:
    """Processes of this user whose environment has ``name=value`` (psutil ``Process.environ()``,
    i.e. ``/proc/PID/environ`` as it was at exec), zombies excluded, oldest first.

    Engines are spawned with a marker variable (the boot id), so an engine whose pid never
    reached the store, and every process it spawned, can still be found. Processes that vanish
    or cannot be read are skipped.
    """
    found = []
    uid = os.getuid()
    for p in psutil.process_iter(["pid", "uids", "create_time"]):
        try:
            if p.pid == os.getpid() or p.info["uids"] is None or p.info["uids"].real != uid:
                continue
            if p.environ().get(name) == value and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return sorted(found, key=lambda p: p.info["create_time"] or 0.0)


def stop_marked(name: str, value: str, grace_s: float) -> StopResult | None:
    """Stop every process :func:`find_marked` finds (each one's process group, with its
    descendants: SIGTERM → ``grace_s`` → SIGKILL → verify); None when none was found.

    The result's ``exit_code`` is None (not our child); ``survivors``/``zombies`` are summed.
    """
    t0 = time.monotonic()
    marked = find_marked(name, value)
    if not marked:
        return None
    groups: dict[int, int] = {}
    for p in marked:
        try:
            groups.setdefault(os.getpgid(p.pid), p.pid)
        except OSError:
            continue
    results = [stop_process_group(pid, pgid, grace_s, known={p.pid: p for p in marked})
               for pgid, pid in groups.items()]
    # A marked process outside those groups (it called setsid itself) is stopped on its own.
    left = [p for p in find_marked(name, value)]
    for p in left:
        results.append(stop_process_group(p.pid, p.pid, grace_s, known={p.pid: p}))
    how = "killed" if any(r.how == "killed" for r in results) else (
        "graceful" if any(r.how == "graceful" for r in results) else "gone")
    return StopResult(None, how, time.monotonic() - t0,
                      [x for r in results for x in r.survivors], [x for r in results for x in r.zombies],
                      sorted({x for r in results for x in r.signalled}))


def stop_process_group(
    pid: int | None,
    pgid: int,
    grace_s: float = 30.0,
    *,
    popen: subprocess.Popen[bytes] | None = None,
    known: dict[int, psutil.Process] | None = None,
    kill_wait_s: float = 10.0,
    poll_s: float = 0.05,
) -> StopResult:
    """Stop a process group: SIGTERM → ``grace_s`` → SIGKILL → verify.

    ``pid``: the engine's main pid (None if unknown); ``pgid``: its process
    group (= pid for engines spawned by a Supervisor). ``popen``: pass the
    Popen when the caller is the parent, to reap it and get the exit code.
    ``known``: processes seen earlier (e.g. descendants tracked while
    running). Members and descendants are collected *before* signalling and
    re-scanned while waiting (a process may fork during the grace). Returns a
    :class:`StopResult`; never raises for processes that vanish meanwhile.
    """
    t0 = time.monotonic()
    procs = _collect(pid, pgid, known or {})
    alive0 = [p.pid for p in procs.values() if _alive(p)]
    how = "gone"
    if alive0:
        how = "graceful"
        _signal_all(pgid, procs, signal.SIGTERM)
        deadline = t0 + grace_s
        while True:
            if popen is not None:
                popen.poll()
            procs = _collect(None, pgid, procs)
            if not any(_alive(p) for p in procs.values()):
                break
            if time.monotonic() >= deadline:
                how = "killed"
                break
            time.sleep(poll_s)
        if how == "killed":
            kill_deadline = time.monotonic() + kill_wait_s
            while True:
                procs = _collect(None, pgid, procs)
                _signal_all(pgid, procs, signal.SIGKILL)
                if popen is not None:
                    popen.poll()
                if not any(_alive(p) for p in procs.values()) or time.monotonic() >= kill_deadline:
                    break
                time.sleep(poll_s)
    exit_code = None
    if popen is not None:
        try:
            exit_code = popen.wait(timeout=max(1.0, kill_wait_s))
        except subprocess.TimeoutExpired:
            exit_code = None
    survivors = [_info(p) for p in procs.values() if _alive(p)]
    zombies = []
    for p in procs.values():
        try:
            if p.is_running() and p.status() == psutil.STATUS_ZOMBIE:
                zombies.append(_info(p))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return StopResult(exit_code, how, time.monotonic() - t0, survivors, zombies, sorted(alive0))


# ---------------------------------------------------------------- supervisor

class Supervisor:
    """Supervises one boot of one engine (see the module docstring for the lifecycle).

    ``engine``: "sglang" | "reference" (selects ``rules/<engine>.toml``).
    ``on_event``: callback receiving :data:`Event` objects (thread notes in the
    module docstring). ``signatures``: failure signatures to classify with
    (default: bundled). ``emit_lines``: also emit a LogLine per output line.
    """

    def __init__(
        self,
        engine: str,
        on_event: Callable[[Event], Any] | None = None,
        *,
        signatures: list[Signature] | None = None,
        emit_lines: bool = False,
    ) -> None:
        self.engine = engine
        self._matcher = PhaseMatcher(engine)
        self._on_event = on_event
        self._signatures = signatures
        self._emit_lines = emit_lines
        self._lock = threading.RLock()
        self._state = BootState.STARTING
        self._proc: subprocess.Popen[bytes] | None = None
        self._spec: LaunchSpec | None = None
        self._log_path: Path | None = None
        self._log: IO[bytes] | None = None
        self._t0 = 0.0
        self._lines: collections.deque[str] = collections.deque(maxlen=_KEEP_LINES)
        self._phases: list[PhaseReached] = []
        self._phase_counts: dict[str, int] = {}
        self._stop_requested = False
        self._exit_code: int | None = None
        self._ready_s: float | None = None
        self._was_ready = False
        self._failure: SignatureMatch | None = None
        self._exited = threading.Event()
        self._pump_done = threading.Event()
        self._known: dict[int, psutil.Process] = {}
        self._create_time: float | None = None
        self.spawned_at: datetime | None = None

    # ---- properties (safe from any thread)
    @property
    def state(self) -> BootState:
        return self._state

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def pgid(self) -> int | None:
        """Process-group id (= pid: the child is a session leader)."""
        return self._proc.pid if self._proc else None

    @property
    def create_time(self) -> float | None:
        """psutil create time of the engine process (guards pid reuse in process_alive)."""
        return self._create_time

    @property
    def spec(self) -> LaunchSpec | None:
        return self._spec

    @property
    def log_path(self) -> Path | None:
        return self._log_path

    @property
    def phases(self) -> list[PhaseReached]:
        with self._lock:
            return list(self._phases)

    @property
    def last_phase(self) -> str | None:
        with self._lock:
            return self._phases[-1].name if self._phases else None

    @property
    def ready_s(self) -> float | None:
        """Seconds from spawn to the first /health 200, or None."""
        return self._ready_s

    @property
    def exit_code(self) -> int | None:
        return self._exit_code

    @property
    def failure(self) -> SignatureMatch | None:
        """The signature of a failed or crashed boot."""
        return self._failure

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested

    def offset_s(self) -> float:
        """Seconds since spawn."""
        return time.monotonic() - self._t0

    def tail(self, n: int = TAIL_LINES) -> list[str]:
        """The last ``n`` output lines (engine text, no timestamp prefix), each cut to :data:`TAIL_LINE_CHARS`."""
        with self._lock:
            lines = list(self._lines)[-n:]
        return [line if len(line) <= TAIL_LINE_CHARS
                else f"{line[:TAIL_LINE_CHARS]} … [{len(line) - TAIL_LINE_CHARS} more characters in the log]"
                for line in lines]

    # ---- internals
    def _emit(self, event: Event) -> None:
        if self._on_event is not None:
            self._on_event(event)

    def _transition(self, new: BootState, reason: str, signature: SignatureMatch | None = None) -> None:
        with self._lock:
            old = self._state
            check_transition(old, new)
            self._state = new
            self._emit(StateChanged(old.value, new.value, reason, self.offset_s(), signature))

    def _classify(self) -> SignatureMatch:
        with self._lock:
            # "ready" for classification: /health 200 seen, or the engine's own ready line printed
            was_ready = self._was_ready or self._matcher.ready_phase in self._phase_counts
            return classify(list(self._lines), last_phase=self.last_phase, was_ready=was_ready,
                            exit_code=self._exit_code, signatures=self._signatures)

    def _pump(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None and self._log is not None
        stream = self._proc.stdout
        try:
            while True:
                raw = stream.readline(1 << 16)
                if not raw:
                    break
                text = raw.decode("utf-8", "replace").rstrip("\r\n")
                self._log.write(format_log_line(text).encode("utf-8"))
                self._log.flush()  # on disk (OS buffers) before anything parses the line
                hit = self._matcher.match(text)
                with self._lock:
                    self._lines.append(text)
                    if hit is not None:
                        n = self._phase_counts.get(hit.name, 0) + 1
                        self._phase_counts[hit.name] = n
                        ev = PhaseReached(hit.name, self.offset_s(), hit.detail, n, hit.line)
                        self._phases.append(ev)
                        self._emit(ev)
                    if self._emit_lines:
                        self._emit(LogLine(text, self.offset_s()))
        except (OSError, ValueError):
            pass  # pipe or log closed under us during teardown
        finally:
            self._pump_done.set()

    def _watch_exit(self) -> None:
        assert self._proc is not None
        rc = self._proc.wait()
        self._on_exit(rc)

    def _on_exit(self, rc: int) -> None:
        """Record the child's exit and move starting → failed / ready → crashed (once)."""
        self._pump_done.wait(timeout=2.0)  # let the last lines land (grandchildren may hold the pipe)
        with self._lock:
            if self._exited.is_set():
                return
            self._exit_code = rc
            self._exited.set()
            if self._stop_requested:
                return
            if self._state is BootState.STARTING:
                self._failure = self._classify()
                self._transition(BootState.FAILED, f"engine exited with code {rc} before ready", self._failure)
            elif self._state is BootState.READY:
                self._failure = self._classify()
                self._transition(BootState.CRASHED, f"engine exited with code {rc} while ready", self._failure)

    def _track_descendants(self) -> None:
        if self._proc is None:
            return
        try:
            for c in psutil.Process(self._proc.pid).children(recursive=True):
                self._known.setdefault(c.pid, c)
        except psutil.NoSuchProcess:
            pass

    # ---- public API
    def start(self, spec: LaunchSpec, log_path: str | Path) -> int:
        """Spawn ``spec`` in a new session, logging to ``log_path`` (appended; parents created).

        Returns the pid. Raises EngineError when the interpreter/program cannot
        be executed (the boot is then ``failed`` with an event) and UserError
        when called twice.
        """
        if self._proc is not None:
            raise UserError("this supervisor already started an engine", "use one Supervisor per boot")
        self._spec = spec
        self._log_path = Path(log_path)
        private_dir(self._log_path.parent)
        self._log = open_private(self._log_path, "ab")  # 0600: prompts, argv and paths of this user's engine
        self._t0 = time.monotonic()
        self.spawned_at = _utcnow()
        try:
            self._proc = subprocess.Popen(
                spec.argv, env=spec.env, cwd=self._log_path.parent, start_new_session=True, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, close_fds=True,
            )
        except (OSError, ValueError) as exc:  # ValueError: a NUL byte in an argument or the environment
            self._log.write(format_log_line(f"dynocell: cannot execute {spec.argv[0]}: {exc}").encode())
            self._log.close()
            self._failure = SignatureMatch("spawn_failed", "Engine could not be started",
                                           "check settings.engine_python / the interpreter path", {"error": str(exc)})
            self._transition(BootState.FAILED, f"spawn failed: {exc}", self._failure)
            raise EngineError(f"cannot start the engine: {exc}", "check the interpreter path (engine_python)") from None
        self._create_time = process_create_time(self._proc.pid)
        threading.Thread(target=self._pump, name=f"engine-pump-{self._proc.pid}", daemon=True).start()
        threading.Thread(target=self._watch_exit, name=f"engine-exit-{self._proc.pid}", daemon=True).start()
        return self._proc.pid

    def _failed_result(self, reason: str, stop_on_failure: bool, grace_s: float) -> ReadyResult:
        stop = None
        if stop_on_failure:
            stop = self._cleanup(grace_s)
            self.close()  # nothing left to log
        return ReadyResult(False, self._state.value, None, self._exit_code, self.last_phase,
                           self.tail(TAIL_LINES), self._failure, reason, stop)

    def _cleanup(self, grace_s: float) -> StopResult:
        assert self._proc is not None
        res = stop_process_group(self._proc.pid, self._proc.pid, grace_s, popen=self._proc, known=self._known)
        self._pump_done.wait(timeout=2.0)
        return res

    def wait_ready(
        self,
        timeout_s: float,
        probe_interval_s: float = 0.5,
        http_timeout_s: float = 2.0,
        *,
        stop_on_failure: bool = True,
        failure_grace_s: float = 5.0,
    ) -> ReadyResult:
        """Wait until ``GET /health`` answers 200, the child dies, or ``timeout_s`` (from spawn) passes.

        Probes every ``probe_interval_s`` (s) with ``http_timeout_s`` per probe.
        A dead child → ``failed`` at once (exit code, tail, signature). Timeout →
        ``failed`` with signature ``boot.timeout``. With ``stop_on_failure`` the
        leftover group is stopped (grace ``failure_grace_s``) and the
        StopResult returned in ``ReadyResult.stop``. If a stop was requested
        meanwhile, returns ``ok=False`` with the current state.
        """
        if self._proc is None:
            raise UserError("wait_ready() before start()", "call start(spec, log_path) first")
        assert self._spec is not None
        deadline = self._t0 + timeout_s
        with EngineClient(self._spec.base_url, http_timeout_s) as client:
            while True:
                rc = self._proc.poll()
                if rc is not None:
                    self._on_exit(rc)
                if self._state is BootState.FAILED:
                    return self._failed_result(f"engine exited with code {self._exit_code} before ready",
                                               stop_on_failure, failure_grace_s)
                if self._state is not BootState.STARTING:
                    return ReadyResult(self._state is BootState.READY, self._state.value, self._ready_s,
                                       self._exit_code, self.last_phase, [], None,
                                       f"boot is {self._state.value}")
                self._track_descendants()
                try:
                    status = client.health().status
                except EngineUnreachable:
                    status = None
                if status == 200 and self._proc.poll() is None:
                    with self._lock:
                        if self._state is BootState.STARTING and not self._stop_requested:
                            self._ready_s = self.offset_s()
                            self._was_ready = True
                            self._transition(BootState.READY, f"/health 200 after {self._ready_s:.1f} s")
                            return ReadyResult(True, self._state.value, self._ready_s, None, self.last_phase,
                                               [], None, "ready")
                    continue
                now = time.monotonic()
                if now >= deadline:
                    with self._lock:
                        if self._state is not BootState.STARTING:
                            continue
                        self._failure = timeout_signature(self.last_phase, timeout_s)
                        self._transition(BootState.FAILED, "boot.timeout", self._failure)
                    return self._failed_result(
                        f"no /health 200 within {timeout_s:.0f} s (last phase: {self.last_phase or 'none'})",
                        stop_on_failure, failure_grace_s)
                self._exited.wait(min(probe_interval_s, max(0.0, deadline - now)))

    def poll(self) -> BootState:
        """Check the child now (ready → crashed if it died without a stop request); return the state."""
        if self._proc is not None:
            rc = self._proc.poll()
            if rc is not None:
                self._on_exit(rc)
            else:
                self._track_descendants()
        return self._state

    def wait_exit(self, timeout_s: float | None = None) -> int | None:
        """Block until the child exits (or ``timeout_s``); return its exit code or None."""
        self._exited.wait(timeout_s)
        return self._exit_code

    def stop(self, grace_s: float = 30.0) -> StopResult:
        """Stop the engine: ``stopping`` at once, then SIGTERM → grace → SIGKILL → verify → ``stopped``.

        While stopping, the state is ``stopping`` whatever ``/health`` says.
        On a failed/crashed boot it kills what is left of the group without a
        state change. Returns the :class:`StopResult`; waits for the log pump
        to finish and closes the log file.
        """
        if self._proc is None:
            raise UserError("stop() before start()", "nothing to stop")
        with self._lock:
            self._stop_requested = True
            if self._state in (BootState.STARTING, BootState.READY):
                self._transition(BootState.STOPPING, f"stop requested (grace {grace_s:g} s)")
        res = stop_process_group(self._proc.pid, self._proc.pid, grace_s, popen=self._proc, known=self._known)
        if res.exit_code is not None:
            with self._lock:
                if not self._exited.is_set():
                    self._exit_code = res.exit_code
                    self._exited.set()
        with self._lock:
            if self._state is BootState.STOPPING:
                self._transition(BootState.STOPPED,
                                 f"{res.how} in {res.seconds:.1f} s, exit code {res.exit_code}"
                                 + (f", {len(res.survivors)} survivors" if res.survivors else ""))
        self.close(pump_timeout_s=5.0)
        return res

    def close(self, pump_timeout_s: float = 2.0) -> None:
        """Wait (bounded) for the log pump and close the log file. Idempotent."""
        self._pump_done.wait(timeout=pump_timeout_s)
        if self._log is not None and not self._log.closed:
            with self._lock:
                self._log.close()

    def log_digest(self) -> FileDigest:
        """Size and sha256 of this boot's log file (call after stop/close for the final value)."""
        if self._log_path is None:
            raise UserError("no log yet", "start() first")
        return file_digest(self._log_path)
