#!/usr/bin/env bash
# Once per CPU machine, from the repo root (needs the package registry):
#   bash ci/gpu/lease.sh flashmla RELEASE             # -> .device-bundle/RELEASE-flashmla/site.tar.xz (~1.1 MB)
# FlashMLA (`--attention-backend flashmla`, Hopper, page size 64) for any bundle: both builders leave
# sgl_kernel/flashmla_ops.abi3.so out (docs/design/device-bundles.md). This takes it from the sglang-kernel wheel that
# RELEASE pins (its own build: the library differs between kernel versions). Carry it beside the release's bundle
# (`carry: [".device-bundle/RELEASE", ".device-bundle/RELEASE-flashmla"]`): ci/gpu/env.sh unpacks it into the
# release's tree when the tree has no flashmla_ops. The FlashMLA rows (test_dsv3_mtp_strict_flashmla.py) need it.
set -euo pipefail
V=${1:?usage: make_flashmla_overlay.sh RELEASE}
PY=${PYTHON:-python3}
source "$(cd "$(dirname "$0")" && pwd)/bundle_common.sh"   # PLAT, pinned_req
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
WHEELS=${BUNDLE_CACHE:+$BUNDLE_CACHE/$V}; WHEELS=${WHEELS:-$WORK/wheels}; mkdir -p "$WHEELS"
# pip keeps a wheel already in $WHEELS (BUNDLE_CACHE) and fetches only what is missing
"$PY" -m pip download -qq --no-deps "${PLAT[@]}" -d "$WHEELS" "sglang==$V"
PIN=$(pinned_req 'sglang-kernel\|sgl-kernel' < <(unzip -p "$WHEELS"/sglang-"$V"-*.whl '*/METADATA'))
[ -n "$PIN" ] || { echo "sglang $V pins no sglang-kernel / sgl-kernel version" >&2; exit 1; }
"$PY" -m pip download -qq --no-deps "${PLAT[@]}" -d "$WHEELS" "$PIN"
WHL=$(ls "$WHEELS"/s*_kernel-"${PIN#*==}"-*.whl | head -1)
S=$WORK/site; mkdir -p "$S"
"$PY" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract('sgl_kernel/flashmla_ops.abi3.so', sys.argv[2])" \
  "$WHL" "$S"
OUT=.device-bundle/$V-flashmla; rm -rf "$OUT"; mkdir -p "$OUT"
XZ_OPT=${XZ_OPT:--9 -T2} tar -cJf "$OUT/site.tar.xz" -C "$S" .
echo "$PIN" > "$OUT/pins.txt"
du -h "$OUT/site.tar.xz"
