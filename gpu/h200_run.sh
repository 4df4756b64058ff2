#!/bin/bash
# Run dynocell's main job on SGLang 0.5.17 or vLLM 0.26.0 on an offline GPU host (gpu/README.md).
#   usage: gpu/h200_run.sh [--site DIR] [--stubs DIR] [--install WHEEL_DIR ...] [--] [RUN_SPEC ...]
# RUN_SPEC is CONFIG.toml or CONFIG.toml:flag,flag (flags passed to `dynocell run`, e.g.
# gpu/configs/h200-ngram.toml:--no-profile or CONFIG.toml:-w,gpu/workloads/h200-greedy.toml).
#   --site DIR     where the wheels go and are read from (default $HOME/.sglang-site; use a
#                  separate one per engine, e.g. $HOME/.vllm-site: the two wheelhouses pin
#                  different fastapi/pydantic versions). Kept between calls on a warm machine.
#   --stubs DIR    import stand-ins put on PYTHONPATH (default .gpu/stubs: SGLang's flashinfer,
#                  deep_gemm, IPython; for vLLM the xgrammar one, .gpu/vllm-stubs).
#   --install DIR  install every wheel of DIR into the site (skipped when already installed).
#   --workload W   the workload of every RUN_SPEC that names none (`dynocell run -w W`).
#   --keep-going   go on with the next RUN_SPEC after a failed boot (default: stop, since
#                  configs of one engine usually fail alike; use it when they differ, e.g. heads).
# A RUN_SPEC `bisect:GOOD.toml,BAD.toml[,flag,...]` runs `dynocell bisect run GOOD BAD flags --json`.
# Before the runs it puts the model pair where the configs look (.gpu/models/pair/{target,draft}):
# the pair that ships with dynocell (`dynocell model make-tiny --json` names it), copied, and its EAGLE-3
# head in vLLM's layout (.gpu/models/eagle3-vllm, `dynocell model for-vllm`: aux layer ids + 1). After
# each config it packs the store, reports, engine logs, kept /metrics scrapes and traces so far
# into $OUT/gpu-artifacts.tgz (or ./gpu-out; one tarball, replaced after each config, holding
# everything so far: a run cut short still brings back what it finished). The reports, progress
# lines and GPU samples live in $DYNOCELL_GPU_OUTDIR (default $HOME/dynocell-gpu-out) and the store
# in $DYNOCELL_HOME, both kept between calls on a warm machine, so each call's tarball holds every
# earlier call's results too. Traces go into a second tarball, $OUT/gpu-traces.tgz (one per boot,
# each under 16 MiB). A config run twice gets -r2, -r3 … on its file names. During each run
# nvidia-smi samples the GPU every 500 ms into NAME.gpu.csv (timestamp, utilization.gpu %,
# memory.used MiB, power.draw W, clocks.sm MHz), and after it gpu/headline.py prints the headline:
# boot s, tok/s per concurrency, TTFT/TPOT, τ and p1..p3, lossless, break-even, GPU utilisation.
set -uo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
SITE=$HOME/.sglang-site
STUBS=$HERE/.gpu/stubs
WHEELS=()
WL=""
KEEP_GOING=0
while [ $# -gt 0 ]; do
  case "$1" in
    --site) SITE=$2; shift 2 ;;
    --stubs) STUBS=$2; shift 2 ;;
    --install) WHEELS+=("$2"); shift 2 ;;
    --workload) WL=$2; shift 2 ;;
    --keep-going) KEEP_GOING=1; shift ;;
    --) shift; break ;;
    *) break ;;
  esac
done
DEST=${OUT:-$HERE/gpu-out}
OUTDIR=${DYNOCELL_GPU_OUTDIR:-$HOME/dynocell-gpu-out}
mkdir -p "$SITE" "$DEST" "$OUTDIR"
for w in "${WHEELS[@]}"; do
  stamp="$SITE/.installed-$(basename "$w")"
  [ -f "$stamp" ] && continue
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" "$w"/*.whl 2>&1 \
    | grep -v "already exists" ; touch "$stamp"
