#!/usr/bin/env bash
# One lease on the lent GPU machine, one device call at a time (docs/design/device-bundles.md): each call carries
# one bundle or fa3 part and runs one or more of these steps; rows and benchmarks run in the background between
# calls, and the next call must follow within the machine's idle window (~30 s). From the repo root on the GPU
# machine:
#
#   SPECV2_COMMIT=<hash> bash ci/gpu_lease.sh STEP [ARGS]
#
#   unpack REL                 unpack the carried .device-bundle/REL (ci/gpu_prepare.sh)
#   add V                      add the carried fa3 part(s) .device-bundle/V-fa3/pNN (ci/gpu_fa3.sh add)
#   inst REL PARTS [REL PARTS ...]   install fa3 (PARTS' sglang-kernel) into unpacked releases
#   rows REL FILE...           queue registered rows, both modes (ci/gpu_bg.py start --modes off, then auto)
#   arows REL FILE...          the same, plugin side only
#                              (ROWS_GPUS=1: on GPU 1, beside a benchmark on GPU 0 of a 2-GPU machine; ROWS_SLOTS=K:
#                              rows at once on the machine, default 8, kept for rows queued earlier too; ROWS_TIMEOUT=S:
#                              per row and mode, default 600; session 38's 12 rows at once took up to 656 s;
#                              ROWS_TESTS=PATTERN: only the tests unittest's -k PATTERN selects, e.g. one class)
#   models REL                 write the real-size models with REL's environment (bench/real_size_models.py)
#   bench NAME BUDGET "RELS" [gpu_real_size.sh args]   one real-size benchmark in the background into
#                              $BENCH_ROOT/bench-NAME (nothing else should run on the GPU meanwhile)
#   wait [S]                   wait for the queued rows (at most S s), pack their results into $OUT
#   poll [S] [NAME]            wait S s, or until bench NAME's run.log says exit; print the benchmarks' progress
#   collect NAME...            copy benchmarks into $OUT (logs over 2 MB cut to 2000 columns)
#   status                     the benchmarks' progress and the rows' dispatcher log
#
# SPECV2_COMMIT names the code in every record (the machine's copy of the tree has no git). The first `rows` and the
# first `bench` each snapshot the tree (ci/gpu_bg.py; $BENCH_ROOT/specv2-snap): code carried by later calls does not
# reach what runs.
set -uo pipefail
STEP=${1:-}; shift || true
export SPECV2_COMMIT=${SPECV2_COMMIT:?set SPECV2_COMMIT to the commit the tree is at}
BENCH_ROOT=${BENCH_ROOT:-/tmp}
SNAP=$BENCH_ROOT/specv2-snap
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

case "$STEP" in
  unpack)
    bash -c "source ci/gpu_prepare.sh $1" > /dev/null && echo "unpacked $1" ;;
  add)
    bash ci/gpu_fa3.sh add "$1" ;;
  inst)
    while [ $# -ge 2 ]; do
      (source ci/gpu_prepare.sh "$1" > /dev/null && bash ci/gpu_fa3.sh install "$1" "$2") || exit 1
      shift 2
    done ;;
  rows)
    v=$1; shift
    python3 ci/gpu_bg.py start "$v" "$@" --modes off "${ROWS[@]}" &&
      python3 ci/gpu_bg.py start "$v" "$@" --modes auto "${ROWS[@]}" ;;
  arows)
    v=$1; shift
    python3 ci/gpu_bg.py start "$v" "$@" --modes auto "${ROWS[@]}" ;;
  models)
    (source ci/gpu_prepare.sh "$1" > /dev/null && python3 bench/real_size_models.py --model 8b 2>&1 | tail -1) ;;
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
    PYTHONPATH=$PWD python3 ci/gpu_bg.py wait "${1:-565}" ;;
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
    echo "usage: SPECV2_COMMIT=<hash> bash ci/gpu_lease.sh STEP [ARGS]; steps:" >&2
    grep -E '^#   [a-z]' "$0" >&2; exit 2 ;;
esac
