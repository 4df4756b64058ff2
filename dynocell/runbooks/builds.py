"""Engine build procedures: build, ensure (for the main job), list, show, verify, check the import.

A build is made by :mod:`dynocell.engine.builds` (overlay + manifest on disk)
and recorded here in ``engine_builds`` (:mod:`dynocell.db.builds`). The
engine's Python is ``settings.engine_python``; the environment used to locate
the installed package is the one a boot gives the engine
(``child_base_env()`` + the config's ``[env]``), so the package found is the
one the engine would import.

Every procedure returns plain dicts (JSON-ready except ``created_at``):

- build dict: ``{build_hash, path, pythonpath, base_dist, base_version,
  patches: [id…], manifest, created}`` — ``pythonpath`` is ``<path>/site``,
  what :func:`dynocell.engine.adapters.render` takes as ``build_pythonpath``;
  ``created`` is True when this call wrote the overlay or the row.
- verify dict: ``{build_hash, path, ok, checked, drift: [{path, kind,
  expected, actual}]}``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Iterable

from dynocell.db import builds as db, refs
from dynocell.engine import builds as eb
from dynocell.errors import NotFound, UserError
from dynocell.runbooks.cell import Cell
from dynocell.settings import child_base_env

HASH_PREFIX = "sha256:"
_HEX = re.compile(r"^[0-9a-f]+$")

__all__ = ["build", "build_llamacpp", "check_import", "llama_server_program", "ensure_build", "list_builds",
           "list_patches", "resolve_build_hash",
           "show_build", "verify_build"]


def _db_manifest(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest as stored in the row: everything but the per-file list of the whole package."""
    return {k: v for k, v in manifest.items() if k != "files"}


def _result(build_dir: Path, manifest: dict[str, Any], created: bool) -> dict[str, Any]:
    ident = manifest["identity"]
    return {
        "build_hash": manifest["build_hash"],
        "path": str(build_dir),
        "pythonpath": str(build_dir / "site"),
        "base_dist": ident["base"]["dist"],
        "base_version": ident["base"]["version"],
        "patches": [p["id"] for p in ident["patches"]],
        "manifest": _db_manifest(manifest),
        "created": created,
    }


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = child_base_env()
    env.update(extra or {})
    return env


def build(cell: Cell, base: str = "sglang", patches: Iterable[str] = (), python: str | None = None,
          env: dict[str, str] | None = None) -> dict[str, Any]:
    """Build (or find) the overlay for ``base`` + ``patches`` (ids or patch folder paths, in order).

    ``python``: the engine's interpreter (default ``settings.engine_python``);
    ``env``: extra environment for locating the package (e.g. a config's
    ``[env]`` PYTHONPATH). Records the build in the store (insert-or-ignore by
    hash). Returns the build dict (module docstring). Raises
    :class:`UserError` for a refused patch (base sha256 mismatch: file, both
    hashes, installed version), a missing package or an unwritable data dir;
    :class:`NotFound` for an unknown patch id.
    """
    python = python or cell.settings.engine_python
    plist = eb.resolve_patches(list(patches))
    dist = eb.locate_installed(python, base, env=_env(env))
    plan = eb.plan_build(dist, plist)
    existed = (cell.settings.builds_dir / plan.hex / "manifest.json").is_file()
    build_dir, manifest = eb.materialize(plan, cell.settings.builds_dir)
    inserted = db.insert_build(cell.store, manifest["build_hash"], dist.name, dist.version,
                               [p.id for p in plist], _db_manifest(manifest), str(build_dir))
    return _result(build_dir, manifest, created=inserted or not existed)


