"""patches/: every file the release table names exists, parses and matches the pristine source of every
release that uses it; GNU ``patch -p1 --fuzz=0`` applies every release's series to a pristine copy and
gives the text the plugin computes; no orphan files; an applied series is recognised as present and not
patched twice.

Pristine sources: the importable releases under <venv>/releases/<v> and the source-only trees under
<venv>/src/<v> (ci/setup_cpu_env.sh); a release whose source is not in this environment is skipped
with that reason."""

import filecmp
import os
import py_compile
import shutil
import subprocess
import sys

import pytest
from conftest import LINE, ROOT, VERSION, requires_sglang

from sglang_specv2_fixes import catalog, core, export, installed, patchfile, releases, selection
from sglang_specv2_fixes.catalog import Patched
from sglang_specv2_fixes.core import STATE
from sglang_specv2_fixes.fingerprint import fingerprint_in_file, fingerprint_source, function_source
from sglang_specv2_fixes.fixes import ALL_FIXES

pytestmark = pytest.mark.release_scoped  # runs on every release in CI (ci/run_cpu_tests.sh)

PATCHES = os.path.join(ROOT, "patches")
FIX_NAMES = [f.name for f in ALL_FIXES]
# (fix, patch name) -> releases of the table that use it
USES = {}
for _v, _r in releases.RELEASES.items():
    for _fix in FIX_NAMES:
        _e = releases.entry(_fix, _r.line)
        if isinstance(_e, Patched):
            USES.setdefault((_fix, _e.name), []).append(_v)
PATCHED_RELEASES = releases.release_set("patched")


def pristine_root(version):
    """Directory holding release ``version``'s pristine ``sglang`` package in this environment, or None."""
    for d in (os.path.join(sys.prefix, "releases", version), os.path.join(sys.prefix, "src", version)):
        if os.path.isfile(os.path.join(d, "sglang", "__init__.py")):
            return d
    return None


def need_root(version):
    root = pristine_root(version)
    if root is None:
        pytest.skip(f"sglang {version}'s source is not in this environment ({sys.prefix}/releases or /src; "
                    f"ci/setup_cpu_env.sh puts it there)")
    return root


def test_the_package_reads_the_top_level_patches_directory():
    assert os.path.realpath(patchfile.PATCH_DIR) == os.path.realpath(PATCHES)
    assert USES, "the table patches nothing"


@pytest.mark.parametrize("fix,name", sorted(USES), ids=lambda x: str(x))
def test_every_referenced_patch_file_exists_and_parses(fix, name):
    path = os.path.join(PATCHES, fix, f"{name}.patch")
    assert os.path.isfile(path), f"releases.py names {fix}/{name}.patch for {USES[(fix, name)]}; it does not exist"
    pf = patchfile.load(fix, name)
    assert pf.fix == fix and pf.written_against.startswith("sglang ") and pf.targets and pf.files
    assert pf.description, "the file says what it changes and why"
    assert {rel for rel, _ in pf.files} == {t.rel_path for t in pf.targets}, "a diff for a file without a target"
    assert len({t.dotted for t in pf.targets}) == len(pf.targets)
    text = open(path, encoding="utf-8").read()
    assert text.endswith("\n") and "\r" not in text


@pytest.mark.parametrize("fix,name", sorted(USES), ids=lambda x: str(x))
def test_hunks_are_gnu_patch_friendly(fix, name):
    """GNU patch reads a hunk with less trailing than leading context as anchored to the end of the file
    (and less leading than trailing, starting at line 1, as anchored to its start): such a hunk fails
    with ``patch -p1 --fuzz=0`` wherever it is not at the end of the file, even though the plugin
    applies it."""
    pf = patchfile.load(fix, name)
    for rel, hunks in pf.files:
        for h in hunks:
            lead = next(i for i, ln in enumerate(h.lines) if ln[:1] != " ")
            trail = next(i for i, ln in enumerate(reversed(h.lines)) if ln[:1] != " ")
            assert trail >= lead, f"{fix}/{name}.patch: hunk @@ -{h.old_start} of {rel}: {lead} leading, {trail} trailing context lines"


def _uses():
    return [(fix, name, v) for (fix, name), vs in sorted(USES.items()) for v in vs]


