#!/usr/bin/env bash
# The registered matrix for several releases at once on one GPU machine (one device call):
#   bash ci/gpu_matrix.sh "0.5.11 0.5.12.post1" [run_registered.py args]
# Each release runs in its own runner on its own port range. GPUs are dealt out round-robin: with N GPUs and
# R releases, release k gets GPUs k, k+R, k+2R, ... (its runner spreads its files over them, --gpus); with
# fewer GPUs than releases, release k shares GPU k mod N. Progress lines are prefixed with the release.
set -uo pipefail
RELEASES=${1:?usage: gpu_matrix.sh "REL ..." [args]}; shift
export SPECV2_MEM_FRACTION=${SPECV2_MEM_FRACTION:-0.4} SPECV2_MODELS=${SPECV2_MODELS:-/tmp/specv2-tiny-models}
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
read -ra RELS <<< "$RELEASES"; R=${#RELS[@]}
k=0; pids=()
for v in "${RELS[@]}"; do
  gpus=0
  if [ "$NGPU" -ge "$R" ]; then gpus=$(seq -s, "$k" "$R" $((NGPU - 1))); elif [ "$NGPU" -gt 0 ]; then gpus=$((k % NGPU)); fi
  (bash ci/gpu_run.sh "$v" --gpus "$gpus" --port-base $((21000 + 4000 * k)) "$@" 2>&1 | sed -u "s/^/[$v] /") &
  pids+=($!); k=$((k + 1))
done
rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done
# the device returns at most 8 files: per release results.json + results.md, all logs in one archive
if [ -n "${OUT:-}" ]; then
  (cd "$OUT" && ls ./*-logs.tar.gz > /dev/null 2>&1 && tar -cf matrix-logs.tar ./*-logs.tar.gz && rm -f ./*-logs.tar.gz)
fi
exit $rc
