"""Releases the table does not know: by default one warning and nothing patched (as before); with
SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE=fingerprint a fix is patched where every target equals a known release's
`before` exactly. Synthetic releases: 0.5.23's sources with only the version changed ("0.5.24"), and the same with
one target edited."""

import dataclasses
import json
import os
import subprocess
import sys

import pytest
from conftest import OPT_IN_SUBJECT, OPT_IN_TEST_SWITCH, ROOT, child_env, requires_sglang, run_py
from release_trees import LOCAL_EDIT, OPEN_UPSTREAM, matched_as, release_root, synthetic_release

from sglang_specv2_fixes import catalog, core, installed, patchfile, releases, selection
from sglang_specv2_fixes.catalog import Note
from sglang_specv2_fixes.fixes import ALL_FIXES

pytestmark = pytest.mark.skipif(release_root("0.5.23") is None, reason="no sglang 0.5.23 source tree here "
                                "(ci/setup_cpu_env.sh)")
MODE = selection.ENV_UNKNOWN_RELEASE
WIDTH = max(len(f.name) for f in ALL_FIXES)  # status's name column
MATCH_LINE = ("sglang 0.5.24 is not a known release; SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE=fingerprint: fixes are "
              "patched only where their functions equal a known release's: ")


def plan_on(tree, monkeypatch, mode=None, value="auto"):
    monkeypatch.setattr(installed, "sglang_root", lambda: str(tree / "sglang"))
    if mode is None:
        monkeypatch.delenv(MODE, raising=False)
    else:
        monkeypatch.setenv(MODE, mode)
    return core.plan(selection.parse(value, ALL_FIXES), version="0.5.24")


def expected_notes():
    """0.5.23's note entries: the states the opt-in must verify on 0.5.23's sources."""
    return {n: e.state for n, e in releases.LINES["0.5.23"].fixes.items() if isinstance(e, Note)}


def test_default_patches_nothing_on_an_unknown_release(tmp_path, monkeypatch):
    tree = synthetic_release(tmp_path / "t", "0.5.24")
    for mode in (None, "", "skip", "SKIP"):
        report = plan_on(tree, monkeypatch, mode)
        assert not report.supported and report.fingerprint_match is None and report.warnings == []
        assert {f.state for f in report.fixes} == {catalog.UNSUPPORTED}
        assert report.summary().endswith("is not a known release (known: " + ", ".join(releases.RELEASES) +
                                         "); nothing patched")


def test_opt_in_patches_the_open_upstream_fixes_on_synthetic_0_5_24(tmp_path, monkeypatch):
    report = plan_on(synthetic_release(tmp_path / "t", "0.5.24"), monkeypatch, "fingerprint")
    assert report.supported and report.code_line is None and report.fingerprint_match == "0.5.23"
    states = {f.name: f for f in report.fixes}
    for fix, name in OPEN_UPSTREAM.items():
        st = states[fix]
        assert st.state == catalog.READY and st.patch == f"patches/{fix}/{name}.patch", (fix, st.reason)
        assert st.targets and all(t.ok for t in st.targets)
        assert f"unknown release: its targets equal those of {matched_as(fix)})" in st.reason
    for fix, state in expected_notes().items():
        assert states[fix].state == state and "source verified: as on" in states[fix].reason, states[fix].reason
    assert set(OPEN_UPSTREAM) | set(expected_notes()) == set(states)
    # one warning, naming the releases every applied fix was matched against
    assert report.warnings == [MATCH_LINE + ", ".join(f"{f} as {matched_as(f)}" for f in states
                                                      if f in OPEN_UPSTREAM) + "; closest code line: 0.5.23"]
    assert "(not in the table; by fingerprint, closest 0.5.23)" in report.summary()
    assert report.as_dict()["fingerprint_match"] == "0.5.23" and report.layout_line == "0.5.23"


def test_opt_in_refuses_an_edited_target_and_applies_the_rest(tmp_path, monkeypatch):
    report = plan_on(synthetic_release(tmp_path / "t", "0.5.24", edit=LOCAL_EDIT), monkeypatch, "fingerprint")
    states = {f.name: f for f in report.fixes}
    st = states["grammar-result-order"]
    assert st.state == catalog.REFUSED and "Scheduler.event_loop_overlap has fingerprint" in st.reason
    assert "refusing to patch code this plugin was not written against" in st.reason
    assert report.warnings[1:] == [f"grammar-result-order refused: {st.reason}"]
    assert report.warnings[0].startswith(MATCH_LINE) and "grammar-result-order as" not in report.warnings[0]
    for fix in set(OPEN_UPSTREAM) - {"grammar-result-order"}:
        assert states[fix].state == catalog.READY, (fix, states[fix].reason)
    # the closest known line is still 0.5.23: the edited entry is the only one that fails
    assert report.fingerprint_match == "0.5.23"


