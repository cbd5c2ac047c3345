#!/usr/bin/env bash
# Merge per-release device bundles (../shared/device/make_bundle.sh output) into one carry that fits the
# device's 64 MiB cap:
#   bash ci/gpu/lease.sh combine 0.5.11 0.5.12.post1 [0.5.12=0.5.12.post1 ...]   # -> .device-bundle/both/
# Plain releases: files identical in all of them go into common.tar.xz once, the rest into RELEASE.tar.xz.
# V=BASE (a release that differs from a plain one in a handful of files, e.g. 0.5.12 vs 0.5.12.post1): only
# V.overlay.tar.xz (files that differ from or are missing in BASE's unpacked site), V.remove (BASE's files
# that V lacks) and V.base; its FlashInfer part is BASE's when their contents are identical.
# On the device: carry [".device-bundle/both"]; ci/gpu/env.sh unpacks common + the release's part(s).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: make_combined_bundle.sh REL_A REL_B [V=BASE ...]" >&2; exit 2; }
OUT=.device-bundle/both; W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
rm -rf "$OUT"; mkdir -p "$OUT"
PLAIN=(); OVER=()
for spec in "$@"; do case "$spec" in *=*) OVER+=("$spec");; *) PLAIN+=("$spec");; esac; done
for v in "${PLAIN[@]}"; do mkdir -p "$W/$v"; tar -xJf ".device-bundle/$v/site.tar.xz" -C "$W/$v"; done
python3 - "$W" "${PLAIN[@]}" <<'PY'
import hashlib, os, sys
w, rels = sys.argv[1], sys.argv[2:]
def digest(root):
    out = {}
    for d, _, fs in os.walk(root):
        for f in fs:
            p = os.path.join(d, f)
            out[os.path.relpath(p, root)] = os.readlink(p) if os.path.islink(p) else hashlib.md5(open(p, "rb").read()).hexdigest()
    return out
ds = {r: digest(f"{w}/{r}") for r in rels}
first = ds[rels[0]]
common = sorted(p for p in first if all(ds[r].get(p) == first[p] for r in rels[1:]))
for r in rels:
    open(f"{w}/{r}.txt", "w").write("\n".join(sorted(set(ds[r]) - set(common))) + "\n")
open(f"{w}/common.txt", "w").write("\n".join(common) + "\n")
PY
(cd "$W/${PLAIN[0]}" && tar -cJf "$OLDPWD/$OUT/common.tar.xz" -T "$W/common.txt")
for v in "${PLAIN[@]}"; do
  (cd "$W/$v" && tar -cJf "$OLDPWD/$OUT/$v.tar.xz" -T "$W/$v.txt")
  cp ".device-bundle/$v/fi.tar.xz" "$OUT/fi-$v.tar.xz"
done
for spec in "${OVER[@]}"; do
  v=${spec%%=*}; base=${spec#*=}
  [ -d "$W/$base" ] || { echo "overlay base $base of $v is not a plain release of this bundle" >&2; exit 2; }
  mkdir -p "$W/ov-$v" "$W/fi-$v" "$W/fi-$base"
  tar -xJf ".device-bundle/$v/site.tar.xz" -C "$W/ov-$v"
  python3 - "$W/$base" "$W/ov-$v" "$W/$v.over.txt" "$OUT/$v.remove" <<'PY'
import filecmp, os, sys
base, ov, over_list, remove_list = sys.argv[1:]
def files(root):
    return {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs}
fb, fv = files(base), files(ov)
over = sorted(p for p in fv if p not in fb or not filecmp.cmp(os.path.join(base, p), os.path.join(ov, p), shallow=False))
open(over_list, "w").write("\n".join(over) + "\n")
open(remove_list, "w").write("\n".join(sorted(fb - fv)) + "\n")
print(f"overlay: {len(over)} files differ or are new, {len(fb - fv)} to remove")
PY
  (cd "$W/ov-$v" && tar -cJf "$OLDPWD/$OUT/$v.overlay.tar.xz" -T "$W/$v.over.txt")
  echo "$base" > "$OUT/$v.base"
  tar -xJf ".device-bundle/$v/fi.tar.xz" -C "$W/fi-$v"; tar -xJf ".device-bundle/$base/fi.tar.xz" -C "$W/fi-$base"
  diff -rq "$W/fi-$v" "$W/fi-$base" >/dev/null || cp ".device-bundle/$v/fi.tar.xz" "$OUT/fi-$v.tar.xz"
done
du -sh "$OUT"; ls -la "$OUT"
