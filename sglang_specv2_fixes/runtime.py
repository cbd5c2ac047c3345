"""What this process runs: the plugin's patched functions in place, and the one line for a release it cannot plan.

    is_patched(target)            True where ``target`` (a dotted path) runs one of this plugin's functions now
    in_place(fix, targets)        a fix's run-time rule asks whether another fix's functions (``targets``) run here;
                                  ``fix`` must be in the asking fix's ``requires`` (catalog.Fix; the planner and a
                                  CPU test check the declarations)
    unsupported(version)          why nothing is planned for a release

core (planning, registration, verification) and the fixes' run-time rules both read it; it imports neither, so
neither imports the other for it.
"""

from __future__ import annotations

import pkgutil
from typing import Iterable, Optional

from .patchfile import MARK


def unsupported(version: Optional[str]) -> str:
    """Why nothing is planned for sglang ``version`` (None: sglang is not importable)."""
    if version is None:
        return "sglang is not installed in this environment"
    return f"sglang {version} is not a known release"


def chain(obj):
    """Every callable a HookRegistry wrapper chain can call: each wrapper (``__wrapped__`` links,
    classmethod/staticmethod unwrapped) and the hooks held in its closure cells."""
    for _ in range(16):
        if obj is None:
            return
        obj = getattr(obj, "__func__", obj)
        yield obj
        for cell in getattr(obj, "__closure__", None) or ():
            try:
                yield cell.cell_contents
            except ValueError:  # empty cell
                pass
        obj = getattr(obj, "__wrapped__", None)


def resolve_raw(target: str):
    """The object at dotted path ``target`` as its owner holds it (a class's own ``__dict__`` entry: the
    classmethod / staticmethod itself). Imports the owner's module."""
    owner_path, attr = target.rsplit(".", 1)
    owner = pkgutil.resolve_name(owner_path)
    if isinstance(owner, type) and attr in owner.__dict__:
        return owner.__dict__[attr]
    return getattr(owner, attr)


def is_patched(target: str) -> bool:
    """True if ``target`` currently runs one of this plugin's functions."""
    try:
        obj = resolve_raw(target)
    except Exception:
        return False
    return any(getattr(f, MARK, None) for f in chain(obj))


def in_place(fix: str, targets: Iterable[str]) -> bool:
    """Fix ``fix``'s patched functions ``targets`` all run in this process. Called by a fix's run-time rule for a fix
    it declares in ``requires`` (or for its own functions, where another fix's patched code calls the rule)."""
    return all(is_patched(t) for t in targets)
