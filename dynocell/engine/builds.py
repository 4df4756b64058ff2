"""Engine builds: a base distribution (``sglang``) + an ordered patch set, as a verifiable overlay.

A build is a directory ``<builds_dir>/<hex>/`` holding

- ``site/<package>/…`` — the installed package re-created file by file: hard
  links (``os.link``) for untouched files, real copies for patched files (a
  hard link that fails, e.g. across filesystems, falls back to a copy; the
  count is recorded under ``manifest["local"]``). ``__pycache__`` folders and
  ``*.pyc`` files are not carried: Python compiles into the overlay on first use.
- ``manifest.json`` — the full manifest: every file's relative path and sha256.

Putting ``<build>/site`` first on the engine's PYTHONPATH
(:func:`dynocell.engine.adapters.render` ``build_pythonpath=``) makes the
engine and every process it spawns import the package from the overlay;
:func:`verify_import` proves it before a boot and :func:`log_origin` checks the
paths an engine prints (SGLang 0.5.17's first log line is a ``UserWarning``
naming ``…/sglang/launch_server.py``, see
``tests/data/sglang-0.5.17/A.server.log``).

Patches (``dynocell/engine/patches/<id>/``, format in that folder's README):
each target file carries its base sha256; a mismatch is a refusal
(:class:`~dynocell.errors.UserError` naming the file, both hashes and the
installed version), never a fuzzy apply. Diffs are applied by
:func:`apply_unified_diff`, a strict applier: exact context, hunks exactly
where their headers say, no fuzz, no offset search. The result must hash to
the manifest's patched sha256.

Identity: ``build_hash = "sha256:" + sha256(canonical JSON of
manifest["identity"])``. The identity holds the base distribution, version and
``tree_sha256`` (sha256 over the sorted ``"<relpath>\\0<sha256>\\n"`` lines of
the installed package), the Python implementation and version, and each patch
(id, diff sha256, files with base/patched sha256), in order. No absolute
paths: they live under ``manifest["local"]``, which is not hashed.

API: :func:`locate_installed`, :func:`load_patch`, :func:`bundled_patches`,
:func:`resolve_patches`, :func:`plan_build`, :func:`materialize`,
:func:`build`, :func:`read_manifest`, :func:`verify`, :func:`verify_import`,
:func:`log_origin`, :func:`apply_unified_diff`, :func:`compute_build_hash`.
This module touches no store (``db/``) and reads no environment variables.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, cast

from dynocell.errors import EngineError, NotFound, UserError

#: Where a ``python -c`` probe dynocell starts (hostinfo's versions, builds' locate and import checks)
#: runs: the file-system root, which only root may write, so no module planted beside the caller is
#: imported. Engines run in their boot directory instead (the supervisor's ``log_path`` folder).
PROBE_CWD = "/"
#: Python's safe-path switch (``-P``, Python ≥ 3.11): ``python -m``/``-c`` no longer put the working
#: directory first on ``sys.path``; older interpreters ignore the variable (their cwd is dynocell's
#: choice all the same). Set last, so a config's ``[env]`` cannot turn it off.
SAFE_PATH_ENV = ("PYTHONSAFEPATH", "1")


def safe_path_env(env: dict[str, str]) -> dict[str, str]:
    """A copy of ``env`` with :data:`SAFE_PATH_ENV` set (every Python child dynocell starts gets it)."""
    key, value = SAFE_PATH_ENV
    return {**env, key: value}

__all__ = [
    "BUNDLED_PATCHES_DIR",
    "BuildPlan",
    "Drift",
    "InstalledDist",
    "LogOrigin",
    "MANIFEST_FORMAT",
    "Patch",
    "PatchFile",
    "apply_unified_diff",
    "build",
    "bundled_patches",
    "compute_build_hash",
    "hash_tree",
    "load_patch",
    "locate_installed",
    "log_origin",
    "materialize",
    "plan_build",
    "read_manifest",
    "resolve_patches",
    "sha256_bytes",
    "sha256_file",
    "verify",
    "verify_import",
]

BUNDLED_PATCHES_DIR = Path(__file__).parent / "patches"
MANIFEST_FORMAT = 1
SKIP_DIRS = frozenset({"__pycache__"})
SKIP_SUFFIXES = (".pyc", ".pyo")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_DIST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


# ---------------------------------------------------------------- hashing

def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    """Hex sha256 of the file at ``path`` (read in 1 MiB chunks). Raises OSError."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _skip(name: str) -> bool:
    return name.endswith(SKIP_SUFFIXES)


