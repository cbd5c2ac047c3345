"""The patch-file format (sglang_specv2_fixes/patchfile.py, docs/design/patch-format.md) on a synthetic
package written to a temporary directory: parsing and its errors, exact application (a hunk moves only
with its own function), fingerprints before/after, compilation into the target module with a traceback
that shows the patched line, and agreement with GNU ``patch -p1 --fuzz=0``.

The real patch files against the installed release are covered in test_patches.py / test_catalog.py;
the last tests here check that a changed context line of the real installed source is refused too."""

import dataclasses
import itertools
import linecache
import os
import re
import shutil
import subprocess
import sys
import traceback

import pytest
from conftest import LINE, ROOT, VERSION

from sglang_specv2_fixes import installed, patchfile, releases
from sglang_specv2_fixes.catalog import Patched
from sglang_specv2_fixes.fingerprint import fingerprint_source, function_source
from sglang_specv2_fixes.fixes import ALL_FIXES
from sglang_specv2_fixes.patchfile import MAGIC, MARK, PatchError

FIX = "fake-fix"
_IDS = itertools.count()

PRISTINE = '''"""A module standing in for an SGLang one."""

import os

CONST = 3


def helper(x):
    y = x + CONST
    return y


class Thing:
    def __init__(self):
        self.n = 0

    @staticmethod
    def unrelated():
        return os.sep

    def step(self, k):
        a = k + 1
        b = a * 2
        c = b - 3
        d = c + 4
        return d

    def other(self):
        return "other"


def tail():
    return 1
'''

EDITED = PRISTINE.replace(
    "    y = x + CONST\n", "    y = x + CONST + 1  # specv2-fixes(fake-fix): one more\n"
).replace(
    "        c = b - 3\n",
    "        if k < 0:\n"
    "            raise ValueError(\"the patched line ran\")  # specv2-fixes(fake-fix): refuse negatives\n"
    "        c = b - 5  # specv2-fixes(fake-fix): five, not three\n",
)
TARGETS = [("helper",), ("Thing.step",)]


@pytest.fixture
def pkg(tmp_path, monkeypatch):
    """A fresh importable package holding PRISTINE; returns (root, module name, rel path, patch text)."""
    name = f"specv2_fake_{os.getpid()}_{next(_IDS)}"
    module = f"{name}.mod"
    rel = f"{name}/mod.py"
    for root, text in (("pristine", PRISTINE), ("edited", EDITED)):
        d = tmp_path / root / name
        d.mkdir(parents=True)
        (d / "__init__.py").write_text("")
        (d / "mod.py").write_text(text)
    text = patchfile.render(FIX, "0.0.1", str(tmp_path / "pristine"), str(tmp_path / "edited"),
                            [(module, "helper"), (module, "Thing.step")], "a synthetic change for the tests")
    monkeypatch.syspath_prepend(str(tmp_path / "pristine"))
    yield str(tmp_path / "pristine"), module, rel, text
    for m in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[m]


# -------------------------------------------------------------------------------------------- parsing
def test_rendered_file_parses_with_fingerprints_and_spans(pkg):
    root, module, rel, text = pkg
    assert text.splitlines()[0] == MAGIC
    pf = patchfile.parse(text)
    assert pf.fix == FIX and pf.written_against == "sglang 0.0.1"
    assert [t.dotted for t in pf.targets] == [f"{module}.helper", f"{module}.Thing.step"]
    assert pf.description == "a synthetic change for the tests"
    for t in pf.targets:
        src, first, last = function_source(PRISTINE, t.qualname)
        assert t.before == fingerprint_source(src) and t.span == (first, last)
        assert t.after == fingerprint_source(function_source(EDITED, t.qualname)[0])
        assert t.rel_path == rel
    ((frel, hunks),) = pf.files
    assert frel == rel and len(hunks) == 2
    # context is trimmed to the target function: nothing from outside its span is required
    for h, t in zip(hunks, pf.targets):
        assert t.span[0] <= h.first_index + 1 and h.first_index + h.old_len <= t.span[1]


