#!/usr/bin/env bash
# Once per CPU machine, from the repo root (needs the package registry):
#   bash ci/gpu/lease.sh xgrammar RELEASE             # -> .device-bundle/RELEASE-xgrammar/site.tar.xz (< 1 MB)
# xgrammar at RELEASE's own pin, for the bundles that lack it (../shared/device/make_bundle.sh leaves it out:
# 0.5.11, 0.5.12, 0.5.12.post1; ci/gpu/make_bundle_slim.sh bundles already carry it). Carry it beside the release's
# bundle (`carry: [".device-bundle/RELEASE", ".device-bundle/RELEASE-xgrammar"]`): ci/gpu/env.sh unpacks it into
# the same tree when that tree has no xgrammar. The grammar rows (test_grammar_overlap_28986.py) need it.
# Slimmed as make_bundle_slim.sh slims its site (slim_site of ci/gpu/bundle_common.sh).
set -euo pipefail
V=${1:?usage: make_xgrammar_overlay.sh RELEASE}
PY=${PYTHON:-python3}
source "$(cd "$(dirname "$0")" && pwd)/bundle_common.sh"   # PLAT, pinned_xgrammar, slim_site
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
"$PY" -m pip download -qq --no-deps "${PLAT[@]}" -d "$WORK/wheels" "sglang==$V"
META=$(unzip -p "$WORK"/wheels/sglang-"$V"-*.whl '*/METADATA')
XG=$(pinned_xgrammar <<<"$META")
[ -n "$XG" ] || { echo "sglang $V pins no xgrammar version" >&2; exit 1; }
"$PY" -m pip download -qq --no-deps "${PLAT[@]}" -d "$WORK/wheels" "xgrammar==$XG"
S=$WORK/site; mkdir -p "$S"
# the wheel is unzipped, not pip-installed: pip refuses a manylinux wheel for another interpreter/platform here
(cd "$S" && unzip -q "$WORK"/wheels/xgrammar-"$XG"-*.whl)
rm -rf "$S"/bin
slim_site "$S"
OUT=.device-bundle/$V-xgrammar; mkdir -p "$OUT"
XZ_OPT=${XZ_OPT:--9 -T2} tar -cJf "$OUT/site.tar.xz" -C "$S" .
echo "xgrammar==$XG" > "$OUT/pins.txt"
du -h "$OUT/site.tar.xz"
