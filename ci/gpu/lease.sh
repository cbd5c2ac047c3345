#!/usr/bin/env bash
# The one entry point of the offline GPU host (docs/gpu-host.md): builds what a device call carries (on this CPU
# machine, with the package registry) and runs each step of a lease on the lent GPU machine, one device call at a
# time. Rows and benchmarks run in the background between calls; the next call must follow within the machine's
# idle window (~30 s). From the repo root:
#
#     bash ci/gpu/lease.sh STEP [ARGS]                        # CPU machine: bundle, combine, fa3-parts, xgrammar,
#                                                             # outlines, flashmla
#     SPECV2_COMMIT=<hash> bash ci/gpu/lease.sh STEP [ARGS]   # GPU machine: every other step
#
#   bundle REL [OUT_DIR]       (CPU) build .device-bundle/REL/{site,fi}.tar.xz + pins.txt (ci/gpu/make_bundle_slim.sh)
#   combine REL REL [V=BASE ...]   (CPU) merge release bundles into .device-bundle/both (ci/gpu/make_combined_bundle.sh)
#   fa3-parts REL [PART_MB]    (CPU) REL's fa3 library as parts .device-bundle/REL-fa3/pNN (ci/gpu/make_fa3_parts.sh)
#   xgrammar REL               (CPU) xgrammar at REL's pin, .device-bundle/REL-xgrammar (ci/gpu/make_xgrammar_overlay.sh)
#   outlines REL               (CPU) outlines at REL's pin + its needs no bundle has, .device-bundle/REL-outlines
#                              (ci/gpu/make_outlines_overlay.sh)
#   flashmla REL               (CPU) FlashMLA of REL's pinned sglang-kernel, .device-bundle/REL-flashmla
#                              (ci/gpu/make_flashmla_overlay.sh)
#   unpack REL                 unpack the carried .device-bundle/REL (ci/gpu/prepare.sh)
#   add V                      add the carried fa3 part(s) .device-bundle/V-fa3/pNN to /tmp/specv2-fa3-V
#   inst REL PARTS [REL PARTS ...]   check the sums of PARTS' fa3 parts (PARTS: the release whose sglang-kernel they
#                              are, e.g. 0.5.12 for 0.5.12.post1), unpack into REL's tree, import sgl_kernel.flash_attn
#   rows REL FILE... [OPTS]    queue registered rows, both modes (ci/gpu/bg.py start --modes off, then auto)
#   arows REL FILE... [OPTS]   the same, plugin side only
#                              (ROWS_GPUS=1: on GPU 1, beside a benchmark on GPU 0 of a 2-GPU machine; ROWS_SLOTS=K:
#                              rows at once on the machine, default 8, kept for rows queued earlier too; ROWS_TIMEOUT=S:
#                              per row and mode, default 600, twelve rows at once may take longer; ROWS_TESTS=PATTERN:
#                              only the tests unittest's -k PATTERN selects, e.g. one class)
#   queue REL FILE... [OPTS]   queue rows with ci/gpu/bg.py start's own options only (--modes NAME: one fix alone,
#                              --mode-env MODE:KEY=VALUE, --gpus, --tests, --slots, --timeout)
#   run REL [ARGS]             the registered A/B matrix of one release in the foreground (ci/run_registered.py ARGS)
#                              into /tmp/specv2-runs/REL; into $OUT: REL-results.json, REL-results.md, REL-logs.tar.gz
#   matrix "REL ..." [ARGS]    `run` for several releases at once, each on its own port range and GPUs (round-robin:
#                              with N GPUs and R releases, release k gets GPUs k, k+R, ...; fewer GPUs than releases:
#                              release k shares GPU k mod N); their logs into $OUT/matrix-logs.tar
#   models REL [SHAPE]         write the real-size models with REL's environment (bench/real_size_models.py; SHAPE:
#                              8b, default, 70b or dsv3-reduced)
#   bench NAME BUDGET "RELS" [gpu_real_size.sh args]   one real-size benchmark in the background into
#                              $BENCH_ROOT/bench-NAME (nothing else should run on the GPU meanwhile)
#   wait [S]                   wait for the queued rows (at most S s), pack their results into $OUT
#   poll [S] [NAME]            wait S s, or until bench NAME's run.log says exit; print the benchmarks' progress
#   collect NAME...            copy benchmarks into $OUT (logs over 2 MB cut to 2000 columns)
#   status                     the benchmarks' progress and the rows' dispatcher log
#
# SPECV2_COMMIT names the code in every record (the machine's copy of the tree has no git); `run` and `matrix` keep
# no background state and do without it. The first `rows` / `arows` / `queue` and the first `bench` each snapshot the
# tree (ci/gpu/bg.py; $BENCH_ROOT/specv2-snap): code carried by later calls does not reach what runs.
set -uo pipefail
STEP=${1:-}; shift || true
SELF=${BASH_SOURCE[0]}
HERE=$(cd "$(dirname "$SELF")" && pwd)
BENCH_ROOT=${BENCH_ROOT:-/tmp}
SNAP=$BENCH_ROOT/specv2-snap
case "$STEP" in
  ""|bundle|combine|fa3-parts|xgrammar|outlines|flashmla|run|matrix) ;;
  *) export SPECV2_COMMIT=${SPECV2_COMMIT:?set SPECV2_COMMIT to the commit the tree is at} ;;
