"""llama.cpp's ``llama-server`` built from source, and the pretrained GGUF models it serves.

Source: the ``llama-cpp-python`` sdist vendors llama.cpp's whole tree (``tools/server/`` included);
its name, version and sha256 are pinned in ``llamacpp.toml`` (``[source]``). :func:`fetch_sdist`
gets it with pip (``pip download --no-deps --no-binary llama-cpp-python NAME==VERSION``) and refuses
a file whose sha256 differs. :func:`build_server` unpacks it, applies patches with the same refusal
rules as the SGLang overlays (:mod:`dynocell.engine.builds`: every target file's base sha256 must
match, strict diff applier, result must hash to ``patched_sha256``; patch paths are relative to the
llama.cpp tree, ``dist = "llama-cpp-python"``), configures with CMake out of tree
(``[build] cmake_options``: CPU only, static, no web UI, no tests/examples) and builds the
``llama-server`` target only, reporting CMake's ``[ NN%]`` progress.

Identity: ``build_hash = "sha256:" + sha256(canonical JSON of identity)``, the identity being the
sdist (dist, version, sha256), the target, the CMake options and each patch's identity. The build
folder is ``<builds_dir>/<hex>/`` with ``bin/llama-server`` and ``manifest.json`` (identity, the
binary's sha256, build seconds, compiler; local paths under ``manifest["local"]``, not hashed). A
folder whose manifest and binary are intact is reused, never rebuilt.

Models (``[models.<name>]``): :func:`fetch_model` gets the named wheel with pip
(``pip download --no-deps``), checks the wheel's sha256, extracts the one GGUF member into
``<models_dir>/gguf/<file>`` and checks its sha256; a verified file already there is reused.

This module persists nothing and reads no environment; pip and CMake run with the environment they
are given (pip needs its own configuration: index, proxy, certificates). It imports only the
standard library and :mod:`dynocell.errors` / :mod:`dynocell.engine.builds`, so CI runs it with a
bare interpreter before dynocell is installed: ``python -m dynocell.engine.kinds.llamacpp_build``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dynocell.engine import builds as eb
from dynocell.errors import EngineError, NotFound, UserError

PINS_FILE = Path(__file__).with_name("llamacpp.toml")
BINARY = "llama-server"
Progress = Callable[[str], None]
_PERCENT = re.compile(r"^\[\s*(\d{1,3})%\]")


def _quiet(_msg: str) -> None:
    pass


def pins() -> dict[str, Any]:
    """``llamacpp.toml`` as a dict (``source``, ``build``, ``models``)."""
    return tomllib.loads(PINS_FILE.read_text(encoding="utf-8"))


def model_names() -> tuple[str, ...]:
    """The models :func:`fetch_model` knows (``[models.<name>]``)."""
    return tuple(pins().get("models", {}))


def _verified(path: Path, want: str, what: str) -> Path:
    got = eb.sha256_file(path)
    if got != want:
        raise UserError(f"{what} {path.name} has sha256 {got}, expected {want}",
                        "the download is not the pinned file: remove it and fetch again; if it recurs, the "
                        "registry serves different bytes under the pinned version (do not use it)")
    return path


def _pip_download(python: str, dist: str, version: str, dest: Path, *, sdist: bool,
                  env: dict[str, str] | None, progress: Progress) -> None:
    argv = [python, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d", str(dest)]
    if sdist:
        argv += ["--no-binary", dist]
    argv.append(f"{dist}=={version}")
    progress(f"pip download {dist}=={version}")
    proc = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
        raise EngineError(f"pip download {dist}=={version} failed (exit {proc.returncode}):\n{tail}",
                          "check the package index is reachable from this host (pip's own settings apply)")


def fetch_sdist(download_dir: Path, *, python: str = sys.executable, env: dict[str, str] | None = None,
                progress: Progress = _quiet) -> Path:
    """The pinned sdist in ``download_dir``, sha256-verified (downloaded with pip when absent).

    Raises UserError for a sha256 mismatch, EngineError when pip fails."""
    src = pins()["source"]
    path = Path(download_dir) / src["file"]
    if not path.is_file():
        Path(download_dir).mkdir(parents=True, exist_ok=True)
        _pip_download(python, src["dist"], src["version"], Path(download_dir), sdist=True, env=env,
                      progress=progress)
    if not path.is_file():
        raise EngineError(f"pip download left no {src['file']} in {download_dir}", None)
    return _verified(path, src["sha256"], "sdist")


def identity(patches: Sequence[eb.Patch] = ()) -> dict[str, Any]:
    """What the build hash covers: sdist pin, target, CMake options, patches (no paths)."""
    p = pins()
    src = p["source"]
    return {"base": {"dist": src["dist"], "version": src["version"], "sha256": src["sha256"]},
            "target": p["build"]["target"], "cmake_options": list(p["build"]["cmake_options"]),
            "patches": [x.identity() for x in patches]}


def build_hash(patches: Sequence[eb.Patch] = ()) -> str:
    """``"sha256:" + hex`` of :func:`identity` (:func:`dynocell.engine.builds.compute_build_hash`)."""
    return eb.compute_build_hash(identity(patches))


def find_build(builds_dir: Path, patches: Sequence[eb.Patch] = ()) -> tuple[Path, dict[str, Any]] | None:
    """``(build folder, manifest)`` of an intact build of this identity, or None (missing or drifted)."""
    folder = Path(builds_dir) / build_hash(patches).removeprefix("sha256:")
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    binary = folder / "bin" / BINARY
    if not binary.is_file() or eb.sha256_file(binary) != manifest.get("binary_sha256"):
        return None
    return folder, manifest


def _check_patches(patches: Sequence[eb.Patch], version: str) -> None:
    for p in patches:
        if p.dist != pins()["source"]["dist"]:
            raise UserError(f"patch {p.id} is for {p.dist}, not llama-cpp-python",
                            "a llama.cpp patch has dist = \"llama-cpp-python\" and paths inside vendor/llama.cpp")
        if version not in p.versions:
            raise UserError(f"patch {p.id} was written for llama-cpp-python {', '.join(p.versions)}, "
                            f"this build is {version}", "rebase the patch on the pinned version")


def apply_patches(tree: Path, patches: Sequence[eb.Patch]) -> None:
    """Apply ``patches`` in order inside the llama.cpp ``tree``, refusing a drifted base file.

    Raises UserError naming the file and both hashes (base mismatch or a result that does not
    hash to the manifest's ``patched_sha256``), or the hunk that does not apply."""
    for p in patches:
        diffs = {fd.path: fd for fd in eb.parse_unified_diff(p.diff, source=str(p.source / "patch.diff"))}
        for f in p.files:
            target = tree / f.path
            data = target.read_bytes() if target.is_file() else b""
            have = eb.sha256_bytes(data)
            if have != f.base_sha256:
                raise UserError(f"patch {p.id}: {f.path} has sha256 {have}, the patch needs {f.base_sha256}",
                                "the file differs from the one the patch was written against: refused")
            new = eb.apply_unified_diff(data.decode("utf-8"), diffs[f.path], source=p.id).encode("utf-8")
            if eb.sha256_bytes(new) != f.patched_sha256:
                raise UserError(f"patch {p.id}: {f.path} patched hashes to {eb.sha256_bytes(new)}, "
                                f"the manifest says {f.patched_sha256}", "regenerate the patch manifest")
            target.write_bytes(new)


def _run_logged(argv: list[str], log, env: dict[str, str] | None, progress: Progress, cwd: Path) -> int:
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace")
    last = -1
    assert proc.stdout is not None
    for line in proc.stdout:
        log.write(line)
        m = _PERCENT.match(line)
        if m and int(m.group(1)) != last:
            last = int(m.group(1))
            progress(f"building {BINARY}: {last}% ({line[m.end():].strip()[:80]})")
    return proc.wait()


def _compile(tree: Path, work: Path, jobs: int, env: dict[str, str] | None, progress: Progress,
             log_path: Path) -> Path:
    opts = pins()["build"]
    bdir = work / "build"
    with open(log_path, "a", encoding="utf-8") as log:
        steps = (["cmake", "-S", str(tree), "-B", str(bdir), *opts["cmake_options"]],
                 ["cmake", "--build", str(bdir), "--target", opts["target"], "-j", str(jobs)])
        for argv in steps:
            log.write("$ " + " ".join(argv) + "\n")
            log.flush()
            try:
                rc = _run_logged(argv, log, env, progress, work)
            except FileNotFoundError as exc:
                raise EngineError(f"cannot run {argv[0]}: {exc}", "install cmake and g++ (apt-get install cmake g++)") \
                    from exc
            if rc != 0:
                raise EngineError(f"{argv[0]} {argv[1]} failed (exit {rc}); log: {log_path}",
                                  "read the log's last lines; a compiler killed by the OOM killer needs fewer jobs")
    binary = bdir / "bin" / BINARY
    if not binary.is_file():
        raise EngineError(f"the build finished without {binary}", f"read {log_path}")
    return binary


def build_server(sdist: Path, builds_dir: Path, patches: Sequence[eb.Patch] = (), *, jobs: int = 2,
                 env: dict[str, str] | None = None, progress: Progress = _quiet) -> tuple[Path, dict[str, Any], bool]:
    """Build (or find) ``llama-server`` for the pinned sdist + ``patches``: ``(folder, manifest, created)``.

    ``sdist`` must be the verified pinned file (:func:`fetch_sdist`). The build runs in a temporary
    folder next to the final one and is moved into place only when complete, so an interrupted build
    leaves no half folder that looks finished. The log is ``<builds_dir>/<hex>.log``. Raises
    UserError (a refused patch, a wrong sdist), EngineError (CMake or the compiler failed)."""
    src = pins()["source"]
    _verified(Path(sdist), src["sha256"], "sdist")
    _check_patches(patches, src["version"])
    found = find_build(builds_dir, patches)
    if found:
        return found[0], found[1], False
    ident = identity(patches)
    bhash = eb.compute_build_hash(ident)
    hexd = bhash.removeprefix("sha256:")
    builds_dir = Path(builds_dir)
    builds_dir.mkdir(parents=True, exist_ok=True)
    final = builds_dir / hexd
    log_path = builds_dir / f"{hexd}.log"
    log_path.write_text("", encoding="utf-8")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f".{hexd[:12]}-", dir=builds_dir) as tmp:
        work = Path(tmp)
        progress(f"unpacking {Path(sdist).name}")
        with tarfile.open(sdist, "r:gz") as tar:
            tar.extractall(work / "src", filter="data")  # no absolute paths, links out or devices
        tree = work / "src" / src["tree"]
        apply_patches(tree, patches)
        binary = _compile(tree, work, jobs, env, progress, log_path)
        staged = work / "out"
        (staged / "bin").mkdir(parents=True)
        shutil.copy2(binary, staged / "bin" / BINARY)
        manifest = {"build_hash": bhash, "identity": ident,
                    "binary_sha256": eb.sha256_file(staged / "bin" / BINARY),
                    "build_s": round(time.monotonic() - t0, 1), "jobs": jobs,
                    "local": {"binary": str(final / "bin" / BINARY), "log": str(log_path)}}
        (staged / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
        if final.exists():
            shutil.rmtree(final)
        os.replace(staged, final)
    progress(f"built {BINARY} in {manifest['build_s']:.0f} s")
    return final, manifest, True


def fetch_model(name: str, models_dir: Path, *, python: str = sys.executable, env: dict[str, str] | None = None,
                progress: Progress = _quiet) -> tuple[Path, bool]:
    """``(path of the verified GGUF, downloaded?)`` for the model ``name`` of ``llamacpp.toml``.

    Raises NotFound for an unknown name, UserError for a sha256 mismatch (the wheel's or the GGUF's),
    EngineError when pip fails."""
    models = pins().get("models", {})
    if name not in models:
        raise NotFound(f"no model {name!r} to fetch", f"known: {', '.join(models)}")
    m = models[name]
    dest = Path(models_dir) / "gguf" / m["file"]
    if dest.is_file():
        return _verified(dest, m["sha256"], "model"), False
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=dest.parent) as tmp:
        _pip_download(python, m["dist"], m["version"], Path(tmp), sdist=False, env=env, progress=progress)
        wheel = _verified(Path(tmp) / m["wheel"], m["wheel_sha256"], "wheel")
        progress(f"extracting {m['member']}")
        part = Path(tmp) / m["file"]
        with zipfile.ZipFile(wheel) as zf, zf.open(m["member"]) as fin, open(part, "wb") as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
        _verified(part, m["sha256"], "model")
        os.replace(part, dest)
    return dest, True


