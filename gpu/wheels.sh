#!/bin/bash
# Download dynocell's run-path wheels (gpu/requirements-run.txt) for an offline Python 3.12
# x86_64 GPU host. Run where PyPI is reachable.   usage: gpu/wheels.sh DEST
set -euo pipefail
DEST=${1:?usage: gpu/wheels.sh DEST}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$DEST"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
  -d "$DEST" -r "$HERE/requirements-run.txt"
du -sh "$DEST"
