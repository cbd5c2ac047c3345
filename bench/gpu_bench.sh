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
source ci/gpu_env.sh "$V" || exit 1    # .device-bundle/RELEASE or the combined .device-bundle/both
# entry points are only seen from a dist-info: write a minimal one next to the source (no pip needed)
EP=/tmp/specv2-ep-$V; rm -rf "$EP"; mkdir -p "$EP/sglang_specv2_fixes-0.1.0.dist-info"
printf 'Metadata-Version: 2.1\nName: sglang-specv2-fixes\nVersion: 0.1.0\n' > "$EP/sglang_specv2_fixes-0.1.0.dist-info/METADATA"
printf '[sglang.srt.plugins]\nspecv2_fixes = sglang_specv2_fixes.plugin:register\n' > "$EP/sglang_specv2_fixes-0.1.0.dist-info/entry_points.txt"
export PYTHONPATH="$PWD:$EP:$PYTHONPATH"
# the bundle has no console scripts: popen_launch_server runs `sglang serve`
mkdir -p /tmp/specv2-bin
printf '#!/bin/sh\nexec python3 -c "import sys; from sglang.cli.main import main; sys.exit(main())" "$@"\n' > /tmp/specv2-bin/sglang
chmod +x /tmp/specv2-bin/sglang; export PATH="/tmp/specv2-bin:$PATH"
python3 -m sglang_specv2_fixes status
OUTDIR=${OUT:-build}/bench-$V
mkdir -p "$OUTDIR"
BUDGET=$(( ${BENCH_TOTAL_S:-560} - ($(date +%s) - T0) ))
echo "[gpu_bench] preparation took $(( $(date +%s) - T0 ))s; serving.py budget ${BUDGET}s -> $OUTDIR"
python3 bench/serving.py --out "$OUTDIR" --budget-s "$BUDGET" "$@"
