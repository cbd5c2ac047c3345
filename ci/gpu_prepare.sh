# Source on the lent GPU machine, from the repo root: `source ci/gpu_prepare.sh RELEASE`
# Unpacks the SGLang bundle (ci/gpu_env.sh), makes the plugin's entry point visible without pip (a minimal
# dist-info next to the source: entry points are only read from a dist-info) and puts an `sglang` console
# shim on PATH (the bundle has no console scripts; popen_launch_server runs `sglang serve`).
_V=${1:?usage: source ci/gpu_prepare.sh RELEASE}
source ci/gpu_env.sh "$_V" || return 1
_EP=/tmp/specv2-ep-$_V; rm -rf "$_EP"; mkdir -p "$_EP/sglang_specv2_fixes-0.1.0.dist-info"
printf 'Metadata-Version: 2.1\nName: sglang-specv2-fixes\nVersion: 0.1.0\n' > "$_EP/sglang_specv2_fixes-0.1.0.dist-info/METADATA"
printf '[sglang.srt.plugins]\nspecv2_fixes = sglang_specv2_fixes.plugin:register\n' > "$_EP/sglang_specv2_fixes-0.1.0.dist-info/entry_points.txt"
export PYTHONPATH="$PWD:$_EP:$PYTHONPATH"
mkdir -p /tmp/specv2-bin
printf '#!/bin/sh\nexec python3 -c "import sys; from sglang.cli.main import main; sys.exit(main())" "$@"\n' > /tmp/specv2-bin/sglang
chmod +x /tmp/specv2-bin/sglang; export PATH="/tmp/specv2-bin:$PATH"
unset _V _EP
