"""Check every version-exact citation of the runbook entries against the released engine wheels (issue 36).

Usage::

    python benchmarks/knowledge_sources.py [ENTRY_DIR …] [--cache DIR] [--wheels DIR]

For each citation ``{package, file, versions, at, quote}`` in an entry's ``sources`` (format:
``dynocell/runbooks/knowledge/entry.py``, ``CITATION_KEYS``) and each version in ``at``, the wheel
``<package>==<version>`` is fetched once with ``pip download --no-deps`` into the cache (default: the
platformdirs user cache, ``…/dynocell/wheels``; ``--wheels DIR`` is looked in first, e.g. a folder of wheels
already downloaded), the cited file is read from inside the wheel (a zip) and every quote must be an exact
substring of it. Prints one row per (entry, version, file, quote): ``found``, ``missing`` (quote not in the
file), ``no-file`` (the file is not in the wheel) or ``no-wheel`` (pip could not fetch it); exits 1 unless
every row is ``found``.

Not run in CI: the vLLM wheel is about 300 MB. ``ENTRY_DIR`` defaults to the bundled entries.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import zipfile
from pathlib import Path

import platformdirs
from rich.console import Console
from rich.table import Table

from dynocell.runbooks.knowledge import BUNDLED_DIR, lint_paths


def wheel_path(package: str, version: str, cache: Path, extra: list[Path]) -> Path | None:
    """The wheel of ``package==version``: found in ``extra`` folders or ``cache``, else downloaded into ``cache``
    (``pip download --no-deps``); None when pip cannot fetch it."""
    pattern = f"{package.replace('-', '_')}-{version}-*.whl"
    for d in (*extra, cache):
        found = sorted(d.glob(pattern))
        if found:
            return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(cache),
                           f"{package}=={version}"], capture_output=True, text=True)
    found = sorted(cache.glob(pattern))
    if proc.returncode != 0 or not found:
        print(f"pip download {package}=={version} failed: {proc.stderr.strip()[-400:]}", file=sys.stderr)
        return None
    return found[0]


def read_member(wheel: Path, member: str) -> str | None:
    """The text of ``member`` (a path inside the wheel) or None when the wheel has no such file."""
    with zipfile.ZipFile(wheel) as z:
        try:
            return z.read(member).decode("utf-8", errors="replace")
        except KeyError:
            return None


def check(dirs: list[Path], cache: Path, extra: list[Path]) -> list[tuple[str, str, str, str, str]]:
    """``(slug, package==version, file, quote, status)`` for every quote of every citation in ``dirs``."""
    entries, errors = lint_paths(dirs, timed=False)
    for e in errors:
        print(f"lint: {e}", file=sys.stderr)
    rows = []
    texts: dict[tuple[str, str, str], str | None] = {}
    for entry in sorted(entries, key=lambda e: e.slug):
        for c in entry.citations:
            for v in c.at:
                key = (c.package, v, c.file)
                if key not in texts:
                    whl = wheel_path(c.package, v, cache, extra)
                    texts[key] = "\0no-wheel" if whl is None else read_member(whl, c.file)
                text = texts[key]
                for q in c.quotes:
                    status = ("no-file" if text is None else "no-wheel" if text == "\0no-wheel"
                              else "found" if q in text else "missing")
                    rows.append((entry.slug, f"{c.package}=={v}", c.file, q, status))
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the check; print the table and the counts; 0 when every quote is found."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dirs", nargs="*", type=Path, default=[BUNDLED_DIR])
    ap.add_argument("--cache", type=Path, default=Path(platformdirs.user_cache_dir("dynocell")) / "wheels")
    ap.add_argument("--wheels", type=Path, action="append", default=[])
    args = ap.parse_args(argv)
    rows = check(args.dirs, args.cache, args.wheels)
    table = Table("entry", "version", "file", "quote", "status")
    for slug, ver, path, q, status in rows:
        table.add_row(slug, ver, path, q if len(q) <= 60 else q[:59] + "…",
                      status if status == "found" else f"[bold red]{status}[/]")
    Console(width=200).print(table)
    bad = [r for r in rows if r[4] != "found"]
    print(f"{len(rows)} quotes in {len({r[0] for r in rows})} entries, {len({r[1] for r in rows})} wheels: "
          f"{len(rows) - len(bad)} found, {len(bad)} missing")
    return 1 if bad or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
