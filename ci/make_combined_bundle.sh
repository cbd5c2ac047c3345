#!/usr/bin/env bash
# Merge two per-release device bundles (../shared/device/make_bundle.sh output) into one carry that fits
# the device's 64 MiB cap: files identical in both go into common.tar.xz once, the rest per release.
#   bash ci/make_combined_bundle.sh 0.5.11 0.5.12.post1      # -> .device-bundle/both/
# On the device: carry [".device-bundle/both"]; ci/gpu_env.sh unpacks common + the release's part.
set -euo pipefail
A=${1:?usage: make_combined_bundle.sh REL_A REL_B}; B=${2:?}
OUT=.device-bundle/both; W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
mkdir -p "$W/$A" "$W/$B" "$OUT"
tar -xJf ".device-bundle/$A/site.tar.xz" -C "$W/$A"; tar -xJf ".device-bundle/$B/site.tar.xz" -C "$W/$B"
python3 - "$W" "$A" "$B" <<'PY'
import hashlib, os, sys
w, a, b = sys.argv[1:]
def digest(root):
    out = {}
    for d, _, fs in os.walk(root):
        for f in fs:
            p = os.path.join(d, f)
            out[os.path.relpath(p, root)] = os.readlink(p) if os.path.islink(p) else hashlib.md5(open(p, "rb").read()).hexdigest()
    return out
da, db = digest(f"{w}/{a}"), digest(f"{w}/{b}")
common = sorted(r for r in da if db.get(r) == da[r])
for rel, d in ((a, da), (b, db)):
    open(f"{w}/{rel}.txt", "w").write("\n".join(sorted(set(d) - set(common))) + "\n")
open(f"{w}/common.txt", "w").write("\n".join(common) + "\n")
PY
(cd "$W/$A" && tar -cJf "$OLDPWD/$OUT/common.tar.xz" -T "$W/common.txt")
for v in "$A" "$B"; do
  (cd "$W/$v" && tar -cJf "$OLDPWD/$OUT/$v.tar.xz" -T "$W/$v.txt")
  cp ".device-bundle/$v/fi.tar.xz" "$OUT/fi-$v.tar.xz"
done
du -sh "$OUT"
