"""patches/: no drift from the plugin's bodies, clean apply on the pristine release, no double patching."""

import filecmp
import os
import py_compile
import re
import shutil
import subprocess

import pytest
from conftest import LINE, ROOT, VERSION, requires_sglang

from sglang_specv2_fixes import catalog, core, export, release, selection
from sglang_specv2_fixes.fixes import ALL_FIXES

pytestmark = requires_sglang
SERIES = os.path.join(ROOT, "patches", VERSION or "none")


def test_committed_series_has_no_drift(tmp_path):
    export.export(VERSION, release.sglang_root(), str(tmp_path))
    committed = sorted(os.listdir(SERIES))
    assert committed == sorted(os.listdir(tmp_path))
    for name in committed:
        assert filecmp.cmp(os.path.join(SERIES, name), tmp_path / name, shallow=False), f"{name} drifted: re-run export-patches"


def test_every_applied_fix_has_a_patch():
    names = open(os.path.join(SERIES, "series")).read().split()
    expected = [f.name for f in ALL_FIXES if f.patches(LINE)]
    assert [re.sub(r"^\d{4}-|\.patch$", "", n) for n in names] == expected


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch not installed")
def test_series_applies_cleanly_compiles_and_is_recognised(tmp_path, monkeypatch):
    names = open(os.path.join(SERIES, "series")).read().split()
    if not names:
        pytest.skip(f"nothing to patch on {VERSION}")
    site = release.sglang_root()
    tree = tmp_path / "site"
    touched = set()
    for n in names:
        touched |= set(re.findall(r"^\+\+\+ b/(\S+)", open(os.path.join(SERIES, n)).read(), re.M))
    for rel in touched:  # pristine copies of the files the series touches (the wheel's own files)
        os.makedirs(tree / os.path.dirname(rel), exist_ok=True)
        shutil.copy(os.path.join(os.path.dirname(site), rel), tree / rel)
    for n in names:
        p = subprocess.run(["patch", "-p1", "--forward", "--no-backup-if-mismatch", "-i", os.path.join(SERIES, n)],
                           cwd=tree, capture_output=True, text=True)
        assert p.returncode == 0 and "offset" not in p.stdout and "fuzz" not in p.stdout, p.stdout + p.stderr
    for rel in touched:
        py_compile.compile(str(tree / rel), doraise=True)
    orig = release.module_file
    monkeypatch.setattr(
        release, "module_file",
        lambda m: str(tree / (m.replace(".", "/") + ".py")) if (m.replace(".", "/") + ".py") in touched else orig(m),
    )
    report = core.plan(selection.parse("auto", ALL_FIXES))
    for f in ALL_FIXES:
        if f.patches(LINE):
            assert report.get(f.name).state == catalog.PRESENT, report.get(f.name)
    before = dict(core._built)
    core.register(report)  # PRESENT fixes are not registered: no double patching
    assert core._built == before
