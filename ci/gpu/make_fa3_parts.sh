#!/usr/bin/env bash
# The FA3 library of a release's sgl-kernel wheel (sgl_kernel/flash_ops.abi3.so, ~1 GB; ../shared/device/make_bundle.sh
# leaves it out) as xz parts that fit one device call each beside the working tree:
#   bash ci/gpu/lease.sh fa3-parts RELEASE [PART_MB]   # -> .device-bundle/RELEASE-fa3/pNN/part + SHA256SUMS
# Needs the wheel in /tmp/bundle-cache/RELEASE/ (make_bundle.sh's download cache). On the device, one call per part
# while the machine stays warm: `ci/gpu/lease.sh add RELEASE`, carrying .device-bundle/RELEASE-fa3/pNN; then
# `ci/gpu/lease.sh inst RELEASE RELEASE` (docs/gpu-host.md).
set -euo pipefail
V=${1:?usage: make_fa3_parts.sh RELEASE [PART_MB]}; MB=${2:-34}
WHL=$(ls /tmp/bundle-cache/"$V"/sglang_kernel-*.whl | head -1)
OUT=.device-bundle/$V-fa3; W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
rm -rf "$OUT"; mkdir -p "$OUT"
python3 -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract('sgl_kernel/flash_ops.abi3.so', sys.argv[2])" "$WHL" "$W"
nice -n 19 xz -T1 -6 -c "$W/sgl_kernel/flash_ops.abi3.so" > "$W/flash_ops.abi3.so.xz"
(cd "$W" && sha256sum flash_ops.abi3.so.xz sgl_kernel/flash_ops.abi3.so) > "$OUT/SHA256SUMS"
split -b "${MB}M" -d -a 2 "$W/flash_ops.abi3.so.xz" "$W/part."
for p in "$W"/part.*; do n=${p##*.}; mkdir -p "$OUT/p$n"; mv "$p" "$OUT/p$n/part"; cp "$OUT/SHA256SUMS" "$OUT/p$n/"; done
echo "$(basename "$WHL"): $(ls -d "$OUT"/p* | wc -l) part(s) of <= ${MB} MiB in $OUT"; du -sh "$OUT"/p*
