#!/usr/bin/env bash
# The registered matrix for several releases at once on one GPU machine (one device call):
#   bash ci/gpu_matrix.sh "0.5.11 0.5.12.post1" [run_registered.py args]
# Each release runs in its own runner on its own port range, on its own GPU when the machine has one per
# release (else they share GPU 0). Progress lines are prefixed with the release.
set -uo pipefail
RELEASES=${1:?usage: gpu_matrix.sh "REL ..." [args]}; shift
export SPECV2_MEM_FRACTION=${SPECV2_MEM_FRACTION:-0.15} SPECV2_MODELS=${SPECV2_MODELS:-/tmp/specv2-tiny-models}
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
k=0; pids=()
for v in $RELEASES; do
  gpu=$(( NGPU > k ? k : 0 ))
  (CUDA_VISIBLE_DEVICES=$gpu bash ci/gpu_run.sh "$v" --port-base $((21000 + 4000 * k)) "$@" 2>&1 | sed -u "s/^/[$v] /") &
  pids+=($!); k=$((k + 1))
done
rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