def hash_tree(root: Path) -> dict[str, str]:
    """``{relpath: sha256}`` of every regular file under ``root`` (``/``-separated, sorted).

    ``__pycache__`` folders and ``*.pyc``/``*.pyo`` are left out; symlinked files
    are hashed through the link. Raises OSError for unreadable files.
    """
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            if _skip(name):
                continue
            p = Path(dirpath) / name
            if not p.is_file():
                continue
            out[p.relative_to(root).as_posix()] = sha256_file(p)
    return dict(sorted(out.items()))


def tree_sha256(files: dict[str, str]) -> str:
    """sha256 over the sorted ``"<relpath>\\0<sha256>\\n"`` lines of ``files`` (hex)."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(f"{rel}\0{files[rel]}\n".encode())
    return h.hexdigest()


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def compute_build_hash(identity: dict[str, Any]) -> str:
    """``"sha256:" +`` sha256 of the canonical JSON (sorted keys, no spaces) of ``identity``."""
    return "sha256:" + sha256_bytes(_canonical(identity))


# ---------------------------------------------------------------- the installed distribution

@dataclass(frozen=True)
class InstalledDist:
    """The package ``name`` (distribution version ``version``) as the engine's Python sees it.

    ``package_dir``: the package folder (``…/site-packages/sglang``);
    ``site_dir``: its parent; ``python``: the interpreter asked;
    ``python_version``: e.g. ``"3.12.3"``; ``implementation``: e.g. ``"cpython"``.
    """

    name: str
    version: str
    package_dir: Path
    site_dir: Path
    python: str
    python_version: str
    implementation: str


_LOCATE_SRC = r"""
import importlib.util, importlib.metadata as m, json, sys
name = sys.argv[1]
spec = importlib.util.find_spec(name)
out = {"python_version": "%d.%d.%d" % sys.version_info[:3],
       "implementation": sys.implementation.name}
if spec is None:
    out["error"] = "not-found"
else:
    out["origin"] = spec.origin
    out["locations"] = list(spec.submodule_search_locations or [])
    try:
        out["version"] = m.version(name)
    except m.PackageNotFoundError:
        out["error"] = "no-metadata"
