"""Patch files: the one stored form of every change (``patches/<fix>/<release>.patch``).

A patch file is a plain unified diff (``patch -p1 --fuzz=0`` applies it from site-packages) preceded by a
header that ``patch`` ignores::

    specv2-fixes-patch: 1
    fix: live-accept-metrics
    written-against: sglang 0.5.11
    target: sglang.srt.managers.x Cls.fn before=<fp> after=<fp> span=412-598
    compose: other-fix sglang.srt.managers.x Cls.fn before=<fp> after=<fp>     (optional, see below)

    what changes and why, free text

    --- a/sglang/srt/managers/x.py
    +++ b/sglang/srt/managers/x.py
    @@ -430,6 +430,15 @@
    ...

At run time the plugin never trusts the file blindly: it reads the installed module, locates each
target, requires the ``before`` fingerprint, applies the hunks exactly (every context and removed line
must equal the installed line; a hunk only moves by the offset of its own target function, so one file
serves every release whose functions are unchanged), requires the ``after`` fingerprint of the result
and compiles the patched function in the target module's globals (a plain ``def`` registered by the plugin on its
first call: ``compile_target``). The compiled code names the installed
file with a ``[specv2-fixes <fix>]`` suffix and carries the patched file's line numbers; the patched text
is registered in ``linecache``, so a traceback shows the line that ran.

Two fixes that change one function compose only where the later one's file says so: ``compose: F M Q before=B
after=A`` means "where fix F's patch of this release is applied too, apply this file after it: on F's result
(fingerprint B, F's ``after=``) this file's hunks for M.Q apply exactly and give A". Each file is still written
against the upstream source, so each fix also applies alone. ``build_stack`` applies the files in that order, checks
each step's fingerprint, and compiles the shared function once; core.plan refuses the later fix, naming both, where
a shared function has no such line or the line no longer matches F's file.

    python -m sglang_specv2_fixes.patchfile write --fix F --release R --pristine DIR --edited DIR \
        --target MODULE:QUALNAME [...] --message TEXT        # author a patch file (DIR: site-packages)
    python -m sglang_specv2_fixes.patchfile normalize FILE...        # trim hunk context to the targets
    python -m sglang_specv2_fixes.patchfile check FILE --root DIR   # apply to a tree, report
    python -m sglang_specv2_fixes.patchfile message FILE... --text TEXT | --replace OLD NEW   # the free text only
"""

from __future__ import annotations

import __future__
import argparse
import dataclasses
import difflib
import functools
import importlib
import inspect
import linecache
import os
import re
import sys
import textwrap
import types
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .fingerprint import SourceNotFound, fingerprint_source, function_source, function_span, plain_lines
from .fingerprint import read_source
from .fingerprint import cache_dir as _code_cache_dir
from .fingerprint import read_entry, write_entry

MAGIC = "specv2-fixes-patch: 1"
MARK = "__specv2_fix__"  # attribute set on every compiled function: "<fix>:<target>"
PATCH_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "patches")

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_TARGET = re.compile(r"^target: (\S+) (\S+) before=([0-9a-f]{16}) after=([0-9a-f]{16}) span=(\d+)-(\d+)$")
_COMPOSE = re.compile(r"^compose: (\S+) (\S+) (\S+) before=([0-9a-f]{16}) after=([0-9a-f]{16})$")


class PatchError(ValueError):
    """A patch file that is malformed or does not apply exactly."""


@dataclasses.dataclass(frozen=True)
class Target:
    module: str
    qualname: str
    before: str  # fingerprint of the upstream function the patch was written against
    after: str  # fingerprint of the same function once patched
    span: Tuple[int, int]  # its 1-based line range in the base release's file

    @property
    def dotted(self) -> str:
        return f"{self.module}.{self.qualname}"

    @property
    def rel_path(self) -> str:
        """Path of the target's module relative to site-packages (a package's ``__init__.py`` too)."""
        base = self.module.replace(".", "/")
        return base + "/__init__.py" if self.module.endswith(".__init__") else base + ".py"


@dataclasses.dataclass(frozen=True)
class Compose:
    """A ``compose:`` line: this file's hunks for ``module.qualname`` also apply after ``fix``'s patch file of the same
    release, on its result (fingerprint ``before``), and give ``after``."""

    fix: str
    module: str
    qualname: str
    before: str
    after: str

    @property
    def dotted(self) -> str:
        return f"{self.module}.{self.qualname}"


