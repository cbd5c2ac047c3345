"""Read a release the table may not know, fix by fix: which known code each target equals.

    Tree.open(PATH)        an unpacked release (a folder holding ``sglang/``, or the ``sglang`` folder itself), a
                           wheel file (read as a zip, nothing installed) or, with no PATH, the installed sglang
    survey(tree)           per fix: each function the table knows for it (patch targets, notes' checked
                           functions), its fingerprint here and the known `before` / `after` / note it equals; per
                           code line: whether every entry verifies here
    render(result)         that as text, ending with a draft release-table entry for a maintainer to review
    plan_unknown(...)      the SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE=fingerprint plan on a release the table does not
                           know: a fix is patched only where every target equals a known `before` exactly

``sglang-specv2-fixes survey [PATH]`` prints ``render(survey(Tree.open(PATH)))``. The plugin imports this module
only on a release the table does not know, and only when the opt-in is set.
"""

from __future__ import annotations

import dataclasses
import email.parser
import glob
import os
import re
import textwrap
import zipfile
from typing import Callable, Dict, List, Optional, Tuple

from . import catalog, installed, patchfile, releases
from .catalog import Note, Patched
from .fingerprint import SourceNotFound, fingerprint_source, function_source

FpOf = Callable[[str, str], Optional[str]]  # (module, qualname) -> fingerprint in the release surveyed, or None

MODE_FINGERPRINT = "fingerprint"


# ------------------------------------------------------------------------------------------- sources
class Tree:
    """One release's sources: ``read(rel)`` gives the text of ``sglang/...`` files (None when absent)."""

    def __init__(self, label: str, version: Optional[str], requires: List[str]):
        self.label, self.version, self.requires = label, version, requires
        self._fp: Dict[Tuple[str, str], Optional[str]] = {}

    def read(self, rel: str) -> Optional[str]:
        raise NotImplementedError

    def fingerprint(self, module: str, qualname: str) -> Optional[str]:
        key = (module, qualname)
        if key not in self._fp:
            text = None
            for rel in _rels(module):
                text = self.read(rel)
                if text is not None:
                    break
            fp = None
            if text is not None:
                try:
                    fp = fingerprint_source(function_source(text, qualname)[0])
                except (SyntaxError, SourceNotFound, IndentationError):
                    fp = None
            self._fp[key] = fp
        return self._fp[key]

    @staticmethod
    def open(path: Optional[str] = None) -> "Tree":
        if path is None:
            root = installed.sglang_root()
            if root is None:
                raise FileNotFoundError("no sglang is installed in this environment; pass a release tree or a wheel")
            return DirTree(os.path.dirname(root), label=f"installed sglang ({root})", version=installed.version())
        if os.path.isfile(path):
            if not zipfile.is_zipfile(path):
                raise ValueError(f"{path}: not a wheel (zip) file")
            return WheelTree(path)
        if os.path.isfile(os.path.join(path, "sglang", "__init__.py")):
            return DirTree(path)
        if os.path.isfile(os.path.join(path, "__init__.py")) and os.path.basename(os.path.abspath(path)) == "sglang":
            return DirTree(os.path.dirname(os.path.abspath(path)))
        raise FileNotFoundError(f"{path}: neither a wheel nor a folder holding sglang/ (or the sglang package)")


def _rels(module: str) -> Tuple[str, str]:
    base = module.replace(".", "/")
    return base + ".py", base + "/__init__.py"


_VERSION = re.compile(r"__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]")


def _metadata(text: str) -> Tuple[Optional[str], List[str]]:
    """(Version, Requires-Dist lines) of a METADATA file (RFC 822 headers, as importlib.metadata reads them)."""
    msg = email.parser.HeaderParser().parsestr(text)
    return msg.get("Version"), list(msg.get_all("Requires-Dist") or [])


