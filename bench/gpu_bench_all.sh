#!/usr/bin/env bash
# Serving benchmark for several releases in one device call:
#   bash bench/gpu_bench_all.sh "0.5.11 0.5.12.post1" [--split "nospec,eagle3-topk1 tree-topk8,tree-topk16"] [serving.py args]
# Each release gets GPUs of its own (timings are never taken on a GPU another benchmark uses); with --split its
# configurations are spread over its GPUs, one part per GPU (release k, part j -> GPU k*P + j), each part's
# stock/plugin pairs on one GPU. A release without a free GPU is skipped. The parts of a release are merged
# (bench/plot.py --merge) into $OUT/bench-RELEASE/{results.json,results.md,serving.png,pairs.png}; the device
# returns at most 8 files, so everything (server logs included) is packed into $OUT/bench-out.tar.gz and only
# the merged results.md files stay beside it.
set -uo pipefail
RELEASES=${1:?usage: gpu_bench_all.sh "REL ..." [--split "A,B C,D"] [args]}; shift
SPLIT=""
if [ "${1:-}" = "--split" ]; then SPLIT=$2; shift 2; fi
read -ra PARTS <<< "${SPLIT:-all}"; P=${#PARTS[@]}
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
OUTROOT=${OUT:-build}
for v in $RELEASES; do  # unpack each bundle once, before its parts start side by side
  bash -c "source ci/gpu_prepare.sh $v" > /dev/null || echo "[gpu_bench_all] preparing $v failed"
done
k=0; pids=()
for v in $RELEASES; do
  for j in $(seq 0 $((P - 1))); do
    g=$((k * P + j))
    if [ "$g" -ge "$NGPU" ]; then echo "[gpu_bench_all] no free GPU for $v part $j: skipped (timings need a GPU of their own)"; continue; fi
    cfg=(); [ "${PARTS[$j]}" = all ] || cfg=(--configs ${PARTS[$j]//,/ })
    (CUDA_VISIBLE_DEVICES=$g OUT=$OUTROOT/parts/$v-part$j bash bench/gpu_bench.sh "$v" --base-port $((31000 + 400 * g)) \
      "${cfg[@]}" "$@" 2>&1 | sed -u "s/^/[$v part$j gpu$g] /") &
    pids+=($!)
  done
  k=$((k + 1))
done
rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done
for v in $RELEASES; do
  ins=$(ls "$OUTROOT"/parts/"$v"-part*/bench-"$v"/results.json 2>/dev/null)
  [ -n "$ins" ] || continue
  mkdir -p "$OUTROOT/bench-$v"
  python3 bench/plot.py --merge "$OUTROOT/bench-$v/results.json" $ins && python3 bench/plot.py "$OUTROOT/bench-$v/results.json" "$OUTROOT/bench-$v"
done
if [ -n "${OUT:-}" ]; then
  (cd "$OUT" && tar -czf bench-out.tar.gz bench-* parts 2>/dev/null && rm -rf parts \
     && for v in $RELEASES; do [ -f "bench-$v/results.md" ] && cp "bench-$v/results.md" "$v-bench.md"; done; rm -rf bench-*/)
fi
exit $rc
