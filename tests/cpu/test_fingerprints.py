"""Fingerprint refusal and recognition of an already-patched source tree, for every fix the release
under test patches (every target of its patch file), on every patched release the CPU suite runs."""

import shutil

import pytest
from conftest import LINE, VERSION, requires_sglang

from sglang_specv2_fixes import catalog, core, installed, patchfile, releases, selection
from sglang_specv2_fixes.catalog import Note, Patched
from sglang_specv2_fixes.core import STATE
from sglang_specv2_fixes.fingerprint import fingerprint_source, function_source, normalise
from sglang_specv2_fixes.fixes import ALL_FIXES


pytestmark = [requires_sglang, pytest.mark.release_scoped]  # release_scoped: runs on every release in CI
AUTO = selection.parse("auto", ALL_FIXES)
PATCHED_HERE = [f.name for f in ALL_FIXES if LINE and isinstance(releases.entry(f.name, LINE), Patched)]
TARGETS_HERE = [(fix, t) for fix in PATCHED_HERE for t in patchfile.load(fix, releases.entry(fix, LINE).name).targets]
CHECKED_NOTES = [f.name for f in ALL_FIXES if LINE and isinstance(releases.entry(f.name, LINE), Note)
                 and releases.entry(f.name, LINE).check and releases.entry(f.name, LINE).check[2]]
# notes whose check says the function is absent here (fingerprint None)
ABSENT_NOTES = [f.name for f in ALL_FIXES if LINE and isinstance(releases.entry(f.name, LINE), Note)
                and releases.entry(f.name, LINE).check and releases.entry(f.name, LINE).check[2] is None]


def _ids(ft):
    return f"{ft[0]}:{ft[1].qualname}" if isinstance(ft, tuple) else str(ft)


@pytest.fixture(autouse=True)
def _fresh_state():
    STATE.reset()
    yield
    STATE.reset()


def test_the_release_under_test_patches_something():
    assert VERSION in releases.release_set("patched")
    assert PATCHED_HERE and TARGETS_HERE, f"no patched fix on sglang {VERSION}: every test below would be vacuous"


def test_normalisation_ignores_indentation_and_blank_lines_only():
    a = "    def f(x):\n\n        return x  \n"
    assert normalise(a) == "def f(x):\n    return x"
    assert fingerprint_source(a) == fingerprint_source("def f(x):\n    return x\n")
    assert fingerprint_source(a) != fingerprint_source("def f(x):\n    return x + 0\n")
    assert fingerprint_source(a) != fingerprint_source("def f(x):\n    # a comment counts\n    return x\n")


def _with_edited_modules(monkeypatch, tmp_path, edits):
    """Point the plan at copies of the installed modules, each edited by ``edits[module](text) -> text``."""
    copies = {}
    for i, (module, edit) in enumerate(edits.items()):
        real = installed.module_file(module)
        copy = tmp_path / f"copy{i}_{module.rsplit('.', 1)[-1]}.py"
        shutil.copy(real, copy)
        new = edit(copy.read_text())
        assert new != copy.read_text(), f"the edit of {module} changed nothing"
        copy.write_text(new)
        copies[module] = str(copy)
    orig = installed.module_file
    monkeypatch.setattr(installed, "module_file", lambda m, root=None: copies.get(m) or orig(m, root))
    return copies


def _edit_function(qualname, how):
    """An edit of ``qualname`` only: ``how(lines of the function) -> lines``."""

    def edit(text):
        _, first, last = function_source(text, qualname)
        lines = text.splitlines(True)
        return "".join(lines[: first - 1] + how(lines[first - 1 : last]) + lines[last:])

    return edit


def _local_edit(lines):  # one comment appended to the function's last line: fingerprints count comments
    return lines[:-1] + [lines[-1].rstrip("\n") + "  # local edit\n"]


def _rename(qualname):
    name = qualname.rsplit(".", 1)[-1]

    def how(lines):
        i = next(i for i, ln in enumerate(lines) if f"def {name}(" in ln)
        return lines[:i] + [lines[i].replace(f"def {name}(", f"def {name}_renamed(", 1)] + lines[i + 1 :]

    return how


def _baseline():
    return {st.name: st.state for st in core.plan(AUTO).fixes}