class DirTree(Tree):
    def __init__(self, root: str, label: Optional[str] = None, version: Optional[str] = None):
        self.root = root
        meta = sorted(glob.glob(os.path.join(root, "sglang-*.dist-info", "METADATA")))
        mv, requires = _metadata(open(meta[0], encoding="utf-8").read()) if meta else (None, [])
        if version is None:
            version = mv
        if version is None:
            for name in ("_version.py", "version.py"):
                text = self.read(f"sglang/{name}")
                m = _VERSION.search(text or "")
                if m:
                    version = m.group(1)
                    break
        super().__init__(label or root, version, requires)

    def read(self, rel: str) -> Optional[str]:
        path = os.path.join(self.root, rel)
        if not os.path.isfile(path):
            return None
        with open(path, encoding="utf-8") as f:
            return f.read()


class WheelTree(Tree):
    def __init__(self, path: str):
        self.zip = zipfile.ZipFile(path)
        self.names = set(self.zip.namelist())
        meta = sorted(n for n in self.names if re.fullmatch(r"sglang-[^/]+\.dist-info/METADATA", n))
        version, requires = _metadata(self.zip.read(meta[0]).decode()) if meta else (None, [])
        if version is None:
            m = re.match(r"sglang-([^-]+)-", os.path.basename(path))
            version = m.group(1) if m else None
        super().__init__(f"wheel {path}", version, requires)

    def read(self, rel: str) -> Optional[str]:
        return self.zip.read(rel).decode("utf-8") if rel in self.names else None


# ------------------------------------------------------------------------------------- known code
@dataclasses.dataclass(frozen=True)
class Known:
    """What the table and the patch files know of one function for one fix: ``kind`` is ``before`` / ``after``
    (of patch file ``label``) or ``note`` (the note's state), on code lines ``lines``."""

    kind: str
    fingerprint: str
    label: str  # patch name, or the note's state
    lines: Tuple[str, ...]

    def describe(self) -> str:
        where = line_releases(self.lines)
        if self.kind == "note":
            return f"{self.label} note of {where}"
        return f"{self.kind} of {self.label}.patch ({where})"


def line_releases(lines) -> str:
    """'0.5.22 … 0.5.23' style: the releases of code lines ``lines``."""
    vs = [v for v, r in releases.RELEASES.items() if r.line in lines]
    order = list(releases.RELEASES)
    runs: List[List[str]] = []
    for v in vs:
        if runs and order.index(v) == order.index(runs[-1][-1]) + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return ", ".join(r[0] if len(r) == 1 else f"{r[0]} … {r[-1]}" for r in runs)


def _lines_of(fix: str, want, table) -> Tuple[str, ...]:
    return tuple(line for line, L in table.items() if want(L.entry(fix)))


def known_functions(fix: str, table=None) -> Dict[Tuple[str, str], List[Known]]:
    """(module, qualname) -> every known version of it for ``fix`` in ``table`` (code line -> Line; default: the
    release table), newest code line first."""
    table = releases.LINES if table is None else table
    out: Dict[Tuple[str, str], List[Known]] = {}
    seen = set()
    for line in reversed(list(table)):
        e = table[line].entry(fix)
        if isinstance(e, Patched):
            if e.name in seen:
                continue
            seen.add(e.name)
            lines = _lines_of(fix, lambda x, n=e.name: isinstance(x, Patched) and x.name == n, table)
            for t in patchfile.load(fix, e.name).targets:
                out.setdefault((t.module, t.qualname), []).append(Known("before", t.before, e.name, lines))
                out.setdefault((t.module, t.qualname), []).append(Known("after", t.after, e.name, lines))
        elif e.check:
            module, qualname, fp = e.check
            key = (module, qualname, fp, e.state)
            if key in seen:
                continue
            seen.add(key)
            lines = _lines_of(fix, lambda x, k=key: isinstance(x, Note) and x.check is not None
                              and (*x.check, x.state) == k, table)
            out.setdefault((module, qualname), []).append(Known("note", fp, e.state, lines))
    return out


def entry_verifies(fix: str, entry, fp_of: FpOf) -> Optional[bool]:
    """Whether a table entry holds for the release behind ``fp_of``: a patch file's every `before` matches, a
    note's checked function matches; None for a note without a check (nothing to verify)."""
    if isinstance(entry, Patched):
        return all(fp_of(t.module, t.qualname) == t.before for t in patchfile.load(fix, entry.name).targets)
    if entry.check is None:
        return None
    module, qualname, fp = entry.check
    return fp_of(module, qualname) == fp


