"""Plan, register and verify fixes; the per-process report and state.

    plan()      -> Report   decide every fix's state for the imported release (reads files, imports
                            nothing from sglang): upstream / open / not-applicable / disabled / refused /
                            present / ready, or unverified (a note whose check fails); damaged plugin data
                            (a missing or unreadable patch file) refuses the fixes it touches, with the cause
    register(r)             apply each READY fix's patch file to the installed source, compile the patched
                            functions and hand them to SGLang's HookRegistry (REPLACE); an ``on_import`` fix
                            whose modules are not imported yet is built, applied and verified when they are
                            (with the fixes whose files compose with its: when all of theirs are);
                            two fixes on one function only where the later's file composes with the earlier's
                            (``compose:``, patchfile.build_stack): built and hooked once, else the later is refused
    verify(r)               after HookRegistry.apply_hooks(): check each target really runs our function
                            now; READY -> applied, or failed with the reason (HookRegistry only logs failures)

All three are idempotent per process; ``STATE`` holds what this process did (``STATE.reset()`` for tests,
as SGLang's ``HookRegistry.reset()``). plugin.py calls them from SGLang's plugin entry point. The report's types are
report.py's, what runs in this process (``is_patched``) is runtime.py's: the fixes read those, never this module.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import os
import sys
from typing import Callable, Dict, List, Optional

from . import __version__, catalog, installed, patchfile, releases
from .catalog import Fix, Note, Patched
from .fingerprint import installed_fingerprint
from .fixes import ALL_FIXES
from .report import FixStatus, Report, TargetCheck  # the report (its own module: survey fills one too)
from .runtime import chain, is_patched, resolve_raw, unsupported  # what runs in this process (the fixes read it too)
from .selection import Selection, opt_in_reason, opted_in, unknown_release_mode, unknown_variables

logger = logging.getLogger("sglang_specv2_fixes")


# ------------------------------------------------------------------------------------------ planning
_installed_fp = installed_fingerprint  # one name here, so that a test can stand in for the installed source


def _plan_note(st: FixStatus, entry: Note, line: str = "") -> FixStatus:
    """A note's state where its check holds; ``unverified`` where the installed source is not the code the note
    describes (never taken on trust: the release may not be the one its version says)."""
    st.state, st.reason = entry.state, entry.reason
    if entry.check:
        module, qualname, expected = entry.check
        installed = _installed_fp(module, qualname)
        ok = installed == expected
        st.targets.append(TargetCheck(f"{module}.{qualname}", expected, installed, ok))
        if ok:
            st.reason += " (source verified)"
        else:
            st.state = catalog.UNVERIFIED
            st.reason = (f"the release table says {entry.state} on {line or 'this release'}, but "
                         f"{module}.{qualname} " + ("is not in the installed sglang" if installed is None else
                                                    f"has fingerprint {installed}, not {expected}") +
                         f": not verified, nothing patched ({entry.reason})")
    return st


def _damaged(e: BaseException, where: str) -> str:
    """One line naming a failure inside the plugin (its data or its code), for a fix's reason and ``errors``."""
    if isinstance(e, FileNotFoundError):
        return f"damaged install: {e.filename or where} is missing (reinstall {installed.DIST})"
    if isinstance(e, OSError):
        return f"damaged install: {e.filename or where} is unreadable ({e.strerror or e}; reinstall {installed.DIST})"
    return f"failure inside the plugin reading {where}: {type(e).__name__}: {e} (reinstall {installed.DIST} or report it)"


def _plan_patch(st: FixStatus, entry: Patched, selection: Selection, line: str, composed=None) -> FixStatus:
    """``composed``: (fix, target) -> fingerprints of that target with this fix's and another's patch applied
    (``compose:`` lines), which also count as carrying this fix."""
    st.patch = f"patches/{st.name}/{entry.name}.patch"
    pf = patchfile.load(st.name, entry.name)
    for t in pf.targets:
        installed = _installed_fp(t.module, t.qualname)
        st.targets.append(TargetCheck(t.dotted, t.before, installed, installed == t.before))

    def carried(c, t):
        return c.installed == t.after or c.installed in (composed or {}).get((st.name, t.dotted), ())

    if not selection.wants(st.name):
        st.state, st.reason = catalog.DISABLED, f"not selected (selection: {selection.canonical})"
    elif all(c.ok for c in st.targets):
        st.state, st.reason = catalog.READY, f"fingerprints match {st.patch}"
    elif all(carried(c, t) for c, t in zip(st.targets, pf.targets)):
        st.state, st.reason = catalog.PRESENT, f"the installed source already carries {st.patch}"
    else:
        bad = [c for c, t in zip(st.targets, pf.targets) if not c.ok and not carried(c, t)]
        st.state = catalog.REFUSED
        if not bad:  # every target is either upstream or already patched, but not all alike
            done = [c.target for c, t in zip(st.targets, pf.targets) if carried(c, t)]
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