def _header_line(text, prefix):
    return next(ln for ln in text.splitlines() if ln.startswith(prefix))


@pytest.mark.parametrize("mutate,message", [
    (lambda t: t.replace(MAGIC, "specv2-fixes-patch: 2", 1), "first line must be"),
    (lambda t: "\n" + t, "first line must be"),
    (lambda t: t.replace("fix: fake-fix\n", "", 1), "header needs fix:"),
    (lambda t: t.replace("written-against: sglang 0.0.1\n", "", 1), "header needs fix:"),
    (lambda t: re.sub(r"(?m)^target: .*\n", "", t), "header needs fix:"),
    (lambda t: t.replace("written-against:", "written-against: sglang 0.0.1\nreviewed-by: nobody\nwritten-against:", 1),
     "unknown header line"),
    (lambda t: re.sub(r"before=[0-9a-f]{16}", "before=xyz", t, count=1), "malformed target line"),
    (lambda t: re.sub(r"span=\d+-\d+", "span=10", t, count=1), "malformed target line"),
    (lambda t: t[: t.index("--- a/")], "no diff"),
    (lambda t: re.sub(r"(?m)^\+\+\+ b/.*\n", "", t), "expected a '--- a/' '+++ b/' file header"),
    (lambda t: re.sub(r"(?m)^@@ -(\d+),(\d+) ", r"@@ -\1;\2 ", t, count=1), "malformed hunk header"),
    (lambda t: t[: t.index("@@")] , "no hunks for"),
    (lambda t: t.rstrip("\n").rsplit("\n", 1)[0] + "\n", "is truncated"),
    (lambda t: re.sub(r"(?m)^ (        b = a \* 2)$", r"x\1", t, count=1), "unexpected line in hunk"),
])
def test_parse_errors(pkg, mutate, message):
    text = pkg[3]
    bad = mutate(text)
    assert bad != text, "the mutation must change the file"
    with pytest.raises(PatchError, match=re.escape(message)):
        patchfile.parse(bad, "bad.patch")


@pytest.mark.parametrize("which", [0, 1])
def test_hunk_outside_its_target_is_refused(pkg, which):
    """Every hunk's changed lines must lie inside one target's span (the fingerprint covers the
    function only): shrinking a target's span to exclude its own hunk is a parse error."""
    text = pkg[3]
    line = [ln for ln in text.splitlines() if ln.startswith("target: ")][which]
    a, b = map(int, re.search(r"span=(\d+)-(\d+)", line).groups())
    bad = text.replace(line, line.replace(f"span={a}-{b}", f"span={a}-{a}"))
    with pytest.raises(PatchError, match="reaches outside its target function"):
        patchfile.parse(bad)
    assert patchfile.parse(bad, check_spans=False)  # the check is what refuses it


def test_load_requires_the_header_fix_to_match_the_directory(pkg, tmp_path, monkeypatch):
    text = pkg[3]
    for fix in (FIX, "another-fix"):
        (tmp_path / "patches" / fix).mkdir(parents=True)
        (tmp_path / "patches" / fix / "0.0.1.patch").write_text(text)
    monkeypatch.setattr(patchfile, "PATCH_DIR", str(tmp_path / "patches"))
    patchfile.load.cache_clear()
    try:
        assert patchfile.load(FIX, "0.0.1").fix == FIX
        with pytest.raises(PatchError, match="header says fix 'fake-fix', file is stored under 'another-fix'"):
            patchfile.load("another-fix", "0.0.1")
    finally:
        patchfile.load.cache_clear()


# ------------------------------------------------------------------------------------------- applying
def test_exact_apply_gives_the_edited_text(pkg):
    _, _, rel, text = pkg
    assert patchfile.apply_text(patchfile.parse(text), rel, PRISTINE) == EDITED