@pytest.mark.parametrize("fix_target", TARGETS_HERE, ids=_ids)
def test_locally_modified_target_is_refused(monkeypatch, tmp_path, fix_target):
    fix, t = fix_target
    base = _baseline()
    _with_edited_modules(monkeypatch, tmp_path, {t.module: _edit_function(t.qualname, _local_edit)})
    report = core.plan(AUTO)
    st = report.get(fix)
    assert st.state == catalog.REFUSED
    edited = next(c for c in st.targets if c.target == t.dotted)
    assert not edited.ok and edited.installed and edited.installed != t.before
    # a clear message naming the target, both fingerprints, the patch file and the reason
    assert f"{t.dotted}: installed source has fingerprint {edited.installed}" in st.reason
    assert f"patches/{fix}/{releases.entry(fix, LINE).name}.patch was written against {t.before}" in st.reason
    assert "refusing to patch" in st.reason
    assert [w for w in report.warnings if w.startswith(f"{fix} refused")] == [f"{fix} refused: {st.reason}"]
    # only this fix's other targets are fine, and no other fix is affected
    assert all(c.ok for c in st.targets if c.target != t.dotted)
    for other in report.fixes:
        if other.name != fix and t.dotted not in [c.target for c in other.targets]:
            assert other.state == base[other.name], (other.name, other.state, other.reason)
    # nothing is built or registered for a refused fix
    core.register(core.plan(AUTO, fixes=[f for f in ALL_FIXES if f.name == fix]))
    assert fix not in STATE.built


@pytest.mark.parametrize("fix_target", TARGETS_HERE, ids=_ids)
def test_missing_target_is_refused(monkeypatch, tmp_path, fix_target):
    fix, t = fix_target
    _with_edited_modules(monkeypatch, tmp_path, {t.module: _edit_function(t.qualname, _rename(t.qualname))})
    report = core.plan(AUTO)
    st = report.get(fix)
    assert st.state == catalog.REFUSED
    assert f"{t.dotted} not found in the installed sglang" in st.reason
    assert next(c for c in st.targets if c.target == t.dotted).installed is None
    assert any(w.startswith(f"{fix} refused") for w in report.warnings)
    with pytest.raises(patchfile.PatchError, match="installed source is not what"):
        core.build_fix(fix)


@pytest.mark.parametrize("fix", PATCHED_HERE)
def test_source_already_carrying_the_patch_is_present_not_patched_twice(monkeypatch, tmp_path, fix):
    """The installed files with this fix's patch file applied (patchfile.apply_text, as ``patch -p1
    --fuzz=0`` would: test_patches checks the two agree): PRESENT, nothing built or registered."""
    from sglang.srt.plugins.hook_registry import HookRegistry

    pf = patchfile.load(fix, releases.entry(fix, LINE).name)
    modules = {t.module: t.rel_path for t in pf.targets}
    _with_edited_modules(monkeypatch, tmp_path, {m: (lambda text, rel=rel: patchfile.apply_text(pf, rel, text))
                                                 for m, rel in modules.items()})
    report = core.plan(AUTO)
    st = report.get(fix)
    assert st.state == catalog.PRESENT, (st.state, st.reason)
    assert st.reason == f"the installed source already carries patches/{fix}/{releases.entry(fix, LINE).name}.patch"
    assert [c.installed for c in st.targets] == [t.after for t in pf.targets]
    assert not any(w.startswith(fix) for w in report.warnings)
    hooks_before = {k: list(v) for k, v in HookRegistry._hooks.items()}
    core.register(core.plan(AUTO, fixes=[f for f in ALL_FIXES if f.name == fix]))
    assert fix not in STATE.built and not STATE.ours
    assert {k: list(v) for k, v in HookRegistry._hooks.items() if v} == {k: v for k, v in hooks_before.items() if v}
    # a selection that names it explicitly does not patch it twice either
    sel = selection.parse(fix, ALL_FIXES)
    assert core.plan(sel).get(fix).state == catalog.PRESENT


