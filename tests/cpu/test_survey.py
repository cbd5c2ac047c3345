"""``sglang-specv2-fixes survey``: a release (tree, wheel or the installed one) read fix by fix against every
fingerprint the release table and the patch files know, with a draft release-table entry. Real release sources
(ci/setup_cpu_env.sh's trees) and synthetic releases built from 0.5.23's; nothing here imports sglang."""

import os
import subprocess
import sys

import pytest
from conftest import ROOT, child_env
from release_trees import (LOCAL_EDIT, OPEN_UPSTREAM, as_wheel, eval_derive, eval_release, release_root,
                           synthetic_release)

from sglang_specv2_fixes import installed, releases, survey

needs_0_5_23 = pytest.mark.skipif(release_root("0.5.23") is None, reason="no sglang 0.5.23 source tree here "
                                  "(ci/setup_cpu_env.sh)")


def cli(*args):
    return subprocess.run([sys.executable, "-m", "sglang_specv2_fixes", *args], capture_output=True, text=True,
                          env=child_env(), cwd=ROOT, timeout=120)


def draft(text):
    """The draft lines at the end of a survey's output: (the _r(...) line, the _derive block or [])."""
    lines = text.split("draft release-table entry", 1)[1].splitlines()[1:]
    r_line = next(ln for ln in lines if ln.strip().startswith("_r("))
    start = next((i for i, ln in enumerate(lines) if ln.startswith("_FIXES[")), None)
    return r_line, ([] if start is None else lines[start: lines.index("})", start) + 1])


@needs_0_5_23
def test_survey_of_the_0_5_23_wheel_reproduces_its_table_entry(tmp_path):
    wheel = as_wheel(synthetic_release(tmp_path / "t", "0.5.23"), tmp_path / "sglang-0.5.23-py3-none-any.whl")
    p = cli("survey", str(wheel))
    assert p.returncode == 0, p.stderr
    assert "release table: code line 0.5.23" in p.stdout
    assert "code line: 0.5.23 (0.5.23): every entry of it verifies against this source" in p.stdout
    r_line, derive = draft(p.stdout)
    assert eval_release(r_line) == releases.RELEASES["0.5.23"] and derive == []
    for fix, name in OPEN_UPSTREAM.items():
        assert f"{fix}: ready: {name}.patch applies" in p.stdout
    tree = survey.Tree.open(str(wheel))
    assert isinstance(tree, survey.WheelTree) and tree.version == "0.5.23"


@needs_0_5_23
def test_survey_as_new_writes_the_0_5_23_line_the_table_has(tmp_path):
    """Read as if the table lacked 0.5.23: the draft derives it from 0.5.22 with exactly the table's entries, except
    the fixes whose 0.5.23 entry no known fingerprint gives: reasoning-tokens-through-stop
    (_GenerationStreamAccumulator.accept changed) and multi-layer-draft (MultiLayerEagleDraftWorker.
    _draft_extend_for_decode changed) and min-tokens-per-position (eagle_prepare_for_decode and eagle_sample
    changed), each with a patch file of 0.5.23's own, and fa3-draft-extend-graph
    (EagleDraftWorker._capture_cuda_graphs changed: upstream's fix, a note): a TODO each, the entry left to the
    maintainer."""
    r = survey.survey(survey.Tree.open(release_root("0.5.23")), as_new=True)
    assert r.hidden == "0.5.23" and r.line == "0.5.22" and r.differs
    text = survey.render(r)
    r_line, derive = draft(text)
    assert eval_release(r_line) == releases.RELEASES["0.5.23"]
    assert derive[0] == '_FIXES["0.5.23"] = _derive("0.5.22", {'
    got, want = eval_derive(derive), dict(releases.LINES["0.5.23"].fixes)
    for fix in ("reasoning-tokens-through-stop", "multi-layer-draft", "fa3-draft-extend-graph",
                "min-tokens-per-position"):
        assert any(ln.startswith(f"    # {fix}: TODO no known fingerprint") for ln in derive), (fix, derive)
        assert got.pop(fix) == releases.LINES["0.5.22"].fixes[fix]
        entry = want.pop(fix)
        assert entry.state == "upstream" if fix == "fa3-draft-extend-graph" else entry.name == "0.5.23", entry
    assert got == want


def own_lines():
    """Releases that are their code line's only release (a survey can leave that line out), after the first."""
    return [v for v, r in releases.RELEASES.items()
            if r.line == v and v != next(iter(releases.RELEASES))
            and [u for u, q in releases.RELEASES.items() if q.line == r.line] == [v]]


