#!/usr/bin/env bash
# Serving benchmark for several releases in one device call, one GPU per release when the machine has
# them (else one after the other on GPU 0 is NOT done: they would disturb each other's timings):
#   bash bench/gpu_bench_all.sh "0.5.11 0.5.12.post1" [bench/serving.py args]
# Writes $OUT/bench-RELEASE/{results.json,results.md,serving.png,pairs.png} and packs the server logs into
# $OUT/bench-logs.tar.gz (the device returns at most 8 files).
set -uo pipefail
RELEASES=${1:?usage: gpu_bench_all.sh "REL ..." [args]}; shift
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
k=0; pids=()
for v in $RELEASES; do
  if [ "$k" -ge "$NGPU" ]; then echo "[gpu_bench_all] no free GPU for $v: skipped (timings need a GPU of their own)"; continue; fi
  (CUDA_VISIBLE_DEVICES=$k bash bench/gpu_bench.sh "$v" --base-port $((31000 + 2000 * k)) "$@" 2>&1 | sed -u "s/^/[$v] /") &
  pids+=($!); k=$((k + 1))
done
rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done
if [ -n "${OUT:-}" ]; then
  (cd "$OUT" && tar -czf bench-logs.tar.gz bench-*/server.log 2>/dev/null && rm -f bench-*/server.log)
fi
exit $rc
