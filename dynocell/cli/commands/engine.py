"""``dynocell engine build|list|show|verify|patches``: patched engine builds (content-addressed overlays)."""

from __future__ import annotations

from typing import List, Optional

import typer

from dynocell.cli.common import JSON_OPTION_HELP, add_row, err_console, get_cell, human_ago, out, print_json, table

engine_app = typer.Typer(
    help="Engine builds: the SGLang installed in the engine's Python plus an ordered set of verified patches, "
    "as an overlay put first on the engine's PYTHONPATH.\n\n"
    "Example: dynocell engine build --patch spec-per-position-metrics",
    no_args_is_help=True,
)

BUILD_HELP = "A build hash or unique prefix (≥ 6 hex digits)."


def register(app: typer.Typer) -> None:
    """Add the ``engine`` group to the root app."""
    app.add_typer(engine_app, name="engine")


def _short(h: str) -> str:
    return h.removeprefix("sha256:")[:12]


@engine_app.command("build")
def build_cmd(
    engine: Optional[str] = typer.Argument(
        None, help="llamacpp: build llama.cpp's llama-server from the pinned llama-cpp-python sdist "
        "(CMake + g++, minutes on 2 cores). Leave out for an SGLang/vLLM overlay."),
    jobs: int = typer.Option(2, "--jobs", "-j", min=1, max=256, help="Compiler jobs (llamacpp only)."),
    base: str = typer.Option("sglang", "--base", help="Base distribution (the installed package to overlay)."),
    patch: Optional[List[str]] = typer.Option(
        None, "--patch", "-p", help="Patch id (bundled) or patch folder path; repeat, applied in order."),
    python: Optional[str] = typer.Option(None, "--python",
                                         help="Engine interpreter (default: the engine_python setting)."),
    json_out: bool = typer.Option(False, "--json", help=JSON_OPTION_HELP),
) -> None:
    """Build an overlay of the installed SGLang with patches applied, and record it.

    Untouched files are hard links, patched files real copies.

    Every patched file must match the patch's base sha256, else the build is refused (file, hashes, version).

    Building the same thing twice gives the same hash and reuses the folder.

    With ENGINE llamacpp: fetch the pinned llama-cpp-python sdist with pip and verify its sha256.

    Then apply the patches (same refusal rules) and build llama-server out of tree into the build cache.

    A found llama-server build is reused.

    Example: dynocell engine build --patch spec-per-position-metrics --json

    Example: dynocell engine build llamacpp
    """
    from dynocell.runbooks import builds

    if engine is not None:
        _build_llamacpp(engine, patch or [], jobs, json_out)
        return

    with err_console.status("hashing the installed package and applying patches …"):
        r = builds.build(get_cell(), base=base, patches=patch or [], python=python)
    if json_out:
        print_json(r)
        return
    local = r["manifest"].get("local", {})
    out(f"{'built' if r['created'] else 'already built'} {r['build_hash']}")
    out(f"  base      {r['base_dist']} {r['base_version']} ({local.get('base_site')})")
    out(f"  patches   {', '.join(r['patches']) or '-'}")
    out(f"  patched   {len(r['manifest'].get('patched_files', []))} files; "
        f"{local.get('hardlinks', 0)} hard links, {local.get('copies', 0)} copies")
    out(f"  overlay   {r['pythonpath']}  (put first on the engine's PYTHONPATH)")


def _build_llamacpp(engine: str, patches: List[str], jobs: int, json_out: bool) -> None:
    from dynocell.errors import UserError
    from dynocell.runbooks import builds

    if engine != "llamacpp":
        raise UserError(f"dynocell builds from source only llamacpp, not {engine!r}",
                        "dynocell engine build llamacpp, or leave ENGINE out for an SGLang/vLLM overlay")
    with err_console.status("fetching the llama-cpp-python sdist …") as status:
        def progress(msg: str) -> None:
            status.update(msg)
            if not json_out:
                err_console.log(msg)
        r = builds.build_llamacpp(get_cell(), patches=patches, jobs=jobs, progress=progress)
    if json_out:
        print_json(r)
        return
    m = r["manifest"]
    out(f"{'built' if r['created'] else 'already built'} {r['build_hash']}")
    out(f"  base      {r['base_dist']} {r['base_version']} (sha256 {m['identity']['base']['sha256'][:16]}…)")
    out(f"  patches   {', '.join(r['patches']) or '-'}")
    out(f"  binary    {r['binary']}")
    out(f"  built in  {m.get('build_s')} s with {m.get('jobs')} jobs")