@dataclasses.dataclass(frozen=True)
class Hunk:
    old_start: int
    old_len: int
    lines: Tuple[str, ...]  # each with its ' ', '-' or '+' prefix, no newline

    @property
    def old(self) -> List[str]:
        return [ln[1:] for ln in self.lines if ln[:1] in (" ", "-")]

    @property
    def new(self) -> List[str]:
        return [ln[1:] for ln in self.lines if ln[:1] in (" ", "+")]

    @property
    def first_index(self) -> int:
        """0-based index in the base file of the hunk's first old line (its insertion point if empty)."""
        return self.old_start - 1 if self.old_len else self.old_start

    def changed_base_lines(self) -> List[int]:
        """1-based base-file lines the hunk removes or inserts before/after."""
        out, cur = [], self.first_index + 1
        for ln in self.lines:
            if ln[:1] == "-":
                out.append(cur)
                cur += 1
            elif ln[:1] == "+":
                out.append(cur - 1 if cur > 1 else cur)
            else:
                cur += 1
        return out


@dataclasses.dataclass(frozen=True)
class PatchFile:
    fix: str
    written_against: str
    targets: Tuple[Target, ...]
    files: Tuple[Tuple[str, Tuple[Hunk, ...]], ...]  # (rel path "sglang/...", hunks)
    description: str
    path: str
    composes: Tuple[Compose, ...] = ()

    def composed(self, fix: str, dotted: str) -> Optional[Compose]:
        """This file's ``compose:`` line for target ``dotted`` after ``fix``'s file, if any."""
        return next((c for c in self.composes if c.fix == fix and c.dotted == dotted), None)

    def targets_in(self, rel: str) -> List[Target]:
        return [t for t in self.targets if t.rel_path == rel]


def parse(text: str, path: str = "<patch>", check_spans: bool = True) -> PatchFile:
    lines = text.splitlines()
    if not lines or lines[0].strip() != MAGIC:
        raise PatchError(f"{path}: first line must be {MAGIC!r}")
    fix = against = None
    targets: List[Target] = []
    composes: List[Compose] = []
    i = 1
    while i < len(lines) and lines[i].strip():
        ln = lines[i]
        if ln.startswith("fix: "):
            fix = ln[5:].strip()
        elif ln.startswith("written-against: "):
            against = ln[len("written-against: "):].strip()
        elif ln.startswith("target: "):
            m = _TARGET.match(ln.strip())
            if not m:
                raise PatchError(f"{path}:{i + 1}: malformed target line")
            targets.append(Target(m[1], m[2], m[3], m[4], (int(m[5]), int(m[6]))))
        elif ln.startswith("compose: "):
            m = _COMPOSE.match(ln.strip())
            if not m:
                raise PatchError(f"{path}:{i + 1}: malformed compose line")
            composes.append(Compose(*m.groups()))
        else:
            raise PatchError(f"{path}:{i + 1}: unknown header line {ln!r}")
        i += 1
    if not fix or not against or not targets:
        raise PatchError(f"{path}: header needs fix:, written-against: and at least one target:")
    own = {t.dotted for t in targets}
    for c in composes:
        if c.dotted not in own or c.fix == fix:
            raise PatchError(f"{path}: compose line for {c.dotted} after {c.fix}: not a target of this file, or itself")
    desc: List[str] = []
    while i < len(lines) and not lines[i].startswith("--- "):
        desc.append(lines[i])
        i += 1
    files: List[Tuple[str, Tuple[Hunk, ...]]] = []
    while i < len(lines):
        if not lines[i].startswith("--- a/") or i + 1 >= len(lines) or not lines[i + 1].startswith("+++ b/"):
            raise PatchError(f"{path}:{i + 1}: expected a '--- a/' '+++ b/' file header")
        rel = lines[i + 1][6:].split("\t")[0].strip()
        i += 2
        hunks: List[Hunk] = []
        while i < len(lines) and lines[i].startswith("@@"):
            m = _HUNK.match(lines[i])
            if not m:
                raise PatchError(f"{path}:{i + 1}: malformed hunk header")
            old_start, old_len = int(m[1]), int(m[2] if m[2] is not None else 1)
            new_len = int(m[4] if m[4] is not None else 1)
            i += 1
            body: List[str] = []
            n_old = n_new = 0
            while i < len(lines) and (n_old < old_len or n_new < new_len):
                ln = lines[i]
                tag = ln[:1] if ln else " "  # an empty line is an empty context line
                if tag not in (" ", "-", "+"):
                    raise PatchError(f"{path}:{i + 1}: unexpected line in hunk")
                body.append(tag + ln[1:] if ln else " ")
                n_old += tag != "+"
                n_new += tag != "-"
                i += 1
            if (n_old, n_new) != (old_len, new_len):
                raise PatchError(f"{path}: hunk at line {old_start} of {rel} is truncated")
            hunks.append(Hunk(old_start, old_len, tuple(body)))
        if not hunks:
            raise PatchError(f"{path}: no hunks for {rel}")
        files.append((rel, tuple(hunks)))
    if not files:
        raise PatchError(f"{path}: no diff")
    for rel, hunks in files if check_spans else ():
        spans = [t.span for t in targets if t.rel_path == rel]
        for h in hunks:
            first, last = h.first_index + 1, h.first_index + h.old_len
            if not any(a <= first and last <= b + 1 for a, b in spans) and h.old_len:
                raise PatchError(f"{path}: hunk @@ -{h.old_start} of {rel} reaches outside its target function")
    return PatchFile(fix, against, tuple(targets), tuple(files), "\n".join(desc).strip(), path, tuple(composes))