@dataclasses.dataclass
class FixMatch:
    """What the release behind ``fp_of`` is for one fix, by fingerprint alone."""

    fix: str
    kind: str  # "patch" (every target equals a known before) | "present" | "note" | "changed" | "missing"
    patch: Optional[str] = None  # the patch file's name (kind patch / present)
    note: Optional[Note] = None  # the known note that verifies (kind note)
    lines: Tuple[str, ...] = ()  # the code lines that entry comes from
    detail: str = ""  # for changed / missing: which functions and fingerprints


def match_fix(fix: str, fp_of: FpOf, table=None) -> FixMatch:
    """Newest code line first: a patch file whose targets all equal its `before` (kind patch), else one whose
    targets all equal its `after` (present), else a checked note whose function equals its fingerprint (note); else
    ``changed`` when a function the fix's patch files target is there with an unknown fingerprint, ``missing``
    when none of them is there."""
    table = releases.LINES if table is None else table
    patched = {}
    for line in reversed(list(table)):
        e = table[line].entry(fix)
        if isinstance(e, Patched) and e.name not in patched:
            patched[e.name] = patchfile.load(fix, e.name)
    for name, pf in patched.items():
        if all(fp_of(t.module, t.qualname) == t.before for t in pf.targets):
            lines = _lines_of(fix, lambda x: isinstance(x, Patched) and x.name == name, table)
            return FixMatch(fix, "patch", patch=name, lines=lines)
    for name, pf in patched.items():
        if all(fp_of(t.module, t.qualname) == t.after for t in pf.targets):
            lines = _lines_of(fix, lambda x: isinstance(x, Patched) and x.name == name, table)
            return FixMatch(fix, "present", patch=name, lines=lines)
    for line in reversed(list(table)):
        e = table[line].entry(fix)
        if isinstance(e, Note) and e.check and fp_of(*e.check[:2]) == e.check[2]:
            lines = _lines_of(fix, lambda x: isinstance(x, Note) and x == e, table)
            return FixMatch(fix, "note", note=e, lines=lines)
    targets = sorted({(t.module, t.qualname) for pf in patched.values() for t in pf.targets})
    found = {k: fp_of(*k) for k in targets}
    if any(found.values()):
        detail = "; ".join(f"{q} has fingerprint {fp}" if fp else f"{q} not found" for (m, q), fp in found.items())
        return FixMatch(fix, "changed", detail=detail)
    checks = sorted({e.check[:2] for L in table.values() for e in [L.entry(fix)]
                     if isinstance(e, Note) and e.check})
    detail = "; ".join(f"{q}: {fp_of(m, q) or 'not found'}" for m, q in targets + checks)
    return FixMatch(fix, "missing", detail=detail)


def line_scores(fp_of: FpOf, table=None) -> List[Tuple[str, int, List[str]]]:
    """Per code line (newest first): (line, entries verified here, fixes whose entry does not hold here)."""
    from .fixes import ALL_FIXES

    table = releases.LINES if table is None else table
    out = []
    for line in reversed(list(table)):
        ok, bad = 0, []
        for f in ALL_FIXES:
            v = entry_verifies(f.name, table[line].entry(f.name), fp_of)
            if v is False:
                bad.append(f.name)
            elif v:
                ok += 1
        out.append((line, ok, bad))
    return out


def best_line(fp_of: FpOf, table=None) -> Tuple[Optional[str], List[str]]:
    """The code line this release matches: the newest one whose every entry holds here, else the one with most
    verified entries (newest on a tie); with the fixes whose entry does not hold. (None, []) when nothing holds."""
    scores = line_scores(fp_of, table)
    for line, ok, bad in scores:
        if not bad and ok:
            return line, []
    line, ok, bad = max(scores, key=lambda s: s[1])  # max keeps the first (newest) of equal scores
    return (line, bad) if ok else (None, [])


# ------------------------------------------------------------------------------------------ survey
@dataclasses.dataclass
class FunctionView:
    module: str
    qualname: str
    fingerprint: Optional[str]
    equals: List[Known]


