"""Plan, register and verify fixes; the per-process report and state.

    plan()      -> Report   decide every fix's state for the installed release (reads files, imports
                            nothing from sglang): upstream / open / not-applicable / disabled / refused /
                            present / ready
    register(r)             apply each READY fix's patch file to the installed source, compile the patched
                            functions and hand them to SGLang's HookRegistry (REPLACE); an ``on_import`` fix
                            whose modules are not imported yet is built, applied and verified when they are
    verify(r)               after HookRegistry.apply_hooks(): check each target really runs our function
                            now; READY -> applied, or failed with the reason (HookRegistry only logs failures)

All three are idempotent per process; ``STATE`` holds what this process did (``STATE.reset()`` for tests,
as SGLang's ``HookRegistry.reset()``). plugin.py calls them from SGLang's plugin entry point.
"""

from __future__ import annotations

import dataclasses
import importlib.abc
import importlib.machinery
import logging
import os
import pkgutil
import sys
from typing import Callable, Dict, List, Optional

from . import __version__, catalog, installed, patchfile, releases
from .catalog import Fix, Note, Patched
from .fingerprint import fingerprint_in_file
from .fixes import ALL_FIXES
from .selection import Selection, unknown_release_mode

logger = logging.getLogger("sglang_specv2_fixes")


@dataclasses.dataclass
class TargetCheck:
    target: str
    expected: str  # fingerprint the patch (or note) was written against
    installed: Optional[str]  # fingerprint of the installed source (None: not found)
    ok: bool


@dataclasses.dataclass
class FixStatus:
    name: str
    upstream: List[str]
    title: str
    state: str
    reason: str
    patch: Optional[str] = None  # patches/<fix>/<name>.patch used on this release
    targets: List[TargetCheck] = dataclasses.field(default_factory=list)
    related: List[str] = dataclasses.field(default_factory=list)  # upstream issues of a fix beyond upstream

    @property
    def ref(self) -> str:
        return self.upstream[0] if self.upstream else "beyond upstream"

    @property
    def refs(self) -> str:
        """As catalog.Fix.refs: the upstream PRs, or 'beyond upstream' with the related issues."""
        if self.upstream:
            return ", ".join(self.upstream)
        return f"beyond upstream ({', '.join(self.related)})" if self.related else "beyond upstream"

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Report:
    plugin_version: str
    sglang_version: Optional[str]
    code_line: Optional[str]
    selection: str
    fixes: List[FixStatus]
    warnings: List[str] = dataclasses.field(default_factory=list)
    # a release the table does not know, planned by fingerprint (SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE=fingerprint):
    # the closest known code line ("none" when nothing matched); None otherwise
    fingerprint_match: Optional[str] = None

    @property
    def supported(self) -> bool:
        return self.code_line is not None or self.fingerprint_match is not None

    @property
    def layout_line(self) -> Optional[str]:
        """The known code line whose layout this release has (its own, or the fingerprint match)."""
        return self.code_line or (self.fingerprint_match if self.fingerprint_match != "none" else None)

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
            "fingerprint_match": self.fingerprint_match,
            "selection": self.selection,
            "fixes": {f.name: f.as_dict() for f in self.fixes},
            "warnings": list(self.warnings),
        }

    def summary(self) -> str:
        """One line: release and what each fix does in this process."""
        if not self.supported:
            return (f"sglang-specv2-fixes {self.plugin_version}: {unsupported(self.sglang_version)} (known: "
                    f"{', '.join(releases.RELEASES)}); nothing patched")
        groups: Dict[str, List[str]] = {}
        for f in self.fixes:
            groups.setdefault(f.state, []).append(f"{f.name}({f.ref})" if f.upstream else f.name)
        parts = "; ".join(f"{state}: {', '.join(names)}" for state, names in groups.items())
        unknown = "" if self.code_line else f" (not in the table; by fingerprint, closest {self.fingerprint_match})"
        return (
            f"sglang-specv2-fixes {self.plugin_version} on sglang {self.sglang_version}{unknown} "
            f"[selection={self.selection}, pid={os.getpid()}]: {parts}"
        )


# ------------------------------------------------------------------------------------------ planning
def unsupported(version: Optional[str]) -> str:
    """Why nothing is planned for sglang ``version`` (None: sglang is not importable)."""
    if version is None:
        return "sglang is not installed in this environment"
    return f"sglang {version} is not a known release"


def _installed_fp(module: str, qualname: str) -> Optional[str]:
    path = installed.module_file(module)
    return fingerprint_in_file(path, qualname) if path else None