def patch_path(fix: str, name: str) -> str:
    return os.path.join(PATCH_DIR, fix, f"{name}.patch")


@functools.lru_cache(maxsize=None)
def load(fix: str, name: str) -> PatchFile:
    path = patch_path(fix, name)
    with open(path, encoding="utf-8") as f:
        pf = parse(f.read(), path)
    if pf.fix != fix:
        raise PatchError(f"{path}: header says fix {pf.fix!r}, file is stored under {fix!r}")
    return pf


# ------------------------------------------------------------------------------------------ applying
def _owner(h: Hunk, targets: Sequence[Target]) -> Target:
    line = h.changed_base_lines()[0]
    for t in targets:
        if t.span[0] <= line <= t.span[1] + 1:
            return t
    raise PatchError(f"hunk at base line {h.old_start} belongs to no target")


def apply_text(pf: PatchFile, rel: str, text: str) -> str:
    """Apply ``pf``'s hunks for file ``rel`` to ``text`` exactly; raise PatchError on any mismatch."""
    lines, _ = _apply(pf, rel, plain_lines(text), _locate(pf, rel, text))
    return _joined(lines, text)


def apply_in_order(pfs: Sequence["PatchFile"], rel: str, text: str) -> str:
    """``text`` with the files' hunks for ``rel`` applied one after the other, as build_stack applies them: a later
    file's hunk in a function an earlier file changed moves by the lines that file added above it (what GNU patch
    finds by its offset search)."""
    done: List[Tuple[Target, Hunk]] = []
    for pf in pfs:
        if rel in dict(pf.files):
            text = _joined(_apply_after(pf, rel, plain_lines(text), _locate(pf, rel, text), done)[0], text)
    return text


def _locate(pf: PatchFile, rel: str, text: str) -> Dict[str, Tuple[int, int]]:
    """qualname -> (first, last) 1-based lines in ``text`` of ``pf``'s targets in file ``rel``; PatchError naming one
    that is not there."""
    located = {}
    for t in pf.targets_in(rel):
        try:
            located[t.qualname] = function_span(text, t.qualname)
        except (SourceNotFound, SyntaxError, IndentationError):
            raise PatchError(f"{t.dotted} not found") from None
    return located


def _joined(lines: Sequence[str], like: str) -> str:
    """The text of ``lines`` (lines without their ends, as _apply gives them), ending as ``like`` ends (a patch keeps
    its file's last line end)."""
    return "\n".join(lines) + ("\n" if like.endswith("\n") else "")


def _apply_after(pf: PatchFile, rel: str, lines, located, done: List[Tuple[Target, Hunk]]):
    """_apply's result for ``lines`` (with the files whose (target, hunk) are in ``done`` applied) with ``pf``'s hunks
    for ``rel`` applied after them; ``done`` then holds this file's too."""
    out = _apply(pf, rel, lines, located, done)
    done.extend((_owner(h, pf.targets_in(rel)), h) for h in dict(pf.files)[rel])
    return out


def _added_above(h: Hunk, index: int) -> int:
    """Lines hunk ``h`` adds (net) above 0-based base line ``index``."""
    n, pos = 0, h.first_index
    for ln in h.lines:
        tag = ln[:1]
        if tag == "+":
            n += pos <= index
        elif tag == "-":
            n -= pos < index
        pos += tag != "+"
    return n


