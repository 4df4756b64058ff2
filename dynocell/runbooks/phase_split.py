"""The speculative step's phase split of a profile window, stored with the profile (issue 24 item 3).

Three ways in, one computation (:func:`dynocell.engine.spec_phases.phase_report`):

- the ``profile`` step of ``dynocell run`` (and ``dynocell profile BOOT``): right after the kernel split,
  from the window's trace files (:func:`record`);
- ``dynocell import trace``: from the imported file (:func:`for_import`; a file imported before the
  split existed gets it when imported again, :func:`fill_import`);
- ``dynocell reanalyze RUN``: for a run already in a store — one recorded before the split existed, or
  brought back from a GPU host — from its stored trace files (:func:`reanalyze`). The files are looked
  for where the store says they were written, then by their file name under ``--trace-dir``, under
  ``<data dir>/boots/<boot id>/`` (a store copied with its ``boots/`` folder, e.g. the H200 stores
  under tests/data) and under the directory holding the SQLite store; a candidate counts only when its
  sha256 is the one stored, so a stale or foreign file with the same name is never read.

A run known not to be speculative gets no row (nothing to say); a speculative one whose trace carries no
phase ranges gets an ``unavailable`` row with the reason (vLLM 0.26.0: the table's own reason).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NoReturn

from dynocell.db import configs as db_configs
from dynocell.db import runs as db_runs
from dynocell.errors import NotFound, UserError
from dynocell.runbooks.cell import Cell


def _config_facts(cell: Cell, config_hash: str | None) -> tuple[str | None, bool | None]:
    """(engine, speculative) of a stored config; (None, None) when unknown (no config, an old form)."""
    from dynocell.engine.config import config_from_canonical

    row = db_configs.get_config(cell.store, config_hash) if config_hash else None
    if row is None:
        return None, None
    try:
        cfg = config_from_canonical(row.canonical_json)
    except Exception:  # noqa: BLE001 - an old or observed canonical form dynocell cannot rebuild: unknown
        return row.engine, None
    return cfg.engine, bool(cfg.speculative_enabled)


def compute(files: list[Path], *, engine: str | None, speculative: bool | None,
            output_tokens: int | None) -> dict[str, Any] | None:
    """The phase report of a window's trace files, or None when there is nothing to say (see
    :func:`dynocell.engine.spec_phases.phase_report`). A trace the phase reader refuses (or fails on) gives
    an ``unavailable`` report naming the error instead of raising: the kernel split already stored stays."""
    from dynocell.engine.spec_phases import phase_report

    try:
        return phase_report(files, engine=engine, speculative=speculative, output_tokens=output_tokens or None)
    except Exception as exc:  # noqa: BLE001 - a refused or unreadable trace: say so, keep the profile
        return {"state": "unavailable", "source": None, "total_ms": None, "phases": [], "ranks": [],
                "reason": f"the trace could not be read for the phase split "
                          f"({', '.join(Path(f).name for f in files)}): {exc}"}


def record(cell: Cell, profile_id: int, files: list[Path], cfg: Any,
           output_tokens: int | None) -> db_runs.PhasesRow | None:
    """Compute and store the phase split of profile ``profile_id`` from its trace ``files``; ``cfg``: the
    boot's ``EngineConfig`` (None when unknown). Returns the stored row, or None when nothing was stored."""
    engine = getattr(cfg, "engine", None)
    speculative = bool(cfg.speculative_enabled) if cfg is not None else None
    report = compute(files, engine=engine, speculative=speculative, output_tokens=output_tokens)
    return db_runs.put_phases(cell.store, profile_id, report) if report else None


def for_import(path: Path, config_hash: str | None, cell: Cell, output_tokens: int | None) -> dict[str, Any] | None:
    """The ``phase_split`` of an imported trace (``ProfilePhases`` columns) or None: the config, when given,
    says the engine and whether the run was speculative."""
    engine, speculative = _config_facts(cell, config_hash)
    report = compute([path], engine=engine, speculative=speculative, output_tokens=output_tokens)
    if not report:
        return None
    return {k: report.get(k) for k in ("state", "source", "total_ms", "phases", "ranks", "reason")}


def fill_import(cell: Cell, found: Any, path: Path, output_tokens: int | None) -> dict[str, Any]:
    """For a trace imported again (``found``: its :class:`~dynocell.db.imports.ImportRow`):
    ``{"phase_split": …}`` — the stored
    split, computed and stored now when the first import predates it — or ``{}`` when there is no profile
    or nothing to say."""
    pid = found.profile_id
    if not pid:
        return {}
    row = db_runs.get_phases(cell.store, pid)
    if row is None:
        report = for_import(path, found.config_hash, cell, output_tokens)
        row = db_runs.put_phases(cell.store, pid, report) if report else None
    if row is None:
        return {}
    return {"phase_split": {k: getattr(row, k) for k in ("state", "source", "total_ms", "phases", "ranks", "reason")}}