@dataclasses.dataclass
class FixView:
    fix: str
    match: FixMatch
    functions: List[FunctionView]


@dataclasses.dataclass
class Result:
    label: str
    version: Optional[str]
    requires: List[str]
    known_release: Optional[str]  # the table's code line for this version, when the table has it (and it is not hidden)
    line: Optional[str]  # the code line this source matches (best_line)
    differs: List[str]  # fixes whose entry on ``line`` does not hold here
    fixes: List[FixView]
    hidden: Optional[str] = None  # code line left out (as_new): the survey reads the release as if the table lacked it


def survey(tree: Tree, as_new: bool = False) -> Result:
    """``as_new``: read a release of the table as if the table did not have its code line (only when that line is
    this release's alone), so the draft shows the entry a maintainer would have written for it."""
    from .fixes import ALL_FIXES

    table, hidden = releases.LINES, None
    line = releases.code_line(tree.version)
    if as_new and line and [v for v, r in releases.RELEASES.items() if r.line == line] == [tree.version]:
        hidden = line
        table = {k: v for k, v in releases.LINES.items() if k != line}
    fp_of = tree.fingerprint
    views = []
    for f in ALL_FIXES:
        funcs = []
        for (module, qualname), known in known_functions(f.name, table).items():
            fp = fp_of(module, qualname)
            funcs.append(FunctionView(module, qualname, fp, [k for k in known if k.fingerprint == fp]))
        views.append(FixView(f.name, match_fix(f.name, fp_of, table), funcs))
    best, differs = best_line(fp_of, table)
    known = None if hidden else releases.code_line(tree.version)
    return Result(tree.label, tree.version, tree.requires, known, best, differs, views, hidden)