def _apply(pf: PatchFile, rel: str, lines: Sequence[str], located: Dict[str, Tuple[int, int]],
           done: Sequence[Tuple[Target, Hunk]] = ()):
    """(the patched text's lines without their ends, ``located`` moved by the hunks) for ``lines`` (a text's lines
    without their ends: fingerprint.plain_lines, or an earlier step's result) with ``pf``'s hunks for ``rel`` applied.
    ``located``: qualname -> (first, last) 1-based lines in ``lines`` of the functions followed, ``pf``'s targets in
    ``rel`` among them; they come back where the hunks move them (a target grows by its own hunks), so the patched
    text need not be split, tokenized or even joined to find the functions (compile_target still checks each one's
    ``after=`` fingerprint). ``done``: (target, hunk) of files already applied to ``lines`` (build_stack): a hunk of a
    target they changed too moves by the lines their hunks added above it in that function."""
    targets = pf.targets_in(rel)
    hunks = dict(pf.files).get(rel)
    if hunks is None:
        raise PatchError(f"{pf.path}: no diff for {rel}")
    lines = list(lines)
    delta, installed = {}, {}
    for t in targets:
        first, last = located[t.qualname]
        delta[t], installed[t] = first - t.span[0], (first, last)
    shift = 0  # lines added so far by earlier hunks
    grown = dict.fromkeys(targets, 0)  # lines each target's own hunks added
    for h in hunks:
        owner = _owner(h, targets)
        moved = 0
        for t, d in done:
            if t.dotted == owner.dotted:
                if t.span != owner.span:
                    raise PatchError(f"{pf.path}: {t.dotted} spans {owner.span} here, {t.span} in the file applied "
                                     f"before it: not written against the same source")
                moved += _added_above(d, h.first_index)
        at = h.first_index + delta[owner] + shift + moved
        old = h.old
        if lines[at : at + len(old)] != old:
            raise PatchError(f"{pf.path}: hunk @@ -{h.old_start} does not apply exactly to {rel} (at line {at + 1})")
        new = h.new
        lines[at : at + len(old)] = new
        shift += len(new) - len(old)
        grown[owner] += len(new) - len(old)
    own = {t.qualname: t for t in targets}
    moved = {}
    for q, (first, last) in located.items():  # targets do not overlap: a hunk is before, inside or after each one
        before = sum(grown[o] for o, (f, _) in installed.items() if f < first)
        moved[q] = (first + before, last + before + (grown[own[q]] if q in own else 0))
    return lines, moved


def module_path(module: str, root: str) -> str:
    """File of dotted ``module`` under ``root`` (the directory holding the ``sglang`` package)."""
    base = os.path.join(root, *module.split("."))
    return base + ".py" if os.path.exists(base + ".py") else os.path.join(base, "__init__.py")


def patched_texts(pf: PatchFile, root: str) -> Dict[str, Tuple[str, str, str]]:
    """rel path -> (file path, installed text, patched text) for every file of the patch."""
    return {rel: (path, text, _joined(lines, text)) for rel, (path, text, lines, _) in _patched(pf, root).items()}


def _patched(pf: PatchFile, root: str):
    """rel path -> (file path, installed text, the patched text's lines without their ends, {target: (first, last)
    of its function there}) for every file of the patch."""
    out = {}
    for rel, _ in pf.files:
        path = os.path.join(root, rel)
        text = read_source(path)
        lines, moved = _apply(pf, rel, plain_lines(text), _locate(pf, rel, text))
        out[rel] = (path, text, lines, {t: moved[t.qualname] for t in pf.targets_in(rel)})
    return out


def _compile_cached(src: str, filename: str, first: int = 1, expected: Optional[str] = None):
    """(``fingerprint_source(src)``, the code of ``src`` dedented and placed at line ``first`` of ``filename``: exec
    mode, postponed annotations, as upstream annotations may name TYPE_CHECKING-only types), both kept as marshal
    data in the code cache (``fingerprint.read_entry`` / ``write_entry``: a trusted folder, each entry sealed with its
    key), named by the sha256 of the interpreter's bytecode magic and optimisation level (``python -O`` drops asserts),
    the file name, ``first`` and ``src``. A pyc for the patched functions: the same source always gives the same
    fingerprint and code, so a hit is what dedenting, fingerprinting and compiling would give; a miss, an entry whose
    seal does not match or that cannot be read, or a folder that cannot be written computes them (nothing written
    while ``sys.dont_write_bytecode``). Where ``expected`` is given and the fingerprint differs, nothing is compiled
    (the code is None): the source is not the one the patch file names. Every process of a server builds the same
    functions: this saves each one that cost (start cost, bench/import_overhead.py)."""
    import hashlib
    import importlib.util
    import marshal

    name = None
    if _code_cache_dir() is not None:
        h = hashlib.sha256(b"fp+code\0" + importlib.util.MAGIC_NUMBER + b"\0%d\0" % sys.flags.optimize
                           + filename.encode() + b"\0%d\0" % first + src.encode("utf-8", "surrogatepass"))
        name = h.hexdigest()[:32] + ".code"
        raw = read_entry(name)
        if raw is not None:
            try:
                got = marshal.loads(raw)
            except (ValueError, EOFError, TypeError):
                got = None
            if isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], str) and \
                    isinstance(got[1], types.CodeType):
                return got
    fp = fingerprint_source(src)
    if expected is not None and fp != expected:
        return fp, None
    code = compile("\n" * (first - 1) + textwrap.dedent(src), filename, "exec",
                   flags=__future__.annotations.compiler_flag, dont_inherit=True)
    if name is not None:
        write_entry(name, marshal.dumps((fp, code)))
    return fp, code


def _span_source(lines: Sequence[str], span: Tuple[int, int], like: str) -> str:
    """Lines ``span`` (1-based, inclusive) of a patched text with their ends, as ``_lines`` of the text slices them:
    ``lines`` are the text's lines without their ends, as _apply made them (joined by LF), ``like`` the text they were
    patched from (its last line end is the patched text's)."""
    return "\n".join(lines[span[0] - 1 : span[1]]) + ("\n" if span[1] < len(lines) or like.endswith("\n") else "")