def check_requires(fixes) -> None:
    """Every ``requires`` of ``fixes`` names another fix of the catalogue (a fix's run-time rule tests that fix's
    functions with runtime.in_place); raises ValueError naming the fix, the unknown name and the known ones."""
    known = {f.name for f in ALL_FIXES} | {f.name for f in fixes}
    for fix in fixes:
        bad = [r for r in fix.requires if r not in known or r == fix.name]
        if bad:
            raise ValueError(f"{fix.name} requires {', '.join(bad)}: not another fix of the catalogue "
                             f"(known: {', '.join(sorted(known))})")


def plan(selection: Selection, version: Optional[str] = None, fixes=None) -> Report:
    """Every fix's state for sglang ``version`` (default: the imported one, with the environment's warnings: an
    imported sglang its dist-info disagrees with, a plugin copy that is not the installed one, unknown variables)."""
    fixes = ALL_FIXES if fixes is None else fixes
    check_requires(fixes)
    env = []
    if version is None:
        version = installed.version()
        env = [w for w in (installed.mismatch(), installed.plugin_mismatch()) if w] + unknown_variables(ALL_FIXES)
    line = releases.code_line(version)
    report = Report(__version__, version, line, selection.canonical, [], warnings=env)
    if line is None and version is not None and unknown_release_mode() == "fingerprint":
        from .survey import plan_unknown  # only here: an unknown release, opted in

        return _compose(plan_unknown(report, selection, fixes))
    composed = _composed_fingerprints(line) if line else {}
    for fix in fixes:
        st = FixStatus(fix.name, list(fix.upstream), fix.title, catalog.UNSUPPORTED, "", related=list(fix.related))
        if line is None:
            st.reason = unsupported(version)
        else:
            entry = releases.entry(fix.name, line)
            if isinstance(entry, Note):
                _plan_note(st, entry, line)
                if st.state == catalog.UNVERIFIED:
                    report.warnings.append(f"{fix.name} unverified: {st.reason}")
            elif not opted_in(fix):
                st.patch = f"patches/{fix.name}/{entry.name}.patch"
                st.state, st.reason = catalog.DISABLED, opt_in_reason(fix, st.patch)
            else:
                try:
                    _plan_patch(st, entry, selection, line, composed)
                except Exception as e:  # damaged plugin data (a missing or unreadable patch file): this fix only
                    st.reason, st.targets = _damaged(e, st.patch or fix.name), []
                    if selection.wants(fix.name):
                        st.state = catalog.REFUSED
                        report.errors.append(f"{fix.name} refused: {st.reason}")
                    else:  # not selected: nothing of it is touched
                        st.state = catalog.DISABLED
                        st.reason = f"not selected (selection: {selection.canonical}); {st.reason}"
                else:
                    if st.state == catalog.REFUSED:
                        report.warnings.append(f"{fix.name} refused: {st.reason}")
        report.fixes.append(st)
    return _compose(report)


def _composed_fingerprints(line: str) -> Dict[tuple, set]:
    """(fix, target) -> the ``after=`` of every ``compose:`` line of this line's patch files that involves the fix (as
    the file's own fix or as the one applied before it): that target with both fixes' patches applied."""
    out: Dict[tuple, set] = {}
    for fix, entry in releases.LINES[line].fixes.items():
        if isinstance(entry, Patched):
            try:
                pf = patchfile.load(fix, entry.name)
            except Exception:  # damaged plugin data: the fix itself is refused when it is planned (plan)
                continue
            for c in pf.composes:
                for name in (fix, c.fix):
                    out.setdefault((name, c.dotted), set()).add(c.after)
    return out