@engine_app.command("list")
def list_cmd(json_out: bool = typer.Option(False, "--json", help=JSON_OPTION_HELP)) -> None:
    """List engine builds, newest first.

    Example: dynocell engine list
    """
    from dynocell.runbooks import builds

    rows = builds.list_builds(get_cell())
    if json_out:
        print_json(rows)
        return
    if not rows:
        out("no engine builds yet — make one with: dynocell engine build --patch spec-per-position-metrics")
        return
    t = table("build", "base", "patches", "links", "here", "made")
    for r in rows:
        add_row(t, _short(r["build_hash"]), f"{r['base_dist']} {r['base_version']}", ", ".join(r["patches"]) or "-",
                r["link_mode"] or "-", "yes" if r["present"] else "no", human_ago(r["created_at"]))
    out(t)


@engine_app.command("show")
def show_cmd(
    ref: str = typer.Argument(..., help=BUILD_HELP, metavar="BUILD"),
    json_out: bool = typer.Option(False, "--json", help=JSON_OPTION_HELP),
) -> None:
    """Show one build: base, patches with their files and sha256s, overlay path.

    Example: dynocell engine show 0ae369f6
    """
    from dynocell.runbooks import builds

    d = builds.show_build(get_cell(), ref)
    if json_out:
        print_json(d)
        return
    ident = d["manifest"].get("identity", {})
    local = d["manifest"].get("local", {})
    out(f"build     {d['build_hash']}")
    out(f"base      {d['base_dist']} {d['base_version']} ({ident.get('base', {}).get('files')} files, "
        f"tree sha256 {ident.get('base', {}).get('tree_sha256', '')[:16]}…)")
    py = ident.get("python", {})
    out(f"python    {py.get('implementation')} {py.get('version')} ({local.get('python')})")
    out(f"overlay   {d['pythonpath']}" + ("" if d["present"] else "  (missing on this host)"))
    out(f"links     {local.get('link_mode')}: {local.get('hardlinks')} hard links, {local.get('copies')} copies")
    for p in d["patch_details"]:
        out(f"patch     {p['id']}")
        if p.get("description"):
            out("          " + p["description"].splitlines()[0])
        for f in p["files"]:
            out(f"          {f['path']}")
            out(f"            base {f['base_sha256']}  →  patched {f['patched_sha256']}")


@engine_app.command("verify")
def verify_cmd(
    ref: str = typer.Argument(..., help=BUILD_HELP, metavar="BUILD"),
    json_out: bool = typer.Option(False, "--json", help=JSON_OPTION_HELP),
) -> None:
    """Re-hash every file of a build's overlay and report drift (exit 1 on drift).

    Example: dynocell engine verify 0ae369f6
    """
    from dynocell.runbooks import builds

    r = builds.verify_build(get_cell(), ref)
    if json_out:
        print_json(r)
    elif r["ok"]:
        out(f"build {_short(r['build_hash'])} intact: {r['checked']} files re-hashed, no drift")
    else:
        out(f"build {_short(r['build_hash'])} DRIFTED: {len(r['drift'])} difference(s) in {r['path']}")
        t = table("kind", "file", "expected sha256", "actual sha256")
        for d in r["drift"]:
            add_row(t, d["kind"], d["path"], (d["expected"] or "-")[:16], (d["actual"] or "-")[:16])
        out(t)
    if not r["ok"]:
        raise typer.Exit(1)


@engine_app.command("patches")
def patches_cmd(json_out: bool = typer.Option(False, "--json", help=JSON_OPTION_HELP)) -> None:
    """List the bundled patches (id, target versions, files).

    Example: dynocell engine patches
    """
    from dynocell.runbooks import builds

    rows = builds.list_patches()
    if json_out:
        print_json(rows)
        return
    t = table("patch", "for", "files")
    for r in rows:
        add_row(t, r["id"], f"{r['dist']} {', '.join(r['versions'])}", "\n".join(r["files"]))
    out(t)