def test_partly_present_patch_is_refused_naming_the_target(monkeypatch, tmp_path):
    """A fix with several targets where only the first carries the patch (a partial manual patch, or an
    upstream change that moved one of them): neither ready nor present, and the reason says which
    target is in which state."""
    multi = [(fix, patchfile.load(fix, releases.entry(fix, LINE).name)) for fix in PATCHED_HERE]
    multi = [(fix, pf) for fix, pf in multi if len(pf.targets) > 1]
    if not multi:
        pytest.skip(f"no fix patches more than one function on sglang {VERSION}")
    fix, pf = multi[0]
    first = pf.targets[0]

    def only_first(text):
        src = function_source(patchfile.apply_text(pf, first.rel_path, text), first.qualname)[0]
        _, a, b = function_source(text, first.qualname)
        lines = text.splitlines(True)
        return "".join(lines[: a - 1]) + src + "".join(lines[b:])

    _with_edited_modules(monkeypatch, tmp_path, {first.module: only_first})
    st = core.plan(AUTO).get(fix)
    assert st.state == catalog.REFUSED, (st.state, st.reason)
    assert st.targets[0].installed == first.after and all(c.ok for c in st.targets[1:])
    assert first.dotted in st.reason, f"the reason names no target: {st.reason!r}"


@pytest.mark.parametrize("fix", CHECKED_NOTES)
def test_note_reports_unverified_source(monkeypatch, tmp_path, fix):
    entry = releases.entry(fix, LINE)
    module, qualname, _ = entry.check
    _with_edited_modules(monkeypatch, tmp_path, {module: _edit_function(qualname, _local_edit)})
    st = core.plan(AUTO).get(fix)
    # the table's state is not taken on trust: the installed code is not what the note describes
    assert st.state == catalog.UNVERIFIED and entry.state in st.reason and "not verified" in st.reason
    assert not st.targets[0].ok


@pytest.mark.parametrize("fix", ABSENT_NOTES)
def test_note_of_absent_code_is_verified_only_while_absent(monkeypatch, fix):
    """A not-applicable note whose check expects the function absent: verified on the release (the function is not
    there); once a function of that name exists (an edited install, a backport) the note is not verified."""
    entry = releases.entry(fix, LINE)
    st = core.plan(AUTO).get(fix)
    assert st.state == entry.state and "source verified" in st.reason and st.targets[0].ok
    monkeypatch.setattr(core, "_installed_fp", lambda module, qualname: "0123456789abcdef")
    st = core.plan(AUTO).get(fix)
    assert st.state == catalog.UNVERIFIED and "not verified" in st.reason and not st.targets[0].ok


@pytest.mark.parametrize("version", ["0.5.10.post1", "0.5.11.dev3+gabc", "0.5.12.post2.dev0", "0.4.0", "9.9.9"])
def test_unsupported_release_plans_nothing(version):
    assert version not in releases.RELEASES
    report = core.plan(AUTO, version=version)
    assert not report.supported and report.code_line is None
    assert {f.state for f in report.fixes} == {catalog.UNSUPPORTED}
    assert all(f.reason == f"sglang {version} is not a known release" for f in report.fixes)
    assert f"sglang {version} is not a known release" in report.summary() and "nothing patched" in report.summary()


def _every_def(text):
    import ast

    names = []

    def walk(node, prefix):
        for ch in ast.iter_child_nodes(node):
            if isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.append(prefix + ch.name)
                walk(ch, prefix + ch.name + ".")

    walk(ast.parse(text), "")
    return names