def test_opt_in_present_and_disabled(tmp_path, monkeypatch):
    """A release whose target already carries the patch (applied by hand) is 'present'; an explicit selection leaves
    the other matched fixes disabled."""
    tree = synthetic_release(tmp_path / "t", "0.5.24")
    pf = patchfile.load("grammar-result-order", "0.5.22")
    for rel in {t.rel_path for t in pf.targets}:
        path = tree / rel
        path.write_text(patchfile.apply_text(pf, rel, path.read_text()))
    report = plan_on(tree, monkeypatch, "fingerprint", value="live-accept-metrics")
    states = {f.name: f.state for f in report.fixes}
    assert states["grammar-result-order"] == catalog.PRESENT
    assert states["live-accept-metrics"] == catalog.READY
    assert states["routed-experts-draft-guard"] == catalog.DISABLED


def test_opt_in_fix_needs_its_switch_on_an_unknown_release_too(tmp_path, monkeypatch):
    """An opt-in fix (Fix.opt_in) matched by fingerprint is planned only with its switch on, as on a known release:
    0.5.22's sources as 0.5.24 match fa3-draft-extend-graph's 0.5.22 patch (made opt-in for the test:
    conftest.OPT_IN_SUBJECT)."""
    assert OPT_IN_SUBJECT == "fa3-draft-extend-graph"
    fix = dataclasses.replace(next(f for f in ALL_FIXES if f.name == OPT_IN_SUBJECT), opt_in=OPT_IN_TEST_SWITCH)
    monkeypatch.setattr(core, "ALL_FIXES", [fix if f.name == fix.name else f for f in ALL_FIXES])
    tree = synthetic_release(tmp_path / "t", "0.5.24", base="0.5.22")
    monkeypatch.setenv(fix.opt_in, "1")
    st = {f.name: f for f in plan_on(tree, monkeypatch, "fingerprint").fixes}[fix.name]
    assert st.state == catalog.READY and st.patch == "patches/fa3-draft-extend-graph/0.5.22.patch", st.reason
    monkeypatch.delenv(fix.opt_in)
    st = {f.name: f for f in plan_on(tree, monkeypatch, "fingerprint").fixes}[fix.name]
    assert st.state == catalog.DISABLED and fix.opt_in in st.reason, st.reason


def test_bad_mode_value_is_an_error(monkeypatch):
    monkeypatch.setenv(MODE, "fingerprints")
    with pytest.raises(selection.SelectionError, match="invalid SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE value"):
        selection.unknown_release_mode()


# ------------------------------------------------------------------- through SGLang's load_plugins (0.5.23 objects)
LOAD = """
import json, sys, logging
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from sglang_specv2_fixes import installed
installed.version = lambda: '0.5.24'  # 0.5.23's objects, a version the table does not know
from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry
load_plugins()
from sglang_specv2_fixes import plugin
r = plugin.announce('scheduler').as_dict()
ours = [t for t, hs in HookRegistry._hooks.items() if any(h[2] and h[2].plugin_name == 'specv2_fixes' for h in hs)]
print('RESULT ' + json.dumps(dict(states={k: v['state'] for k, v in r['fixes'].items()}, hooks=ours)))
"""


def load_0_5_24(**env):
    """LOAD in a fresh interpreter with 0.5.23's overlay as the installed sglang."""
    e = child_env(**env)
    e["PYTHONPATH"] = os.pathsep.join([ROOT, release_root("0.5.23")] + [
        p for p in e["PYTHONPATH"].split(os.pathsep) if p and "releases" not in p])
    return subprocess.run([sys.executable, "-c", LOAD], capture_output=True, text=True, env=e, cwd=ROOT, timeout=600)


