"""The fix records and the release table against the real installed release: fingerprints, the
compiled patched functions, names."""

import importlib
import inspect
import linecache
import os

import pytest
from conftest import LINE, VERSION, requires_sglang

from sglang_specv2_fixes import catalog, core, installed, patchfile, releases, selection
from sglang_specv2_fixes.catalog import Note, Patched
from sglang_specv2_fixes.fingerprint import function_source
from sglang_specv2_fixes.fixes import ALL_FIXES


pytestmark = [requires_sglang, pytest.mark.release_scoped]  # release_scoped: runs on every release in CI
PATCHED_HERE = [f for f in ALL_FIXES if LINE and isinstance(releases.entry(f.name, LINE), Patched)]


def test_release_is_supported():
    assert VERSION in releases.RELEASES, VERSION
    assert LINE in releases.LINES
    # the CPU suite runs the importable releases; each is a patched one
    assert VERSION in releases.release_set("cpu")
    assert VERSION in releases.release_set("patched") and PATCHED_HERE


def test_every_fix_has_an_entry_for_every_code_line():
    for fix in ALL_FIXES:
        for line in releases.LINES:
            assert releases.entry(fix.name, line) is not None, (fix.name, line)
        assert fix.title and fix.what and fix.why and fix.removal, fix.name
        assert all(pr.startswith("#") and pr[1:].isdigit() for pr in fix.upstream), (fix.name, fix.upstream)
        assert all(r.startswith("#") and r[1:].isdigit() for r in fix.related), (fix.name, fix.related)
        assert not (fix.upstream and fix.related), fix.name  # related refs are for beyond-upstream fixes
        assert fix.ref == (fix.upstream[0] if fix.upstream else "beyond upstream")


def test_fingerprints_match_installed_release():
    report = core.plan(selection.parse("auto", ALL_FIXES))
    assert report.warnings == []
    assert report.sglang_version == VERSION and report.code_line == LINE and report.supported
    for st in report.fixes:
        for t in st.targets:
            assert t.ok, (st.name, t)
        assert st.state in (catalog.READY, catalog.UPSTREAM, catalog.NOT_APPLICABLE, catalog.OPEN), (
            st.name, st.state, st.reason)
        entry = releases.entry(st.name, LINE)
        if isinstance(entry, Patched):
            assert st.state == catalog.READY and st.patch == f"patches/{st.name}/{entry.name}.patch"
            assert [t.target for t in st.targets] == [t.dotted for t in patchfile.load(st.name, entry.name).targets]
        else:
            assert st.state == entry.state and st.patch is None
            assert len(st.targets) == (1 if entry.check else 0)
            if entry.check:
                assert "source verified" in st.reason


@pytest.mark.parametrize("fix", PATCHED_HERE, ids=lambda f: f.name)
def test_patched_functions_build_in_target_module(fix):
    built = core.build_fix(fix.name)
    pf = patchfile.load(fix.name, releases.entry(fix.name, LINE).name)
    assert list(built) == [t.dotted for t in pf.targets]
    root = os.path.dirname(installed.sglang_root())
    for t in pf.targets:
        fn = built[t.dotted]
        module = importlib.import_module(t.module)
        owner = module
        for part in t.qualname.split(".")[:-1]:
            owner = getattr(owner, part)
        original = owner.__dict__[t.qualname.rsplit(".", 1)[-1]]
        original = inspect.unwrap(getattr(original, "__func__", original))
        # a decorated target (event_loop_overlap's @DynamicGradMode()) is rebuilt with its decorators: the checks
        # below are on the function the decorator wraps, as they are on the installed one
        outer, fn = fn, inspect.unwrap(fn)
        # the patched function runs with the upstream module's globals, under the upstream name and signature
        assert fn.__globals__ is module.__dict__
        assert fn.__name__ == original.__name__ and fn.__qualname__ == original.__qualname__
        assert fn.__module__ == t.module
        ours, theirs = (f.__code__.co_varnames[: f.__code__.co_argcount] for f in (fn, original))
        # the upstream parameters; a backport of upstream's own signature change may append ones with defaults, so
        # every existing caller still binds (multi-token-finish: tail_str(new_accepted_len=1) as 0.5.14 has it)
        assert ours[: len(theirs)] == theirs and len(ours) - len(theirs) <= len(fn.__defaults__ or ())
        assert fn.__code__.co_kwonlyargcount == original.__code__.co_kwonlyargcount
        assert getattr(outer, patchfile.MARK) == f"{fix.name}:{t.dotted}"
        assert outer.__qualname__ == original.__qualname__
        # tracebacks: the installed file tagged with the fix, at the patched file's line numbers, whose
        # text linecache holds
        path = os.path.join(root, t.rel_path)
        assert fn.__code__.co_filename == f"{path} [specv2-fixes {fix.name}]"
        patched = patchfile.apply_text(pf, t.rel_path, open(path, encoding="utf-8").read())
        src, first, _ = function_source(patched, t.qualname)
        assert fn.__code__.co_firstlineno == first
        assert "".join(linecache.getlines(fn.__code__.co_filename)) == patched
        assert linecache.getline(fn.__code__.co_filename, first) == src.splitlines(True)[0]
        # the module itself is not touched by building
        assert owner.__dict__[t.qualname.rsplit(".", 1)[-1]] is not outer


def test_build_fix_refuses_what_is_not_patched_here():
    for fix in ALL_FIXES:
        if fix not in PATCHED_HERE:
            with pytest.raises(LookupError, match=f"{fix.name} is not patched on sglang {VERSION}"):
                core.build_fix(fix.name)
    with pytest.raises(LookupError):
        core.build_fix(PATCHED_HERE[0].name, version="0.5.10.post1")


def test_notes_name_their_release_state():
    for fix in ALL_FIXES:
        entry = releases.entry(fix.name, LINE)
        if isinstance(entry, Note):
            assert entry.state in (catalog.UPSTREAM, catalog.NOT_APPLICABLE, catalog.OPEN)
            assert entry.reason


def test_fix_by_alias():
    for fix in ALL_FIXES:
        for a in fix.aliases:
            assert core.fix_by_alias(a) is fix and core.fix_by_alias(f" {a.upper()} ") is fix
    assert core.fix_by_alias("bogus") is None
    live = core.fix_by_alias("live-accept-metrics")
    assert live.upstream == () and live.aliases == ("live-accept-metrics",) and live.ref == "beyond upstream"
