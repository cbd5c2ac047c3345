# Source on the lent GPU machine, from the repo root: `source ci/gpu_prepare.sh RELEASE`
# Unpacks the SGLang bundle (ci/gpu_env.sh), makes the plugin's entry point visible without pip (a minimal
# dist-info next to the source: entry points are only read from a dist-info) and puts an `sglang` console
# shim on PATH (the bundle has no console scripts; popen_launch_server runs `sglang serve`).
# Safe to source from several processes at once once the bundle is unpacked (the benchmark's parts do): the
# dist-info and the shim are written to a temporary path and renamed into place, never rewritten under a
# running server.
_V=${1:?usage: source ci/gpu_prepare.sh RELEASE}
source ci/gpu_env.sh "$_V" || return 1
_EP=/tmp/specv2-ep-$_V
if [ ! -f "$_EP/sglang_specv2_fixes-0.2.0.dist-info/entry_points.txt" ]; then
  _T=$(mktemp -d /tmp/specv2-ep.XXXXXX); mkdir -p "$_T/sglang_specv2_fixes-0.2.0.dist-info"
  printf 'Metadata-Version: 2.1\nName: sglang-specv2-fixes\nVersion: 0.2.0\n' > "$_T/sglang_specv2_fixes-0.2.0.dist-info/METADATA"
  printf '[sglang.srt.plugins]\nspecv2_fixes = sglang_specv2_fixes.plugin:register\n' > "$_T/sglang_specv2_fixes-0.2.0.dist-info/entry_points.txt"
  chmod 755 "$_T"; mv -T "$_T" "$_EP" 2>/dev/null || rm -rf "$_T"   # lost a race: the winner's copy is identical
fi
# ci/bundle_shims: placeholder classes for backend modules whose kernels the bundle cannot carry (its docstring)
export PYTHONPATH="$PWD:$PWD/ci/bundle_shims:$_EP:$PYTHONPATH"
mkdir -p /tmp/specv2-bin
if [ ! -x /tmp/specv2-bin/sglang ]; then
  _T=$(mktemp /tmp/specv2-bin/.sglang.XXXXXX)
  printf '#!/bin/sh\nexec python3 -c "import sys; from sglang.cli.main import main; sys.exit(main())" "$@"\n' > "$_T"
  chmod +x "$_T"; mv -f "$_T" /tmp/specv2-bin/sglang
fi
export PATH="/tmp/specv2-bin:$PATH"
unset _V _EP _T