print("DYNOCELL-LOCATE " + json.dumps(out))
"""


def locate_installed(python: str, name: str = "sglang", *, env: dict[str, str] | None = None,
                     timeout_s: float = 60.0) -> InstalledDist:
    """Find the installed package ``name`` of the interpreter ``python`` (run in a subprocess).

    Uses ``importlib.util.find_spec`` (locates without executing the package's
    ``__init__``, so a package whose dependencies are missing — sglang without
    torch on a CPU box — is still found) and ``importlib.metadata.version``.
    ``env`` is the child's whole environment (pass the engine's, PYTHONPATH
    included, so the package found is the one the engine would import).
    The answer is checked, not trusted: the location must be an existing
    directory named ``name`` holding ``__init__.py``, and the version a plain
    version string. Raises :class:`UserError` when ``python`` cannot run, the
    package is missing or not a regular package, or the answer is malformed.
    """
    if not _DIST_NAME.match(name):
        raise UserError(f"not a distribution name: {name!r}", "use e.g. --base sglang")
    try:
        proc = subprocess.run([python, "-c", _LOCATE_SRC, name], capture_output=True, text=True, cwd=PROBE_CWD,
                              env=None if env is None else safe_path_env(env), timeout=timeout_s, check=False)
    except FileNotFoundError as exc:
        raise UserError(f"engine python not found: {python}",
                        "set DYNOCELL_ENGINE_PYTHON to the interpreter that runs the engine") from exc
    except subprocess.TimeoutExpired as exc:
        raise UserError(f"{python} did not answer within {timeout_s:.0f} s while locating {name}",
                        "check that the interpreter starts") from exc
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("DYNOCELL-LOCATE ")), None)
    if proc.returncode != 0 or line is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise UserError(f"{python} failed while locating {name} (exit {proc.returncode}): " + " | ".join(tail),
                        "check DYNOCELL_ENGINE_PYTHON")
    try:
        info = json.loads(line.split(" ", 1)[1])
    except json.JSONDecodeError as exc:
        raise UserError(f"{python} gave a malformed answer while locating {name}: {line[:200]!r}") from exc
    if info.get("error") == "not-found":
        raise UserError(f"{name} is not installed in the engine's Python ({python})",
                        f"install {name} there, or point DYNOCELL_ENGINE_PYTHON at the interpreter that has it")
    if info.get("error") == "no-metadata":
        raise UserError(f"{name} is importable from {info.get('origin')} but has no distribution metadata "
                        f"in {python}", "install it with pip so its version is known")
    locations = info.get("locations") or []
    origin = info.get("origin") or ""
    if len(locations) != 1 or not origin.endswith("__init__.py"):
        raise UserError(f"{name} in {python} is not a regular package (origin {origin!r}, "
                        f"locations {locations!r})", "an engine build needs a package folder with __init__.py")
    pkg = Path(locations[0])
    if not pkg.is_absolute() or not pkg.is_dir() or pkg.name != name or not (pkg / "__init__.py").is_file():
        raise UserError(f"{python} reported {name} at {pkg}, which is not a package folder named {name}",
                        "check the interpreter's installation")
    version = str(info.get("version") or "")
    if not re.fullmatch(r"[0-9A-Za-z.+!_-]{1,64}", version):
        raise UserError(f"{python} reported a malformed version for {name}: {version!r}")
    pkg = pkg.resolve()
    return InstalledDist(name=name, version=version, package_dir=pkg, site_dir=pkg.parent, python=python,
                         python_version=str(info.get("python_version", "")),
                         implementation=str(info.get("implementation", "")))


# ---------------------------------------------------------------- patches

@dataclass(frozen=True)
class PatchFile:
    """One file a patch touches: ``path`` relative to the site folder (``sglang/srt/…``), hex sha256s."""

    path: str
    base_sha256: str
    patched_sha256: str


@dataclass(frozen=True)
class Patch:
    """A patch folder: ``manifest.toml`` + ``patch.diff`` (format: ``patches/README.md``).

    ``versions``: the base versions it was written against; ``diff``: the
    unified diff text; ``diff_sha256``: hex sha256 of ``patch.diff``'s bytes.
    """

    id: str
    description: str
    evidence: str
    dist: str
    versions: tuple[str, ...]
    files: tuple[PatchFile, ...]
    diff: str
    diff_sha256: str
    source: Path

    def identity(self) -> dict[str, Any]:
        """The part of the patch that enters the build identity (no paths)."""
        return {"id": self.id, "diff_sha256": self.diff_sha256,
                "files": [{"path": f.path, "base_sha256": f.base_sha256, "patched_sha256": f.patched_sha256}
                          for f in self.files]}


def load_patch(folder: Path) -> Patch:
    """Read and check one patch folder. Raises :class:`UserError` naming the file and field at fault."""
    mpath = folder / "manifest.toml"
    dpath = folder / "patch.diff"
    try:
        data = tomllib.loads(mpath.read_text(encoding="utf-8"))
        diff_bytes = dpath.read_bytes()
    except FileNotFoundError as exc:
        raise UserError(f"patch folder {folder} lacks {Path(exc.filename).name}",
                        "a patch folder holds manifest.toml and patch.diff") from exc
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{mpath}: {exc}") from exc

    def need(key: str, kind: type) -> Any:
        v = data.get(key)
        if not isinstance(v, kind) or (isinstance(v, (str, list)) and not v):
            raise UserError(f"{mpath}: field {key!r} is missing or not a non-empty {kind.__name__}")
        return v

    pid = need("id", str)
    if pid != folder.name:
        raise UserError(f"{mpath}: id {pid!r} differs from its folder name {folder.name!r}")
    versions = need("versions", list)
    files = []
    for i, f in enumerate(need("files", list)):
        if not isinstance(f, dict):
            raise UserError(f"{mpath}: files[{i}] is not a table")
        path, b, p = f.get("path"), f.get("base_sha256"), f.get("patched_sha256")
        if not isinstance(path, str) or not path or path.startswith("/") or ".." in path.split("/"):
            raise UserError(f"{mpath}: files[{i}].path must be a relative path inside the site folder, got {path!r}")
        for key, h in (("base_sha256", b), ("patched_sha256", p)):
            if not isinstance(h, str) or not _HEX64.match(h):
                raise UserError(f"{mpath}: files[{i}].{key} must be 64 lowercase hex digits, got {h!r}")
        files.append(PatchFile(path, cast(str, b), cast(str, p)))  # both checked to be str just above
    if len({f.path for f in files}) != len(files):
        raise UserError(f"{mpath}: a file is listed twice")
    try:
        diff = diff_bytes.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{dpath} is not UTF-8") from exc
    touched = {fd.path for fd in parse_unified_diff(diff, source=str(dpath))}
    listed = {f.path for f in files}
    if touched != listed:
        raise UserError(f"{dpath} touches {sorted(touched)} but {mpath} lists {sorted(listed)}",
                        "every file the diff touches needs its base/patched sha256 in the manifest, and only those")
    return Patch(id=pid, description=str(data.get("description", "")).strip(),
                 evidence=str(data.get("evidence", "")).strip(), dist=need("dist", str),
                 versions=tuple(str(v) for v in versions), files=tuple(files), diff=diff,
                 diff_sha256=sha256_bytes(diff_bytes), source=folder)


def bundled_patches(extra_dirs: Iterable[Path] = ()) -> dict[str, Patch]:
    """Every patch folder under the bundled directory and ``extra_dirs`` (later dirs win by id)."""
    out: dict[str, Patch] = {}
    for d in (BUNDLED_PATCHES_DIR, *extra_dirs):
        if not Path(d).is_dir():
            continue
        for sub in sorted(Path(d).iterdir()):
            if sub.is_dir() and (sub / "manifest.toml").is_file():
                out[sub.name] = load_patch(sub)
    return out


def resolve_patches(ids: Iterable[str], extra_dirs: Iterable[Path] = ()) -> list[Patch]:
    """The patches named by ``ids`` (bundled ids, or paths of patch folders), in the given order.

    Raises :class:`NotFound` for an unknown id and :class:`UserError` for a
    repeated one.
    """
    ids = list(ids)
    if len(set(ids)) != len(ids):
        raise UserError(f"a patch is named twice: {ids}", "name each patch once")
    known: dict[str, Patch] | None = None
    out = []
    for pid in ids:
        p = Path(pid)
        if ("/" in pid or pid.startswith(".")) and (p / "manifest.toml").is_file():
            out.append(load_patch(p.resolve()))
            continue
        if known is None:
            known = bundled_patches(extra_dirs)
        if pid not in known:
            raise NotFound(f"no patch named {pid!r}",
                           "bundled patches: " + (", ".join(sorted(known)) or "none") + "; or give a patch folder path")
        out.append(known[pid])
    return out


# ---------------------------------------------------------------- strict unified diff applier

@dataclass(frozen=True)
class Hunk:
    """One hunk: 1-based starts and counts from its header; ``lines`` are ``(tag, text)`` with tag in ' -+'."""

    old_start: int
    old_count: int
    new_start: int
    new_count: int
    lines: tuple[tuple[str, str], ...]
    header_line: int


@dataclass(frozen=True)
class FileDiff:
    """The hunks for one file; ``path`` with the ``a/``/``b/`` prefix removed."""

    path: str
    hunks: tuple[Hunk, ...]


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _split_lines(text: str) -> list[str]:
    """Lines with their ``\\n`` kept; only ``\\n`` separates (not ``str.splitlines``' extra separators)."""
    parts = text.split("\n")
    lines = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _strip_prefix(label: str) -> str:
    label = label.split("\t", 1)[0].strip()
    if label.startswith(("a/", "b/")):
        label = label[2:]
    return label


def _parse_hunk(lines: list[str], i: int, source: str) -> tuple[Hunk, int]:
    """The hunk whose ``@@`` header is ``lines[i]``, and the index of the line after it."""
    m = _HUNK.match(lines[i])
    if not m:
        raise UserError(f"{source}:{i + 1}: malformed hunk header {lines[i].rstrip()!r}")
    os_, oc, ns, nc = (int(m.group(1)), int(m.group(2) if m.group(2) is not None else 1),
                       int(m.group(3)), int(m.group(4) if m.group(4) is not None else 1))
    header = i
    i += 1
    body: list[tuple[str, str]] = []
    n_old = n_new = 0
    while n_old < oc or n_new < nc or (i < len(lines) and lines[i].startswith("\\")):
        if i >= len(lines):
            raise UserError(f"{source}:{header + 1}: hunk ends early (expected -{oc} +{nc} lines)")
        ln = lines[i]
        tag = ln[:1]
        if tag == "\\":  # "\ No newline at end of file": the previous line has no newline
            if not body or not body[-1][1].endswith("\n"):
                raise UserError(f"{source}:{i + 1}: misplaced '\\ No newline' marker")
            t, s = body[-1]
            body[-1] = (t, s[:-1])
        elif tag in (" ", "-", "+"):
            body.append((tag, ln[1:]))
            n_old += tag in " -"
            n_new += tag in " +"
        else:
            raise UserError(f"{source}:{i + 1}: line inside a hunk starts with {tag!r} "
                            "(expected ' ', '-', '+' or '\\')")
        if n_old > oc or n_new > nc:
            raise UserError(f"{source}:{header + 1}: hunk has more lines than its header says")
        i += 1
    if i < len(lines) and (lines[i][:1] in (" ", "+") or
                           (lines[i][:1] == "-" and not lines[i].startswith("--- "))):
        raise UserError(f"{source}:{header + 1}: hunk has more lines than its header says")
    return Hunk(os_, oc, ns, nc, tuple(body), header + 1), i


def parse_unified_diff(text: str, *, source: str = "<diff>") -> list[FileDiff]:
    """Parse a unified diff (``diff -u`` / ``git diff`` output, paths ``a/…`` ``b/…``).

    Lines outside file sections (``diff --git``, ``index …``, blank lines) are
    ignored; inside a hunk every line must start with ``' '``, ``'-'``, ``'+'``
    or ``'\\'`` until the header's counts are met. File creation/deletion
    (``/dev/null``) and renames are refused. Raises :class:`UserError` naming
    ``source`` and the line number.
    """
    lines = _split_lines(text)
    files: list[FileDiff] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("--- "):
            if line.startswith("@@"):
                raise UserError(f"{source}:{i + 1}: hunk outside a file section")
            i += 1
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("+++ "):
            raise UserError(f"{source}:{i + 1}: '---' not followed by '+++'")
        old, new = _strip_prefix(line[4:]), _strip_prefix(lines[i + 1][4:])
        if "/dev/null" in (old, new) or old != new:
            raise UserError(f"{source}:{i + 1}: only in-place edits are supported (got {old!r} -> {new!r})")
        i += 2
        hunks: list[Hunk] = []
        while i < len(lines) and lines[i].startswith("@@"):
            hunk, i = _parse_hunk(lines, i, source)
            hunks.append(hunk)
        if not hunks:
            raise UserError(f"{source}: file section for {old} has no hunks")
        if any(f.path == old for f in files):
            raise UserError(f"{source}: {old} appears in two file sections")
        files.append(FileDiff(old, tuple(hunks)))
    if not files:
        raise UserError(f"{source}: no file sections found", "a patch.diff is `diff -u` / `git diff` output")
    return files


def apply_unified_diff(original: str, fd: FileDiff, *, source: str = "<diff>") -> str:
    """Apply one file's hunks to ``original`` strictly; returns the new text.

    Every hunk's context and removed lines must equal the original's lines
    exactly at the position its header gives (``-start,count``), hunks must be
    in order and not overlap, and each hunk's ``+start`` must equal where it
    lands in the output. No fuzz, no offset search, no whitespace leniency.
    Raises :class:`UserError` naming the file, hunk and first differing line.
    """
    orig = _split_lines(original)
    out: list[str] = []
    pos = 0
    for h in fd.hunks:
        start = h.old_start - 1 if h.old_count else h.old_start
        if start < pos:
            raise UserError(f"{source}: hunk at line {h.header_line} for {fd.path} overlaps the previous hunk")
        if start + h.old_count > len(orig):
            raise UserError(f"{source}: hunk at line {h.header_line} for {fd.path} reaches past the end "
                            f"of the file ({len(orig)} lines)")
        out.extend(orig[pos:start])
        expected_new_start = len(out) + (1 if h.new_count else 0)
        if h.new_start != expected_new_start:
            raise UserError(f"{source}: hunk at line {h.header_line} for {fd.path} says +{h.new_start}, "
                            f"but lands at line {expected_new_start} (no offset tolerance)")
        old = [s for t, s in h.lines if t in " -"]
        for k, want in enumerate(old):
            have = orig[start + k]
            if have != want:
                raise UserError(f"{source}: hunk at line {h.header_line} does not match {fd.path} line "
                                f"{start + k + 1}: expected {want!r}, found {have!r}",
                                "the file differs from the one the patch was written against")
        out.extend(s for t, s in h.lines if t in " +")
        pos = start + h.old_count
    out.extend(orig[pos:])
    return "".join(out)


# ---------------------------------------------------------------- planning and building

@dataclass
class BuildPlan:
    """What a build will contain, computed before anything is written.

    ``files``: ``{relpath under site/: sha256}`` of the final overlay;
    ``patched``: ``{relpath: new bytes}`` for patched files; ``identity``: the
    hashed part of the manifest; ``build_hash``: ``"sha256:…"``.
    """

    dist: InstalledDist
    patches: list[Patch]
    files: dict[str, str]
    patched: dict[str, bytes]
    identity: dict[str, Any]
    build_hash: str
    base_files: dict[str, str] = field(repr=False, default_factory=dict)

    @property
    def hex(self) -> str:
        """The hash without its ``sha256:`` prefix (the overlay folder's name)."""
        return self.build_hash.split(":", 1)[1]


def plan_build(dist: InstalledDist, patches: list[Patch]) -> BuildPlan:
    """Hash the installed package and apply ``patches`` in order, in memory.

    Refusals (:class:`UserError`): a patch for another distribution or for a
    version other than ``dist.version``; a target file missing; a target whose
    sha256 differs from the patch's ``base_sha256`` (message names the file,
    both hashes, the installed version and the package folder); a diff that
    does not apply exactly; a result whose sha256 differs from the patch's
    ``patched_sha256``. Patches stack: patch k's base is the content after
    patches 1..k-1.
    """
    prefix = dist.name + "/"
    base = {prefix + rel: h for rel, h in hash_tree(dist.package_dir).items()}
    current = dict(base)
    patched: dict[str, bytes] = {}
    for p in patches:
        if p.dist != dist.name:
            raise UserError(f"patch {p.id} is for {p.dist}, the build's base is {dist.name}")
        if dist.version not in p.versions:
            raise UserError(f"patch {p.id} targets {p.dist} {', '.join(p.versions)}; the engine's Python has "
                            f"{dist.name} {dist.version} ({dist.package_dir})",
                            "install a version the patch supports, or port the patch (a new folder with new hashes)")
        diffs = {fd.path: fd for fd in parse_unified_diff(p.diff, source=str(p.source / "patch.diff"))}
        for pf in p.files:
            if not pf.path.startswith(prefix):
                raise UserError(f"patch {p.id}: {pf.path} is outside the {dist.name} package")
            have = current.get(pf.path)
            if have is None:
                raise UserError(f"patch {p.id}: {pf.path} does not exist in the installed {dist.name} "
                                f"{dist.version} ({dist.site_dir})", "the patch was written for another layout")
            if have != pf.base_sha256:
                raise UserError(
                    f"patch {p.id}: {pf.path} has sha256 {have} in the installed {dist.name} {dist.version} "
                    f"({dist.site_dir}), the patch expects base sha256 {pf.base_sha256}",
                    "refusing to apply to a different file; reinstall the pristine version or port the patch")
            text_bytes = patched.get(pf.path)
            if text_bytes is None:
                text_bytes = (dist.site_dir / pf.path).read_bytes()
                if sha256_bytes(text_bytes) != have:  # changed between hashing and reading
                    raise UserError(f"patch {p.id}: {pf.path} changed while the build was being planned")
            new = apply_unified_diff(text_bytes.decode("utf-8"), diffs[pf.path],
                                     source=f"patch {p.id}").encode("utf-8")
            got = sha256_bytes(new)
            if got != pf.patched_sha256:
                raise UserError(f"patch {p.id}: {pf.path} hashes to {got} after applying, the manifest says "
                                f"{pf.patched_sha256}", "the patch's diff and manifest disagree; fix the manifest")
            patched[pf.path] = new
            current[pf.path] = got
    identity = {
        "format": MANIFEST_FORMAT,
        "base": {"dist": dist.name, "version": dist.version, "tree_sha256": tree_sha256(base),
                 "files": len(base)},
        "python": {"implementation": dist.implementation, "version": dist.python_version},
        "patches": [p.identity() for p in patches],
        "tree_sha256": tree_sha256(current),
    }
    return BuildPlan(dist=dist, patches=patches, files=current, patched=patched, identity=identity,
                     build_hash=compute_build_hash(identity), base_files=base)


def _manifest(plan: BuildPlan, build_dir: Path, links: int, copies: int) -> dict[str, Any]:
    return {
        "build_hash": plan.build_hash,
        "identity": plan.identity,
        "patched_files": sorted(plan.patched),
        "files": plan.files,
        "local": {
            "path": str(build_dir),
            "site": str(build_dir / "site"),
            "python": plan.dist.python,
            "base_site": str(plan.dist.site_dir),
            "hardlinks": links,
            "copies": copies,
            "link_mode": "hardlink" if copies == 0 else ("copy" if links == 0 else "mixed"),
        },
    }


def materialize(plan: BuildPlan, builds_dir: Path) -> tuple[Path, dict[str, Any]]:
    """Write the overlay for ``plan`` under ``builds_dir/<hex>/``; returns (build dir, manifest).

    Built in a temporary sibling folder and renamed into place, so a build dir
    either is complete or does not exist; when it already exists (built
    before, or by a concurrent process) its ``manifest.json`` is returned
    unchanged. Untouched files are hard-linked (a failed link — cross-device,
    not permitted — falls back to a copy, counted in ``manifest["local"]``).
    Raises :class:`UserError` when ``builds_dir`` is not writable or a base
    file changed while being linked.
    """
    final = builds_dir / plan.hex
    if (final / "manifest.json").is_file():
        return final, read_manifest(final)
    try:
        builds_dir.mkdir(parents=True, exist_ok=True)
        tmp = builds_dir / f".tmp-{plan.hex[:16]}-{os.getpid()}"
        if tmp.exists():
            shutil.rmtree(tmp)
        links = copies = 0
        site = tmp / "site"
        for rel, digest in plan.files.items():
            dst = site / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            if rel in plan.patched:
                dst.write_bytes(plan.patched[rel])
                continue
            src = plan.dist.site_dir / rel
            try:
                os.link(src.resolve(), dst)
                links += 1
            except OSError:
                shutil.copy2(src, dst)
                copies += 1
                if sha256_file(dst) != digest:
                    raise UserError(f"{rel} changed in {plan.dist.site_dir} while the build was being made",
                                    "run the build again") from None
        manifest = _manifest(plan, final, links, copies)
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
        try:
            os.rename(tmp, final)
        except OSError:
            if (final / "manifest.json").is_file():  # a concurrent build won the race
                shutil.rmtree(tmp, ignore_errors=True)
                return final, read_manifest(final)
            raise
    except PermissionError as exc:
        raise UserError(f"cannot write the build under {builds_dir}: {exc.strerror}",
                        "set DYNOCELL_HOME to a writable directory") from exc
    return final, manifest


def build(python: str, patches: list[Patch], builds_dir: Path, *, base: str = "sglang",
          env: dict[str, str] | None = None) -> tuple[Path, dict[str, Any]]:
    """Locate ``base`` in ``python``, plan and materialize the build; returns (build dir, manifest).

    Errors: see :func:`locate_installed`, :func:`plan_build`, :func:`materialize`.
    """
    dist = locate_installed(python, base, env=env)
    return materialize(plan_build(dist, patches), builds_dir)


def read_manifest(build_dir: Path) -> dict[str, Any]:
    """The ``manifest.json`` of a build dir. Raises :class:`NotFound` when missing or unreadable."""
    p = build_dir / "manifest.json"
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise NotFound(f"no readable manifest at {p}: {exc}",
                       "the build folder was removed or damaged; run `dynocell engine build` again") from exc


# ---------------------------------------------------------------- verification

@dataclass(frozen=True)
class Drift:
    """One difference between a build dir and its manifest.

    ``kind``: ``modified`` (content hash differs), ``missing`` (file gone),
    ``extra`` (file not in the manifest; ``__pycache__``/``*.pyc`` excepted),
    ``manifest`` (the manifest's own identity does not match its hash).
    ``expected``/``actual``: hex sha256 (or None).
    """

    path: str
    kind: str
    expected: str | None = None
    actual: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain dict form (for JSON output and the store)."""
        return {"path": self.path, "kind": self.kind, "expected": self.expected, "actual": self.actual}


def verify(build_dir: Path, manifest: dict[str, Any]) -> list[Drift]:
    """Re-hash every file of the overlay (patched and linked) against ``manifest``.

    Also checks that ``manifest["identity"]`` hashes to ``manifest["build_hash"]``
    and that ``manifest["files"]`` hashes to the identity's ``tree_sha256`` (so
    an edited manifest.json is drift too). Returns an empty list when the build
    is intact; never raises for drift.
    """
    drift: list[Drift] = []
    identity = manifest.get("identity") or {}
    files: dict[str, str] = manifest.get("files") or {}
    if compute_build_hash(identity) != manifest.get("build_hash"):
        drift.append(Drift("manifest.json", "manifest", manifest.get("build_hash"), compute_build_hash(identity)))
    if tree_sha256(files) != identity.get("tree_sha256"):
        drift.append(Drift("manifest.json", "manifest", identity.get("tree_sha256"), tree_sha256(files)))
    site = build_dir / "site"
    have = hash_tree(site) if site.is_dir() else {}
    for rel, want in files.items():
        got = have.get(rel)
        if got is None:
            drift.append(Drift(rel, "missing", want, None))
        elif got != want:
            drift.append(Drift(rel, "modified", want, got))
    for rel in sorted(set(have) - set(files)):
        drift.append(Drift(rel, "extra", None, have[rel]))
    return drift


_VERIFY_IMPORT_SRC = ("import importlib, sys\n"
                      "m = importlib.import_module(sys.argv[1])\n"
                      "print('DYNOCELL-IMPORT ' + str(m.__file__))\n")


def verify_import(python: str, pythonpath: str, *, name: str = "sglang", env: dict[str, str] | None = None,
                  timeout_s: float = 120.0) -> Path:
    """Prove that ``python`` with ``pythonpath`` first on PYTHONPATH imports ``name`` from the overlay.

    ``pythonpath``: the build's ``<build>/site`` (what the boot prepends);
    ``env``: the engine's environment (its own PYTHONPATH is kept after the
    overlay, exactly as :func:`dynocell.engine.adapters.build_env` does).
    Runs ``python -c "import <name>; print(<name>.__file__)"`` — a real import,
    as the engine will do. Returns the imported ``__init__.py`` path (resolved).
    Raises :class:`EngineError` when the import fails or resolves outside
    ``pythonpath`` ("a boot that ran unpatched code fails loudly").
    """
    child = dict(env or {})
    rest = child.get("PYTHONPATH")
    child["PYTHONPATH"] = pythonpath + (os.pathsep + rest if rest else "")
    try:
        proc = subprocess.run([python, "-c", _VERIFY_IMPORT_SRC, name], capture_output=True, text=True,
                              env=safe_path_env(child), cwd=PROBE_CWD, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineError(f"could not check where {python} imports {name} from: {exc}",
                          "check DYNOCELL_ENGINE_PYTHON") from exc
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("DYNOCELL-IMPORT ")), None)
    if proc.returncode != 0 or line is None:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise EngineError(f"{python} cannot import {name} with the build first on PYTHONPATH "
                          f"(exit {proc.returncode}): {tail}",
                          "the engine would not start; see the error above (a missing dependency?)")
    got = Path(line.split(" ", 1)[1].strip())
    root = Path(pythonpath).resolve()
    try:
        resolved = got.resolve()
        ok = resolved.is_relative_to(root) or got.is_relative_to(Path(pythonpath))
    except OSError:
        resolved, ok = got, False
    if not ok:
        raise EngineError(f"the engine's Python imports {name} from {got}, outside the build overlay {root}: "
                          "a boot would run unpatched code",
                          "something puts another sglang before PYTHONPATH (a .pth file, sitecustomize, "
                          "an editable install); remove it or use another DYNOCELL_ENGINE_PYTHON")
    return resolved


@dataclass(frozen=True)
class LogOrigin:
    """Where an engine log says its package's code came from.

    ``inside``/``outside``: distinct ``…/<package>/….py`` paths printed in the
    log (warnings, tracebacks) under / not under the overlay site folder.
    ``ok``: at least one path seen and none outside; ``seen``: any path seen.
    """

    inside: tuple[str, ...]
    outside: tuple[str, ...]

    @property
    def seen(self) -> bool:
        """True when the log named at least one file of the package."""
        return bool(self.inside or self.outside)

    @property
    def ok(self) -> bool:
        """True when the log named package files and all are inside the overlay."""
        return self.seen and not self.outside


def log_origin(lines: Iterable[str], overlay_site: Path | str, *, name: str = "sglang") -> LogOrigin:
    """Scan engine log lines for file paths of package ``name`` and check they are in the overlay.

    SGLang 0.5.17 started as ``python -m sglang.launch_server`` prints as its
    first line ``<site>/sglang/launch_server.py:56: UserWarning: 'python -m
    sglang.launch_server' is still supported …`` (real log:
    ``tests/data/sglang-0.5.17/A.server.log``), and tracebacks print
    ``File "<site>/sglang/…py"``; either proves where the code came from. A
    supervisor can feed the first lines of a boot log and fail the boot when
    ``outside`` is non-empty. Pure function; never raises.
    """
    root = str(Path(overlay_site)).rstrip("/") + "/"
    pattern = re.compile(r"""(?:^|[\s"'(])(/[^\s"':]*/""" + re.escape(name) + r"""/[^\s"':]*\.py)\b""")
    inside: dict[str, None] = {}
    outside: dict[str, None] = {}
    marker = f"/{name}/"
    for line in lines:
        if marker not in line:
            continue
        for m in pattern.finditer(line):
            path = m.group(1)
            (inside if path.startswith(root) else outside)[path] = None
    return LogOrigin(tuple(inside), tuple(outside))
