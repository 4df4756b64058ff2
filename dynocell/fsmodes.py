"""Private file modes for what dynocell keeps (issue 32, item 7): the data directory and the folders it makes
are created 0700, the store and the engine logs 0600, so another local user reads none of them (configs carry
environment values, logs carry prompts and engine argv). Standard library only: the bare-venv llama-server
build and the engine probes import nothing else.

The modes are set at creation (``os.mkdir``/``os.open`` with the mode, then ``chmod`` against the umask) and
never loosened; an existing folder keeps what its owner set, except that :func:`tighten` takes group and
other bits off a folder this user owns (``dynocell init`` on an existing data directory, reported).
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """Create ``path`` and any missing parents as 0700 (existing folders untouched) and return it.

    Raises OSError as ``Path.mkdir`` does (the caller names the setting to fix)."""
    path = Path(path)
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            d.mkdir(mode=DIR_MODE)
            with contextlib.suppress(OSError):
                os.chmod(d, DIR_MODE)  # mkdir's mode is masked by the umask; 0700 is what is meant
    return path


def private_file(path: Path) -> None:
    """Make ``path`` 0600 when this user owns it (a file another user made is left as it is)."""
    with contextlib.suppress(OSError):
        st = os.stat(path)
        if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & 0o077:
            os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o077)


def open_private(path: Path, mode: str = "ab"):  # noqa: ANN201 - a binary file object, as open() returns
    """``open(path, mode)`` for a binary log or record file created 0600 (an existing one keeps its mode
    unless this user owns it: then group and other bits are taken off). Raises OSError as ``open``."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    fd = os.open(path, flags, FILE_MODE)
    private_file(path)
    return os.fdopen(fd, mode)


def tighten(path: Path) -> bool:
    """Take group and other bits off the folder ``path`` when this user owns it; True when it changed."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    if st.st_uid != os.getuid() or not stat.S_IMODE(st.st_mode) & 0o077:
        return False
    try:
        os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o077)
    except OSError:
        return False
    return True


def mode_of(path: Path) -> str | None:
    """``0700``-style octal mode of ``path``, or None when it cannot be read."""
    try:
        return f"0{stat.S_IMODE(os.stat(path).st_mode):o}"
    except OSError:
        return None


def foreign_control(path: Path) -> str | None:
    """Why another local user could replace or rewrite ``path`` (a folder or file dynocell trusts), or None.

    Another user controls it when it is owned by a user other than this one and root, or when its group
    or other write bit is set (such a user can rename the store away and put their own in its place:
    configs that run their code, "trusted" marks). A missing path gives None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if st.st_uid not in (os.getuid(), 0):
        return f"{path} is owned by uid {st.st_uid}, not by this user (uid {os.getuid()})"
    if stat.S_IMODE(st.st_mode) & 0o022:
        return f"{path} is writable by other users (mode {mode_of(path)})"
    return None
