#!/usr/bin/env bash
# Build the CPU test environment: one venv with torch (CPU-usable build) and SGLang's pure-Python
# runtime deps (ci/cpu-deps.txt), plus one overlay folder per SGLang release holding that release's own
# Python source (its wheel, --no-deps) and the few deps whose pins differ per release.
#
#   ci/setup_cpu_env.sh [VENV_DIR]        (default .venv-cpu; idempotent, a re-run is cheap)
#
# The release list and each overlay's pip specs come from the release table
# (python -m sglang_specv2_fixes.releases cpu-overlays); nothing here names a release or a per-release pin.
# SPECV2_RELEASES="v1 v2" limits the overlays built; SPECV2_JOBS (default 4) overlays install at once
# (each into its own folder, so parallel installs do not touch each other), while torch and the shared
# deps install into the venv. The tests then run once per release with PYTHONPATH=<VENV>/releases/<v>
# (ci/run_cpu_tests.sh); the GPU-only sgl_kernel is replaced by the test stand-in, never installed.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
VENV=${1:-$ROOT/.venv-cpu}
PY=${PYTHON:-python3}
JOBS=${SPECV2_JOBS:-4}
T0=$SECONDS

step() { printf '[setup %(%H:%M:%S)T +%4ds] %s\n' -1 "$((SECONDS - T0))" "$*"; }
# free disk where the venv lives, in every step that can run out of it (a CI machine once had too little)
disk() { df -h "$(dirname "$VENV")" | awk 'NR == 2 {print $4 " free on " $6}'; }
# pip's wheel cache would keep a second copy of torch's ~4 GB of wheels: off unless the caller asks for it
export PIP_NO_CACHE_DIR=${PIP_NO_CACHE_DIR:-1}
# the table's queries need only the package's source (no sglang, no deps)
table() { PYTHONPATH="$ROOT" "$VENV/bin/python" -m sglang_specv2_fixes.releases "$@"; }

# The CI machine's disk is shared and can be nearly full (then every install fails within seconds).
# Before installing, wait (SPECV2_DISK_WAIT_S, default 900 s; progress each minute) until the space this run still
# needs is free; a failed install is retried once after the same wait.
avail_kb() { df -Pk "$(dirname "$VENV")" | awk 'NR == 2 {print $4}'; }
wait_for_disk() {  # KB why: returns at once if KB are free, else polls until they are or the wait runs out
  local need=$1 why=$2 waited=0 limit=${SPECV2_DISK_WAIT_S:-900}
  while [ "$(avail_kb)" -lt "$need" ]; do
    if [ "$waited" -ge "$limit" ]; then
      step "disk: $(disk), $((need / 1048576)) GiB wanted for $why; waited ${waited} s, going on anyway"
      return 0
    fi
    [ $((waited % 60)) -ne 0 ] || step "disk: $(disk), $((need / 1048576)) GiB wanted for $why; waiting (${waited} of ${limit} s)"
    sleep 10; waited=$((waited + 10))
  done
}
step "disk: $(disk) (a fresh setup needs about 10 GiB at its peak, 8.5 after)"
if [ ! -x "$VENV/bin/python" ]; then
  step "creating venv $VENV"
  "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"

# ---- per-release overlays (background, $JOBS at a time): "VERSION SPEC..." lines from the table
declare -A SPECS=()
ORDER=()
while read -r v specs; do
  SPECS[$v]="$specs"
  ORDER+=("$v")