done
export PYTHONPATH=$HERE:$SITE:$STUBS${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export SGLANG_IS_FLASHINFER_AVAILABLE=false SGLANG_ENABLE_JIT_DEEPGEMM=false VLLM_USE_FLASHINFER_SAMPLER=0
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export DYNOCELL_HOME=${DYNOCELL_HOME:-$HOME/dynocell-home} DYNOCELL_BOOT_TIMEOUT_SGLANG_S=${DYNOCELL_BOOT_TIMEOUT_SGLANG_S:-400}
dc() { python3 -m dynocell "$@"; }
PAIR=$HERE/.gpu/models/pair
if [ ! -f "$PAIR/target/config.json" ] || [ ! -f "$PAIR/draft/config.json" ]; then
  shipped=$(dc model make-tiny --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["target"])') || exit 1
  mkdir -p "$PAIR" && cp -r "$shipped" "$PAIR/target" && cp -r "$(dirname "$shipped")/draft" "$PAIR/draft" || exit 1
  echo "model pair: $(dirname "$shipped") -> $PAIR"
fi
# The shipped EAGLE-3 head in vLLM 0.26.0's layout (aux layer ids + 1), made afresh each time: an ignored
# folder made by an earlier call stays on a warm host, and a stale copy boots the old layout (2026-12-02).
E3V=$HERE/.gpu/models/eagle3-vllm
e3=$(dirname "$(dc model make-tiny --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["target"])')")/eagle3
rm -rf "$E3V"
if [ -f "$e3/config.json" ]; then dc model for-vllm "$e3" "$E3V" >/dev/null || exit 1; fi
pack() {  # the store, reports, engine logs (gzipped), scrapes and GPU samples so far -> one tarball; traces -> another
  mkdir -p "$OUTDIR/boots" "$OUTDIR/traces"
  for b in "$DYNOCELL_HOME"/boots/*/; do
    [ -d "$b" ] || continue
    id=$(basename "$b"); mkdir -p "$OUTDIR/boots/$id"
    [ -f "$b/engine.log" ] && gzip -c "$b/engine.log" > "$OUTDIR/boots/$id/engine.log.gz"
    [ -d "$b/scrapes" ] && cp -r "$b/scrapes" "$OUTDIR/boots/$id/"
    find "$b" -name '*.trace.json*' -size -16M -exec cp {} "$OUTDIR/traces/" \; 2>/dev/null
  done
  cp "$DYNOCELL_HOME/dynocell.db" "$OUTDIR/dynocell.db" 2>/dev/null
  tar -C "$OUTDIR" --exclude=./traces -czf "$DEST/.gpu-artifacts.tgz.tmp" . && mv "$DEST/.gpu-artifacts.tgz.tmp" "$DEST/gpu-artifacts.tgz"
  tar -C "$OUTDIR" -cf "$DEST/.gpu-traces.tar.tmp" traces && mv "$DEST/.gpu-traces.tar.tmp" "$DEST/gpu-traces.tar"
  echo "packed after $1: $(du -h "$DEST/gpu-artifacts.tgz" | cut -f1) (+ traces $(du -h "$DEST/gpu-traces.tar" | cut -f1))"
}
gpu_watch() {  # nvidia-smi every 500 ms into $1 while the run goes; prints the sampler's pid
  command -v nvidia-smi >/dev/null || { echo ""; return; }
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used,power.draw,clocks.sm --format=csv,noheader,nounits \
    -lms 500 > "$1" 2>/dev/null &
  echo $!
}
uniq_name() {  # NAME, or NAME-r2, NAME-r3 … when NAME's report exists already (repeats keep every report)
  local n=$1 i=2
  [ -e "$OUTDIR/$n.report.txt" ] || [ -e "$OUTDIR/$n.json" ] || { echo "$n"; return; }
  while [ -e "$OUTDIR/$n-r$i.report.txt" ] || [ -e "$OUTDIR/$n-r$i.json" ]; do i=$((i + 1)); done
  echo "$n-r$i"
}
dc init >/dev/null || exit 1
for spec in "$@"; do
  if [ "${spec%%:*}" = "bisect" ]; then  # bisect:GOOD,BAD[,flags]: dynocell bisect run
    IFS=, read -r -a bargs <<< "${spec#bisect:}"
    name=$(uniq_name "bisect-$(basename "${bargs[0]}" .toml)")
    echo "==== $name ($(date -u +%H:%M:%S)) ===="
    dc bisect run "${bargs[@]}" --json > "$OUTDIR/$name.json" 2> "$OUTDIR/$name.progress.txt"
    echo "exit $? ($(date -u +%H:%M:%S))"; tail -n 30 "$OUTDIR/$name.progress.txt"
    pack "$name"; continue
  fi
  cfg=${spec%%:*}; flags=""; [ "$spec" != "$cfg" ] && flags=${spec#*:}
  case ",$flags," in *,-w,*|*,--workload,*) ;; *) [ -n "$WL" ] && flags="-w,$WL${flags:+,$flags}" ;; esac
  name=$(basename "$cfg" .toml)
  case "$flags" in *h200-greedy*|*workloads/greedy*) name="$name-greedy" ;; esac
  name=$(uniq_name "$name")
  echo "==== $name ($(date -u +%H:%M:%S)) ===="
  watcher=$(gpu_watch "$OUTDIR/$name.gpu.csv")
  # shellcheck disable=SC2086
  dc run "$cfg" ${flags//,/ } > "$OUTDIR/$name.report.txt" 2> "$OUTDIR/$name.progress.txt"
  echo "exit $? ($(date -u +%H:%M:%S))"
  [ -n "$watcher" ] && kill "$watcher" 2>/dev/null
  run=$(dc runs --json -n 1 | python3 -c 'import json,sys; r=json.load(sys.stdin); print(r[0]["id"] if r else "")')
  [ -n "$run" ] && dc show "$run" --json > "$OUTDIR/$name.run.json"
  python3 "$HERE/gpu/headline.py" "$name" "$OUTDIR/$name.gpu.csv" < "$OUTDIR/$name.run.json" 2>&1
  pack "$name"
  if [ "$KEEP_GOING" = 0 ] && grep -q "^ *boot failed" "$OUTDIR/$name.progress.txt"; then  # the next would fail alike
    echo "boot failed: stopping here (engine log in the tarball)"; sed -n '1,400p' "$OUTDIR/$name.progress.txt" | tail -n 30
    ls "$DYNOCELL_HOME"/boots/*/engine.log >/dev/null 2>&1 && tail -n 40 "$(ls -t "$DYNOCELL_HOME"/boots/*/engine.log | head -1)"
    break
  fi
done
ls -la "$DEST"; ls "$OUTDIR"