@pytest.mark.parametrize("fix,name,version", _uses(), ids=lambda x: str(x))
def test_patch_file_matches_every_release_that_uses_it(fix, name, version):
    """``before`` = the pristine function of each release naming the file; the exact application gives
    ``after`` and a module that compiles."""
    root = need_root(version)
    pf = patchfile.load(fix, name)
    for t in pf.targets:
        fp = fingerprint_in_file(patchfile.module_path(t.module, root), t.qualname)
        assert fp == t.before, f"{t.dotted} in sglang {version}: {fp}, {fix}/{name}.patch says before={t.before}"
    for rel, (path, old, plain, spans) in patchfile._patched(pf, root).items():
        new = patchfile._joined(plain, old)
        compile(new, path, "exec")
        lines = new.splitlines(keepends=True)
        assert set(spans) == set(pf.targets_in(rel)) and plain == new.splitlines()
        for t in pf.targets_in(rel):
            src, first, last = function_source(new, t.qualname)
            assert fingerprint_source(src) == t.after, (version, t.dotted)
            # the start-up path takes the patched function from the span the hunks give (no second tokenizing) and
            # from the lines the hunks were applied to (no second split, no join: compile_target)
            assert spans[t] == (first, last) and "".join(lines[first - 1 : last]) == src, (version, t.dotted)
            assert patchfile._span_source(plain, spans[t], old) == src


def test_every_patched_release_has_a_series():
    assert PATCHED_RELEASES and LINE in {releases.RELEASES[v].line for v in PATCHED_RELEASES}
    for v in releases.RELEASES:
        line = releases.code_line(v)
        want = [f"{f}/{releases.entry(f, line).name}.patch" for f in FIX_NAMES if isinstance(releases.entry(f, line), Patched)]
        assert export.series(v) == want
        assert bool(want) == (v in PATCHED_RELEASES)
        for p in want:
            assert os.path.isfile(os.path.join(PATCHES, p))


def test_no_orphan_patch_files():
    """Every file under patches/<fix>/ is named by the release table (a file no release uses is dead or
    a table entry is missing); every directory is a fix (or the packagers' series/)."""
    referenced = {f"{fix}/{name}.patch" for fix, name in USES}
    orphans, strays = [], []
    for d in sorted(os.listdir(PATCHES)):
        full = os.path.join(PATCHES, d)
        if d == "series":
            continue
        if d not in FIX_NAMES or not os.path.isdir(full):
            strays.append(d)
            continue
        for f in sorted(os.listdir(full)):
            if f"{d}/{f}" not in referenced:
                orphans.append(f"{d}/{f}")
    assert not strays, f"patches/ entries that are not a fix of the catalogue: {strays}"
    assert not orphans, f"patch files no release of releases.py uses: {orphans}"


def test_committed_series_has_no_drift(tmp_path):
    committed = os.path.join(PATCHES, "series")
    if not os.path.isdir(committed):
        pytest.skip("patches/series/ is not generated yet (export.write_series)")
    written = export.write_series(str(tmp_path))
    assert sorted(written) == PATCHED_RELEASES
    assert sorted(os.listdir(committed)) == sorted(os.listdir(tmp_path / "series"))
    for name in os.listdir(committed):
        assert filecmp.cmp(os.path.join(committed, name), tmp_path / "series" / name, shallow=False), \
            f"patches/series/{name} drifted: regenerate it"


def test_write_series_removes_stale_files(tmp_path):
    (tmp_path / "series").mkdir()
    (tmp_path / "series" / "0.0.1").write_text("gone/0.0.1.patch\n")
    assert export.write_series(str(tmp_path)) == PATCHED_RELEASES
    assert sorted(os.listdir(tmp_path / "series")) == sorted(PATCHED_RELEASES)
    for v in PATCHED_RELEASES:
        assert (tmp_path / "series" / v).read_text().split() == export.series(v)


