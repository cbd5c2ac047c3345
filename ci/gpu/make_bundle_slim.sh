#!/usr/bin/env bash
# Slim variant of ../shared/device/make_bundle.sh for SGLang 0.5.13.post1 - 0.5.17 (works for earlier ones too):
# same resolver (../shared/device/resolve_deps.py, read-only), same layout (.device-bundle/V/{site,fi}.tar.xz +
# pins.txt, consumed by ci/gpu/env.sh / ci/gpu/prepare.sh), plus
#   - xgrammar at the release's own pin (the resolver skips it, but 0.5.13.post1+ import it at server start:
#     sglang/srt/function_call/*_detector.py, entrypoints/openai/protocol.py)
#   - more slimming, so that one release's folder stays <= 58 MB (64 MiB carry cap minus the work tree).
# Every drop below is explained in docs/design/device-bundles.md.
#
#   bash ci/gpu/lease.sh bundle 0.5.17              # -> .device-bundle/0.5.17/{site,fi}.tar.xz, pins.txt
#   BUNDLE_CACHE=/tmp/bundle-cache bash ci/gpu/lease.sh bundle 0.5.17  # keep downloaded wheels between runs
#   KEEP_SITE=/tmp/site-0.5.17 bash ci/gpu/lease.sh bundle 0.5.17      # also keep the slimmed, unpacked site
set -euo pipefail
V=${1:?usage: make_bundle_slim.sh SGLANG_VERSION [OUT_DIR]}
OUT=${2:-.device-bundle/$V}
HERE=$(cd "$(dirname "$0")" && pwd)
SHARED=${SHARED_DEVICE:-$HERE/../../../shared/device}
PY=${PYTHON:-python3}
MAX_MB=${MAX_MB:-58}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
WHEELS=${BUNDLE_CACHE:+$BUNDLE_CACHE/$V}
WHEELS=${WHEELS:-$WORK/wheels}
mkdir -p "$WHEELS"
source "$HERE/bundle_common.sh"   # PLAT, pinned_xgrammar, slim_site

"$PY" "$SHARED/resolve_deps.py" "$V" "$WORK/pins.json"
"$PY" - "$WORK/pins.json" > "$WORK/pins.txt" <<'PY'
import json, sys
print("\n".join(f"{k}=={v}" for k, v in json.load(open(sys.argv[1])).items()))
PY
"$PY" -m pip download -qq --no-deps "${PLAT[@]}" -d "$WHEELS" -r "$WORK/pins.txt"
META=$(unzip -p "$WHEELS"/sglang-"$V"-*.whl '*/METADATA')
# transformers at the release's own pin; tokenizers at a version that pin accepts (as make_bundle.sh)
TF=$(sed -n 's/^Requires-Dist: transformers==\([0-9.]*\).*/\1/p' <<<"$META" | head -1)
# xgrammar at the release's own pin (its other requirements: torch, triton, transformers, numpy, pydantic,
# typing-extensions, apache-tvm-ffi are in the image or already in the bundle)
XG=$(pinned_xgrammar <<<"$META")
EXTRA=("transformers==${TF:-5.6.0}" "tokenizers==0.22.2" "dill" "pycountry")
[ -n "$XG" ] && EXTRA+=("xgrammar==$XG")
"$PY" -m pip download -qq --no-deps "${PLAT[@]}" -d "$WHEELS" "${EXTRA[@]}"
[ -n "$XG" ] && echo "xgrammar==$XG" >> "$WORK/pins.txt"
# install exactly the pinned set (a cache may hold other versions from earlier runs)
"$PY" - "$WORK/pins.txt" "$WHEELS" "${EXTRA[@]}" > "$WORK/wheel-files.txt" <<'PY'
import os, re, sys
pins, wheels, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
norm = lambda n: re.sub(r"[-_.]+", "_", n).lower()
want = {}
for spec in [l.strip() for l in open(pins) if l.strip()] + extra:
    name, _, ver = spec.partition("==")
    want[norm(name)] = ver
files = {}
for f in sorted(os.listdir(wheels)):
    if not f.endswith(".whl"):
        continue
    name, ver = f.split("-")[:2]
    n = norm(name)
    if n in want and (not want[n] or want[n] == ver):
        files.setdefault(n, []).append(os.path.join(wheels, f))
missing = sorted(set(want) - set(files))
if missing:
    sys.exit(f"no wheel for {missing}")
for n, fs in files.items():  # an unpinned extra (dill, pycountry): the newest file
    print(sorted(fs)[-1])
PY
"$PY" -m pip install -qq --no-deps --no-compile "${PLAT[@]}" --target "$WORK/site" $(cat "$WORK/wheel-files.txt")
S=$WORK/site

# ---- drops of make_bundle.sh: FA3/FlashMLA/Blackwell kernels of sglang-kernel, headers/static libs, console
# scripts, IDE/completion and data packages the serving path does not import
rm -f "$S"/sgl_kernel/flash_ops*.so "$S"/sgl_kernel/flashmla_ops*.so
rm -rf "$S"/sgl_kernel/sm100 "$S"/lib "$S"/lib64 "$S"/include "$S"/deep_gemm "$S"/_mscclpp*.so \
       "$S"/jedi* "$S"/pycountry/locales "$S"/mistral_common/data "$S"/bin "$S"/Cryptodome "$S"/openai_harmony
# ---- further drops (docs/design/device-bundles.md, "What is dropped")
# nvidia-mathdx: cuBLASDx/cuFFTDx headers for the MoE load-balancer JIT (sglang/kernels/ops/lplb), never on the
# dense serving path; nccl4py: imported only by flashinfer/moe_ep (MoE expert parallel), lazily
rm -rf "$S"/nvidia/mathdx "$S"/nvidia_mathdx-*.dist-info "$S"/nccl "$S"/nccl4py-*.dist-info
rmdir "$S"/nvidia 2>/dev/null || true
# extension modules built for CPython 3.10: the image's Python 3.12 can never load them
find "$S" -name '*.cpython-3[0-9]*-x86_64-linux-gnu.so' ! -name '*.cpython-312-*' -delete
# zstandard's CFFI backend is used only with PYTHON_ZSTANDARD_IMPORT_POLICY=cffi (CPython loads backend_c)
rm -f "$S"/zstandard/_cffi*.so
# xgrammar's static library and headers, type stubs, bytecode caches, DWARF debug info (ci/gpu/bundle_common.sh)
slim_site "$S"

mkdir -p "$WORK/fi/flashinfer" "$OUT"
mv "$S"/flashinfer/data "$WORK/fi/flashinfer/"   # FlashInfer's JIT sources (the device builds its norm kernels)
XZ_OPT=${XZ_OPT:--9 -T2} tar -cJf "$OUT/site.tar.xz" -C "$S" .
XZ_OPT=${XZ_OPT:--9 -T2} tar -cJf "$OUT/fi.tar.xz" -C "$WORK/fi" .
cp "$WORK/pins.txt" "$OUT/pins.txt"
if [ -n "${KEEP_SITE:-}" ]; then rm -rf "$KEEP_SITE"; mkdir -p "$KEEP_SITE"; cp -a "$S"/. "$WORK"/fi/. "$KEEP_SITE"/; fi
du -sh "$OUT"/*.tar.xz
mb=$(( ($(du -sb "$OUT" | cut -f1) + 999999) / 1000000 ))
echo "$OUT: $mb MB (limit $MAX_MB MB)"
[ "$mb" -le "$MAX_MB" ] || { echo "over the limit" >&2; exit 1; }