def ensure_build(cell: Cell, cfg: Any) -> dict[str, Any]:
    """The build for a config's ``patches`` on the engine's package (sglang or vllm) of its Python, made if needed.

    ``cfg``: an :class:`~dynocell.engine.config.EngineConfig` with non-empty
    ``patches`` (its ``env`` is used when locating the package). An existing
    overlay is re-verified (every file re-hashed, ~1 s for sglang's ~3,800
    files); drift refuses the boot. Returns the build dict. Raises
    :class:`UserError` for an empty patch set, a refused patch or drift.
    """
    if not cfg.patches:
        raise UserError("the config has no patches", "an engine build is only needed for patches = [...]")
    if cfg.engine not in ("sglang", "vllm"):
        raise UserError(f"patches = {list(cfg.patches)} on a {cfg.engine!r} engine: engine builds patch SGLang "
                        "or vLLM", "remove `patches` from the config, or use engine = \"sglang\" or \"vllm\"")
    # The overlay's base distribution is the engine's own package (sglang / vllm).
    result = build(cell, base=cfg.engine, patches=cfg.patches, env=dict(cfg.env))
    if not result["created"]:
        report = verify_build(cell, result["build_hash"])
        if not report["ok"]:
            shown = "; ".join(f"{d['kind']} {d['path']}" for d in report["drift"][:5])
            raise UserError(f"engine build {result['build_hash'][:19]} has drifted: {shown}",
                            f"remove {result['path']} and run the job again (it will be rebuilt)")
    return result


def check_import(cell: Cell, build_result: dict[str, Any], cfg: Any = None) -> str:
    """Prove the engine's Python imports sglang from the build overlay; returns the imported file.

    Call before booting with a build. ``cfg`` (optional): its ``env`` is added
    as the boot would. Raises :class:`~dynocell.errors.EngineError` when the
    import fails or resolves outside the overlay.
    """
    extra = dict(getattr(cfg, "env", {}) or {})
    path = eb.verify_import(cell.settings.engine_python, build_result["pythonpath"],
                            name=build_result.get("base_dist", "sglang"), env=_env(extra))
    return str(path)


def resolve_build_hash(cell: Cell, ref: str) -> str:
    """The stored build hash ``ref`` names: full hash, or a unique prefix (``sha256:`` optional), by the
    one resolver's rule (:mod:`dynocell.db.refs`).

    Raises :class:`NotFound` when ``ref`` is not hex, nothing matches or the prefix is ambiguous.
    """
    hexpart = ref.strip().lower().removeprefix(HASH_PREFIX)
    if not hexpart or not _HEX.match(hexpart):
        raise NotFound(f"not a build hash: {ref!r}", "see `dynocell engine list`")
    return refs.resolve_key(cell.store, hexpart, "build")


def _get(cell: Cell, ref: str) -> db.StoredBuild:
    row = db.get_build(cell.store, resolve_build_hash(cell, ref))
    assert row is not None
    return row


def list_builds(cell: Cell) -> list[dict[str, Any]]:
    """Every stored build, newest first: ``{build_hash, base_dist, base_version, patches, path,
    link_mode, present, created_at}`` (``present``: the overlay folder exists here)."""
    out = []
    for row in db.all_builds(cell.store):
        out.append({"build_hash": row.build_hash, "base_dist": row.base_dist, "base_version": row.base_version,
                    "patches": row.patches, "path": row.path,
                    "link_mode": (row.manifest.get("local") or {}).get("link_mode"),
                    "present": (Path(row.path) / "manifest.json").is_file(), "created_at": row.created_at})
    return out


def show_build(cell: Cell, ref: str) -> dict[str, Any]:
    """One build: the row, ``pythonpath``, ``present``, and per patch ``{id, description, files}``
    with each file's base/patched sha256. Raises :class:`NotFound` for an unknown ref."""
    row = _get(cell, ref)
    d = row.to_dict()
    d["pythonpath"] = str(Path(row.path) / "site")
    d["present"] = (Path(row.path) / "manifest.json").is_file()
    try:
        known = eb.bundled_patches()
    except UserError:
        known = {}
    d["patch_details"] = [
        {**p, "description": known[p["id"]].description if p["id"] in known else None}
        for p in (row.manifest.get("identity") or {}).get("patches", [])
    ]
    return d