@pytest.mark.parametrize("version", own_lines())
def test_survey_as_new_never_states_a_wrong_entry_silently(version):
    """For each release read as new: every entry its draft gives that is not the table's is marked for review (a
    new patch file the table had to write: TODO; a changed checked function: REVIEW)."""
    root = release_root(version)
    if root is None:
        pytest.skip(f"no sglang {version} source tree here")
    r = survey.survey(survey.Tree.open(root), as_new=True)
    text = survey.render(r)
    assert max(len(ln) for ln in text.splitlines()) <= 120, "survey output fits in 120 columns"
    _, derive = draft(text)
    got = eval_derive(derive) if derive else releases.LINES[r.line].fixes
    for fix, want in releases.LINES[version].fixes.items():
        if got[fix] != want:
            marked = [ln for ln in derive if f"{fix}" in ln and ("TODO" in ln or "REVIEW" in ln)]
            assert marked, (version, fix, got[fix], want, derive)


@needs_0_5_23
def test_synthetic_0_5_24_matches_0_5_23(tmp_path):
    tree = synthetic_release(tmp_path / "t", "0.5.24")
    p = cli("survey", str(tree))
    assert p.returncode == 0, p.stderr
    assert "sglang 0.5.24:" in p.stdout and "release table: not in the table" in p.stdout
    assert "code line: 0.5.23 (0.5.23): every entry of it verifies against this source" in p.stdout
    r_line, derive = draft(p.stdout)
    want = releases.RELEASES["0.5.23"]
    assert eval_release(r_line) == releases.Release("0.5.24", "0.5.23", want.torch, want.cpu) and derive == []
    # the package folder itself and a wheel give the same reading
    for path in (tree / "sglang", as_wheel(tree, tmp_path / "sglang-0.5.24-py3-none-any.whl")):
        q = cli("survey", str(path))
        assert q.returncode == 0 and q.stdout.split("\n", 1)[1] == p.stdout.split("\n", 1)[1], q.stderr


@needs_0_5_23
def test_edited_target_is_flagged_and_left_to_the_maintainer(tmp_path):
    tree = synthetic_release(tmp_path / "t", "0.5.24", edit=LOCAL_EDIT)
    r = survey.survey(survey.Tree.open(str(tree)))
    assert r.line == "0.5.23" and r.differs == ["grammar-result-order"]
    views = {v.fix: v for v in r.fixes}
    assert views["grammar-result-order"].match.kind == "changed"
    assert all(views[f].match.kind == "patch" for f in OPEN_UPSTREAM if f != "grammar-result-order")
    text = survey.render(r)
    r_line, derive = draft(text)
    assert eval_release(r_line).line == "0.5.24"  # its own code line
    assert derive[0] == '_FIXES["0.5.24"] = _derive("0.5.23", {'
    assert any(ln.startswith("    # grammar-result-order: TODO no known fingerprint") for ln in derive), derive
    assert eval_derive(derive) == releases.LINES["0.5.23"].fixes  # nothing stated for it: the maintainer writes it


def test_survey_of_the_installed_release_and_bad_paths(tmp_path, monkeypatch):
    root = release_root("0.5.23") or release_root(next(iter(releases.RELEASES)))
    if root is None:
        pytest.skip("no release source tree here")
    monkeypatch.setattr(installed, "sglang_root", lambda: os.path.join(root, "sglang"))
    monkeypatch.setattr(installed, "version", lambda: "9.9.9")
    tree = survey.Tree.open(None)
    assert tree.version == "9.9.9" and "installed sglang" in tree.label
    monkeypatch.setattr(installed, "sglang_root", lambda: None)
    with pytest.raises(FileNotFoundError, match="no sglang is installed"):
        survey.Tree.open(None)
    (tmp_path / "not-a-wheel.whl").write_text("x")
    for bad in (tmp_path / "nowhere", tmp_path / "not-a-wheel.whl", tmp_path):
        p = cli("survey", str(bad))
        assert p.returncode == 2 and p.stderr.startswith("error: ") and p.stdout == "", (bad, p.stderr)


def test_metadata_pins_and_their_absence():
    r = survey.Result("x", "1.0", ["torch==2.14.1", "flashinfer_python[cu13]==0.7.2", "apache-tvm-ffi<0.2,>=0.1.5",
                                   "xgrammar==0.2.7"], None, "0.5.23", [], [])
    lines = survey.draft_release(r, "0.5.23")
    assert lines[0] == '    _r("1.0", "0.5.23", "2.14.1", "flashinfer-python==0.7.2"),'
    assert any("apache-tvm-ffi: <0.2,>=0.1.5 (no exact pin" in ln for ln in lines)
    r.requires = []
    assert survey.draft_release(r, "0.5.23")[0] == '    _r("1.0", "0.5.23", "?"),'
