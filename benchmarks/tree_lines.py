"""The tree of a Python package with line counts per module, as markdown (docs/restructure-23.md).

Usage::

    python benchmarks/tree_lines.py [ROOT] [--rev REV] [--doc docs/ARCHITECTURE.md]

``ROOT`` defaults to ``dynocell``. ``--rev`` reads the tree of a git revision instead of the
working tree (``git ls-tree`` / ``git show``, e.g. ``--rev b638a43`` for the tree before issue 23).
``--doc`` also lists the modules whose file name (``foo.py`` or ``foo/``) the given markdown never
mentions, and exits 1 when there are any — a check that a module table matches the tree.
Lines are ``len(text.splitlines())`` (what ``wc -l`` counts, give or take a final newline);
``*.py`` only, Alembic migrations (``db/migrations/``) left out.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections import defaultdict
from pathlib import Path


def _files(root: str, rev: str | None) -> dict[str, int]:
    """``{path: lines}`` of every ``*.py`` under ``root`` (working tree, or revision ``rev``)."""
    if rev is None:
        return {str(p): len(p.read_text().splitlines()) for p in sorted(Path(root).rglob("*.py"))}
    names = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "--", root], check=True,
                           capture_output=True, text=True).stdout.split()
    out = {}
    for name in sorted(n for n in names if n.endswith(".py")):
        text = subprocess.run(["git", "show", f"{rev}:{name}"], check=True, capture_output=True, text=True).stdout
        out[name] = len(text.splitlines())
    return out


def tree(files: dict[str, int], root: str) -> list[str]:
    """Markdown lines: one per package (its total) and one per module, indented by depth."""
    totals: dict[str, int] = defaultdict(int)
    for path, n in files.items():
        parts = Path(path).parts
        for i in range(1, len(parts)):
            totals["/".join(parts[:i])] += n
    lines, seen = [f"{root}/  {totals[root]} lines, {len(files)} modules"], {root}
    for path, n in files.items():
        parts = Path(path).parts
        for i in range(2, len(parts)):
            pkg = "/".join(parts[:i])
            if pkg not in seen:
                seen.add(pkg)
                lines.append(f"{'  ' * (i - 1)}{parts[i - 1]}/  {totals[pkg]}")
        lines.append(f"{'  ' * (len(parts) - 1)}{parts[-1]}  {n}")
    return lines


def unmentioned(files: dict[str, int], doc: Path) -> list[str]:
    """Modules (``name.py``, not ``__init__``/``__main__``, not under ``migrations``) and packages whose
    name the markdown ``doc`` never writes — as ``name.py`` for a module, ``name/`` for a package."""
    text = doc.read_text()
    missing: set[str] = set()
    for path in files:
        parts = Path(path).parts
        for pkg in parts[1:-1]:
            if f"{pkg}/" not in text:
                missing.add(f"{pkg}/")
        name = parts[-1]
        if name in ("__init__.py", "__main__.py"):
            continue
        stem = name[:-3]
        if name not in text and f"`{stem}`" not in text:
            missing.add("/".join(parts[1:]))
    return sorted(missing)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", nargs="?", default="dynocell")
    ap.add_argument("--rev", default=None, help="a git revision instead of the working tree")
    ap.add_argument("--doc", type=Path, default=None, help="markdown that should name every module")
    args = ap.parse_args(argv)
    files = {p: n for p, n in _files(args.root, args.rev).items() if "migrations" not in Path(p).parts}
    print("\n".join(tree(files, args.root)))
    if args.doc is not None:
        missing = unmentioned(files, args.doc)
        print(f"\nnot named in {args.doc}: {', '.join(missing) or 'none'}")
        return 1 if missing else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