def verify_build(cell: Cell, ref: str) -> dict[str, Any]:
    """Re-hash every file of a build's overlay and report drift (the verify dict of the module docstring).

    The on-disk ``manifest.json`` must carry the same identity as the stored
    row (else a ``manifest`` drift); then :func:`dynocell.engine.builds.verify`
    re-hashes every file. A missing overlay folder is one ``missing`` drift.
    Raises :class:`NotFound` for an unknown ref; never raises for drift.
    """
    row = _get(cell, ref)
    build_dir = Path(row.path)
    drift: list[dict[str, Any]] = []
    checked = 0
    try:
        disk = eb.read_manifest(build_dir)
    except NotFound:
        drift.append(eb.Drift(str(build_dir), "missing").as_dict())
    else:
        if disk.get("identity") != row.manifest.get("identity") or disk.get("build_hash") != row.build_hash:
            drift.append(eb.Drift("manifest.json", "manifest", row.build_hash,
                                  eb.compute_build_hash(disk.get("identity") or {})).as_dict())
        drift.extend(d.as_dict() for d in eb.verify(build_dir, disk))
        checked = len(disk.get("files") or {})
    return {"build_hash": row.build_hash, "path": row.path, "ok": not drift, "checked": checked, "drift": drift}


def list_patches() -> list[dict[str, Any]]:
    """The bundled patches: ``{id, dist, versions, files, description}``."""
    return [{"id": p.id, "dist": p.dist, "versions": list(p.versions), "files": [f.path for f in p.files],
             "description": p.description} for p in eb.bundled_patches().values()]


# ---------------------------------------------------------------- llama.cpp's llama-server

LLAMACPP_DIST = "llama-cpp-python"


def build_llamacpp(cell: Cell, patches: Iterable[str] = (), jobs: int = 2,
                   progress: Any = None) -> dict[str, Any]:
    """Build (or find) ``llama-server`` from the pinned llama-cpp-python sdist + ``patches`` and record it.

    The sdist is fetched with pip into ``<builds_dir>/downloads`` and sha256-verified; the build goes to
    ``<builds_dir>/<hex>/bin/llama-server`` (:func:`dynocell.engine.kinds.llamacpp_build.build_server`;
    a found intact build is reused, never rebuilt). Returns the build dict of the module docstring with
    ``binary`` added (``pythonpath`` is None: nothing is put on a PYTHONPATH). Raises UserError for a refused
    patch or a wrong download, EngineError when pip, CMake or the compiler fail."""
    from dynocell.engine.kinds import llamacpp_build as lb

    say = progress or (lambda _m: None)
    plist = eb.resolve_patches(list(patches))
    builds_dir = cell.settings.builds_dir
    sdist = lb.fetch_sdist(builds_dir / "downloads", python=cell.settings.engine_python, progress=say)
    folder, manifest, created = lb.build_server(sdist, builds_dir, plist, jobs=jobs, progress=say)
    ident = manifest["identity"]
    inserted = db.insert_build(cell.store, manifest["build_hash"], ident["base"]["dist"], ident["base"]["version"],
                               [p.id for p in plist], manifest, str(folder))
    return {"build_hash": manifest["build_hash"], "path": str(folder), "pythonpath": None,
            "binary": str(folder / "bin" / lb.BINARY), "base_dist": ident["base"]["dist"],
            "base_version": ident["base"]["version"], "patches": [p.id for p in plist], "manifest": manifest,
            "created": created or inserted}


def llama_server_program(cell: Cell) -> str:
    """The llama-server executable to boot ``engine = "llamacpp"`` with: the ``llama_server`` setting, else the
    newest recorded llama-cpp-python build whose binary is on this host. Raises UserError naming both ways."""
    from dynocell.engine.kinds import llamacpp_build as lb

    if cell.settings.llama_server is not None:
        path = Path(cell.settings.llama_server).expanduser()
        if not path.is_file() or not os.access(path, os.X_OK):
            raise UserError(f"llama_server setting {path} is not an executable file",
                            "point DYNOCELL_LLAMA_SERVER at a llama-server binary, or unset it and run "
                            "`dynocell engine build llamacpp`")
        return str(path)
    for b in db.all_builds(cell.store):
        binary = Path(b.path) / "bin" / lb.BINARY
        if b.base_dist == LLAMACPP_DIST and binary.is_file():
            return str(binary)
    raise UserError("no llama-server to boot engine = \"llamacpp\" with",
                    "build one: dynocell engine build llamacpp (or set DYNOCELL_LLAMA_SERVER to a llama-server binary)")