def main(argv: Sequence[str] | None = None) -> int:
    """CI entry: fetch + build + fetch the models, then write ``--done`` (JSON: rc, binary, models, build_s,
    error). Exit status 0 on success, 1 on failure (the error is in the done-file and on stderr)."""
    ap = argparse.ArgumentParser(prog="python -m dynocell.engine.kinds.llamacpp_build",
                                 description="Build llama-server from the pinned sdist and fetch the GGUF models.")
    ap.add_argument("--dir", required=True, type=Path, help="cache folder (downloads/, builds/, models/)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--model", action="append", default=[], help="model name to fetch (repeat)")
    ap.add_argument("--done", type=Path, required=True, help="JSON file written when finished")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    out: dict[str, Any] = {"rc": 1}
    try:
        sdist = fetch_sdist(args.dir / "downloads", progress=print)
        folder, manifest, _ = build_server(sdist, args.dir / "builds", jobs=args.jobs, progress=print)
        out.update(binary=str(folder / "bin" / BINARY), build_hash=manifest["build_hash"],
                   build_s=manifest["build_s"])
        out["models"] = {n: str(fetch_model(n, args.dir / "models", progress=print)[0]) for n in args.model}
        out["rc"] = 0
    except (UserError, EngineError, OSError) as exc:
        out["error"] = str(exc)
        print(f"Error: {exc}", file=sys.stderr)
    out["wall_s"] = round(time.monotonic() - t0, 1)
    args.done.parent.mkdir(parents=True, exist_ok=True)
    args.done.write_text(json.dumps(out, indent=1), encoding="utf-8")
    return int(out["rc"])


if __name__ == "__main__":
    sys.exit(main())
