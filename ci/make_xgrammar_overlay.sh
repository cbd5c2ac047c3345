#!/usr/bin/env bash
# Once per CPU machine, from the repo root (needs the package registry):
#   bash ci/make_xgrammar_overlay.sh RELEASE      # -> .device-bundle/RELEASE-xgrammar/site.tar.xz (< 1 MB)
# xgrammar at RELEASE's own pin, for the bundles that lack it (../shared/device/make_bundle.sh leaves it out:
# 0.5.11, 0.5.12, 0.5.12.post1; ci/make_bundle_slim.sh bundles already carry it). Carry it beside the release's
# bundle (`carry: [".device-bundle/RELEASE", ".device-bundle/RELEASE-xgrammar"]`): ci/gpu_env.sh unpacks it into
# the same tree when that tree has no xgrammar. The grammar rows (test_grammar_overlap_28986.py) need it.
# Slimmed as make_bundle_slim.sh slims xgrammar: no static library, C++ headers, type stubs or DWARF debug info.
set -euo pipefail
V=${1:?usage: make_xgrammar_overlay.sh RELEASE}
PY=${PYTHON:-python3}
PLAT=(--python-version 3.12 --implementation cp --only-binary=:all:)   # as ci/make_bundle_slim.sh
for p in manylinux_2_34_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_26_x86_64 manylinux_2_24_x86_64 \
         manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64; do PLAT+=(--platform "$p"); done
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
"$PY" -m pip download -qq --no-deps "${PLAT[@]}" -d "$WORK/wheels" "sglang==$V"
META=$(unzip -p "$WORK"/wheels/sglang-"$V"-*.whl '*/METADATA')
XG=$(sed -n 's/^Requires-Dist: xgrammar==\([0-9.a-z]*\)\( *;.*\)\{0,1\}$/\1/p' <<<"$META" | head -1)
[ -n "$XG" ] || { echo "sglang $V pins no xgrammar version" >&2; exit 1; }
"$PY" -m pip download -qq --no-deps "${PLAT[@]}" -d "$WORK/wheels" "xgrammar==$XG"
S=$WORK/site; mkdir -p "$S"
# the wheel is unzipped, not pip-installed: pip refuses a manylinux wheel for another interpreter/platform here
(cd "$S" && unzip -q "$WORK"/wheels/xgrammar-"$XG"-*.whl)
rm -rf "$S"/xgrammar/lib/*.a "$S"/xgrammar/include "$S"/bin
rmdir "$S"/xgrammar/lib 2>/dev/null || true
find "$S" -name '*.pyi' -delete
find "$S" -name __pycache__ -prune -exec rm -rf {} +
find "$S" -name '*.so*' -type f -print0 | while IFS= read -r -d '' f; do
  if readelf -S "$f" 2>/dev/null | grep -q '\.debug_'; then strip --strip-debug "$f"; fi
done
OUT=.device-bundle/$V-xgrammar; mkdir -p "$OUT"
XZ_OPT=${XZ_OPT:--9 -T2} tar -cJf "$OUT/site.tar.xz" -C "$S" .
echo "xgrammar==$XG" > "$OUT/pins.txt"
du -h "$OUT/site.tar.xz"
