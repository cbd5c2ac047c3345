#!/usr/bin/env bash
# On the lent GPU machine (no network), from the repo root, with a device bundle carried
# (.device-bundle/<RELEASE> or the combined .device-bundle/both):
#   bash ci/gpu_run.sh RELEASE [run_registered.py args]
# Unpacks the SGLang bundle, makes the plugin's entry point visible, prints `status`, runs the A/B matrix
# into /tmp/specv2-runs/RELEASE and packs what comes back into $OUT (the device returns at most 8 files):
# RELEASE-results.json, RELEASE-results.md, RELEASE-logs.tar.gz.
set -uo pipefail
V=${1:?usage: gpu_run.sh RELEASE [args]}; shift
source ci/gpu_env.sh "$V" || exit 1
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
RUN=/tmp/specv2-runs/$V; rm -rf "$RUN"; mkdir -p "$RUN"
python3 ci/run_registered.py --out "$RUN" "$@"; rc=$?
if [ -n "${OUT:-}" ]; then
  cp "$RUN/results.json" "$OUT/$V-results.json" 2>/dev/null; cp "$RUN/results.md" "$OUT/$V-results.md" 2>/dev/null
  tar -czf "$OUT/$V-logs.tar.gz" -C "$RUN" . 2>/dev/null
fi
exit $rc
