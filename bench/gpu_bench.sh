#!/usr/bin/env bash
# Serving benchmark on the lent GPU machine (no network), from the repo root, with .device-bundle/<RELEASE>
# (or the combined .device-bundle/both of ci/gpu/make_combined_bundle.sh) carried:
#   bash bench/gpu_bench.sh RELEASE [bench/serving.py args]
#   bash bench/gpu_bench.sh 0.5.11 --side plugin=auto@0.5.11 --side upstream=off@0.5.17   # two releases, one GPU
# Same preparation as ci/gpu/lease.sh's `run` step (unpack the SGLang bundle, make the plugin's entry point visible, the
# `sglang` console shim that popen_launch_server runs), py-spy from a carried .whl/py_spy-*.whl (for
# --host-profile-seconds; carry ".whl" beside the bundle), then bench/serving.py into ${OUT:-build}/bench-RELEASE
# (one folder down: results.json, results.md, serving.png, pairs.png, server.log).
# The wall-clock budget handed to serving.py is BENCH_TOTAL_S (default 560, the call's limit is 600) minus what
# the preparation took; a --budget-s among the args overrides it.
set -uo pipefail
T0=$(date +%s)
V=${1:?usage: gpu_bench.sh RELEASE [serving.py args]}; shift
source ci/gpu/prepare.sh "$V" || exit 1   # bundle, entry point, `sglang` shim
# a --side NAME=SELECTION@RELEASE on another release: unpack that bundle too (.device-bundle/RELEASE or the combined
# .device-bundle/both), in a subshell: serving.py puts ${SPECV2_UNPACK_ROOT:-/tmp}/sglang-RELEASE on that server's
# PYTHONPATH in place of $V's
_prev=""
for _x in "$@"; do
  _s=""; [ "$_prev" = --side ] && _s=$_x; case "$_x" in --side=*) _s=${_x#--side=} ;; esac; _prev=$_x
  case "$_s" in *@*) _r=${_s#*@}; _r=${_r%%,*} ;; *) continue ;; esac
  if [ "$_r" != "$V" ]; then
    (SPECV2_UNPACK_ONLY=1 source ci/gpu/env.sh "$_r" > /dev/null) && echo "[gpu_bench] side $_s: sglang $_r unpacked" \
      || echo "[gpu_bench] side $_s: unpacking sglang $_r failed (its server will be refused)"
  fi
done
# py-spy for serving.py --host-profile-seconds: the wheel carried in .whl/ (no network here; its one file is a static
# binary, so it is unzipped, no pip needed) into $PYSPY_DIR once (renamed into place: parts run side by side)
PYSPY_DIR=${PYSPY_DIR:-/tmp/pyspy}
_W=$(ls .whl/py_spy-*.whl 2>/dev/null | head -1)
if [ -n "$_W" ] && ! command -v py-spy > /dev/null; then
  if [ ! -x "$PYSPY_DIR/bin/py-spy" ]; then
    _T=$(mktemp -d "$PYSPY_DIR.XXXXXX"); chmod 755 "$_T"
    python3 -m zipfile -e "$_W" "$_T/whl" && mkdir -p "$_T/bin" && mv "$_T"/whl/py_spy-*.data/scripts/py-spy "$_T/bin/" \
      && chmod +x "$_T/bin/py-spy" && rm -rf "$_T/whl" && { mv -T "$_T" "$PYSPY_DIR" 2>/dev/null || rm -rf "$_T"; } \
      || { echo "[gpu_bench] unpacking $_W failed"; rm -rf "$_T"; }
  fi
  export PATH="$PYSPY_DIR/bin:$PATH"
fi
command -v py-spy > /dev/null && echo "[gpu_bench] py-spy: $(command -v py-spy) ($(py-spy --version 2>&1))"
python3 -m sglang_specv2_fixes status
OUTDIR=${OUT:-build}/bench-$V
mkdir -p "$OUTDIR"
BUDGET=$(( ${BENCH_TOTAL_S:-560} - ($(date +%s) - T0) ))
echo "[gpu_bench] preparation took $(( $(date +%s) - T0 ))s; serving.py budget ${BUDGET}s -> $OUTDIR"
python3 bench/serving.py --out "$OUTDIR" --budget-s "$BUDGET" "$@"