def _apply_series(version, tree):
    """Copy the files release ``version``'s series touches out of its pristine tree and apply the series
    with GNU patch; returns (touched rel paths, the text the plugin computes for each)."""
    root = need_root(version)
    series = export.series(version)
    assert series, version
    pfs = [patchfile.load(*p[: -len(".patch")].split("/")) for p in series]
    touched = sorted({rel for pf in pfs for rel, _ in pf.files})
    expected = {}
    for rel in touched:
        os.makedirs(tree / os.path.dirname(rel), exist_ok=True)
        shutil.copy(os.path.join(root, rel), tree / rel)
        expected[rel] = open(os.path.join(root, rel), encoding="utf-8").read()
    for p, pf in zip(series, pfs):
        dry = subprocess.run(["patch", "-p1", "--fuzz=0", "--dry-run", "-i", os.path.join(PATCHES, p)],
                             cwd=tree, capture_output=True, text=True)
        assert dry.returncode == 0, f"{version}: {p}\n{dry.stdout}{dry.stderr}"
        run = subprocess.run(["patch", "-p1", "--fuzz=0", "--forward", "--no-backup-if-mismatch", "-i",
                              os.path.join(PATCHES, p)], cwd=tree, capture_output=True, text=True)
        assert run.returncode == 0 and "fuzz" not in run.stdout, f"{version}: {p}\n{run.stdout}{run.stderr}"
    for rel in touched:  # the plugin's order and offsets (a file composed after another moves by its lines)
        expected[rel] = patchfile.apply_in_order(pfs, rel, expected[rel])
    return touched, expected


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch not installed")
@pytest.mark.parametrize("version", PATCHED_RELEASES)
def test_series_applies_with_gnu_patch_like_the_plugin(version, tmp_path):
    tree = tmp_path / "site"
    touched, expected = _apply_series(version, tree)
    for rel in touched:
        assert (tree / rel).read_text() == expected[rel], f"{version}: GNU patch and the plugin disagree on {rel}"
        py_compile.compile(str(tree / rel), cfile=str(tmp_path / "x.pyc"), doraise=True)


@requires_sglang
@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch not installed")
def test_installed_series_applied_is_recognised_and_not_patched_twice(tmp_path, monkeypatch):
    """The release under test with its whole series applied by GNU patch: every patched fix is PRESENT
    and core.register builds and registers nothing."""
    tree = tmp_path / "site"
    touched, _ = _apply_series(VERSION, tree)
    orig = installed.module_file
    monkeypatch.setattr(
        installed, "module_file",
        lambda m, root=None: str(tree / (m.replace(".", "/") + ".py")) if (m.replace(".", "/") + ".py") in touched else orig(m, root),
    )
    report = core.plan(selection.parse("auto", ALL_FIXES))
    patched = [f.name for f in ALL_FIXES if isinstance(releases.entry(f.name, LINE), Patched)]
    assert patched
    for name in patched:
        assert report.get(name).state == catalog.PRESENT, report.get(name)
    STATE.reset()
    try:
        core.register(report)  # PRESENT fixes are not registered: no double patching
        assert STATE.built == {} and not STATE.ours
    finally:
        STATE.reset()


@pytest.mark.parametrize("version", PATCHED_RELEASES)
def test_series_applied_is_present_on_every_patched_release(version, tmp_path, monkeypatch):
    """As above, for every patched release whose source is here (planned against that tree)."""
    if shutil.which("patch") is None:
        pytest.skip("GNU patch not installed")
    tree = tmp_path / "site"
    touched, _ = _apply_series(version, tree)
    root = need_root(version)  # the pristine tree, with the patched files laid over it
    orig = installed.module_file
    monkeypatch.setattr(
        installed, "module_file",
        lambda m, r=None: (str(tree / (m.replace(".", "/") + ".py")) if (m.replace(".", "/") + ".py") in touched
                           else orig(m, os.path.join(root, "sglang"))),
    )
    report = core.plan(selection.parse("auto", ALL_FIXES), version=version)
    for f in ALL_FIXES:
        st = report.get(f.name)
        if isinstance(releases.entry(f.name, releases.code_line(version)), Patched):
            assert st.state == catalog.PRESENT, (version, st.name, st.state, st.reason)
        else:
            assert st.state != catalog.REFUSED


@requires_sglang
@pytest.mark.parametrize("fix", [f.name for f in ALL_FIXES if LINE and isinstance(releases.entry(f.name, LINE), Patched)])
def test_check_command_on_the_installed_release(fix):
    p = subprocess.run([sys.executable, "-m", "sglang_specv2_fixes.patchfile", "check",
                        patchfile.patch_path(fix, releases.entry(fix, LINE).name), "--root",
                        os.path.dirname(installed.sglang_root())], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("before ok, after ok") == len(patchfile.load(fix, releases.entry(fix, LINE).name).targets)