def _plan_note(st: FixStatus, entry: Note) -> FixStatus:
    st.state, st.reason = entry.state, entry.reason
    if entry.check:
        module, qualname, expected = entry.check
        installed = _installed_fp(module, qualname)
        ok = installed == expected
        st.targets.append(TargetCheck(f"{module}.{qualname}", expected, installed, ok))
        st.reason += " (source verified)" if ok else " (installed source differs from the release: not verified)"
    return st


def _plan_patch(st: FixStatus, entry: Patched, selection: Selection, line: str) -> FixStatus:
    st.patch = f"patches/{st.name}/{entry.name}.patch"
    pf = patchfile.load(st.name, entry.name)
    for t in pf.targets:
        installed = _installed_fp(t.module, t.qualname)
        st.targets.append(TargetCheck(t.dotted, t.before, installed, installed == t.before))
    if not selection.wants(st.name):
        st.state, st.reason = catalog.DISABLED, f"not selected (selection: {selection.canonical})"
    elif all(c.ok for c in st.targets):
        st.state, st.reason = catalog.READY, f"fingerprints match {st.patch}"
    elif all(c.installed == t.after for c, t in zip(st.targets, pf.targets)):
        st.state, st.reason = catalog.PRESENT, f"the installed source already carries {st.patch}"
    else:
        bad = [c for c, t in zip(st.targets, pf.targets) if not c.ok and c.installed != t.after]
        st.state = catalog.REFUSED
        if not bad:  # every target is either upstream or already patched, but not all alike
            done = [c.target for c, t in zip(st.targets, pf.targets) if c.installed == t.after]
            todo = [c.target for c in st.targets if c.ok]
            st.reason = (f"partly applied by hand: {', '.join(done)} already carry {st.patch}, {', '.join(todo)} "
                         f"do not - refusing to patch a mix; apply or revert the whole patch file")
            return st
        st.reason = "; ".join(
            f"{c.target} not found in the installed sglang" if c.installed is None
            else f"{c.target}: installed source has fingerprint {c.installed}, {st.patch} was written "
            f"against {c.expected} ({line})"
            for c in bad
        ) + " - refusing to patch code this plugin was not written against"
    return st


def plan(selection: Selection, version: Optional[str] = None, fixes=None) -> Report:
    fixes = ALL_FIXES if fixes is None else fixes
    version = installed.version() if version is None else version
    line = releases.code_line(version)
    report = Report(__version__, version, line, selection.canonical, [])
    if line is None and version is not None and unknown_release_mode() == "fingerprint":
        from .survey import plan_unknown  # only here: an unknown release, opted in

        return plan_unknown(report, selection, fixes)
    for fix in fixes:
        st = FixStatus(fix.name, list(fix.upstream), fix.title, catalog.UNSUPPORTED, "", related=list(fix.related))
        if line is None:
            st.reason = unsupported(version)
        else:
            entry = releases.entry(fix.name, line)
            if isinstance(entry, Note):
                _plan_note(st, entry)
            else:
                _plan_patch(st, entry, selection, line)
                if st.state == catalog.REFUSED:
                    report.warnings.append(f"{fix.name} refused: {st.reason}")
        report.fixes.append(st)
    return report


