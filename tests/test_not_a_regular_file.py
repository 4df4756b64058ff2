"""A pipe or a device given where a file is expected is named as such, never read (which could block
forever on a FIFO or never end on /dev/zero) and never called missing: the commands said "no such file"
for a FIFO that was there (newcomer pass). Real console script, a real FIFO."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

COMMANDS = [
    (["config", "add"], "not a regular config file (a pipe, device or socket)"),
    (["run"], "not a regular config file (a pipe, device or socket)"),
    (["import", "log"], "not a regular file (a pipe, device or socket)"),
    (["import", "metrics"], "not a regular file (a pipe, device or socket)"),
    (["import", "bench"], "not a regular file (a pipe, device or socket)"),
    (["trace", "split"], "not a regular file (a pipe, device or socket)"),
]


@pytest.mark.parametrize(("command", "said"), COMMANDS, ids=[" ".join(c) for c, _ in COMMANDS])
def test_a_fifo_is_named_not_a_regular_file(command, said, cli_env, tmp_path: Path):
    fifo = tmp_path / "server.toml"
    os.mkfifo(fifo)
    exe = shutil.which("dynocell", path=str(Path(sys.executable).parent))
    proc = subprocess.run([exe, *command, str(fifo)], env=cli_env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"Error: {fifo}: {said}"), proc.stderr


def test_the_reason_names_a_directory_a_device_and_a_missing_path(tmp_path: Path):
    from dynocell.errors import not_a_file

    assert not_a_file(tmp_path) == "a directory, not a file"
    assert not_a_file("/dev/null", "config file") == "not a regular config file (a pipe, device or socket)"
    assert not_a_file(tmp_path / "nope") == "no such file"
