"""Plan, register and verify fixes; the per-process report.

    plan()      -> Report   decide every fix's state for the installed release (reads files, imports
                            nothing from sglang): upstream / not-applicable / disabled / refused / ready
    register(r)             compile the READY bodies and hand them to SGLang's HookRegistry (REPLACE)
    verify(r)               after HookRegistry.apply_hooks(): check each target really is our body now;
                            READY -> applied, or failed with the reason (HookRegistry only logs failures)

All three are idempotent per process; plugin.py calls them from SGLang's plugin entry point.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pkgutil
from typing import Dict, List, Optional

from . import __version__, catalog, release
from .bodies import MARK, body_fingerprint, build
from .catalog import Fix, Patch, ReleaseNote
from .fingerprint import fingerprint_in_file
from .fixes import ALL_FIXES
from .selection import Selection

logger = logging.getLogger("sglang_specv2_fixes")


@dataclasses.dataclass
class TargetCheck:
    target: str
    expected: str  # fingerprint the body was written against
    installed: Optional[str]  # fingerprint of the installed source (None: not found)
    ok: bool


@dataclasses.dataclass
class FixStatus:
    name: str
    pr: str
    title: str
    state: str
    reason: str
    targets: List[TargetCheck] = dataclasses.field(default_factory=list)
    patches: List[Patch] = dataclasses.field(default_factory=list, repr=False)

    def as_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d.pop("patches")
        return d


@dataclasses.dataclass
class Report:
    plugin_version: str
    sglang_version: Optional[str]
    code_line: Optional[str]
    selection: str
    fixes: List[FixStatus]
    warnings: List[str] = dataclasses.field(default_factory=list)

    @property
    def supported(self) -> bool:
        return self.code_line is not None

    def get(self, name: str) -> FixStatus:
        for f in self.fixes:
            if f.name == name:
                return f
        raise KeyError(name)

    def as_dict(self) -> dict:
        return {
            "plugin_version": self.plugin_version,
            "sglang_version": self.sglang_version,
            "code_line": self.code_line,
            "supported": self.supported,
            "selection": self.selection,
            "fixes": {f.name: f.as_dict() for f in self.fixes},
            "warnings": list(self.warnings),
        }

    def summary(self) -> str:
        """One line: release and what each fix does in this process."""
        if not self.supported:
            return (
                f"sglang-specv2-fixes {self.plugin_version}: sglang {self.sglang_version} is not a supported "
                f"release ({', '.join(release.SUPPORTED_RELEASES)}); nothing patched"
            )
        groups: Dict[str, List[str]] = {}
        for f in self.fixes:
            groups.setdefault(f.state, []).append(f"{f.name}({f.pr})")
        parts = "; ".join(f"{state}: {', '.join(names)}" for state, names in groups.items())
        return (
            f"sglang-specv2-fixes {self.plugin_version} on sglang {self.sglang_version} "
            f"[selection={self.selection}, pid={os.getpid()}]: {parts}"
        )


def _installed_fp(module: str, qualname: str) -> Optional[str]:
    path = release.module_file(module)
    return fingerprint_in_file(path, qualname) if path else None


def _plan_fix(fix: Fix, line: str, selection: Selection) -> FixStatus:
    st = FixStatus(fix.name, fix.pr, fix.title, catalog.NOT_APPLICABLE, "", [])
    entry = fix.for_line(line)
    if entry is None:
        st.reason = f"no entry for code line {line}"
        return st
    if isinstance(entry, ReleaseNote):
        st.state, st.reason = entry.state, entry.reason
        if entry.check:
            module, qualname, expected = entry.check
            installed = _installed_fp(module, qualname)
            ok = installed == expected
            st.targets.append(TargetCheck(f"{module}.{qualname}", expected, installed, ok))
            st.reason += " (source verified)" if ok else " (installed source differs from the release: not verified)"
        return st
    patches: List[Patch] = list(entry)
    st.patches = patches
    for p in patches:
        installed = _installed_fp(p.module, p.qualname)
        st.targets.append(TargetCheck(p.target, p.fingerprint, installed, installed == p.fingerprint))
    if not selection.wants(fix.name):
        st.state, st.reason = catalog.DISABLED, f"not selected ({selection.raw})"
        return st
    if all(t.ok for t in st.targets):
        st.state, st.reason = catalog.READY, "fingerprints match"
        return st
    present = [t.installed is not None and t.installed == body_fingerprint(p) for t, p in zip(st.targets, patches)]
    if all(present):
        st.state, st.reason = catalog.PRESENT, "installed source already carries this fix (patches/ applied)"
        return st
    bad = [t for t, pres in zip(st.targets, present) if not t.ok and not pres]
    st.state = catalog.REFUSED
    st.reason = "; ".join(
        f"{t.target} not found in the installed sglang" if t.installed is None
        else f"{t.target}: installed source fingerprint {t.installed} != {t.expected} expected for {line}"
        for t in bad
    ) + " - refusing to patch code this plugin was not written against"
    return st


def plan(selection: Selection, version: Optional[str] = None, fixes=None) -> Report:
    fixes = ALL_FIXES if fixes is None else fixes
    version = release.installed_version() if version is None else version
    line = release.code_line(version)
    report = Report(__version__, version, line, selection.raw, [])
    if line is None:
        for fix in fixes:
            report.fixes.append(FixStatus(fix.name, fix.pr, fix.title, catalog.UNSUPPORTED, f"sglang {version} is not supported"))
        return report
    for fix in fixes:
        st = _plan_fix(fix, line, selection)
        report.fixes.append(st)
        if st.state == catalog.REFUSED:
            report.warnings.append(f"{fix.name} ({fix.pr}) refused: {st.reason}")
    return report


# ---------------------------------------------------------------- registration and verification
_built: Dict[str, Dict[str, object]] = {}  # fix name -> target -> our compiled body (this process)


def register(report: Report) -> None:
    """Compile the READY bodies and register them as REPLACE hooks (once per process)."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    for st in report.fixes:
        if st.state != catalog.READY or st.name in _built:
            continue
        try:
            built = {p.target: build(p, st.name) for p in st.patches}
        except Exception as e:  # a body that does not compile against this release: refuse the fix
            st.state, st.reason = catalog.FAILED, f"body could not be built: {type(e).__name__}: {e}"
            report.warnings.append(f"{st.name} ({st.pr}) failed: {st.reason}")
            continue
        _built[st.name] = built
        for target, fn in built.items():
            HookRegistry.register(target, fn, HookType.REPLACE)