def test_indexed_lookup_equals_the_tokenizer_on_every_def_of_the_target_files(monkeypatch):
    """function_source locates a def on a per-text index and ends its block by indentation (start-up cost: 26
    targets cost ~110 ms through the tokenizer under load); on every def and class of every file a patch file
    here touches, stock and patched, it must give what the tokenizer-based reference gives (located here, not
    read from the span cache)."""
    from sglang_specv2_fixes import fingerprint
    from sglang_specv2_fixes.fingerprint import function_source_tokenized

    import os

    monkeypatch.setenv("SGLANG_SPECV2_FIXES_CODE_CACHE", "0")
    monkeypatch.setattr(fingerprint, "_SPANS", {})
    function_source.cache_clear()

    root = os.path.dirname(installed.sglang_root())
    files = {patchfile.module_path(t.module, root) for _, t in TARGETS_HERE}
    texts = [open(p, encoding="utf-8").read() for p in sorted(files)]
    for fix in PATCHED_HERE:
        pf = patchfile.load(fix, releases.entry(fix, LINE).name)
        texts += [new for _, _, new in patchfile.patched_texts(pf, root).values()]
    # the shapes that indentation alone gets wrong (seen in 0.5.11's deepseek_weight_loader.py: a module-level
    # string right after a class), and a signature / call closed at the def's own indentation
    texts.append('@dataclass(frozen=True)\nclass A:\n    pass\n\n\n"""doc\n"""\nX = 1\n\n\n'
                 'def f(\n    a,\n) -> int:\n    s = \'\'\'\nb\n\'\'\'\n    return g(\n        a,\n    )\n\n\n'
                 'class B:\n    def h(self):\n        x = [\n1,\n]\n        return x\n    y = 2\n')
    # line breaks other than LF (a CRLF file): _leaves' regex scan gives way to the line-by-line one
    texts.append('class C:\r\n    def k(self):\r\n        return 1\r\n\r\n    z = 3\r\nW = 0\r\n')
    seen = 0
    for text in texts:
        for q in _every_def(text):
            try:
                want = function_source_tokenized(text, q)
            except Exception as e:  # the same refusal either way
                want = type(e).__name__
            try:
                got = function_source(text, q)
            except Exception as e:
                got = type(e).__name__
            assert got == want, q
            if isinstance(got, tuple):  # the fast normalisation hashes what textwrap.dedent's would (start-up cost)
                assert fingerprint.normalise(got[0]) == fingerprint.normalise_reference(got[0]), q
            seen += 1
    assert seen > 500, seen


@pytest.mark.parametrize("src", [
    "    def f():\n        return 1\n",
    "\tdef f():\n\t    x = 1\n  \t\n\t\treturn x\n",  # tabs, a tab-and-space-only line
    "  a\n    b\n \n c\n",  # a shorter margin later
    "    a\n  \xa0\n    b\n",  # a no-break space: more than spaces and tabs for dedent's margin
    "    a\r\n    b\x0c\n",  # other line breaks: the reference is used
    "x = '''\n  text\n'''\n", "", "\n\n   \n",
])
def test_fast_normalise_equals_textwrap_dedent(src):
    from sglang_specv2_fixes import fingerprint

    assert fingerprint.normalise(src) == fingerprint.normalise_reference(src)


def _stored(entry):
    """What a cache entry holds (read as the plugin reads it: its seal checked)."""
    import json

    from sglang_specv2_fixes import fingerprint

    raw = fingerprint.read_entry(entry.name)
    return None if raw is None else json.loads(raw)


def _store(entry, obj):
    """Write a cache entry as the plugin writes one (sealed with the folder's key)."""
    import json

    from sglang_specv2_fixes import fingerprint

    fingerprint.write_entry(entry.name, json.dumps(obj).encode())


def test_function_spans_are_kept_between_processes(monkeypatch, tmp_path):
    """Start cost: where a function is in a module text is kept under the cache folder, named by the text's sha256; a
    later process (here: the spans written as at the end of register, the in-process caches cleared) slices the lines
    without locating; a span that does not fit the text is located again; ``SGLANG_SPECV2_FIXES_CODE_CACHE=0`` and
    ``sys.dont_write_bytecode`` write nothing."""
    import sys

    from sglang_specv2_fixes import fingerprint

    text = "import os\n\n\nclass A:\n    @staticmethod\n    def f(x):\n        return x + 1\n\n    y = 2\n\n\ndef g():\n    pass\n"
    want = ("    @staticmethod\n    def f(x):\n        return x + 1\n", 5, 7)
    monkeypatch.setenv("SGLANG_SPECV2_FIXES_CODE_CACHE", str(tmp_path / "c"))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setattr(fingerprint, "_SPANS", {})
    function_source.cache_clear()
    located = []
    real = fingerprint._locate_indexed
    monkeypatch.setattr(fingerprint, "_locate_indexed", lambda t, q: located.append(q) or real(t, q))
    assert function_source(text, "A.f") == want and located == ["A.f"]
    fingerprint.flush()
    (entry,) = (tmp_path / "c").glob("*.spans")
    assert _stored(entry) == {"A.f": [5, 7]}
    monkeypatch.setattr(fingerprint, "_SPANS", {})  # a new process
    function_source.cache_clear()
    assert function_source(text, "A.f") == want and located == ["A.f"]  # sliced, not located
    assert fingerprint.fingerprint_source(function_source(text, "A.f")[0]) == fingerprint.fingerprint_source(want[0])
    assert function_source(text + "\n# more\n", "A.f") == want and located == ["A.f", "A.f"]  # another text
    _store(entry, {"A.f": [5, 99]})  # does not fit the text: located again
    monkeypatch.setattr(fingerprint, "_SPANS", {})
    function_source.cache_clear()
    assert function_source(text, "A.f") == want and located[-1] == "A.f" and len(located) == 3
    fingerprint.flush()
    assert _stored(entry) == {"A.f": [5, 7]}
    for env, dont in (("0", False), (str(tmp_path / "d"), True)):
        monkeypatch.setenv("SGLANG_SPECV2_FIXES_CODE_CACHE", env)
        monkeypatch.setattr(sys, "dont_write_bytecode", dont)
        monkeypatch.setattr(fingerprint, "_SPANS", {})
        function_source.cache_clear()
        assert function_source(text, "g") == ("def g():\n    pass\n", 12, 13)
        fingerprint.flush()
    assert not (tmp_path / "d").exists() and not (tmp_path / "0").exists()


