"""Which SGLang release is installed, and which code line of the catalogue it belongs to.

Detection reads package metadata (``importlib.metadata``) and never imports ``sglang``: the CLI and the
plugin's planning step stay cheap and work on machines without a GPU. A bare source checkout on
PYTHONPATH without a dist-info falls back to ``sglang/version.py``/``_version.py`` read as text.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
from typing import Optional

# Exact releases this plugin was written and fingerprinted for -> code line key used in the catalogue.
# Releases mapped to one line have byte-identical sources in every file the plugin touches
# (0.5.12 vs 0.5.12.post1: only _version.py and jit_kernel/deepseek_v4.py differ in the wheels).
SUPPORTED_RELEASES = {
    "0.5.11": "0.5.11",
    "0.5.12": "0.5.12",
    "0.5.12.post1": "0.5.12",
    # Report-only releases: the plugin patches nothing there; it verifies (by fingerprint) which fixes
    # the release carries upstream and which bugs are still open, and reports it.
    "0.5.13.post1": "0.5.13.post1",
    "0.5.14": "0.5.14",
    # 0.5.15 vs 0.5.15.post1: every function the catalogue checks is byte-identical (the post1 diff is
    # DSA top-k seeding for PD disaggregation; Scheduler.run_batch differs there, the probe only wraps it)
    "0.5.15": "0.5.15",
    "0.5.15.post1": "0.5.15",
    "0.5.16": "0.5.16",
    "0.5.17": "0.5.17",
}
CODE_LINES = ("0.5.11", "0.5.12", "0.5.13.post1", "0.5.14", "0.5.15", "0.5.16", "0.5.17")
# Code lines on which the plugin has no Patch at all (only ReleaseNotes): it reports, never patches.
REPORT_ONLY_LINES = ("0.5.13.post1", "0.5.14", "0.5.15", "0.5.16", "0.5.17")


def installed_version() -> Optional[str]:
    """Installed sglang version string, or None when sglang is not importable."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        pass
    root = sglang_root()
    if root is None:
        return None
    for name in ("_version.py", "version.py"):
        path = os.path.join(root, name)
        if os.path.exists(path):
            m = re.search(r"__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]", open(path).read())
            if m:
                return m.group(1)
    return None


def sglang_root() -> Optional[str]:
    """Directory of the installed ``sglang`` package, found without importing it."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def module_file(module: str, root: Optional[str] = None) -> Optional[str]:
    """Path of ``sglang.x.y`` inside the sglang package at ``root`` (default: the installed one),
    without importing anything."""
    root = root or sglang_root()
    if root is None or not module.startswith("sglang."):
        return None
    rel = module.split(".")[1:]
    for cand in (os.path.join(root, *rel) + ".py", os.path.join(root, *rel, "__init__.py")):
        if os.path.exists(cand):
            return cand
    return None


def code_line(version: Optional[str]) -> Optional[str]:
    return SUPPORTED_RELEASES.get(version or "")
