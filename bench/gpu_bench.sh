#!/usr/bin/env bash
# Serving benchmark on the lent GPU machine (no network), from the repo root, with .device-bundle/<RELEASE>
# (or the combined .device-bundle/both of ci/make_combined_bundle.sh) carried:
#   bash bench/gpu_bench.sh RELEASE [bench/serving.py args]
# Same preparation as ci/gpu_run.sh (unpack the SGLang bundle, make the plugin's entry point visible, the
# `sglang` console shim that popen_launch_server runs), then bench/serving.py into ${OUT:-build}/bench-RELEASE
# (one folder down: results.json, results.md, serving.png, pairs.png, server.log).
# The wall-clock budget handed to serving.py is BENCH_TOTAL_S (default 560, the call's limit is 600) minus what
# the preparation took; a --budget-s among the args overrides it.
set -uo pipefail
T0=$(date +%s)
V=${1:?usage: gpu_bench.sh RELEASE [serving.py args]}; shift
source ci/gpu_prepare.sh "$V" || exit 1   # bundle, entry point, `sglang` shim
python3 -m sglang_specv2_fixes status
OUTDIR=${OUT:-build}/bench-$V
mkdir -p "$OUTDIR"
BUDGET=$(( ${BENCH_TOTAL_S:-560} - ($(date +%s) - T0) ))
echo "[gpu_bench] preparation took $(( $(date +%s) - T0 ))s; serving.py budget ${BUDGET}s -> $OUTDIR"
python3 bench/serving.py --out "$OUTDIR" --budget-s "$BUDGET" "$@"