def compile_target(pf: PatchFile, target: Target, path: str, text: str, lines: Sequence[str], span: Tuple[int, int],
                   deferred: bool = False) -> Callable:
    """Compile ``target`` out of the patched module text into the target module's globals: ``lines`` are the patched
    text's lines without their ends, as _apply made them from ``text`` (the installed text), ``span`` the target's
    1-based lines there. Its ``after=`` fingerprint is required before anything runs. The patched text is joined only
    where it is read: a traceback or ``inspect.getsource`` (a lazy ``linecache`` entry), or the target not found at
    ``span`` (it is then located in it).

    ``deferred`` (what register() asks for): a plain ``def`` (``_deferrable``) is fingerprinted now but compiled when it
    is first called (``_Deferred``): most targets never run in a given process (the launcher runs no scheduler code;
    a server without grammar, PD, DP or trees runs none of their functions), and compiling is most of what a first
    start costs. What is called is the same function either way: the compiled code is swapped into the registered
    function object, which then runs with no indirection."""
    filename = f"{path} [specv2-fixes {pf.fix}]"

    def attempt(src: str, first: int):
        if deferred and _deferrable(src):
            return fingerprint_source(src), None
        return _compile_cached(src, filename, first, target.after)

    first, src = span[0], _span_source(lines, span, text)
    fp, code = attempt(src, first)
    if fp != target.after:
        src, first, _ = function_source(_joined(lines, text), target.qualname)
        fp, code = attempt(src, first)
    if fp != target.after:
        raise PatchError(f"{pf.path}: patched {target.dotted} has fingerprint {fp}, header says after={target.after}")
    if "." in target.qualname and "super()" in src:
        raise PatchError(f"{target.dotted}: zero-argument super() cannot be compiled outside its class")
    # a lazy entry (linecache's form for sources a loader gives): the text is joined and split only when a traceback
    # or inspect.getsource reads it, not in every process at start-up
    linecache.cache[filename] = (lambda: _joined(lines, text),)
    module = importlib.import_module(target.module)
    if code is None:
        fn = _Deferred.stub(target, module, src, filename, first)
    else:
        fn = _define(code, module, target)
    setattr(fn, MARK, f"{pf.fix}:{target.dotted}")
    return fn


def _deferrable(src: str) -> bool:
    """A plain ``def`` (not async, not a class), with no decorator or ``@classmethod`` / ``@staticmethod`` alone (their
    hook is the plain function: _define): its function object can take its compiled code later."""
    head = src.lstrip()
    for binding in ("@classmethod\n", "@staticmethod\n"):
        if head.startswith(binding):
            head = head[len(binding):].lstrip()
    return head.startswith("def ")


def _define(code, module, target: Target) -> Callable:
    """Run the compiled ``def`` of ``target`` in ``module``'s globals: the function, with the upstream names."""
    local_ns: dict = {}
    exec(code, module.__dict__, local_ns)  # noqa: S102 - fingerprinted upstream code plus the stored diff
    (fn,) = local_ns.values()
    if isinstance(fn, (classmethod, staticmethod)):
        # the hook is the plain function: HookRegistry puts the original's descriptor back around its wrapper
        # (a classmethod hook inside that classmethod is not callable: ForwardBatch.init_new, verify-handoff)
        fn = fn.__func__
    # a decorated target (Scheduler.event_loop_overlap's @DynamicGradMode()) comes back wrapped: the wrapped
    # function gets the upstream names too
    for f in {id(f): f for f in (fn, inspect.unwrap(fn))}.values():
        f.__qualname__ = target.qualname
        f.__module__ = target.module
    return fn


_DEFERRED_ARG = "_specv2_fixes_compile_"
_STUB_CODE = next(c for c in compile(
    f"def stub(*args, {_DEFERRED_ARG}=None, **kwargs):\n    return {_DEFERRED_ARG}(args, kwargs)\n",
    "<specv2-fixes>", "exec").co_consts if isinstance(c, types.CodeType))


