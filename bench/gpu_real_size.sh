#!/usr/bin/env bash
# Real-size serving benchmark (bench/serving.py --real-size) on the lent GPU machine, from the repo root, with
# .device-bundle/<RELEASE> (one release) or .device-bundle/both (ci/make_combined_bundle.sh) carried:
#   bash bench/gpu_real_size.sh "RELEASE [RELEASE ...]" [--split "A,B C"] [bench/serving.py args]
# 8B-shaped target + 1-layer EAGLE3 draft (bench/real_size_models.py: config + tokenizer, dummy weights) written
# once under /tmp; SGLANG_SIMULATE_ACC_LEN (--acc-len, default 3.0) on both servers. Each release gets GPUs of its
# own: without --split one GPU per release (GPU k for the k-th release) running its configurations one after the
# other; with --split the release's configurations are spread one part per GPU (release k, part j -> GPU k*P + j),
# a configuration's stock/plugin pairs always on one GPU. A part without a GPU is skipped. Then, into $OUT
# (default build/real-size; the device returns at most 8 files):
#   real-size-latest.{json,md,png}   bench/real_size_report.py over every release (copy to docs/bench/)
#   RELEASE-real-size.md             the release's serving.py table (bench/plot.py)
#   real-size-out.tar.gz             everything: per part results.json / results.md / plots / server.log, merged
#                                    bench-RELEASE/results.json (pass these to real_size_report.py to re-merge)
# Budget: REAL_SIZE_TOTAL_S (default 560, the call's limit is 600) covers everything; the parts get what is left
# after unpacking and writing the models, less 30 s for merging, the report and packing.
# SPECV2_COMMIT=<hash> records the measured commit (the device copy has no .git).
set -uo pipefail
T0=$(date +%s)
RELEASES=${1:?usage: gpu_real_size.sh "REL ..." [--split "A,B C"] [serving.py args]}; shift
SPLIT=""
if [ "${1:-}" = "--split" ]; then SPLIT=$2; shift 2; fi
read -ra PARTS <<< "${SPLIT:-all}"; P=${#PARTS[@]}
read -ra RELS <<< "$RELEASES"
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
OUTROOT=${OUT:-build/real-size}
mkdir -p "$OUTROOT"
export SPECV2_REAL_SIZE_MODELS=${SPECV2_REAL_SIZE_MODELS:-/tmp/specv2-real-size-models}
for v in "${RELS[@]}"; do  # unpack each bundle once, before the parts start side by side
  bash -c "source ci/gpu_prepare.sh $v" > /dev/null || echo "[gpu_real_size] preparing $v failed"
done
# the models once (serving.py would write them too, under a lock): tokenizers / torch from the first release's env
(source ci/gpu_prepare.sh "${RELS[0]}" > /dev/null && python3 bench/real_size_models.py "$SPECV2_REAL_SIZE_MODELS") \
  || echo "[gpu_real_size] writing the models failed"
export BENCH_TOTAL_S=$(( ${REAL_SIZE_TOTAL_S:-560} - ($(date +%s) - T0) - 30 ))
echo "[gpu_real_size] $NGPU GPU(s); releases ${RELS[*]}; parts: ${PARTS[*]}; preparation took $(( $(date +%s) - T0 ))s;" \
     "each part gets ${BENCH_TOTAL_S}s (bench/gpu_bench.sh); commit ${SPECV2_COMMIT:-unrecorded}"
k=0; pids=()
for v in "${RELS[@]}"; do
  for j in $(seq 0 $((P - 1))); do
    g=$((k * P + j))
    if [ "$g" -ge "$NGPU" ]; then echo "[gpu_real_size] no free GPU for $v part $j: skipped (timings need a GPU of their own)"; continue; fi
    cfg=(); [ "${PARTS[$j]}" = all ] || cfg=(--configs ${PARTS[$j]//,/ })
    (CUDA_VISIBLE_DEVICES=$g OUT=$OUTROOT/parts/$v-part$j bash bench/gpu_bench.sh "$v" --real-size \
       --base-port $((31000 + 400 * g)) "${cfg[@]}" "$@" 2>&1 | sed -u "s/^/[$v part$j gpu$g] /") &
    pids+=($!)
  done
  k=$((k + 1))
done
rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done
merged=()
for v in "${RELS[@]}"; do
  ins=$(ls "$OUTROOT"/parts/"$v"-part*/bench-"$v"/results.json 2>/dev/null)
  [ -n "$ins" ] || { echo "[gpu_real_size] $v: no results"; rc=1; continue; }
  mkdir -p "$OUTROOT/bench-$v"
  python3 bench/plot.py --merge "$OUTROOT/bench-$v/results.json" $ins \
    && python3 bench/plot.py "$OUTROOT/bench-$v/results.json" "$OUTROOT/bench-$v" \
    && cp "$OUTROOT/bench-$v/results.md" "$OUTROOT/$v-real-size.md" && merged+=("$OUTROOT/bench-$v/results.json")
done
if [ "${#merged[@]}" -gt 0 ]; then
  python3 bench/real_size_report.py --out-dir "$OUTROOT" "${merged[@]}" || rc=1
fi
(cd "$OUTROOT" && tar -czf real-size-out.tar.gz bench-* parts 2>/dev/null && rm -rf parts bench-*/)
echo "[gpu_real_size] done in $(( $(date +%s) - T0 ))s (rc $rc): $(ls "$OUTROOT" | tr '\n' ' ')"
exit $rc
