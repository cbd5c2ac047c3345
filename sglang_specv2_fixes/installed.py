"""Which SGLang release is imported and where (its code line comes from releases.py), and which copy of this plugin.

The release is read from the ``sglang`` package that ``import sglang`` would import (found with ``find_spec``, never
imported: the CLI and the plugin's planning step stay cheap and work without a GPU), as SGLang's own
``sglang/version.py`` does: ``sglang/_version.py``'s ``__version__`` read as text, else the dist-info's version.
``mismatch()`` cross-checks it with the ``sglang`` dist-info that ``importlib.metadata`` finds: a source checkout or
an older tree on PYTHONPATH shadowing an installed wheel is named, not trusted. ``plugin_path()`` / ``plugin_mismatch()``
do the same for this plugin (a clone's directory imports the clone, not the installed wheel), and ``plugin_skipped()``
says whether SGLang's ``load_plugins()`` would load this plugin at all.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
from typing import Mapping, Optional

ENTRY_POINT = "specv2_fixes"  # this plugin's name in the sglang.srt.plugins entry-point group (pyproject.toml)
PLUGINS_ENV = "SGLANG_PLUGINS"  # SGLang's allow-list of general plugins


DIST = "sglang-specv2-fixes"  # this plugin's distribution name (pyproject.toml)
_VERSION = re.compile(r"__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]")


def version() -> Optional[str]:
    """The version of the sglang that is imported, or None when sglang is not importable: its package's
    ``_version.py`` (or a literal ``__version__`` in ``version.py``), else the dist-info's version (what
    ``sglang.__version__`` says)."""
    root = sglang_root()
    if root is None:
        return None
    own = _tree_version(root)
    return own if own is not None else _dist_version()


def _tree_version(root: str) -> Optional[str]:
    for name in ("_version.py", "version.py"):
        path = os.path.join(root, name)
        try:
            with open(path, encoding="utf-8") as f:
                m = _VERSION.search(f.read())
        except OSError:
            continue
        if m:
            return m.group(1)
    return None


_META_VERSION = re.compile(r"^Version:[ \t]*(\S+)[ \t]*$", re.M)


def _dist_version() -> Optional[str]:
    """The version the sglang dist-info states: the ``Version:`` header of its METADATA, read from the header block
    only (``Distribution.version`` parses the whole file, README included: ~2 ms at every start), else what
    ``Distribution.version`` says."""
    try:
        dist = importlib.metadata.distribution("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    m = _META_VERSION.search(text.split("\n\n", 1)[0])
    return m.group(1) if m else dist.version


def _dist_package(dist_name: str, package: str) -> Optional[str]:
    """The package folder that the dist-info of ``dist_name`` describes (None: no dist-info, or no such folder beside
    it). An editable install names its source folder in direct_url.json. Read without the RECORD (sglang's lists
    thousands of files): a start-up cost the plugin must not pay."""
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError:
        return None
    try:
        import json

        url = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        url = {}
    if url.get("dir_info", {}).get("editable") and url.get("url", "").startswith("file://"):
        where = os.path.join(url["url"][len("file://"):], package)
    else:
        where = str(dist.locate_file(package))
    return where if os.path.isfile(os.path.join(where, "__init__.py")) else None


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def mismatch() -> Optional[str]:
    """One warning when the imported sglang is not what its dist-info says (None: they agree, or there is no
    dist-info to compare with)."""
    root = sglang_root()
    dist = _dist_version()
    if root is None or dist is None:
        return None
    own = _tree_version(root)
    where = _dist_package("sglang", "sglang")
    other_copy = where is not None and not _same(where, root)
    if not other_copy and (own is None or own == dist):
        return None
    said = f"the sglang dist-info says {dist}" + (f" for {where}" if other_copy else "")
    return (f"the imported sglang ({root}) is {own or 'of unknown version'} by its own version file, but {said}: "
            f"this plugin plans for the imported one ({own or dist}); fix the environment (an editable or source "
            f"checkout on PYTHONPATH shadows the installed sglang)")


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


def plugin_path() -> str:
    """The folder of this plugin's package that is running."""
    return os.path.dirname(os.path.abspath(__file__))


def plugin_mismatch() -> Optional[str]:
    """A warning when the running plugin is not the installed distribution's copy (a clone's directory on sys.path or
    the working directory imports the clone), None when it is or no distribution is installed."""
    where = _dist_package(DIST, "sglang_specv2_fixes")
    if where is None or _same(where, plugin_path()):
        return None
    return (f"this plugin runs from {plugin_path()}, not from the installed {DIST} ({where}): a clone's directory "
            f"(or PYTHONPATH) shadows the installed copy")


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