class _Deferred:
    """The compile of one fingerprinted patched function, run on its first call. The function registered is a stub
    with the target's names, globals, file and first line (``inspect.getsource`` shows the patched source before and
    after); its first call compiles the source (through the code cache), puts the code, defaults and annotations into
    the stub itself and runs it: from then on the stub is the patched function. Calls that meet during that first
    compile wait for it (one lock per function)."""

    __slots__ = ("fn", "todo", "lock")

    def __init__(self, fn, todo):
        import threading

        self.fn, self.todo, self.lock = fn, todo, threading.Lock()

    @classmethod
    def stub(cls, target: Target, module, src: str, filename: str, first: int) -> Callable:
        name = target.qualname.rsplit(".", 1)[-1]
        code = _STUB_CODE.replace(co_filename=filename, co_firstlineno=first, co_name=name,
                                  **({"co_qualname": target.qualname} if sys.version_info >= (3, 11) else {}))
        fn = types.FunctionType(code, module.__dict__, name)
        fn.__qualname__, fn.__module__ = target.qualname, target.module
        fn.__kwdefaults__ = {_DEFERRED_ARG: cls(fn, (target, module, src, filename, first))}
        return fn

    def __call__(self, args, kwargs):
        self.materialize()
        return self.fn(*args, **kwargs)

    def materialize(self) -> None:
        with self.lock:
            if self.todo is None:
                return
            target, module, src, filename, first = self.todo
            fp, code = _compile_cached(src, filename, first, target.after)
            if code is None:  # the source was fingerprinted when the stub was made
                raise PatchError(f"{target.dotted}: patched source changed after start-up (fingerprint {fp})")
            real = _define(code, module, target)
            fn = self.fn
            fn.__code__ = real.__code__  # no free variables: compiled at module level
            fn.__defaults__, fn.__kwdefaults__ = real.__defaults__, real.__kwdefaults__
            fn.__annotations__, fn.__doc__ = real.__annotations__, real.__doc__
            self.todo = None


def _deferred_of(fn: Callable) -> Optional[_Deferred]:
    """The pending compile of ``fn`` if it is a deferred patched function not compiled yet, else None."""
    d = (getattr(fn, "__kwdefaults__", None) or {}).get(_DEFERRED_ARG)
    return d if isinstance(d, _Deferred) and d.todo is not None else None


def materialize(fn: Callable) -> Callable:
    """``fn`` compiled now if it is a deferred patched function (``compile_target``); ``fn`` itself either way."""
    d = _deferred_of(fn)
    if d is not None:
        d.materialize()
    return fn


def is_deferred(fn: Callable) -> bool:
    """``fn`` is a deferred patched function not compiled yet."""
    return _deferred_of(fn) is not None


def build(pf: PatchFile, root: str, deferred: bool = False) -> Dict[str, Callable]:
    """target dotted name -> compiled patched function, for the sglang tree at ``root`` (``deferred``: see
    compile_target)."""
    texts = _patched(pf, root)  # rel -> (path, installed text, patched lines, spans)
    return {t.dotted: compile_target(pf, t, *texts[t.rel_path][:3], texts[t.rel_path][3][t], deferred)
            for t in pf.targets}


def build_stack(pfs: Sequence[PatchFile], root: str, deferred: bool = False) -> Dict[str, Callable]:
    """As ``build`` for several patch files applied one after the other, in the order given, to the tree at ``root``.
    A function an earlier file already changed is taken by a later one only through that file's ``compose:`` line for
    the earlier fix: its text then must have the line's ``before=`` fingerprint (else PatchError, before anything is
    compiled), and the function both changed is compiled once, with the line's ``after=`` (checked as any
    ``after=``). Each file's own ``before=`` against the installed source is core.plan's check."""
    if len(pfs) == 1:
        return build(pfs[0], root, deferred)
    # rel -> (path, installed text, the lines with the files so far applied (without their ends), qualname -> (first,
    # last) of every target of the stack in that file, in those lines): the functions are located once, in the
    # installed text, and followed through each file's hunks (_apply's ``located``), not located again in each
    # intermediate text
    texts: Dict[str, tuple] = {}
    done: Dict[str, List[Tuple[Target, Hunk]]] = {}  # rel -> (target, hunk) of the files so far applied
    last: Dict[str, Tuple[PatchFile, Target, str]] = {}  # dotted -> (last file to change it, target, label)
    for pf in pfs:
        for rel, _ in pf.files:
            if rel not in texts:
                path = os.path.join(root, rel)
                text = read_source(path)
                located = {}
                for q in {t.qualname for f in pfs for t in f.targets_in(rel)}:
                    try:
                        located[q] = function_span(text, q)
                    except (SourceNotFound, SyntaxError, IndentationError):
                        raise PatchError(f"{rel}: {q} not found") from None
                texts[rel] = (path, text, plain_lines(text), located)
            path, text, lines, located = texts[rel]
            for t in pf.targets_in(rel):
                if t.dotted not in last:
                    continue
                prev = last[t.dotted][0]
                c = pf.composed(prev.fix, t.dotted)
                if c is None:
                    raise PatchError(f"{pf.path}: {t.dotted} is also changed by {prev.path}, and this file has no "
                                     f"compose line for {prev.fix}")
                got = fingerprint_source(_span_source(lines, located[t.qualname], text))
                if got != c.before:
                    raise PatchError(f"{pf.path}: after {prev.path}, {t.dotted} has fingerprint {got}; this file's "
                                     f"compose line for {prev.fix} expects {c.before}")
            lines, located = _apply_after(pf, rel, lines, located, done.setdefault(rel, []))
            texts[rel] = (path, text, lines, located)
        for t in pf.targets:
            if t.dotted in last:
                prev, _, label = last[t.dotted]
                last[t.dotted] = (pf, dataclasses.replace(t, after=pf.composed(prev.fix, t.dotted).after),
                                  f"{label}+{pf.fix}")
            else:
                last[t.dotted] = (pf, t, pf.fix)
    built = {}
    for dotted, (pf, t, label) in last.items():
        path, text, lines, located = texts[t.rel_path]
        built[dotted] = compile_target(dataclasses.replace(pf, fix=label), t, path, text, lines, located[t.qualname],
                                       deferred)
    return built