@pytest.mark.parametrize("old,new", [
    ("        b = a * 2\n", "        b = a * 2  # local edit\n"),  # a context line
    ("        c = b - 3\n", "        c = b - 4\n"),  # a removed line
    ("    y = x + CONST\n", "    y = x + CONST  \n"),  # trailing whitespace counts too
])
def test_changed_context_or_removed_line_does_not_apply(pkg, old, new):
    _, _, rel, text = pkg
    assert old in PRISTINE
    with pytest.raises(PatchError, match="does not apply exactly"):
        patchfile.apply_text(patchfile.parse(text), rel, PRISTINE.replace(old, new, 1))


def test_missing_target_does_not_apply(pkg):
    _, module, rel, text = pkg
    with pytest.raises(PatchError, match=re.escape(f"{module}.Thing.step not found")):
        patchfile.apply_text(patchfile.parse(text), rel, PRISTINE.replace("def step(", "def stepped(", 1))


def test_no_diff_for_an_unrelated_file(pkg):
    _, _, _, text = pkg
    with pytest.raises(PatchError, match="no diff for other/file.py"):
        patchfile.apply_text(patchfile.parse(text), "other/file.py", PRISTINE)


def test_hunks_move_with_their_own_function(pkg):
    """A release whose target functions are unchanged but moved reuses the file: each hunk shifts by
    its own target's offset (here helper +2, Thing.step +2+3), never by fuzzy search."""
    _, _, rel, text = pkg
    pf = patchfile.parse(text)

    def shift(t):
        t = t.replace("CONST = 3\n", "CONST = 3\nEXTRA = 1\nMORE = 2\n", 1)  # before helper
        return t.replace("        self.n = 0\n", "        self.n = 0\n        self.m = 1\n        self.o = 2\n        self.p = 3\n", 1)

    moved = shift(PRISTINE)
    assert function_source(moved, "helper")[1] == function_source(PRISTINE, "helper")[1] + 2
    assert function_source(moved, "Thing.step")[1] == function_source(PRISTINE, "Thing.step")[1] + 5
    assert patchfile.apply_text(pf, rel, moved) == shift(EDITED)