esac
ROWS=(--slots "${ROWS_SLOTS:-8}" --timeout "${ROWS_TIMEOUT:-600}" --gpus "${ROWS_GPUS:-0}")
[ -n "${ROWS_TESTS:-}" ] && ROWS+=(--tests "$ROWS_TESTS")

show() {  # the last lines of each benchmark's progress
  local d
  for d in "$BENCH_ROOT"/bench-*; do
    [ -f "$d/run.log" ] || continue
    echo "== $d"
    grep -v -E "^\[.*\] \[(upstream|plugin|stock)" "$d/run.log" \
      | grep -E "\[bench\]|\[gpu_real_size\]|real_size_report|^exit" | cut -c1-400 | tail -8
  done
}

fa3_add() {  # V: append the carried .device-bundle/V-fa3/pNN/part(s) to /tmp/specv2-fa3-V
  local v=$1 d=/tmp/specv2-fa3-$1 p n
  mkdir -p "$d"
  for p in .device-bundle/"$v"-fa3/p*/part; do
    n=$(basename "$(dirname "$p")")
    { [ -f "$d/$n" ] || cp "$p" "$d/$n"; } && cp "$(dirname "$p")/SHA256SUMS" "$d/" || return 1
    echo "[fa3] $v: have $(ls "$d" | grep -c '^p') part(s), $(du -sh "$d" | cut -f1)"
  done
}

fa3_install() {  # REL PARTS: PARTS' parts, checked twice (joined, unpacked), into REL's unpacked tree
  local v=$1 d=/tmp/specv2-fa3-$2 t=/tmp/sglang-$1
  [ -f "$t/.ready" ] || { echo "[fa3] $t not unpacked (source ci/gpu/prepare.sh $v first)"; return 1; }
  cat "$d"/p* > "$d/flash_ops.abi3.so.xz"
  (cd "$d" && grep flash_ops.abi3.so.xz SHA256SUMS | sha256sum -c -) || return 1
  xz -dc "$d/flash_ops.abi3.so.xz" > "$t/sgl_kernel/flash_ops.abi3.so" || return 1
  (cd "$t" && grep sgl_kernel/flash_ops.abi3.so "$d/SHA256SUMS" | sha256sum -c -) || return 1
  rm -f "$d/flash_ops.abi3.so.xz"
  python3 -c "from sgl_kernel.flash_attn import flash_attn_with_kvcache; print('[fa3] sgl_kernel.flash_attn imports')"
}

