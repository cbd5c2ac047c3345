# Sourced by ci/gpu/make_bundle_slim.sh and ci/gpu/make_xgrammar_overlay.sh: how both fetch wheels for the GPU image
# (CPython 3.12, x86-64 manylinux) and slim a site tree (docs/design/device-bundles.md, "What is dropped").

# pip download flags: binary wheels for the GPU image's interpreter and platform, not this machine's
PLAT=(--python-version 3.12 --implementation cp --only-binary=:all:)
for _p in manylinux_2_34_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_26_x86_64 manylinux_2_24_x86_64 \
          manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64; do PLAT+=(--platform "$_p"); done
unset _p

# pinned_req NAMES < METADATA: NAME==VERSION of the first of NAMES (one name, or a sed alternation such as
# 'sglang-kernel\|sgl-kernel') that an sglang wheel's METADATA pins (empty if none)
pinned_req() { sed -n "s/^Requires-Dist: \($1\)==\([0-9.a-z]*\)\( *;.*\)\{0,1\}\$/\1==\2/p" | head -1; }
# pinned_xgrammar < METADATA: the xgrammar version an sglang wheel's METADATA pins (empty if none)
pinned_xgrammar() { local r; r=$(pinned_req xgrammar); echo "${r#*==}"; }

# slim_site DIR: drop what serving never loads from a site tree
slim_site() {
  local S=$1 f
  # xgrammar: the static library and C++ headers are for building against it; Python loads libxgrammar_bindings.so
  rm -rf "$S"/xgrammar/lib/*.a "$S"/xgrammar/include
  rmdir "$S"/xgrammar/lib 2>/dev/null || true
  # type stubs and bytecode caches are never read when importing
  find "$S" -name '*.pyi' -delete
  find "$S" -name __pycache__ -prune -exec rm -rf {} +
  # DWARF debug info of shared objects (xgrammar 50 MB -> 2 MB, zstandard, nccl, torch_memory_saver): code,
  # symbol tables and CUDA fatbins stay as they are. The section list is read whole, not piped to `grep -q`:
  # under the callers' pipefail, grep's early exit sometimes killed readelf with SIGPIPE, the test read as
  # false and a 50 MB xgrammar went into the bundle unstripped.
  find "$S" -name '*.so*' -type f -print0 | while IFS= read -r -d '' f; do
    case "$(readelf -S "$f" 2>/dev/null)" in *.debug_*) strip --strip-debug "$f" ;; esac
  done
}
