"""Fingerprint refusal and recognition of an already-patched source tree."""

import shutil

import pytest
from conftest import LINE, requires_sglang

from sglang_specv2_fixes import catalog, core, release, selection
from sglang_specv2_fixes.bodies import body_source
from sglang_specv2_fixes.fingerprint import fingerprint_source, function_source, normalise
from sglang_specv2_fixes.fixes import ALL_FIXES, skip_stale_overlap_updates

pytestmark = requires_sglang
AUTO = selection.parse("auto", ALL_FIXES)


def test_normalisation_ignores_indentation_and_blank_lines_only():
    a = "    def f(x):\n\n        return x  \n"
    assert normalise(a) == "def f(x):\n    return x"
    assert fingerprint_source(a) == fingerprint_source("def f(x):\n    return x\n")
    assert fingerprint_source(a) != fingerprint_source("def f(x):\n    return x + 0\n")
    assert fingerprint_source(a) != fingerprint_source("def f(x):\n    # a comment counts\n    return x\n")


def _with_modified_target(monkeypatch, tmp_path, edit):
    """Point the plan at a copy of the target file edited by ``edit(text) -> text``."""
    (patch,) = skip_stale_overlap_updates.FIX.patches("0.5.11")
    real = release.module_file(patch.module)
    copy = tmp_path / "mixin.py"
    shutil.copy(real, copy)
    copy.write_text(edit(copy.read_text()))
    orig = release.module_file
    monkeypatch.setattr(release, "module_file", lambda m: str(copy) if m == patch.module else orig(m))
    return patch


@pytest.mark.skipif(LINE != "0.5.11", reason="#23456 is patched on 0.5.11 only")
def test_locally_modified_target_is_refused(monkeypatch, tmp_path):
    patch = _with_modified_target(
        monkeypatch, tmp_path, lambda t: t.replace("req.spec_verify_ct += 1", "req.spec_verify_ct += 1  # local edit", 1)
    )
    report = core.plan(AUTO)
    st = report.get("skip-stale-overlap-updates")
    assert st.state == catalog.REFUSED
    assert patch.target in st.reason and patch.fingerprint in st.reason
    assert any("refused" in w for w in report.warnings)
    # the other fixes are unaffected
    assert report.get("bonus-slot-accounting").state == catalog.UPSTREAM


@pytest.mark.skipif(LINE != "0.5.11", reason="#23456 is patched on 0.5.11 only")
def test_missing_target_is_refused(monkeypatch, tmp_path):
    _with_modified_target(monkeypatch, tmp_path, lambda t: t.replace("def _resolve_spec_overlap_token_ids", "def _renamed", 1))
    st = core.plan(AUTO).get("skip-stale-overlap-updates")
    assert st.state == catalog.REFUSED and "not found" in st.reason


@pytest.mark.skipif(LINE != "0.5.11", reason="#23456 is patched on 0.5.11 only")
def test_source_already_carrying_the_body_is_present_not_patched_twice(monkeypatch, tmp_path):
    def paste_body(text):
        src, first, last = function_source(text, patch.qualname)
        lines = text.splitlines()
        indent = lines[first - 1][: len(lines[first - 1]) - len(lines[first - 1].lstrip())]
        body = [indent + ln if ln else ln for ln in body_source(patch)[0].splitlines()]
        return "\n".join(lines[: first - 1] + body + lines[last:]) + "\n"

    (patch,) = skip_stale_overlap_updates.FIX.patches("0.5.11")
    _with_modified_target(monkeypatch, tmp_path, paste_body)
    st = core.plan(AUTO).get("skip-stale-overlap-updates")
    assert st.state == catalog.PRESENT
    core.register(core.plan(AUTO, fixes=[]))  # nothing to register
    assert "skip-stale-overlap-updates" not in core._built


def test_upstream_note_reports_unverified_source(monkeypatch, tmp_path):
    fix = next(f for f in ALL_FIXES if f.name == "bonus-slot-accounting")
    module, qualname, _ = fix.for_line(LINE).check
    real = release.module_file(module)
    copy = tmp_path / "info.py"
    copy.write_text(open(real).read().replace("# Pre-claim bonus slot", "# edited: pre-claim bonus slot", 1))
    orig = release.module_file
    monkeypatch.setattr(release, "module_file", lambda m: str(copy) if m == module else orig(m))
    st = core.plan(AUTO).get("bonus-slot-accounting")
    assert st.state == catalog.UPSTREAM and "not verified" in st.reason


@pytest.mark.parametrize("version", ["0.5.10.post1", "0.5.13", "0.5.18", "0.5.23", "0.5.11.dev3+gabc"])
def test_unsupported_release_plans_nothing(version):
    report = core.plan(AUTO, version=version)
    assert not report.supported
    assert {f.state for f in report.fixes} == {catalog.UNSUPPORTED}
    assert "not a supported release" in report.summary() and "nothing patched" in report.summary()
