#!/usr/bin/env bash
# Build the CPU test environment: one venv with torch (CPU-usable build) and SGLang's pure-Python
# runtime deps, plus one overlay folder per supported SGLang release holding that release's own
# Python source (installed --no-deps from its wheel) and the few deps whose pins differ per release.
#
#   ci/setup_cpu_env.sh [VENV_DIR]        (default .venv-cpu; idempotent, re-run is cheap)
#
# The tests then run once per release with PYTHONPATH=<VENV>/releases/<release> (see ci/run_cpu_tests.sh).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
VENV=${1:-$ROOT/.venv-cpu}
PY=${PYTHON:-python3}
# release -> "pip specs of its per-release overlay"
declare -A OVERLAY=(
  [0.5.11]="sglang==0.5.11 flashinfer-python==0.6.8.post1 apache-tvm-ffi==0.1.15.post2"
  [0.5.12.post1]="sglang==0.5.12.post1 flashinfer-python==0.6.11.post1 apache-tvm-ffi==0.1.9"
)
RELEASES=${SPECV2_RELEASES:-"0.5.11 0.5.12.post1"}

step() { printf '[setup %(%H:%M:%S)T] %s\n' -1 "$*"; }

if [ ! -x "$VENV/bin/python" ]; then
  step "creating venv $VENV"
  "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"
if ! "$VPY" -c "import torch, torchvision" 2>/dev/null; then
  step "installing torch 2.14.1 + torchvision 0.29.1 (CPU use; SGLang imports torchvision at import time)"
  "$VPY" -m pip install -q --upgrade pip
  "$VPY" -m pip install -q torch==2.14.1 torchvision==0.29.1
fi
if [ ! -f "$VENV/.deps-ok" ] || ! cmp -s "$HERE/cpu-deps.txt" "$VENV/.deps-ok"; then
  step "installing SGLang runtime deps (ci/cpu-deps.txt, no torch)"
  "$VPY" -m pip install -q --no-deps -r "$HERE/cpu-deps.txt"
  step "installing the plugin and test tools"
  "$VPY" -m pip install -q pytest
  cp "$HERE/cpu-deps.txt" "$VENV/.deps-ok"
fi
"$VPY" -m pip install -q --no-deps --no-build-isolation -e "$ROOT"
for v in $RELEASES; do
  dst="$VENV/releases/$v"
  if [ -f "$dst/.ready" ]; then step "release $v ready"; continue; fi
  step "installing SGLang $v overlay: ${OVERLAY[$v]}"
  rm -rf "$dst"; mkdir -p "$dst"
  "$VPY" -m pip install -q --no-deps --no-compile --target "$dst" ${OVERLAY[$v]}
  rm -rf "$dst"/bin
  touch "$dst/.ready"
done
# Report-only releases: their sources are only read (fingerprints / status), never imported (one wheel
# each, no deps; tests/cpu/test_source_only_releases.py requires every one of them).
SOURCE_RELEASES=${SPECV2_SOURCE_RELEASES:-"0.5.13.post1 0.5.14 0.5.15 0.5.15.post1 0.5.16 0.5.17"}
for v in $SOURCE_RELEASES; do
  dst="$VENV/src/$v"
  if [ -f "$dst/.ready" ]; then step "source tree $v ready"; continue; fi
  step "fetching SGLang $v source (wheel, no deps, not importable here)"
  rm -rf "$dst"; mkdir -p "$dst"
  "$VPY" -m pip install -q --no-deps --no-compile --target "$dst" "sglang==$v"
  touch "$dst/.ready"
done
step "done: $VENV"
