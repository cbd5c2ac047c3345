"""The catalogue against the real installed release: fingerprints, bodies, names."""

import importlib

import pytest
from conftest import LINE, VERSION, requires_sglang

from sglang_specv2_fixes import catalog, core, release, selection
from sglang_specv2_fixes.bodies import body_source, build
from sglang_specv2_fixes.catalog import ReleaseNote
from sglang_specv2_fixes.fixes import ALL_FIXES

pytestmark = requires_sglang


def test_release_is_supported():
    assert VERSION in release.SUPPORTED_RELEASES, VERSION
    assert LINE in release.CODE_LINES


def test_every_fix_has_an_entry_for_every_code_line():
    for fix in ALL_FIXES:
        for line in release.CODE_LINES:
            assert fix.for_line(line) is not None, (fix.name, line)
        assert fix.what and fix.why and fix.removal and fix.pr.startswith("#")


def test_fingerprints_match_installed_release():
    report = core.plan(selection.parse("auto", ALL_FIXES))
    assert report.warnings == []
    for st in report.fixes:
        for t in st.targets:
            assert t.ok, (st.name, t)
        assert st.state in (catalog.READY, catalog.UPSTREAM, catalog.NOT_APPLICABLE), (st.name, st.state, st.reason)


@pytest.mark.parametrize("fix", ALL_FIXES, ids=lambda f: f.name)
def test_bodies_build_in_target_module(fix):
    for patch in fix.patches(LINE):
        fn = build(patch, fix.name)
        module = importlib.import_module(patch.module)
        owner = module
        for part in patch.qualname.split(".")[:-1]:
            owner = getattr(owner, part)
        original = owner.__dict__[patch.qualname.rsplit(".", 1)[-1]]
        # the body runs with the upstream module's globals, under the upstream name and signature
        assert fn.__globals__ is module.__dict__
        assert fn.__name__ == original.__name__
        assert fn.__code__.co_varnames[: fn.__code__.co_argcount] == original.__code__.co_varnames[: original.__code__.co_argcount]
        src, path, first = body_source(patch)
        assert fn.__code__.co_filename == path and fn.__code__.co_firstlineno == first


def test_notes_name_their_release_state():
    for fix in ALL_FIXES:
        entry = fix.for_line(LINE)
        if isinstance(entry, ReleaseNote):
            assert entry.state in (catalog.UPSTREAM, catalog.NOT_APPLICABLE)
            assert entry.reason
