#!/bin/bash
# Run dynocell's main job on SGLang 0.5.17 on an offline GPU host (see gpu/README.md).
#   usage: gpu/h200_run.sh [--install WHEEL_DIR ...] [--] [RUN_SPEC ...]
# RUN_SPEC is CONFIG.toml or CONFIG.toml:flag,flag (flags passed to `dynocell run`, e.g.
# gpu/configs/h200-ngram.toml:--no-profile). Installs the given wheel folders into $SITE
# (once), exports SGLang's offline environment, runs each config, then writes the store,
# each run's report/JSON and the engine logs into $OUT (or ./gpu-out) as one tarball.
set -uo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
SITE=${SITE:-$HOME/.sglang-site}
DEST=${OUT:-$HERE/gpu-out}
OUTDIR=$(mktemp -d)
mkdir -p "$SITE" "$DEST"
while [ "${1:-}" = "--install" ]; do
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$2"/*.whl 2>&1 | grep -v "already exists" || true
  shift 2
done
[ "${1:-}" = "--" ] && shift
export PYTHONPATH=$HERE:$SITE:$HERE/.gpu/stubs${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export SGLANG_IS_FLASHINFER_AVAILABLE=false SGLANG_ENABLE_JIT_DEEPGEMM=false
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DYNOCELL_HOME=${DYNOCELL_HOME:-$HOME/dynocell-home} DYNOCELL_BOOT_TIMEOUT_SGLANG_S=${DYNOCELL_BOOT_TIMEOUT_SGLANG_S:-400}
dc() { python3 -m dynocell "$@"; }
pack() {  # the store, reports, engine logs and traces so far, as one tarball in $DEST
  mkdir -p "$OUTDIR/boots"
  for b in "$DYNOCELL_HOME"/boots/*/; do
    id=$(basename "$b"); mkdir -p "$OUTDIR/boots/$id"
    cp "$b/engine.log" "$OUTDIR/boots/$id/" 2>/dev/null
    find "$b" -name '*.trace.json*' -size -16M -exec cp {} "$OUTDIR/boots/$id/" \; 2>/dev/null
  done
  cp "$DYNOCELL_HOME/dynocell.db" "$OUTDIR/dynocell.db" 2>/dev/null
  tar -C "$OUTDIR" -czf "$DEST/gpu-artifacts-$1.tgz" .
}
dc init >/dev/null || exit 1
for spec in "$@"; do
  cfg=${spec%%:*}; flags=""; [ "$spec" != "$cfg" ] && flags=${spec#*:}
  name=$(basename "$cfg" .toml)
  echo "==== $name ($(date -u +%H:%M:%S)) ===="
  # shellcheck disable=SC2086
  dc run "$cfg" ${flags//,/ } > "$OUTDIR/$name.report.txt" 2> "$OUTDIR/$name.progress.txt"
  echo "exit $?"; tail -n 60 "$OUTDIR/$name.report.txt"
  run=$(dc runs --json -n 1 | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r[0]["id"] if r else "")')
  [ -n "$run" ] && dc show "$run" --json > "$OUTDIR/$name.run.json"
  pack "$name"
done
ls -la "$DEST"