def _pin(requires: List[str], name: str) -> Tuple[Optional[str], str]:
    """(exact pin or None, the requirement as written) of ``name`` in Requires-Dist lines."""
    norm = name.replace("_", "-").lower()
    for req in requires:
        m = re.match(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?\s*(.*)$", req.split(";")[0].strip())
        if m and m.group(1).replace("_", "-").lower() == norm:
            spec = m.group(3).strip().strip("()")
            pin = spec[2:].strip() if spec.startswith("==") and "," not in spec else None
            return pin, spec
    return None, ""


def draft_release(r: Result, line: str) -> List[str]:
    """The ``_r(...)`` line of RELEASES for this release on code line ``line`` (torch pin and CPU overlay pins from
    the wheel's Requires-Dist), with comments for what could not be read."""
    torch, torch_spec = _pin(r.requires, "torch")
    args = [f'"{r.version or "?"}"', f'"{line}"', f'"{torch or "?"}"']
    notes = [] if torch else [f"torch pin not found ({torch_spec or 'no Requires-Dist'}): fill it in"]
    for dist in ("flashinfer-python", "apache-tvm-ffi"):
        pin, spec = _pin(r.requires, dist)
        if pin:
            args.append(f'"{dist}=={pin}"')
        else:
            notes.append(f"{dist}: {spec or 'not required'} (no exact pin: use what the CPU overlay resolves)")
    notes.append("add any pin its import needs on CPU (0.5.17 … 0.5.20 needed xgrammar==0.2.1)")
    return [f"    _r({', '.join(args)}),"] + [f"    # {n}" for n in notes]


def _chunks(text: str, width: int) -> List[str]:
    """``text`` cut at spaces into pieces of about ``width`` characters that join back to it exactly."""
    out, cur = [], ""
    for word in text.split(" "):
        if cur and len(cur) + len(word) > width:
            out.append(cur)
            cur = ""
        cur += word + " "
    out.append(cur[:-1])
    return out


def _comment(text: str) -> List[str]:
    return textwrap.wrap(text, 120, initial_indent="    # ", subsequent_indent="    #   ", break_on_hyphens=False,
                         break_long_words=False)


def _entry(fix: str, code: str, comment: str) -> List[str]:
    """``code`` with its comment on the same line, or the comment (naming the fix) above it when that is too wide."""
    one = f"    {code}  # {comment}"
    return [one] if len(one) <= 120 else _comment(f"{fix}: {comment}") + [f"    {code}"]


def draft_line(r: Result) -> List[str]:
    """``_FIXES["<version>"] = _derive(<best line>, {...})`` for a release whose source matches no code line
    throughout: each differing fix's entry as far as fingerprints can say, the rest left for the maintainer."""
    out = [f'_FIXES["{r.version}"] = _derive("{r.line}", {{']
    views = {v.fix: v for v in r.fixes}
    for fix in r.differs:
        m = views[fix].match
        base = releases.entry(fix, r.line)
        if m.kind == "patch":
            out += _entry(fix, f'"{fix}": patch("{m.patch}"),', f"REVIEW: every target equals the before of "
                          f"{m.patch}.patch ({line_releases(m.lines)}); check it is the whole fix here")
        elif m.kind == "note":
            n = m.note
            if isinstance(base, Note) and (base.state, base.reason) == (n.state, n.reason) and base.check \
                    and base.check[:2] == n.check[:2]:
                out += _entry(fix, f'"{fix}": "{n.check[2]}",', f"as on {line_releases(m.lines)}")
            else:
                out += _comment(f"{fix}: as on {line_releases(m.lines)}")
                out.append(f'    "{fix}": note(')
                out.append(f"        {n.state.upper().replace('-', '_')},")
                out += [f"        {chunk!r}" for chunk in _chunks(n.reason, 100)]
                out[-1] += ","
                check = f"        check={n.check!r},"
                out += [check] if len(check) <= 120 else ["        check=("] + [f"            {x!r}," for x in n.check] \
                    + ["        ),"]
                out.append("    ),")
        elif m.kind == "present":
            out += _comment(f"{fix}: the source already equals the after of patches/{fix}/{m.patch}.patch (applied "
                            "by hand, or taken upstream): read it and write a note")
        elif isinstance(base, Note) and base.check and views[fix].functions:
            fp = next((fv.fingerprint for fv in views[fix].functions
                       if (fv.module, fv.qualname) == tuple(base.check[:2])), None)
            if fp:
                out += _entry(fix, f'"{fix}": "{fp}",', f"REVIEW: {base.check[1].rsplit('.', 1)[-1]} changed, "
                              f"{base.state!r} kept unread")
            else:
                out += _comment(f"{fix}: TODO {base.check[1]} not found: read the source, write a note")
        else:
            out += _comment(f"{fix}: TODO no known fingerprint ({m.detail}): a new patch file or a note")
    out.append("})")
    return out


def render(r: Result) -> str:
    out = [f"sglang {r.version or '?'}: {r.label}"]
    if r.hidden:
        out.append(f"release table: code line {r.hidden} left out (--as-new): read as if the table did not know it")
    else:
        out.append(f"release table: {'code line ' + r.known_release if r.known_release else 'not in the table'}")
    out.append("per fix: what its functions equal here (the patch files' before / after, the notes' checks)")
    for v in r.fixes:
        m = v.match
        where = line_releases(m.lines)
        what = {
            "patch": f"ready: {m.patch}.patch applies (every target equals its before; {where})",
            "present": f"present: every target already equals the after of {m.patch}.patch ({where})",
            "note": f"{m.note.state if m.note else ''}: the checked function equals the note of {where}",
            "changed": "nothing known: the functions its patch files target have other code here",
            "missing": "nothing known: none of its known functions is here",
        }[m.kind]
        out += [""] + textwrap.wrap(f"{v.fix}: {what}", 120, initial_indent="  ", subsequent_indent="    ",
                                    break_on_hyphens=False)
        gone = [fv.qualname for fv in v.functions if fv.fingerprint is None]
        for fv in v.functions:
            if fv.fingerprint is not None:
                eq = "; ".join(k.describe() for k in fv.equals) if fv.equals else "no known version"
                one = f"    {fv.qualname:<56} {fv.fingerprint}  {eq}"
                out += [one] if len(one) <= 120 else [f"    {fv.qualname:<56} {fv.fingerprint}"] + textwrap.wrap(
                    f"= {eq}", 120, initial_indent="      ", subsequent_indent="        ", break_on_hyphens=False)
        if gone:
            out.append(textwrap.fill(f"not in this source: {', '.join(gone)}", 116, initial_indent="    ",
                                     subsequent_indent="      "))
    out.append("")
    if r.line is None:
        out.append("code line: no entry of any code line holds here: read the source fix by fix")
        return "\n".join(out) + "\n"
    if not r.differs:
        out.append(f"code line: {r.line} ({line_releases([r.line])}): every entry of it verifies against this source")
    else:
        out.append(textwrap.fill(f"code line: closest is {r.line} ({line_releases([r.line])}); its entries do not "
                                 f"hold here for {', '.join(r.differs)}", 120, subsequent_indent="  ",
                                 break_on_hyphens=False))
    same = r.known_release and not r.differs and r.known_release == r.line
    out.append("\ndraft release-table entry (sglang_specv2_fixes/releases.py; review before committing):")
    if same:
        out.append("    # the table has this release on this code line already")
    out += draft_release(r, r.line if not r.differs else (r.version or "?"))
    if r.differs:
        out += draft_line(r)
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------- unknown releases (opt-in)
def plan_unknown(report, sel, fixes, fp_of: Optional[FpOf] = None):
    """Fill ``report`` (sglang ``report.sglang_version`` is not in the table) by fingerprint: a fix is READY only
    when every target equals the `before` of one known patch file; PRESENT when every target equals its `after`;
    a known checked note's state when its function matches; REFUSED when the fix's targets are there with unknown
    code; UNSUPPORTED when they are gone. One warning names what matched which release."""
    from .fingerprint import installed_fingerprint
    from .report import FixStatus, TargetCheck
    from .selection import opt_in_reason, opted_in

    fp_of = fp_of or installed_fingerprint
    line, _ = best_line(fp_of)
    report.fingerprint_match = line or "none"
    matched = []
    for fix in fixes:
        st = FixStatus(fix.name, list(fix.upstream), fix.title, catalog.UNSUPPORTED, "", related=list(fix.related))
        m = match_fix(fix.name, fp_of)
        if m.kind in ("patch", "present"):
            pf = patchfile.load(fix.name, m.patch)
            st.patch = f"patches/{fix.name}/{m.patch}.patch"
            for t in pf.targets:
                fp = fp_of(t.module, t.qualname)
                st.targets.append(TargetCheck(t.dotted, t.before, fp, fp == t.before))
            if m.kind == "present":
                st.state, st.reason = catalog.PRESENT, f"the installed source already carries {st.patch}"
            elif not sel.wants(fix.name):
                st.state, st.reason = catalog.DISABLED, f"not selected (selection: {sel.canonical})"
            elif not opted_in(fix):  # as core.plan: an opt-in fix is planned only with its switch on
                st.state, st.reason = catalog.DISABLED, opt_in_reason(fix, st.patch)
            else:
                st.state = catalog.READY
                st.reason = (f"fingerprints match {st.patch} (unknown release: its targets equal those of "
                             f"{line_releases(m.lines)})")
                matched.append(f"{fix.name} as {line_releases(m.lines)}")
        elif m.kind == "note":
            module, qualname, fp = m.note.check
            st.state = m.note.state
            st.reason = f"{m.note.reason} (source verified: as on {line_releases(m.lines)})"
            st.targets.append(TargetCheck(f"{module}.{qualname}", fp, fp, True))
        elif m.kind == "changed":
            st.state = catalog.REFUSED
            st.reason = (f"sglang {report.sglang_version} is not a known release and its code for this fix equals no "
                         f"known version ({m.detail}) - refusing to patch code this plugin was not written against")
            report.warnings.append(f"{fix.name} refused: {st.reason}")
        else:
            st.reason = f"sglang {report.sglang_version} is not a known release and has none of this fix's " \
                        f"functions as known ({m.detail})"
        report.fixes.append(st)
    report.warnings.insert(0, (
        f"sglang {report.sglang_version} is not a known release; SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE="
        f"{MODE_FINGERPRINT}: fixes are patched only where their functions equal a known release's: "
        f"{', '.join(matched) or 'none'}; closest code line: {line or 'none'}"))
    return report