def _compose(report: Report) -> Report:
    """Two READY fixes that replace one function: the later one (catalogue order) is kept READY only where its patch
    file has a ``compose:`` line for the earlier one that matches that one's file (register then builds the function
    from both, ``patchfile.build_stack``); otherwise it is refused, naming both, and the earlier one applies alone."""
    owner: Dict[str, tuple] = {}  # target -> (the last READY fix that replaces it, the fingerprint it leaves)
    for st in report.fixes:
        if st.state != catalog.READY:
            continue
        pf = _patch_file(st)
        clash = []
        for t in pf.targets:
            if t.dotted not in owner:
                continue
            first, after = owner[t.dotted]
            c = pf.composed(first.name, t.dotted)
            if c is None:
                clash.append(f"{t.dotted} is also replaced by {first.name} ({first.patch}), and {st.patch} has no "
                             f"compose line for it")
            elif c.before != after:
                clash.append(f"{st.patch} composes with {first.name} on {t.dotted} after fingerprint {c.before}, "
                             f"but {first.patch} now gives {after}")
        if clash:
            st.state = catalog.REFUSED
            st.reason = "; ".join(clash) + " - refusing to let one fix replace the other's function"
            report.warnings.append(f"{st.name} refused: {st.reason}")
            continue
        for t in pf.targets:
            if t.dotted in owner:
                st.reason += f"; composed with {owner[t.dotted][0].name} on {t.qualname} (applied after it)"
                owner[t.dotted] = (st, pf.composed(owner[t.dotted][0].name, t.dotted).after)
            else:
                owner[t.dotted] = (st, t.after)
    return report


NOT_IN_EFFECT = (catalog.REFUSED, catalog.FAILED, catalog.UNVERIFIED)  # states status exits 1 for


