"""Size check before a device call: what `run` would send (the tracked and untracked-not-ignored
files of the checkout, as git lists them) plus the carried paths, against the 64 MiB limit of one call
(/work/.library/device/README.md, Limits). Exits 1 when over, so a plan can stop before sending.

usage: python3 gpu/call_size.py [CARRY_PATH ...]      (run from the checkout's root)
Prints the tree's size, each carried path's size and the total, in MiB (2**20 bytes).
"""

import os
import subprocess
import sys

LIMIT = 64 * 2**20


def tree_bytes() -> int:
    """Bytes of the files git would count as the working tree (tracked + untracked-not-ignored)."""
    out = subprocess.run(["git", "ls-files", "-z", "-c", "-o", "--exclude-standard"], check=True,
                         capture_output=True).stdout
    total = 0
    for name in out.split(b"\0"):
        if name and os.path.isfile(name):  # deleted-but-tracked files are not sent
            total += os.path.getsize(name)
    return total


def path_bytes(path: str) -> int:
    """Bytes under ``path`` (a file or a folder, links not followed)."""
    if os.path.isfile(path):
        return os.path.getsize(path)
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            if not os.path.islink(p):
                total += os.path.getsize(p)
    return total


def main() -> int:
    mib = 2**20
    tree = tree_bytes()
    total = tree
    print(f"tree {tree / mib:7.2f} MiB")
    for c in sys.argv[1:]:
        n = path_bytes(c)
        total += n
        print(f"{c:<20} {n / mib:7.2f} MiB")
    ok = total <= LIMIT
    print(f"total {total / mib:7.2f} MiB of {LIMIT / mib:.0f} MiB: {'fits' if ok else 'OVER THE LIMIT'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