def _chain(obj):
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


def _is_ours(obj, ours) -> bool:
    """True if ``obj`` is ``ours`` or a HookRegistry wrapper chain that calls it."""
    return any(f is ours for f in _chain(obj))


def resolve_raw(target: str):
    owner_path, attr = target.rsplit(".", 1)
    owner = pkgutil.resolve_name(owner_path)
    if isinstance(owner, type) and attr in owner.__dict__:
        return owner.__dict__[attr]
    return getattr(owner, attr)


def verify(report: Report) -> None:
    """Turn READY into APPLIED (or FAILED) by looking at what the targets are now."""
    for st in report.fixes:
        if st.state not in (catalog.READY, catalog.APPLIED):
            continue
        built = _built.get(st.name)
        if not built:
            st.state, st.reason = catalog.FAILED, "never registered in this process"
            continue
        missing = []
        for target, fn in built.items():
            try:
                ok = _is_ours(resolve_raw(target), fn)
            except Exception as e:
                ok = False
                target = f"{target} ({type(e).__name__}: {e})"
            if not ok:
                missing.append(target)
        if missing:
            st.state = catalog.FAILED
            st.reason = "HookRegistry did not install the body on: " + ", ".join(missing) + " (see 'Failed to apply hooks' in the log)"
        else:
            st.state, st.reason = catalog.APPLIED, "fingerprints match; body installed"


def is_patched(target: str) -> bool:
    """True if ``target`` currently runs one of this plugin's bodies."""
    try:
        obj = resolve_raw(target)
    except Exception:
        return False
    return any(getattr(f, MARK, None) for f in _chain(obj))