def strict_failures(report: Report, selection: Selection) -> List[str]:
    """With ``SGLANG_SPECV2_FIXES_STRICT=1``: why startup must stop (empty: it need not, or strict mode is off).
    Every selected fix that cannot be applied (refused, failed, unverified) and, for any selection but off, a release
    the plugin cannot plan (unknown, or no sglang)."""
    from .selection import ENV_STRICT, strict

    if not strict() or selection.mode == "off":
        return []
    if not report.supported:
        return [unsupported(report.sglang_version)]
    return [f"{f.name} {f.state}" for f in report.fixes if f.state in NOT_IN_EFFECT and selection.wants(f.name)]


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
    (:class:`_OnImport`), together with the fixes whose files compose with its; until then it stays READY."""
    root = os.path.dirname(installed.sglang_root())
    on_import = {f.name for f in ALL_FIXES if f.on_import}
    todo = [(st, _patch_file(st)) for st in report.fixes
            if st.state == catalog.READY and st.name not in STATE.built and not _waiting(st.name)]
    # fixes whose files compose on a shared function are built together, once (_stacks): a group with a fix built at
    # load is built now (building imports the modules anyway), a group of on_import fixes waits for every module of
    # every fix in it. Built apart, the later fix's function would go to a target HookRegistry has patched already,
    # which apply_hooks skips: the function would keep the earlier fix's change only and the later fix would fail
    # (fa3- and flashinfer-draft-extend-graph on 0.5.13.x: init_cuda_graphs, their modules eagle_worker_v2 and
    # flashinfer_backend; there the first imports the second, but another release's imports may not)
    now = []
    for stack in _stacks(todo):
        waiting = sorted({t.module for _, pf in stack for t in pf.targets} - set(sys.modules)) \
            if all(st.name in on_import for st, _ in stack) else []
        if not waiting:
            now.append(stack)
            continue
        for st, _ in stack:
            for module in waiting:
                STATE.on_import.setdefault(module, []).append(st.name)
            st.reason = f"fingerprints match {st.patch}; applied when SGLang imports {', '.join(waiting)}"
    for stack in now:
        _build_and_register(report, stack, root)
    # building those may have imported a module an on_import fix waits for (0.5.11's scheduler imports model_runner):
    # its import is over, so the finder would never see it; register such a fix now, with the others
    late = [m for m in STATE.on_import if m in sys.modules]
    names = {n for m in late for n in STATE.on_import.pop(m)}
    again = [(st, _patch_file(st)) for st in report.fixes
             if st.name in names and not _waiting(st.name) and st.state == catalog.READY]
    for stack in _stacks(again):
        _build_and_register(report, stack, root)
    if STATE.on_import and not any(isinstance(f, _OnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _OnImport())


def _waiting(name: str) -> bool:
    """``name`` is an on_import fix still waiting for one of its modules."""
    return any(name in names for names in STATE.on_import.values())


def _patch_file(st: FixStatus):
    """The patch file plan() checked for ``st`` (``st.patch``)."""
    return patchfile.load(st.name, os.path.basename(st.patch)[: -len(".patch")])


def _stacks(ready: list) -> List[list]:
    """``ready``: (status, patch file) of READY fixes in catalogue order -> groups that replace common functions (one
    fix each, but for fixes whose files compose, see _compose), each in catalogue order."""
    groups: List[tuple] = []  # (targets, [(st, pf)])
    for item in ready:
        names = {t.dotted for t in item[1].targets}
        hit = [g for g in groups if g[0] & names]
        merged = (names.union(*(g[0] for g in hit)), [x for g in hit for x in g[1]] + [item])
        groups = [g for g in groups if all(g is not h for h in hit)] + [merged]
    order = {id(item[0]): i for i, item in enumerate(ready)}
    return [sorted(g[1], key=lambda x: order[id(x[0])]) for g in groups]


def _build_and_register(report: Report, stack: list, root: str) -> bool:
    """Build one fix's patched functions, or those of fixes whose files compose on shared functions (``stack``: (status,
    patch file) in order; a shared function is built from every file once and is each fix's), and register them."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    try:
        built = patchfile.build_stack([pf for _, pf in stack], root, deferred=True)
    except Exception as e:  # a patch that does not apply/compile here: that fix is not applied
        if len(stack) > 1:  # the composition failed: the first fix alone, the later ones are not applied
            for st, _ in stack[1:]:
                st.state = catalog.FAILED
                st.reason = f"{st.patch} could not be composed with {stack[0][0].name}: {type(e).__name__}: {e}"
                report.warnings.append(f"{st.name} failed: {st.reason}")
            return _build_and_register(report, stack[:1], root)
        st = stack[0][0]
        st.state, st.reason = catalog.FAILED, f"{st.patch} could not be built: {type(e).__name__}: {e}"
        report.warnings.append(f"{st.name} failed: {st.reason}")
        return False
    for st, pf in stack:
        STATE.built[st.name] = {t.dotted: built[t.dotted] for t in pf.targets}
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
        stacks = _stacks([(st, _patch_file(st)) for st in ready])
        built = [_build_and_register(report, stack, root) for stack in stacks]  # every one, then apply
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
    from .fingerprint import flush

    flush()  # the spans found building them, kept now: a scheduler process may end without running atexit


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
                ok = any(f is fn for f in chain(resolve_raw(target)))
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


def build_fix(name: str, version: Optional[str] = None) -> Dict[str, Callable]:
    """Compile ``name``'s patched functions for the installed release without registering them (tests and
    benchmarks call the real patched code this way); fingerprints are checked as in plan()."""
    return build_fixes([name], version)


def build_fixes(names, version: Optional[str] = None) -> Dict[str, Callable]:
    """As build_fix for several fixes at once, as register builds them: in catalogue order, a function two of them
    replace built from both files (``compose:``), target -> function."""
    version = installed.version() if version is None else version
    line = releases.code_line(version)
    pfs = []
    for fix in ALL_FIXES:
        if fix.name not in names:
            continue
        entry = releases.entry(fix.name, line) if line else None
        if not isinstance(entry, Patched):
            raise LookupError(f"{fix.name} is not patched on sglang {version}")
        pf = patchfile.load(fix.name, entry.name)
        for t in pf.targets:
            if _installed_fp(t.module, t.qualname) != t.before:
                raise patchfile.PatchError(f"{t.dotted}: installed source is not what {pf.path} was written against")
        pfs.append(pf)
    if len(pfs) != len(set(names)):
        raise LookupError(f"unknown fix among {sorted(names)}")
    return patchfile.build_stack(pfs, os.path.dirname(installed.sglang_root()))


def fix_by_alias(name: str) -> Optional[Fix]:
    low = name.strip().lower()
    return next((f for f in ALL_FIXES if low in (a.lower() for a in f.aliases)), None)