# ------------------------------------------------------------------------------- process-wide state
class State:
    """What the plugin did in this process: the report, the functions it built, the roles it logged."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.report: Optional[Report] = None
        self.selection: Optional[Selection] = None
        self.built: Dict[str, Dict[str, Callable]] = {}  # fix name -> target -> our compiled function
        self.announced: set = set()  # roles already logged in this process
        self.ours: set = set()  # id() of every function we registered (see plugin._fast_propagate)
        self.on_import: Dict[str, List[str]] = {}  # module not imported yet -> the on_import fixes waiting for it


STATE = State()


# ---------------------------------------------------------------------- registration and verification
def register(report: Report) -> None:
    """Compile each READY fix's patched functions and register them as REPLACE hooks (once per process). An
    ``on_import`` fix whose target modules are not imported yet is registered when SGLang imports them
    (:class:`_OnImport`); until then it stays READY."""
    root = os.path.dirname(installed.sglang_root())
    on_import = {f.name for f in ALL_FIXES if f.on_import}
    for st in report.fixes:
        if st.state != catalog.READY or st.name in STATE.built or _waiting(st.name):
            continue
        pf = _patch_file(st)
        waiting = sorted({t.module for t in pf.targets} - set(sys.modules)) if st.name in on_import else []
        if waiting:
            for module in waiting:
                STATE.on_import.setdefault(module, []).append(st.name)
            st.reason = f"fingerprints match {st.patch}; applied when SGLang imports {', '.join(waiting)}"
            continue
        _build_and_register(report, st, pf, root)
    if STATE.on_import and not any(isinstance(f, _OnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _OnImport())


def _waiting(name: str) -> bool:
    """``name`` is an on_import fix still waiting for one of its modules."""
    return any(name in names for names in STATE.on_import.values())


def _patch_file(st: FixStatus):
    """The patch file plan() checked for ``st`` (``st.patch``)."""
    return patchfile.load(st.name, os.path.basename(st.patch)[: -len(".patch")])


def _build_and_register(report: Report, st: FixStatus, pf, root: str) -> bool:
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    try:
        built = patchfile.build(pf, root)
    except Exception as e:  # a patch that does not apply/compile here: that fix is not applied
        st.state, st.reason = catalog.FAILED, f"{st.patch} could not be built: {type(e).__name__}: {e}"
        report.warnings.append(f"{st.name} failed: {st.reason}")
        return False
    STATE.built[st.name] = built
    for target, fn in built.items():
        STATE.ours.add(id(fn))
        HookRegistry.register(target, fn, HookType.REPLACE)
    return True


class _OnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a module an ``on_import`` fix waits for, it wraps the real loader so that, once the
    module has executed, the fix is built, handed to HookRegistry, applied and verified (and logged)."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in STATE.on_import:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            _imported(fullname)

        spec.loader.exec_module = exec_module
        return spec


def _imported(module: str) -> None:
    """``module`` has executed: register every fix that waited for it, then apply and verify them together (a fix
    verified before its neighbour is registered would find that one unregistered), and log each (errors are the
    fixes', never the import's)."""
    report = STATE.report
    names = [n for n in STATE.on_import.pop(module, ()) if not _waiting(n)]  # not: another module still to come
    ready = [st for st in (report.fixes if report else ()) if st.name in names and st.state == catalog.READY]
    if not ready:
        return
    try:
        from sglang.srt.plugins.hook_registry import HookRegistry

        root = os.path.dirname(installed.sglang_root())
        built = [_build_and_register(report, st, _patch_file(st), root) for st in ready]  # every one, then apply
        if any(built):
            HookRegistry.apply_hooks()
            verify(report)
    except Exception as e:  # pragma: no cover - reported, never raised into SGLang's import
        for st in ready:
            if st.state == catalog.READY:
                st.state = catalog.FAILED
                st.reason = f"{st.patch} could not be applied on import: {type(e).__name__}: {e}"
    for st in ready:
        (logger.info if st.state == catalog.APPLIED else logger.error)(
            "sglang-specv2-fixes: %s %s on import of %s: %s", st.name, st.state, module, st.reason)


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
        built = STATE.built.get(st.name)
        if not built and _waiting(st.name):
            continue  # an on_import fix whose module SGLang has not imported in this process: stays READY
        if not built:
            st.state, st.reason = catalog.FAILED, "never registered in this process"
            continue
        missing = []
        for target, fn in built.items():
            try:
                ok = any(f is fn for f in _chain(resolve_raw(target)))
            except Exception as e:
                ok = False
                target = f"{target} ({type(e).__name__}: {e})"
            if not ok:
                missing.append(target)
        if missing:
            st.state = catalog.FAILED
            st.reason = "HookRegistry did not install the patched function on: " + ", ".join(missing) + \
                " (see 'Failed to apply hooks' in the log)"
        else:
            st.state, st.reason = catalog.APPLIED, f"{st.patch} applied (fingerprints match)"


def is_patched(target: str) -> bool:
    """True if ``target`` currently runs one of this plugin's functions."""
    try:
        obj = resolve_raw(target)
    except Exception:
        return False
    return any(getattr(f, patchfile.MARK, None) for f in _chain(obj))


def build_fix(name: str, version: Optional[str] = None) -> Dict[str, Callable]:
    """Compile ``name``'s patched functions for the installed release without registering them (tests and
    benchmarks call the real patched code this way); fingerprints are checked as in plan()."""
    version = installed.version() if version is None else version
    line = releases.code_line(version)
    entry = releases.entry(name, line) if line else None
    if not isinstance(entry, Patched):
        raise LookupError(f"{name} is not patched on sglang {version}")
    pf = patchfile.load(name, entry.name)
    for t in pf.targets:
        if _installed_fp(t.module, t.qualname) != t.before:
            raise patchfile.PatchError(f"{t.dotted}: installed source is not what {pf.path} was written against")
    return patchfile.build(pf, os.path.dirname(installed.sglang_root()))


def fix_by_alias(name: str) -> Optional[Fix]:
    low = name.strip().lower()
    return next((f for f in ALL_FIXES if low in (a.lower() for a in f.aliases)), None)