# ----------------------------------------------------------------------------------------- authoring
def render(fix: str, release: str, pristine_root: str, edited_root: str, targets: Sequence[Tuple[str, str]],
           message: str, context: int = 3, compose: Sequence[str] = ()) -> str:
    """Patch file text: header + whole-file unified diffs (``context`` lines, 3 by default) from pristine to edited.
    More context makes a hunk unique where its 3 lines also occur elsewhere in the file (GNU patch, which searches
    by context, would otherwise apply it at the nearest copy, e.g. another event loop's identical lines); context
    outside the target function is trimmed either way (normalize)."""
    header = [MAGIC, f"fix: {fix}", f"written-against: sglang {release}"]
    diffs: List[str] = []
    by_file: Dict[str, List[str]] = {}
    for module, qualname in targets:
        by_file.setdefault(module, []).append(qualname)
    for module, quals in by_file.items():
        old = read_source(module_path(module, pristine_root))
        new = read_source(module_path(module, edited_root))
        for q in quals:
            src, first, last = function_source(old, q)
            header.append(f"target: {module} {q} before={fingerprint_source(src)} "
                          f"after={fingerprint_source(function_source(new, q)[0])} span={first}-{last}")
        rel = module.replace(".", "/") + ".py"
        diffs.extend(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{rel}", f"b/{rel}", n=context))
    raw = "".join(ln if ln.endswith("\n") else ln + "\n" for ln in diffs)
    head = "\n".join(header) + "\n\n" + textwrap.fill(message.strip(), 100) + "\n\n"
    text = normalize(head + raw)
    if compose:  # "FIX/NAME": that file applied first, then this one, on each function both change
        pf = parse(text)
        lines = header[:]
        for ref in compose:
            first = load(*ref.split("/", 1))
            for t in pf.targets:
                if not any(o.dotted == t.dotted for o in first.targets):
                    continue
                base = read_source(module_path(t.module, pristine_root))
                earlier = [(_owner(h, first.targets_in(t.rel_path)), h) for h in dict(first.files)[t.rel_path]]
                once = apply_text(first, t.rel_path, base)
                both = _joined(_apply(pf, t.rel_path, plain_lines(once), _locate(pf, t.rel_path, once), earlier)[0],
                               once)
                after = fingerprint_source(function_source(both, t.qualname)[0])
                lines.append(f"compose: {first.fix} {t.module} {t.qualname} before="
                             f"{next(o.after for o in first.targets if o.dotted == t.dotted)} after={after}")
        text = "\n".join(lines) + text[len("\n".join(header)):]
        parse(text)
    return text


def normalize(text: str) -> str:
    """Re-emit a patch file with every hunk's context trimmed to its target function (see _trim)."""
    pf = parse(text, "<normalize>", check_spans=False)
    head = text[: text.index("\n--- a/") + 1]
    body = "".join(_format_file(rel, [_trim(h, pf.targets_in(rel)) for h in hunks]) for rel, hunks in pf.files)
    parse(head + body)  # a file that does not parse is never written
    return head + body


def _trim(h: Hunk, targets: Sequence[Target]) -> Hunk:
    """Drop the hunk's context lines outside its target function: the fingerprint covers the function
    only, so context outside it would make the patch fail on a release whose neighbours differ."""
    a, b = _owner(h, targets).span
    lines, start = list(h.lines), h.first_index + 1
    while lines and lines[0][:1] == " " and start < a:
        lines.pop(0)
        start += 1
    end = start + sum(ln[:1] != "+" for ln in lines) - 1
    while lines and lines[-1][:1] == " " and end > b:
        lines.pop()
        end -= 1
    # GNU patch reads unequal leading/trailing context as "anchored at the file's start/end": keep both equal
    lead = next((i for i, ln in enumerate(lines) if ln[:1] != " "), len(lines))
    trail = next((i for i, ln in enumerate(reversed(lines)) if ln[:1] != " "), len(lines))
    keep = min(lead, trail)
    start += lead - keep
    lines = lines[lead - keep : len(lines) - (trail - keep)]
    old_len = sum(ln[:1] != "+" for ln in lines)
    return Hunk(start if old_len else start - 1, old_len, tuple(lines))


def _format_file(rel: str, hunks: Sequence[Hunk]) -> str:
    out, shift = [f"--- a/{rel}\n", f"+++ b/{rel}\n"], 0
    for h in hunks:
        new_len = sum(ln[:1] != "-" for ln in h.lines)
        new_start = h.old_start + shift if h.old_len or not new_len else h.old_start + shift + 1
        out.append(f"@@ -{h.old_start},{h.old_len} +{new_start},{new_len} @@\n")
        out.extend(ln + "\n" for ln in h.lines)
        shift += new_len - h.old_len
    return "".join(out)


def message_of(text: str) -> str:
    """A patch file's free-text message, unwrapped to one line (render fills it to 100 columns)."""
    head = text[: text.index("\n--- a/") + 1]
    lines = head.split("\n\n", 1)[1].strip().splitlines() if "\n\n" in head else []
    out = lines[0] if lines else ""
    for ln in lines[1:]:
        out += ln if re.search(r"\w-$", out) else " " + ln  # textwrap breaks after a word's hyphen
    return out


def with_message(text: str, message: str) -> str:
    """The patch file ``text`` with its message replaced by ``message`` (filled as render fills it). Only the free
    text changes: the header lines (targets, fingerprints, compose lines) and every hunk stay byte for byte, which is
    checked, so no fingerprint can go stale."""
    old = parse(text, "<message>", check_spans=False)
    header = text.split("\n\n", 1)[0]
    body = text[text.index("\n--- a/") + 1:]
    new = header + "\n\n" + textwrap.fill(message.strip(), 100) + "\n\n" + body
    pf = parse(new, "<message>", check_spans=False)
    if (pf.targets, pf.files, pf.composes, pf.fix, pf.written_against) != (
            old.targets, old.files, old.composes, old.fix, old.written_against):
        raise PatchError("the new message changed more than the message")
    return new


def _main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m sglang_specv2_fixes.patchfile", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write", help="author patches/<fix>/<release>.patch from a pristine and an edited tree")
    w.add_argument("--fix", required=True)
    w.add_argument("--release", required=True)
    w.add_argument("--pristine", required=True, help="directory holding the pristine sglang package")
    w.add_argument("--edited", required=True, help="directory holding the edited sglang package")
    w.add_argument("--target", action="append", required=True, help="MODULE:QUALNAME (repeat)")
    w.add_argument("--message", required=True)
    w.add_argument("--out", help="default: the package's patches/<fix>/<release>.patch")
    w.add_argument("--context", type=int, default=3, help="context lines per hunk (default 3)")
    w.add_argument("--compose", action="append", default=[], metavar="FIX/NAME",
                   help="a compose line for every function patches/FIX/NAME.patch also changes (applied before this one)")
    n = sub.add_parser("normalize", help="trim every hunk's context to its target function, in place")
    n.add_argument("files", nargs="+")
    m = sub.add_parser("message", help="replace the free-text message of patch files, in place (nothing else changes)")
    m.add_argument("files", nargs="+")
    m.add_argument("--text", help="the new message")
    m.add_argument("--replace", nargs=2, metavar=("OLD", "NEW"), help="replace OLD by NEW in the unwrapped message")
    c = sub.add_parser("check", help="apply a patch file to a tree in memory and compile-check the result")
    c.add_argument("file")
    c.add_argument("--root", required=True, help="directory holding the sglang package")
    a = p.parse_args(argv)
    if a.cmd == "write":
        targets = [tuple(t.split(":", 1)) for t in a.target]
        text = render(a.fix, a.release, a.pristine, a.edited, targets, a.message, a.context, a.compose)
        out = a.out or patch_path(a.fix, a.release)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
        print(out)
        return 0
    if a.cmd == "normalize":
        for path in a.files:
            with open(path, encoding="utf-8") as f:
                text = normalize(f.read())
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return 0
    if a.cmd == "message":
        if (a.text is None) == (a.replace is None):
            p.error("message: give --text or --replace")
        for path in a.files:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            msg = message_of(text)
            if a.replace and a.replace[0] not in msg:
                print(f"error: {path}: {a.replace[0]!r} is not in its message", file=sys.stderr)
                return 1
            text = with_message(text, a.text if a.text is not None else msg.replace(*a.replace))
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return 0
    pf = parse(open(a.file, encoding="utf-8").read(), a.file)
    try:
        for rel, (path, old, new) in patched_texts(pf, a.root).items():
            compile(new, path, "exec")
            for t in pf.targets_in(rel):
                ok_before = fingerprint_source(function_source(old, t.qualname)[0]) == t.before
                ok_after = fingerprint_source(function_source(new, t.qualname)[0]) == t.after
                print(f"{t.dotted}: before {'ok' if ok_before else 'MISMATCH'}, after {'ok' if ok_after else 'MISMATCH'}")
                if not (ok_before and ok_after):
                    return 1
    except PatchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_main())