def test_fingerprints_are_kept_with_their_spans(monkeypatch, tmp_path):
    """Start cost: fingerprint_in_file keeps the fingerprint beside the span, and a later process (the in-process
    caches cleared) takes it from there without slicing or normalising; a changed file is another text and is
    fingerprinted again; an entry whose span is relocated loses its fingerprint; a malformed one is not read."""
    import json
    import sys

    from sglang_specv2_fixes import fingerprint

    path = tmp_path / "m.py"
    path.write_text("class A:\n    def f(self):\n        return 1\n")
    monkeypatch.setenv("SGLANG_SPECV2_FIXES_CODE_CACHE", str(tmp_path / "c"))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    made = []
    real = fingerprint.fingerprint_source
    monkeypatch.setattr(fingerprint, "fingerprint_source", lambda src: made.append(src) or real(src))

    def new_process():
        fingerprint.flush()  # what the ending process found, written as at the end of register
        monkeypatch.setattr(fingerprint, "_SPANS", {})
        function_source.cache_clear()

    new_process()
    want = real("    def f(self):\n        return 1\n")
    assert fingerprint.fingerprint_in_file(str(path), "A.f") == want and len(made) == 1
    fingerprint.flush()
    (entry,) = (tmp_path / "c").glob("*.spans")
    assert _stored(entry) == {"A.f": [2, 3, want]}
    new_process()
    assert fingerprint.fingerprint_in_file(str(path), "A.f") == want and len(made) == 1  # from the entry
    function_source(path.read_text(), "A.f")  # the span found again: the fingerprint stays with it
    fingerprint.flush()
    assert _stored(entry) == {"A.f": [2, 3, want]}
    path.write_text("class A:\n    def f(self):\n        return 2\n")  # another text, another entry
    new_process()
    other = fingerprint.fingerprint_in_file(str(path), "A.f")
    assert other == real("    def f(self):\n        return 2\n") != want and len(made) == 2
    fingerprint.flush()
    assert len(list((tmp_path / "c").glob("*.spans"))) == 2
    path.write_text("class A:\n    def f(self):\n        return 1\n")
    for bad in ([2, 3, 7], [2, 3, "short"], [2, "3", want]):  # not an entry: fingerprinted again
        new_process()  # the previous process's spans written first: this entry is what the next one reads
        _store(entry, {"A.f": bad})
        new_process()
        assert fingerprint.fingerprint_in_file(str(path), "A.f") == want and made[-1].endswith("return 1\n")
    new_process()
    assert len(made) == 5 and _stored(entry) == {"A.f": [2, 3, want]}
    _store(entry, {"A.f": [2, 99]})  # a span that does not fit: located again, then fingerprinted
    new_process()
    assert fingerprint.fingerprint_in_file(str(path), "A.f") == want and len(made) == 6
    new_process()
    assert _stored(entry) == {"A.f": [2, 3, want]}
