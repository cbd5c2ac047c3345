"""Which SGLang release is installed and where (its code line comes from releases.py).

Detection reads package metadata (``importlib.metadata``) and never imports ``sglang``: the CLI and the
plugin's planning step stay cheap and work on machines without a GPU. A bare source checkout on
PYTHONPATH without a dist-info falls back to ``sglang/version.py``/``_version.py`` read as text.
``plugin_skipped()`` says whether SGLang's ``load_plugins()`` would load this plugin at all.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
from typing import Mapping, Optional

ENTRY_POINT = "specv2_fixes"  # this plugin's name in the sglang.srt.plugins entry-point group (pyproject.toml)
PLUGINS_ENV = "SGLANG_PLUGINS"  # SGLang's allow-list of general plugins


def version() -> Optional[str]:
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


def plugin_skipped(env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """Why SGLang's ``load_plugins()`` would skip this plugin (None: it would load it), read from ``env``
    (default: this process's environment).

    The rule of ``sglang.srt.plugins.load_plugins_by_group``, the same in every release of the table (0.5.11 …
    0.5.23): a non-empty ``SGLANG_PLUGINS`` (taken as is, ``EnvStr``) is a comma list of entry-point names,
    each stripped, empty items dropped; a plugin whose name is not in it is skipped (names compare exactly, case
    included). Unset or empty: every installed plugin is loaded. (``SGLANG_PLATFORM`` only skips distributions
    that ship a platform plugin; this one ships none.)
    """
    raw = (os.environ if env is None else env).get(PLUGINS_ENV) or ""
    if not raw:
        return None
    allowed = {x.strip() for x in raw.split(",") if x.strip()}
    if ENTRY_POINT in allowed:
        return None
    return f"${PLUGINS_ENV}={raw!r} " + (f"does not name {ENTRY_POINT}" if allowed else "names no plugin")
