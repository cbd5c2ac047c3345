"""Release source trees for the survey / unknown-release / known-bugs tests: the real ones ci/setup_cpu_env.sh
unpacks (``<venv>/releases/<v>``), and synthetic ones built from them in a temporary folder (only the modules the
release table names, so a test copies a few files, not a release)."""

import os
import shutil
import sys
import zipfile

from sglang_specv2_fixes import catalog, patchfile, releases
from sglang_specv2_fixes.catalog import Patched

# the fixes the table patches on 0.5.23 (open upstream, or beyond upstream there), and the patch file each one gets
OPEN_UPSTREAM = {"live-accept-metrics": "0.5.22", "grammar-result-order": "0.5.22",
                 "routed-experts-draft-guard": "0.5.22", "multi-token-finish": "0.5.18",
                 "reasoning-tokens-through-stop": "0.5.23", "inkling-draft-extend-track-guard": "0.5.22",
                 "multi-layer-draft": "0.5.23", "min-tokens-per-position": "0.5.23",
                 "dp-draft-graph-rank-agree": "0.5.22", "outlines-spec-guard": "0.5.21",
                 "fp4-kv-verify-workspace": "0.5.16"}
# a local edit of grammar-result-order's target (Scheduler.event_loop_overlap): a comment changes its fingerprint
LOCAL_EDIT = {"sglang.srt.managers.scheduler": ("    def event_loop_overlap(self):\n",
                                                "    def event_loop_overlap(self):\n        # a local edit\n")}


def matched_as(fix):
    """The releases whose table entry is OPEN_UPSTREAM[fix]'s patch file, as the unknown-release warning and reasons
    name them ('0.5.22 … 0.5.23')."""
    from sglang_specv2_fixes import survey

    return survey.line_releases([line for line, L in releases.LINES.items()
                                 if L.fixes[fix] == Patched(OPEN_UPSTREAM[fix])])


def release_root(version):
    """The folder holding release ``version``'s pristine ``sglang/`` here (its CPU overlay or unpacked wheel), or
    None."""
    for d in (os.path.join(sys.prefix, "releases", version), os.path.join(sys.prefix, "src", version)):
        if os.path.isfile(os.path.join(d, "sglang", "__init__.py")):
            return d
    return None


def table_modules():
    """Every module the release table names: patch files' targets and notes' checked functions."""
    mods = set()
    for line in releases.LINES.values():
        for fix, e in line.fixes.items():
            if isinstance(e, Patched):
                mods |= {t.module for t in patchfile.load(fix, e.name).targets}
            elif e.check:
                mods.add(e.check[0])
    return sorted(mods)


def synthetic_release(dest, version, base="0.5.23", edit=None):
    """A copy of ``base``'s table modules under ``dest`` with only its version changed to ``version`` (sglang/version.py
    and the dist-info METADATA). ``edit``: {module: (old, new)} text replacements in those modules (exactly one
    occurrence each). Returns ``dest``."""
    src = release_root(base)
    assert src, f"no source tree of sglang {base} here (ci/setup_cpu_env.sh)"
    for module in table_modules():
        rel = module.replace(".", "/") + ".py"
        if os.path.isfile(os.path.join(src, rel)):
            os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
            shutil.copyfile(os.path.join(src, rel), os.path.join(dest, rel))
    for module, (old, new) in (edit or {}).items():
        path = os.path.join(dest, module.replace(".", "/") + ".py")
        text = open(path, encoding="utf-8").read()
        assert text.count(old) == 1, (module, old)
        open(path, "w", encoding="utf-8").write(text.replace(old, new))
    with open(os.path.join(dest, "sglang", "__init__.py"), "w") as f:
        f.write("")
    with open(os.path.join(dest, "sglang", "version.py"), "w") as f:
        f.write(f'__version__ = "{version}"\n')
    meta = os.path.join(src, f"sglang-{base}.dist-info", "METADATA")
    if os.path.isfile(meta):
        text = open(meta, encoding="utf-8").read().replace(f"Version: {base}\n", f"Version: {version}\n", 1)
        os.makedirs(os.path.join(dest, f"sglang-{version}.dist-info"))
        with open(os.path.join(dest, f"sglang-{version}.dist-info", "METADATA"), "w", encoding="utf-8") as f:
            f.write(text)
    return dest


def as_wheel(tree, path):
    """Zip ``tree`` (a folder holding sglang/ and a dist-info) into a wheel-shaped file at ``path``."""
    with zipfile.ZipFile(path, "w") as z:
        for folder, _, files in os.walk(tree):
            for name in files:
                full = os.path.join(folder, name)
                z.write(full, os.path.relpath(full, tree))
    return path


def eval_derive(draft_lines):
    """Run a survey draft ``_FIXES["V"] = _derive(...)`` against the release table: the entries it gives V."""
    ns = {"_FIXES": {}, "_derive": releases._derive, "patch": catalog.patch, "note": catalog.note,
          "UPSTREAM": catalog.UPSTREAM, "NOT_APPLICABLE": catalog.NOT_APPLICABLE, "OPEN": catalog.OPEN}
    exec("\n".join(draft_lines), ns)
    (entries,) = ns["_FIXES"].values()
    return entries


def eval_release(line):
    """The Release a survey draft's ``_r(...)`` line describes."""
    return eval(line.strip().rstrip(","), {"_r": releases._r})
