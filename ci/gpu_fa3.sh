#!/usr/bin/env bash
# On the lent GPU machine, from the repo root (ci/make_fa3_parts.sh made the parts):
#   bash ci/gpu_fa3.sh add RELEASE       # append the carried .device-bundle/RELEASE-fa3/pNN/part(s) to /tmp/specv2-fa3-RELEASE
#   bash ci/gpu_fa3.sh install RELEASE [PARTS_RELEASE]   # check the sums, unpack into /tmp/sglang-RELEASE/sgl_kernel,
#                                                        # import it (parts added for PARTS_RELEASE, default RELEASE:
#                                                        # 0.5.12.post1 uses 0.5.12's, the same sglang-kernel)
# /tmp survives only while the machine stays warm (~30 s after a call), so the calls must follow each other.
set -euo pipefail
CMD=${1:?usage: gpu_fa3.sh add|install RELEASE [PARTS_RELEASE]}; V=${2:?release}
D=/tmp/specv2-fa3-${3:-$V}; mkdir -p "$D"
case "$CMD" in
  add)
    for p in .device-bundle/"$V"-fa3/p*/part; do
      n=$(basename "$(dirname "$p")")
      [ -f "$D/$n" ] || cp "$p" "$D/$n"; cp "$(dirname "$p")/SHA256SUMS" "$D/"
      echo "[gpu_fa3] $V: have $(ls "$D" | grep -c '^p') part(s), $(du -sh "$D" | cut -f1)"
    done ;;
  install)
    T=/tmp/sglang-$V
    [ -f "$T/.ready" ] || { echo "[gpu_fa3] $T not unpacked (source ci/gpu_prepare.sh $V first)"; exit 1; }
    cat "$D"/p* > "$D/flash_ops.abi3.so.xz"
    (cd "$D" && grep flash_ops.abi3.so.xz SHA256SUMS | sha256sum -c -)
    xz -dc "$D/flash_ops.abi3.so.xz" > "$T/sgl_kernel/flash_ops.abi3.so"
    (cd "$T" && grep sgl_kernel/flash_ops.abi3.so "$D/SHA256SUMS" | sha256sum -c -)
    rm -f "$D/flash_ops.abi3.so.xz"
    python3 -c "from sgl_kernel.flash_attn import flash_attn_with_kvcache; print('[gpu_fa3] sgl_kernel.flash_attn imports')" ;;
  *) echo "usage: gpu_fa3.sh add|install RELEASE [PARTS_RELEASE]"; exit 2 ;;
esac