def _candidates(cell: Cell, stored: Path, boot_id: str | None, trace_dir: Path | None) -> list[Path]:
    """Where a stored trace may be now, in the order tried (see the module docstring)."""
    name = stored.name
    out = [stored]
    if trace_dir is not None:
        out.append(trace_dir / name)
    if boot_id:
        boot_dir = cell.settings.boots_dir / boot_id
        out += [boot_dir / name, *sorted(boot_dir.glob(f"profiles/*/{name}"))]
        url = cell.settings.db_url
        if url.startswith("sqlite:///"):
            store_dir = Path(url[len("sqlite:///"):]).parent
            out.append(store_dir / "boots" / boot_id / name)
    return out


def _locate(cell: Cell, trace: dict[str, Any], boot_id: str | None, trace_dir: Path | None) -> Path | None:
    """The file of one stored trace (``{path, sha256, …}``) whose sha256 matches, or None."""
    from dynocell.engine.supervisor import file_digest

    stored = Path(str(trace.get("path") or ""))
    if not stored.name.endswith((".json", ".json.gz")):
        return None
    for p in _candidates(cell, stored, boot_id, trace_dir):
        try:
            if p.is_file() and (not trace.get("sha256") or file_digest(p).sha256 == trace["sha256"]):
                return p
        except OSError:
            continue
    return None


def _no_profile(cell: Cell, run_id: str, config_hash: str | None) -> NoReturn:
    """Raise the UserError of a run without a completed profile window with traces; a run made with
    ``--no-profile`` (its ``profile`` step skipped for that reason) is told how to get a profile."""
    skipped = any(s.name == "profile" and s.state == "skipped" and s.error == "--no-profile"
                  for s in db_runs.steps(cell.store, run_id))
    if skipped:
        config = (config_hash or "CONFIG").removeprefix("sha256:")[:12]
        raise UserError(f"run {run_id} was made with --no-profile: it has no profile to reanalyze",
                        f"profile a ready boot of its config (dynocell profile BOOT), or run it again with the "
                        f"profile step (on unless --no-profile): dynocell run {config} --profile")
    raise UserError(f"run {run_id} has no completed profile window with trace files",
                    "profile a ready boot (dynocell profile BOOT) or import a trace with --config")


def reanalyze(cell: Cell, run_ref: str, trace_dir: str | Path | None = None) -> dict[str, Any]:
    """Compute (again) the phase split of a run's newest profile window from its stored trace files.

    Returns ``{run_id, profile_id, files: [path], phases, note}``: ``phases`` the stored row as a dict
    (``PhasesRow.to_dict()``), or None for a run known not to be speculative whose trace has no phase
    ranges (``note`` says so). Raises NotFound for an unknown run, UserError for a run without a completed
    profile window with traces, or when a trace file cannot be found (naming where it was looked for and
    ``--trace-dir``).
    """
    from dynocell.runbooks.refs import resolve_key

    run_id = resolve_key(cell, run_ref, "run")
    run = db_runs.get_run(cell.store, run_id)
    profs = [p for p in db_runs.profiles(cell.store, run_id=run_id) if p.state == "completed"]
    if run is None or not profs or not profs[-1].traces:
        _no_profile(cell, run_id, run.config_hash if run is not None else None)
    prof = profs[-1]
    tdir = Path(trace_dir) if trace_dir else None
    if tdir is not None and not tdir.is_dir():
        raise UserError(f"--trace-dir {tdir}: not a directory", "give the folder holding the run's trace files")
    files = []
    for t in prof.traces or []:  # non-empty: checked above
        found = _locate(cell, t, prof.boot_id, tdir)
        if found is None:
            raise NotFound(f"trace {Path(str(t.get('path'))).name} of run {run_id} (stored at {t.get('path')}, "
                           f"sha256 {str(t.get('sha256'))[:12]}…) is not on this host",
                           "copy it back and give its folder: dynocell reanalyze RUN --trace-dir DIR")
        files.append(found)
    engine, speculative = _config_facts(cell, run.config_hash)
    report = compute(files, engine=engine, speculative=speculative, output_tokens=prof.output_tokens)
    row = db_runs.put_phases(cell.store, prof.id, report) if report else None
    note = None if row else "the run is not speculative and its trace holds no phase ranges: no phase split"
    return {"run_id": run_id, "profile_id": prof.id, "files": [str(f) for f in files],
            "phases": row.to_dict() if row else None, "note": note}
