#!/usr/bin/env bash
# Once per CPU machine, from the repo root (needs the package registry):
#   bash ci/gpu/lease.sh outlines RELEASE     # -> .device-bundle/RELEASE-outlines/site.tar.xz + pins.txt (~1.1 MB)
# outlines at RELEASE's own pin (sglang's METADATA: outlines==0.1.11 on 0.5.11 - 0.5.23), for `--grammar-backend
# outlines` (test_outlines_spec_guard.py). No bundle carries it (../shared/device/resolve_deps.py skips outlines and
# outlines-core). Carry it beside the release's bundle (`carry: [".device-bundle/RELEASE",
# ".device-bundle/RELEASE-outlines"]`): ci/gpu/env.sh unpacks it into a folder of its own that goes after the
# release's tree on PYTHONPATH (a package the tree has keeps the tree's version).
#
# What it holds: what `import sglang.srt.constrained.outlines_backend` and a regex compile load (outlines 0.1.x imports
# all of outlines.generate / models / types at `import outlines`) that neither the bundle nor the GPU image has:
#   outlines, outlines_core (at outlines' own pin), lark (outlines.fsm.parsing / grammars), diskcache
#   (outlines.caching), airportsdata (outlines.types.airports).
# In the bundle already: interegular, pycountry, pydantic, transformers, dill; in the image: torch, numpy, jinja2,
# cloudpickle, requests, regex, typing_extensions. Declared by outlines but not imported on that path: nest_asyncio
# (under IPython only), jsonschema, referencing, tqdm.
# outlines' TransformerTokenizer.__hash__ (every regex compile) imports datasets.fingerprint.Hasher; datasets is left
# out of every bundle, so env.sh puts the project's datasets stand-in (sglang_specv2_fixes/testing/shims) last on
# PYTHONPATH where no datasets is importable (tests/cpu/test_device_bundle.py: the layout).
set -euo pipefail
V=${1:?usage: make_outlines_overlay.sh RELEASE}
PY=${PYTHON:-python3}
source "$(cd "$(dirname "$0")" && pwd)/bundle_common.sh"   # PLAT, slim_site
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
W=$WORK/wheels
pin() { sed -n "s/^Requires-Dist: $1==\([0-9.a-z]*\)\( *;.*\)\{0,1\}$/\1/p" | head -1; }
"$PY" -m pip download -qq --no-deps "${PLAT[@]}" -d "$W" "sglang==$V"
OL=$(unzip -p "$W"/sglang-"$V"-*.whl '*/METADATA' | pin outlines)
[ -n "$OL" ] || { echo "sglang $V pins no outlines version" >&2; exit 1; }
"$PY" -m pip download -qq --no-deps "${PLAT[@]}" -d "$W" "outlines==$OL"
CORE=$(unzip -p "$W"/outlines-"$OL"-*.whl '*/METADATA' | pin outlines_core)
[ -n "$CORE" ] || { echo "outlines $OL pins no outlines_core version" >&2; exit 1; }
# lark, diskcache, airportsdata: unpinned by outlines (the newest wheel; pins.txt records which)
"$PY" -m pip download -qq --no-deps "${PLAT[@]}" -d "$W" "outlines_core==$CORE" lark diskcache airportsdata
rm -f "$W"/sglang-*.whl
S=$WORK/site; mkdir -p "$S"
# unzipped, not pip-installed: pip refuses a manylinux cp312 wheel for another interpreter/platform here
for f in "$W"/*.whl; do (cd "$S" && unzip -qo "$f"); done
rm -rf "$S"/bin
slim_site "$S"
OUT=.device-bundle/$V-outlines; mkdir -p "$OUT"
XZ_OPT=${XZ_OPT:--9 -T2} tar -cJf "$OUT/site.tar.xz" -C "$S" .
for f in "$W"/*.whl; do basename "$f" | cut -d- -f1-2 | sed 's/-/==/'; done | sort > "$OUT/pins.txt"
cat "$OUT/pins.txt"
du -h "$OUT/site.tar.xz"