def result_of(proc):
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def test_load_plugins_on_0_5_24_applies_by_fingerprint_only_when_opted_in():
    proc = load_0_5_24(SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE="fingerprint")
    r = result_of(proc)
    # on_import fixes: ready until SGLang imports their modules (applied where another fix's build imported it)
    on_import = {f.name for f in ALL_FIXES if f.on_import}
    for fix in OPEN_UPSTREAM:
        assert r["states"][fix] in ({"ready", "applied"} if fix in on_import else {"applied"}), (fix, r["states"])
    assert {r["states"][f] for f in expected_notes()} <= {"upstream", "not-applicable"}
    assert proc.stderr.count("is not a known release; SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE=fingerprint") == 1
    assert "live-accept-metrics as 0.5.22 … 0.5.23" in proc.stderr
    targets = {t.dotted for f, n in OPEN_UPSTREAM.items() if f not in on_import for t in patchfile.load(f, n).targets}
    assert targets and targets <= set(r["hooks"])
    # without the opt-in: nothing hooked, one warning (as before)
    proc = load_0_5_24()
    assert result_of(proc)["hooks"] == []
    warnings = [ln for ln in proc.stderr.splitlines() if ln.startswith("WARNING:sglang_specv2_fixes")]
    assert len(warnings) == 1 and "sglang 0.5.24 is not a known release" in warnings[0], warnings
    assert warnings[0].endswith("nothing patched")


@requires_sglang
def test_a_known_release_imports_neither_survey_nor_the_catalogue():
    """Start-up cost: on a release of the table the plugin loads as before (survey.py only for an unknown release
    with the opt-in set, known_bugs.py never)."""
    code = ("import sys, json\nfrom sglang.srt.plugins import load_plugins\nload_plugins()\n"
            "print('RESULT ' + json.dumps(sorted(m for m in sys.modules if m.startswith('sglang_specv2_fixes'))))")
    mods = result_of(run_py(code, SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE="fingerprint"))
    assert "sglang_specv2_fixes.plugin" in mods
    assert "sglang_specv2_fixes.survey" not in mods and "sglang_specv2_fixes.known_bugs" not in mods, mods


@requires_sglang
@pytest.mark.parametrize("env", [dict(SGLANG_SPECV2_FIXES="grammar-result-order"),
                                 dict(SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE="fingerprints")])
def test_startup_stops_on_an_explicit_selection_without_opt_in_or_a_bad_mode(env):
    proc = run_py(LOAD, **env)
    assert proc.returncode != 0
    if "SGLANG_SPECV2_FIXES" in env:
        assert "sglang 0.5.24 is not a release this plugin knows" in proc.stderr
    else:
        assert "invalid SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE value 'fingerprints'" in proc.stderr


# ------------------------------------------------------------------------------------------- status
def status_on(tree, *args, **env):
    code = ("import sys; from sglang_specv2_fixes import installed; installed.version = lambda: '0.5.24'; "
            f"installed.sglang_root = lambda: {str(tree / 'sglang')!r}; "
            f"from sglang_specv2_fixes.cli import main; sys.exit(main({['status', *args]!r}))")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(**env),
                          cwd=ROOT, timeout=120)


def test_status_on_an_unknown_release_shows_what_the_opt_in_would_apply(tmp_path):
    tree = synthetic_release(tmp_path / "t", "0.5.24")
    p = status_on(tree)
    assert p.returncode == 0, p.stderr
    assert "sglang 0.5.24 is not a release this plugin knows: nothing would be patched" in p.stdout
    preview = p.stdout.split("with SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE=fingerprint (closest known code line: "
                             "0.5.23):", 1)[1]
    for fix in OPEN_UPSTREAM:
        assert f"  {fix:<{WIDTH}} ready\n" in preview, preview
    p = status_on(tree, SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE="fingerprint")
    assert p.returncode == 0, p.stderr
    assert "code line: none (not in the table; SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE=fingerprint, closest known " \
           "line: 0.5.23)" in p.stdout
    for fix in OPEN_UPSTREAM:
        assert f"  {fix:<{WIDTH}} ready " in p.stdout
    assert p.stderr.count("is not a known release; SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE=fingerprint") == 1
    edited = synthetic_release(tmp_path / "e", "0.5.24", edit=LOCAL_EDIT)
    p = status_on(edited, SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE="fingerprint")
    assert p.returncode == 1 and f"  {'grammar-result-order':<{WIDTH}} refused" in p.stdout, p.stdout
    p = status_on(tree, SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE="bogus")
    assert p.returncode == 2 and "invalid SGLANG_SPECV2_FIXES_UNKNOWN_RELEASE value 'bogus'" in p.stderr
