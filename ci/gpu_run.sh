#!/usr/bin/env bash
# On the lent GPU machine (no network), from the repo root, with a device bundle carried
# (.device-bundle/<RELEASE> or the combined .device-bundle/both):
#   bash ci/gpu_run.sh RELEASE [run_registered.py args]
# Unpacks the SGLang bundle, makes the plugin's entry point visible, prints `status`, runs the A/B matrix
# into /tmp/specv2-runs/RELEASE and packs what comes back into $OUT (the device returns at most 8 files):
# RELEASE-results.json, RELEASE-results.md, RELEASE-logs.tar.gz.
set -uo pipefail
V=${1:?usage: gpu_run.sh RELEASE [args]}; shift
source ci/gpu_prepare.sh "$V" || exit 1   # bundle, entry point, `sglang` shim
python3 -m sglang_specv2_fixes status
RUN=/tmp/specv2-runs/$V; rm -rf "$RUN"; mkdir -p "$RUN"
python3 ci/run_registered.py --out "$RUN" "$@"; rc=$?
if [ -n "${OUT:-}" ]; then
  cp "$RUN/results.json" "$OUT/$V-results.json" 2>/dev/null; cp "$RUN/results.md" "$OUT/$V-results.md" 2>/dev/null
  tar -czf "$OUT/$V-logs.tar.gz" -C "$RUN" . 2>/dev/null
fi
exit $rc