def test_a_hunk_does_not_jump_to_a_lookalike_elsewhere(pkg):
    """Exactness: when the target's own lines differ, an identical block elsewhere in the file is not
    used (GNU patch without --fuzz would happily search for it)."""
    _, _, rel, text = pkg
    lookalike = PRISTINE.replace(
        "    def other(self):\n",
        "    def step_copy(self, k):\n        a = k + 1\n        b = a * 2\n        c = b - 3\n        d = c + 4\n"
        "        return d\n\n    def other(self):\n",
    ).replace("        a = k + 1\n        b = a * 2\n", "        a = k + 1\n        b = a * 3\n", 1)
    with pytest.raises(PatchError, match="does not apply exactly"):
        patchfile.apply_text(patchfile.parse(text), rel, lookalike)


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch not installed")
@pytest.mark.parametrize("moved", [False, True])
def test_gnu_patch_applies_the_same_file_identically(pkg, tmp_path, moved):
    """The stored file is a plain unified diff: ``patch -p1 --fuzz=0`` gives the text the plugin computes.
    Here the change in Thing.step sits two lines before the function's end, so render() trims the
    trailing context (outside the span) to 2 lines while 3 leading lines stay: GNU patch reads a hunk
    with less trailing than leading context as anchored to the end of the file and refuses it."""
    _, _, rel, text = pkg
    pf = patchfile.parse(text)
    base = PRISTINE.replace("CONST = 3\n", "CONST = 3\nEXTRA = 1\n") if moved else PRISTINE
    tree = tmp_path / "gnu"
    (tree / os.path.dirname(rel)).mkdir(parents=True)
    (tree / rel).write_text(base)
    (tmp_path / "x.patch").write_text(text)
    p = subprocess.run(["patch", "-p1", "--fuzz=0", "--no-backup-if-mismatch", "-i", str(tmp_path / "x.patch")],
                       cwd=tree, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (tree / rel).read_text() == patchfile.apply_text(pf, rel, base)


# ----------------------------------------------------------------------------------------- compiling
def test_build_compiles_into_the_module_and_tracebacks_show_the_patched_line(pkg):
    root, module, rel, text = pkg
    import importlib

    mod = importlib.import_module(module)
    built = patchfile.build(patchfile.parse(text), root)
    assert sorted(built) == [f"{module}.Thing.step", f"{module}.helper"]
    step, helper = built[f"{module}.Thing.step"], built[f"{module}.helper"]
    path = os.path.join(root, rel)
    for target, fn in built.items():
        assert fn.__globals__ is mod.__dict__  # upstream module globals (CONST, os)
        assert getattr(fn, MARK) == f"{FIX}:{target}"
        assert fn.__module__ == module and fn.__qualname__ == target[len(module) + 1:]
        assert fn.__code__.co_filename == f"{path} [specv2-fixes {FIX}]"
        assert fn.__code__.co_filename.endswith(f"[specv2-fixes {FIX}]")
        # line numbers are those of the patched file, whose text linecache serves
        first = function_source(EDITED, fn.__qualname__)[1]
        assert fn.__code__.co_firstlineno == first
        assert linecache.getline(fn.__code__.co_filename, first) == EDITED.splitlines(True)[first - 1]
    assert helper(1) == 1 + 3 + 1
    assert step(mod.Thing(), 1) == (1 + 1) * 2 - 5 + 4
    assert mod.Thing().step(1) == (1 + 1) * 2 - 3 + 4  # the module itself is untouched
    with pytest.raises(ValueError) as e:
        step(mod.Thing(), -1)
    frame = traceback.extract_tb(e.value.__traceback__)[-1]
    assert frame.filename.endswith(f"[specv2-fixes {FIX}]")
    assert frame.line == 'raise ValueError("the patched line ran")  # specv2-fixes(fake-fix): refuse negatives'
    assert EDITED.splitlines()[frame.lineno - 1].strip() == frame.line


def test_deferred_functions_compile_once_on_their_first_call(pkg, monkeypatch):
    """``deferred`` (what register asks for): the fingerprints are checked at build time, but a plain def is compiled
    on its first call, once, however many threads call it at once; until then it shows the patched source, with the
    names, globals, file and mark of the eager build, and after it it is that build's code, in the same object."""
    import builtins
    import importlib
    import inspect
    import threading
    import time

    root, module, _, text = pkg
    monkeypatch.setenv("SGLANG_SPECV2_FIXES_CODE_CACHE", "0")
    mod = importlib.import_module(module)
    compiled = []
    real = builtins.compile

    def slow_compile(*a, **k):  # widens the window in which the threads below meet
        compiled.append(a[1])
        time.sleep(0.05)
        return real(*a, **k)

    monkeypatch.setattr(patchfile, "compile", slow_compile, raising=False)
    pf = patchfile.parse(text)
    eager = patchfile.build(pf, root)
    assert len(compiled) == 2
    later = patchfile.build(pf, root, deferred=True)
    assert len(compiled) == 2 and later.keys() == eager.keys()
    for target, fn in later.items():
        assert patchfile.is_deferred(fn) and not patchfile.is_deferred(eager[target])
        assert getattr(fn, MARK) == getattr(eager[target], MARK)
        assert (fn.__module__, fn.__qualname__, fn.__name__) == (eager[target].__module__, eager[target].__qualname__,
                                                                 eager[target].__name__)
        assert fn.__globals__ is mod.__dict__ and fn.__code__.co_filename == eager[target].__code__.co_filename
        assert inspect.getsource(fn) == inspect.getsource(eager[target]) and "specv2-fixes(fake-fix)" in inspect.getsource(fn)
    helper, step = later[f"{module}.helper"], later[f"{module}.Thing.step"]
    assert helper(1) == 1 + 3 + 1 and len(compiled) == 3 and not patchfile.is_deferred(helper)
    assert helper.__code__ == eager[f"{module}.helper"].__code__
    assert helper(2) == 2 + 3 + 1 and len(compiled) == 3  # compiled once
    out, gate = [], threading.Barrier(8)

    def call():
        gate.wait()
        out.append(step(mod.Thing(), 1))

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == [(1 + 1) * 2 - 5 + 4] * 8 and len(compiled) == 4
    assert step.__code__ == eager[f"{module}.Thing.step"].__code__ and patchfile.materialize(step) is step
    with pytest.raises(ValueError) as e:  # a traceback shows the patched line, as the eager build's does
        step(mod.Thing(), -1)
    assert traceback.extract_tb(e.value.__traceback__)[-1].line.startswith('raise ValueError("the patched line ran")')
    # a fingerprint that does not match is refused at build time, deferred or not, with nothing compiled
    bad = text.replace(pf.targets[0].after, "0" * 16)
    with pytest.raises(PatchError, match="header says after=0000000000000000"):
        patchfile.build(patchfile.parse(bad), root, deferred=True)
    assert len(compiled) == 4
    # what waits: a plain def only (a decorator, async def or class is compiled at once)
    assert [patchfile._deferrable(s) for s in ("    def f(self):\n", "@x\ndef f():\n", "async def f():\n",
                                               "class A:\n")] == [True, False, False, False]


def test_compiled_functions_are_kept_and_reused_by_source(pkg, tmp_path, monkeypatch):
    """The code cache (start cost): a second build loads each patched function's code from the cache folder, the same
    code a compile gives; an entry that cannot be read is compiled again and rewritten; a changed source is a new
    entry; ``SGLANG_SPECV2_FIXES_CODE_CACHE=0`` and ``sys.dont_write_bytecode`` write nothing."""
    import builtins

    root, module, _, text = pkg
    cache = tmp_path / "code"
    monkeypatch.setenv("SGLANG_SPECV2_FIXES_CODE_CACHE", str(cache))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    compiled = []
    real = builtins.compile
    monkeypatch.setattr(patchfile, "compile", lambda *a, **k: compiled.append(a[1]) or real(*a, **k), raising=False)
    pf = patchfile.parse(text)
    first = patchfile.build(pf, root)
    codes = lambda: sorted(cache.glob("*.code"))  # noqa: E731 (the folder also keeps function spans)
    assert len(compiled) == 2 and len(codes()) == 2
    again = patchfile.build(pf, root)
    assert len(compiled) == 2  # both from the cache
    for target, fn in again.items():
        assert fn.__code__ == first[target].__code__ and fn is not first[target]
    assert again[f"{module}.helper"](1) == 1 + 3 + 1
    entry = codes()[0]
    entry.write_bytes(b"not marshal data")
    patchfile.build(pf, root)
    assert len(compiled) == 3 and entry.read_bytes() != b"not marshal data"
    fp, other = patchfile._compile_cached("x = 1\n", "other.py")
    assert len(compiled) == 4 and len(codes()) == 3 and other.co_filename == "other.py"
    assert fp == fingerprint_source("x = 1\n") and patchfile._compile_cached("x = 1\n", "other.py") == (fp, other)
    assert len(compiled) == 4  # the fingerprint came from the entry too
    # a source whose fingerprint is not the one expected is not compiled, nor kept
    bad = patchfile._compile_cached("x = (\n", "other.py", 1, "0123456789abcdef")
    assert bad == (fingerprint_source("x = (\n"), None) and len(compiled) == 4 and len(codes()) == 3
    # the entry is named by the first line too: the same source elsewhere in the file is other code
    at = {}
    for first in (1, 7):
        ns: dict = {}
        exec(patchfile._compile_cached("def f():\n    return 1\n", "other.py", first)[1], ns)
        at[first] = ns["f"].__code__.co_firstlineno
    assert at == {1: 1, 7: 7} and len(compiled) == 6 and len(codes()) == 5
    for off in ({"SGLANG_SPECV2_FIXES_CODE_CACHE": "0"}, {"dont_write_bytecode": True}):
        folder = tmp_path / f"none-{len(compiled)}"
        monkeypatch.setenv("SGLANG_SPECV2_FIXES_CODE_CACHE", off.get("SGLANG_SPECV2_FIXES_CODE_CACHE", str(folder)))
        monkeypatch.setattr(sys, "dont_write_bytecode", off.get("dont_write_bytecode", False))
        patchfile._compile_cached("y = 2\n", "other.py")
        assert not folder.exists()
    assert len(compiled) == 8


def test_after_fingerprint_mismatch_is_an_error(pkg):
    root, module, _, text = pkg
    after = re.search(r"Thing\.step before=[0-9a-f]{16} after=([0-9a-f]{16})", text).group(1)
    bad = text.replace(f"after={after}", "after=0123456789abcdef")
    with pytest.raises(PatchError, match=rf"patched {re.escape(module)}\.Thing\.step has fingerprint {after}, "
                                         r"header says after=0123456789abcdef"):
        patchfile.build(patchfile.parse(bad), root)


def test_zero_argument_super_is_refused(tmp_path, monkeypatch):
    name = f"specv2_fake_super_{os.getpid()}_{next(_IDS)}"
    src = "class Base:\n    def f(self):\n        return 1\n\n\nclass Child(Base):\n    def f(self):\n        return super().f()\n"
    for root, text in (("pristine", src), ("edited", src.replace("super().f()", "super().f() + 1"))):
        (tmp_path / root / name).mkdir(parents=True)
        (tmp_path / root / name / "__init__.py").write_text("")
        (tmp_path / root / name / "mod.py").write_text(text)
    text = patchfile.render(FIX, "0.0.1", str(tmp_path / "pristine"), str(tmp_path / "edited"),
                            [(f"{name}.mod", "Child.f")], "x")
    monkeypatch.syspath_prepend(str(tmp_path / "pristine"))
    try:
        with pytest.raises(PatchError, match="zero-argument super"):
            patchfile.build(patchfile.parse(text), str(tmp_path / "pristine"))
    finally:
        sys.modules.pop(f"{name}.mod", None)
        sys.modules.pop(name, None)


def test_check_command(pkg, tmp_path):
    root, _, _, text = pkg
    (tmp_path / "x.patch").write_text(text)
    cmd = [sys.executable, "-m", "sglang_specv2_fixes.patchfile", "check", str(tmp_path / "x.patch"), "--root"]
    p = subprocess.run(cmd + [root], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("before ok, after ok") == 2
    p = subprocess.run(cmd + [str(tmp_path / "edited")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and "does not apply exactly" in p.stderr


# ------------------------------------------------------------------------ the installed release's files
PATCHED_HERE = [f.name for f in ALL_FIXES if LINE and isinstance(releases.entry(f.name, LINE), Patched)]


@pytest.mark.skipif(not PATCHED_HERE, reason=f"nothing patched on sglang {VERSION}")
@pytest.mark.parametrize("fix", PATCHED_HERE)
def test_installed_source_with_one_changed_line_does_not_apply(fix):
    """Each hunk of the real patch file, against the real installed file with the hunk's first
    context/removed line edited: PatchError (no fuzz, no search)."""
    pf = patchfile.load(fix, releases.entry(fix, LINE).name)
    root = os.path.dirname(installed.sglang_root())
    for rel, hunks in pf.files:
        text = open(os.path.join(root, rel), encoding="utf-8").read()
        assert patchfile.apply_text(pf, rel, text) != text
        for h in hunks:
            old = h.old
            if not old:
                continue
            t = patchfile._owner(h, pf.targets_in(rel))
            start = h.first_index + function_source(text, t.qualname)[1] - t.span[0]  # where it applies here
            lines = text.splitlines(True)
            assert [ln.rstrip("\n") for ln in lines[start:start + len(old)]] == old
            lines[start] = lines[start].rstrip("\n") + "  # local edit\n"
            with pytest.raises(PatchError, match="does not apply exactly"):
                patchfile.apply_text(pf, rel, "".join(lines))


# ------------------------------------------------------------------ two fixes on one function (``compose:`` lines)
SECOND = "other-fake-fix"
# a second fix on Thing.step, written against PRISTINE like the first: it changes ``return d``, below the first file's
# hunk there, which adds two lines above it (one line of context: three would reach ``c = b - 3``, which the first
# file changes, and could not compose)
EDITED_2 = PRISTINE.replace("        return d\n", "        return d * 10  # specv2-fixes(other-fake-fix): ten times\n")


def _second(tmp_path, root, module, compose=(), context=1):
    name = module.split(".")[0]
    d = tmp_path / f"edited2-{next(_IDS)}" / name
    d.mkdir(parents=True)
    (d / "mod.py").write_text(sys.modules[__name__].EDITED_2)
    return patchfile.render(SECOND, "0.0.1", root, str(d.parent), [(module, "Thing.step")], "a second change",
                            context=context, compose=compose)


def test_a_compose_line_builds_the_shared_function_from_both_files_in_order(pkg, tmp_path, monkeypatch):
    import importlib

    root, module, rel, text = pkg
    first = patchfile.parse(text, "first.patch")
    monkeypatch.setattr(patchfile, "load", lambda fix, name: first)  # what --compose FIX/NAME reads
    second = patchfile.parse(_second(tmp_path, root, module, compose=[f"{FIX}/0.0.1"]), "second.patch")
    (c,) = second.composes
    assert (c.fix, c.dotted) == (FIX, f"{module}.Thing.step")
    assert c.before == first.targets[1].after  # the first file's result
    assert c.after not in (second.targets[0].after, first.targets[1].after)  # checked on compile by build_stack
    mod = importlib.import_module(module)
    built = patchfile.build_stack([first, second], root)
    assert sorted(built) == [f"{module}.Thing.step", f"{module}.helper"]
    step = built[f"{module}.Thing.step"]
    assert step(mod.Thing(), 1) == ((1 + 1) * 2 - 5 + 4) * 10  # both changes
    assert getattr(step, MARK) == f"{FIX}+{SECOND}:{module}.Thing.step"
    assert getattr(built[f"{module}.helper"], MARK) == f"{FIX}:{module}.helper"  # not shared: the first file's own
    assert patchfile.build(second, root)[f"{module}.Thing.step"](mod.Thing(), 1) == ((1 + 1) * 2 - 3 + 4) * 10  # alone
    # the other order, or no compose line: refused before anything is compiled
    with pytest.raises(PatchError, match=f"no compose line for {SECOND}"):
        patchfile.build_stack([second, first], root)
    plain = patchfile.parse(_second(tmp_path, root, module), "plain.patch")
    with pytest.raises(PatchError, match=f"also changed by first.patch, and this file has no compose line for {FIX}"):
        patchfile.build_stack([first, plain], root)
    # a wrong composed fingerprint fails like any after=
    bad = patchfile.parse(_second(tmp_path, root, module, compose=[f"{FIX}/0.0.1"]).replace(
        f"after={c.after}", "after=0123456789abcdef"), "bad.patch")
    with pytest.raises(PatchError, match="header says after=0123456789abcdef"):
        patchfile.build_stack([first, bad], root)


def test_hunks_that_overlap_what_the_earlier_file_changed_do_not_compose(pkg, tmp_path, monkeypatch):
    """The later file's hunk moves by the lines the earlier one added above it in the function (above: composes); a
    hunk whose context the earlier file changed does not find its lines there (no search): PatchError, never a
    misplaced edit. The compose line cannot even be written for it."""
    root, module, rel, text = pkg
    first = patchfile.parse(text, "first.patch")
    monkeypatch.setattr(patchfile, "load", lambda fix, name: first)
    second = patchfile.parse(_second(tmp_path, root, module, compose=[f"{FIX}/0.0.1"]), "second.patch")
    (hunk,) = dict(second.files)[rel]
    assert hunk.first_index > dict(first.files)[rel][1].first_index  # below the first file's hunk: composed above
    monkeypatch.setattr(sys.modules[__name__], "EDITED_2",  # ``d = c + 4``, one line of context: ``c = b - 3``
                        PRISTINE.replace("        d = c + 4\n", "        d = c + 40  # specv2-fixes(other-fake-fix)\n"))
    with pytest.raises(PatchError, match="does not apply exactly"):
        _second(tmp_path, root, module, compose=[f"{FIX}/0.0.1"])
    near = patchfile.parse(_second(tmp_path, root, module), "near.patch")
    assert patchfile.build(near, root)  # alone it applies
    near = dataclasses.replace(near, composes=(dataclasses.replace(second.composes[0]),))
    with pytest.raises(PatchError, match="near.patch: hunk .* does not apply exactly"):
        patchfile.build_stack([first, near], root)


@pytest.mark.parametrize("line,message", [
    ("compose: fake-fix {m} Thing.step before=0123456789abcdef after=0123456789abcdef", "not a target of this file"),
    ("compose: other {m} Nothing before=0123456789abcdef after=0123456789abcdef", "not a target of this file"),
    ("compose: other {m} Thing.step before=xyz after=0123456789abcdef", "malformed compose line"),
])
def test_compose_line_errors(pkg, line, message):
    root, module, rel, text = pkg
    head, rest = text.split("\n\n", 1)
    with pytest.raises(PatchError, match=message):
        patchfile.parse(head + "\n" + line.format(m=module) + "\n\n" + rest)


# ------------------------------------------------------------------------------- the message command
def test_message_replaces_the_free_text_only(tmp_path):
    """``patchfile message``: every stored file reads back as itself (a file whose message render filled), a new
    message changes the text between the header and the first hunk and nothing else, and a message that would change
    more (a line that reads as a header or hunk) is refused."""
    import glob

    files = sorted(glob.glob(os.path.join(ROOT, "patches", "*", "*.patch")))
    assert len(files) > 100
    same = 0
    for path in files:
        text = open(path, encoding="utf-8").read()
        if patchfile.with_message(text, patchfile.message_of(text)) == text:
            same += 1
        new = patchfile.with_message(text, "What changes and why. " * 12)
        assert patchfile.message_of(new) == ("What changes and why. " * 12).strip()
        assert new.split("\n\n", 1)[0] == text.split("\n\n", 1)[0]  # the header, fingerprints included
        assert new[new.index("\n--- a/"):] == text[text.index("\n--- a/"):]  # every hunk
    assert same >= len(files) - 2  # hand-wrapped messages aside, the stored files are render's fill
    path = tmp_path / "x.patch"
    path.write_text(open(files[0], encoding="utf-8").read(), encoding="utf-8")
    old = patchfile.message_of(path.read_text(encoding="utf-8"))
    word = old.split()[3]
    assert patchfile._main(["message", str(path), "--replace", word, "WORD"]) == 0
    assert patchfile.message_of(path.read_text(encoding="utf-8")) == old.replace(word, "WORD")
    assert patchfile._main(["message", str(path), "--replace", "no such text", "x"]) == 1
    with pytest.raises(PatchError):  # filled, the second line would start a file's diff
        patchfile.with_message(path.read_text(encoding="utf-8"), "x" * 99 + " --- a/sglang/x.py +++ b/sglang/x.py")