case "$STEP" in
  bundle)
    bash "$HERE/make_bundle_slim.sh" "$@" ;;
  combine)
    bash "$HERE/make_combined_bundle.sh" "$@" ;;
  fa3-parts)
    bash "$HERE/make_fa3_parts.sh" "$@" ;;
  xgrammar)
    bash "$HERE/make_xgrammar_overlay.sh" "$@" ;;
  outlines)
    bash "$HERE/make_outlines_overlay.sh" "$@" ;;
  flashmla)
    bash "$HERE/make_flashmla_overlay.sh" "$@" ;;
  unpack)
    # env.sh marks a tree .ready only when every part unpacked (a combined bundle must be carried as .device-bundle/both:
    # a folder left there by an earlier call is kept, so remove it before moving another one in)
    bash -c "source ci/gpu/prepare.sh $1" > /dev/null; if [ -f "${SPECV2_UNPACK_ROOT:-/tmp}/sglang-$1/.ready" ]; then
      echo "unpacked $1"; else echo "unpack $1 failed: its tree is not ready (tar's messages above; is .device-bundle/$1, or a" \
      ".device-bundle/both holding $1, carried whole?)"; exit 1; fi ;;
  add)
    fa3_add "${1:?usage: add RELEASE}" ;;
  inst)
    while [ $# -ge 2 ]; do
      (source ci/gpu/prepare.sh "$1" > /dev/null && fa3_install "$1" "$2") || exit 1
      shift 2
    done ;;
  rows)
    v=$1; shift
    python3 ci/gpu/bg.py start "$v" "$@" --modes off "${ROWS[@]}" &&
      python3 ci/gpu/bg.py start "$v" "$@" --modes auto "${ROWS[@]}" ;;
  arows)
    v=$1; shift
    python3 ci/gpu/bg.py start "$v" "$@" --modes auto "${ROWS[@]}" ;;
  queue)
    python3 ci/gpu/bg.py start "$@" ;;
  run)
    v=${1:?usage: run RELEASE [run_registered.py args]}; shift
    source ci/gpu/prepare.sh "$v" || exit 1   # bundle, entry point, `sglang` shim
    python3 -m sglang_specv2_fixes status
    run=$BENCH_ROOT/specv2-runs/$v; rm -rf "$run"; mkdir -p "$run"
    python3 ci/run_registered.py --out "$run" "$@"; rc=$?
    if [ -n "${OUT:-}" ]; then
      cp "$run/results.json" "$OUT/$v-results.json" 2>/dev/null; cp "$run/results.md" "$OUT/$v-results.md" 2>/dev/null
      tar -czf "$OUT/$v-logs.tar.gz" -C "$run" . 2>/dev/null
    fi
    exit $rc ;;
  matrix)
    releases=${1:?usage: matrix "REL ..." [run_registered.py args]}; shift
    export SPECV2_MEM_FRACTION=${SPECV2_MEM_FRACTION:-0.4} SPECV2_MODELS=${SPECV2_MODELS:-/tmp/specv2-tiny-models}
    ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
    read -ra rels <<< "$releases"; r=${#rels[@]}
    k=0; pids=()
    for v in "${rels[@]}"; do
      gpus=0
      if [ "$ngpu" -ge "$r" ]; then gpus=$(seq -s, "$k" "$r" $((ngpu - 1))); elif [ "$ngpu" -gt 0 ]; then gpus=$((k % ngpu)); fi
      (bash "$SELF" run "$v" --gpus "$gpus" --port-base $((21000 + 4000 * k)) "$@" 2>&1 | sed -u "s/^/[$v] /") &
      pids+=($!); k=$((k + 1))
    done
    rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done
    # the device returns a limited number of files: per release results.json + results.md, all logs in one archive
    if [ -n "${OUT:-}" ]; then
      (cd "$OUT" && ls ./*-logs.tar.gz > /dev/null 2>&1 && tar -cf matrix-logs.tar ./*-logs.tar.gz && rm -f ./*-logs.tar.gz)
    fi
    exit $rc ;;
  models)
    (source ci/gpu/prepare.sh "$1" > /dev/null && python3 bench/real_size_models.py --model "${2:-8b}" 2>&1 | tail -1) ;;
  bench)
    name=$1; budget=$2; rels=$3; shift 3
    out=$BENCH_ROOT/bench-$name; mkdir -p "$out"
    if [ ! -d "$SNAP" ]; then
      mkdir -p "$SNAP" && tar --exclude=./.device-bundle --exclude=./.whl -cf - . | tar -xf - -C "$SNAP"
    fi
    (cd "$SNAP" && OUT=$out REAL_SIZE_TOTAL_S=$budget setsid nohup bash -c \
      'bash bench/gpu_real_size.sh "$@" > "$OUT/run.log" 2>&1; echo "exit $?" >> "$OUT/run.log"' _ "$rels" "$@" \
      > /dev/null 2>&1 < /dev/null &)
    echo "started bench $name at $(date -u +%T)" ;;
  wait)
    PYTHONPATH=$PWD python3 ci/gpu/bg.py wait "${1:-565}" ;;
  poll)
    end=$(( $(date +%s) + ${1:-540} ))
    while [ "$(date +%s)" -lt "$end" ]; do
      [ -n "${2:-}" ] && grep -q "^exit " "$BENCH_ROOT/bench-$2/run.log" 2>/dev/null && break
      sleep 5
    done
    show ;;
  collect)
    : "${OUT:?collect writes into \$OUT}"
    for b in "$@"; do [ -d "$BENCH_ROOT/bench-$b" ] && cp -r "$BENCH_ROOT/bench-$b" "$OUT/"; done
    find "$OUT" -name "*.log" -size +2M -exec sh -c 'cut -c1-2000 "$1" > "$1.t" && mv "$1.t" "$1"' _ {} \;
    ls "$OUT" ;;
  status)
    show; tail -n 30 /tmp/specv2-bg/dispatcher.log 2>/dev/null; true ;;
  *)
    echo "usage: [SPECV2_COMMIT=<hash>] bash ci/gpu/lease.sh STEP [ARGS]; steps:" >&2
    grep -E '^#   [a-z]' "$SELF" >&2; exit 2 ;;
esac