done < <(table cpu-overlays)
[ ${#ORDER[@]} -gt 0 ] || { echo "setup: the release table lists no CPU overlay" >&2; exit 1; }
WANT=("${ORDER[@]}")
if [ -n "${SPECV2_RELEASES:-}" ]; then
  WANT=()
  for v in $SPECV2_RELEASES; do
    [ -n "${SPECS[$v]+x}" ] || { echo "setup: $v has no CPU overlay in the release table (python -m sglang_specv2_fixes.releases cpu-overlays)" >&2; exit 1; }
    WANT+=("$v")
  done
fi
mkdir -p "$VENV/releases" "$VENV/logs"
pip_target() {  # folder log specs...: pip's output into log
  local dir=$1 log=$2; shift 2
  "$VPY" -m pip install --no-deps --no-compile --disable-pip-version-check --target "$dir" "$@" >"$log" 2>&1
}
install_overlay() {  # version specs...: into a temp folder, moved into place when complete
  local v=$1; shift
  local dst="$VENV/releases/$v" log="$VENV/logs/overlay-$v.log"
  rm -rf "$dst" "$dst.part"
  if pip_target "$dst.part" "$log" "$@" \
     || { grep -q 'No space left on device' "$log" && rm -rf "$dst.part" \
          && wait_for_disk $((2 * 1048576)) "overlay $v (retry after: no space left on device)" \
          && pip_target "$dst.part" "$log" "$@"; }; then
    rm -rf "$dst.part/bin"
    printf '%s\n' "$*" >"$dst.part/.ready"
    mv "$dst.part" "$dst"
    step "overlay $v installed: $*"
  else
    step "overlay $v FAILED ($log; disk: $(disk)):"; tail -20 "$log" >&2
    return 1
  fi
}
overlay_ready() {  # version specs...: .ready holds the specs it was built from (a changed pin in the table
  # rebuilds the overlay) and every spec's dist-info is there; an empty .ready (older script) counts if so
  local v=$1; shift
  local dst="$VENV/releases/$v" s name ver have
  [ -f "$dst/.ready" ] || return 1
  have=$(cat "$dst/.ready")
  [ -z "$have" ] || [ "$have" = "$*" ] || return 1
  for s in "$@"; do
    name=${s%%==*}; ver=${s#*==}
    [ -d "$dst/${name//-/_}-$ver.dist-info" ] || return 1
  done
  [ -n "$have" ] || printf '%s\n' "$*" >"$dst/.ready"
}
# overlays the table no longer lists, and the old source-only trees (every release is importable now)
for d in "$VENV"/releases/*; do
  [ -d "$d" ] || continue
  v=$(basename "$d")
  if [ -z "${SPECS[$v]+x}" ]; then step "removing $d (not in the release table)"; rm -rf "$d"; fi
done
if [ -d "$VENV/src" ]; then step "removing $VENV/src (old source-only trees: every release has an overlay now)"; rm -rf "$VENV/src"; fi
# the space this run still needs: torch's CUDA build and its libraries (~6 GiB, with pip's unpacking), and each
# missing overlay (~0.5 GiB with its temporary copy; dedupe_overlays.py later gives back ~1.8 GiB of the overlays')
need_kb=0
have_torch=0
"$VPY" -c "import torch, torchvision" 2>/dev/null && have_torch=1 || need_kb=$((6 * 1048576))
for v in "${WANT[@]}"; do
  # shellcheck disable=SC2086
  overlay_ready "$v" ${SPECS[$v]} || need_kb=$((need_kb + 524288))
done
[ "$need_kb" -eq 0 ] || wait_for_disk "$need_kb" "the installs below"
# one background pool installs the overlays, $JOBS at a time, while the venv's own deps install below
(
  rc=0
  for v in "${WANT[@]}"; do
    dst="$VENV/releases/$v"
    # shellcheck disable=SC2086
    if overlay_ready "$v" ${SPECS[$v]}; then continue; fi
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 0.5; done
    step "overlay $v: pip install --no-deps --target releases/$v ${SPECS[$v]}"
    # shellcheck disable=SC2086
    install_overlay "$v" ${SPECS[$v]} &
  done
  for p in $(jobs -p); do wait "$p" || rc=1; done
  # one copy of the files the overlays share (~1.8 of their ~4 GiB), while torch may still be unpacking
  [ $rc -ne 0 ] || step "$("$VPY" "$HERE/dedupe_overlays.py" "$VENV/releases")" || rc=1
  exit $rc
) &
POOL=$!

# ---- the shared venv (foreground, while the overlays download)
if [ "$have_torch" -eq 0 ]; then
  step "installing torch 2.14.1 + torchvision 0.29.1 (CPU use; SGLang imports torchvision at import time)"
  pip_torch() { "$VPY" -m pip install -q --disable-pip-version-check torch==2.14.1 torchvision==0.29.1; }
  pip_torch || { step "torch install failed (disk: $(disk)); once more after waiting for disk"
                 wait_for_disk $((6 * 1048576)) "torch (retry)"; pip_torch; } \
    || { step "torch install failed (disk: $(disk))"; exit 1; }
fi
if [ ! -f "$VENV/.deps-ok" ] || ! cmp -s "$HERE/cpu-deps.txt" "$VENV/.deps-ok"; then
  step "installing SGLang's shared runtime deps (ci/cpu-deps.txt, no torch) and pytest"
  "$VPY" -m pip install -q --disable-pip-version-check --no-deps -r "$HERE/cpu-deps.txt"
  "$VPY" -m pip install -q --disable-pip-version-check pytest
  cp "$HERE/cpu-deps.txt" "$VENV/.deps-ok"
fi
if [ "$("$VPY" -I -c 'import os, sglang_specv2_fixes as m; print(os.path.dirname(os.path.dirname(os.path.realpath(m.__file__))))' 2>/dev/null)" != "$(realpath "$ROOT")" ] \
   || [ ! -x "$VENV/bin/sglang-specv2-fixes" ] \
   || [ ! -x "$(head -1 "$VENV/bin/sglang-specv2-fixes" | sed 's/^#!//')" ]; then
  # (the last: a console script written through another path to this venv, e.g. a clone's symlink since removed)
  step "installing the plugin (editable) from $ROOT"
  "$VPY" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e "$ROOT"
fi

if ! wait "$POOL"; then step "setup failed: an overlay did not install (disk: $(disk))"; exit 1; fi
for v in "${WANT[@]}"; do [ -f "$VENV/releases/$v/.ready" ] || { step "overlay $v missing"; exit 1; }; done
step "done: $VENV (${#WANT[@]} release overlays: ${WANT[*]}; disk: $(disk))"
