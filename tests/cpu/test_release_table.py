"""The release table (sglang_specv2_fixes/releases.py): consistency of releases, code lines and fix
entries, and the release_set() grammar that ci/ and tests/registered use. Nothing here needs sglang."""

import dataclasses
import re
import subprocess
import sys

import pytest
from conftest import ROOT

from sglang_specv2_fixes import catalog, releases
from sglang_specv2_fixes.catalog import NOT_APPLICABLE, NOTE_STATES, Note, Patched
from sglang_specv2_fixes.fixes import ALL_FIXES

pytestmark = pytest.mark.release_scoped  # runs on every release in CI (ci/run_cpu_tests.sh)

NAMES = [f.name for f in ALL_FIXES]
FP = re.compile(r"^[0-9a-f]{16}$")


def patched_on(line):
    return [n for n, e in releases.LINES[line].fixes.items() if isinstance(e, Patched)]


# ------------------------------------------------------------------------------------ consistency
def test_fix_names_are_unique_and_aliases_do_not_collide():
    assert len(set(NAMES)) == len(NAMES)
    seen = {}
    for f in ALL_FIXES:
        for a in f.aliases:
            assert seen.setdefault(a.lower(), f.name) == f.name, f"{a!r} names {seen[a.lower()]} and {f.name}"


def test_the_table_names_the_catalogue_fixes():
    assert releases.NAMES == set(NAMES), sorted(releases.NAMES ^ set(NAMES))
    for line in releases.LINES:
        for name in NAMES:
            assert isinstance(releases.entry(name, line), (Patched, Note)), (line, name)


def test_a_fix_absent_from_a_line_is_not_applicable_there(monkeypatch):
    """Taking a fix out of a line's row leaves it not applicable there, to plan() and the catalogue as well."""
    from sglang_specv2_fixes import core, known_bugs, selection

    line, fix = "0.5.11", "seq-lens-helper"
    assert fix in releases.LINES[line].fixes
    row = dict(releases.LINES[line].fixes)
    del row[fix]
    monkeypatch.setitem(releases.LINES, line, dataclasses.replace(releases.LINES[line], fixes=row))
    e = releases.entry(fix, line)
    assert isinstance(e, Note) and e.state == NOT_APPLICABLE and e.check is None and fix in e.reason
    assert e == releases.absent(fix)
    assert known_bugs.table_states(fix)["0.5.11"] == NOT_APPLICABLE
    st = {f.name: f for f in core.plan(selection.parse("auto", ALL_FIXES), "0.5.11").fixes}[fix]
    assert st.state == catalog.NOT_APPLICABLE and fix in st.reason, (st.state, st.reason)


@pytest.mark.parametrize("line", list(releases.LINES))
def test_entries_are_well_formed(line):
    for name, e in releases.LINES[line].fixes.items():
        if isinstance(e, Patched):
            assert e.name and "/" not in e.name and not e.name.endswith(".patch"), (line, name, e)
        else:
            assert e.state in NOTE_STATES and e.reason.strip(), (line, name, e)
            if e.check is not None:
                module, qualname, fp = e.check
                assert module.startswith("sglang.") and qualname, (line, name, e.check)
                # None: the function must be absent, which only a not-applicable note can claim
                assert FP.match(fp) if fp is not None else e.state == NOT_APPLICABLE, (line, name, e.check)
    with pytest.raises(ValueError, match="note state must be one of"):
        Note(catalog.APPLIED, "x")


def test_code_lines_are_consistent():
    used = {r.line for r in releases.RELEASES.values()}
    assert used == set(releases.LINES), "every release names a known code line, and every code line is used"
    for v, r in releases.RELEASES.items():
        assert r.version == v
        assert releases.code_line(v) == r.line and releases.release(v) is r
        assert r.torch and re.match(r"^\d+\.\d+", r.torch)
        assert r.cpu is None or (isinstance(r.cpu, tuple) and all("==" in s for s in r.cpu)), r
    for v in (None, "", "0.5.10.post1", "9.9.9"):
        assert releases.code_line(v) is None and releases.release(v) is None
    # a code line groups releases; its releases are contiguous in the table
    order = list(releases.RELEASES)
    for line in releases.LINES:
        idx = [order.index(v) for v, r in releases.RELEASES.items() if r.line == line]
        assert idx == list(range(idx[0], idx[-1] + 1)), (line, idx)
        assert line in releases.RELEASES, f"code line {line} is named after one of its releases"
        assert releases.RELEASES[line].line == line


def test_probe_targets_and_spec_v2_only():
    for line, L in releases.LINES.items():
        for target in (L.probe_decode, L.run_batch):
            assert target.startswith("sglang.") and target.count(".") >= 3, (line, target)
        assert L.probe_decode.endswith(".process_batch_result_decode"), (line, L.probe_decode)
    v2_only = {line for line, L in releases.LINES.items() if L.spec_v2_only}
    # spec v1 (ScheduleBatch.is_spec_v2) exists up to 0.5.13.post1 and is gone from 0.5.14 on
    assert not v2_only & {"0.5.11", "0.5.12", "0.5.13.post1"}
    assert {"0.5.14", "0.5.15", "0.5.16", "0.5.17"} <= v2_only


def test_entry_lookup():
    line = next(iter(releases.LINES))
    assert releases.entry(NAMES[0], line) is releases.LINES[line].fixes[NAMES[0]]
    with pytest.raises(KeyError):  # a name no line has is a typo, not a fix that does not apply
        releases.entry("no-such-fix", line)
    with pytest.raises(KeyError):
        releases.entry(NAMES[0], "0.0.0-no-such-line")


# ------------------------------------------------------------------------------------ release_set
def test_release_set_all_patched_report_only():
    all_ = releases.release_set("all")
    assert all_ == list(releases.RELEASES)
    patched = releases.release_set("patched")
    report_only = releases.release_set("report-only")
    assert patched == [v for v in all_ if patched_on(releases.RELEASES[v].line)]
    assert report_only == [v for v in all_ if not patched_on(releases.RELEASES[v].line)]
    assert sorted(patched + report_only, key=all_.index) == all_ and not set(patched) & set(report_only)
    assert patched, "this plugin patches at least one release"
    assert {"0.5.11", "0.5.12", "0.5.12.post1"} <= set(patched)


def test_release_set_gpu_and_cpu():
    assert releases.release_set("gpu") == [v for v, r in releases.RELEASES.items() if r.torch.startswith("2.11")]
    assert releases.release_set("cpu") == [v for v, r in releases.RELEASES.items() if r.cpu]
    assert {"0.5.11", "0.5.12.post1"} <= set(releases.release_set("cpu"))


@pytest.mark.parametrize("name", NAMES)
def test_release_set_fix(name):
    got = releases.release_set(f"fix:{name}")
    assert got == [v for v, r in releases.RELEASES.items() if isinstance(releases.entry(name, r.line), Patched)]
    assert set(got) <= set(releases.release_set("patched"))


def test_release_set_intersections_keep_table_order():
    for a, b in (("gpu", "fix:tree-drafting"), ("patched", "cpu"), ("fix:live-accept-metrics", "fix:tree-drafting")):
        want = [v for v in releases.release_set(a) if v in set(releases.release_set(b))]
        assert releases.release_set(f"{a}&{b}") == want
        assert releases.release_set(f" {b} & {a} ") == want  # spaces, either order: same set, table order
    assert releases.release_set("patched&report-only") == []
    assert releases.release_set("all&all") == releases.release_set("all")


def test_release_set_unions_keep_table_order_and_bind_looser_than_intersections():
    a, b = "fix:skip-stale-overlap-updates", "fix:draft-graph-eager-registry"
    want = [v for v in releases.RELEASES if v in set(releases.release_set(a)) | set(releases.release_set(b))]
    assert releases.release_set(f"{a}|{b}") == releases.release_set(f"{b} | {a}") == want
    assert len(want) > max(len(releases.release_set(a)), len(releases.release_set(b)))  # each adds a release
    assert releases.release_set("up-to:0.5.11|from:0.5.23&gpu") == (
        ["0.5.11"] + [v for v in releases.release_set("from:0.5.23") if v in releases.release_set("gpu")])
    with pytest.raises(ValueError, match="unknown fix 'bogus'"):
        releases.release_set("gpu|fix:bogus")


def test_release_set_up_to_and_from():
    order = list(releases.RELEASES)
    i = order.index("0.5.13")
    assert releases.release_set("up-to:0.5.13") == order[: i + 1]
    assert releases.release_set("from:0.5.13") == order[i:]
    assert releases.release_set("from:0.5.13&up-to:0.5.13.post1") == ["0.5.13", "0.5.13.post1"]


@pytest.mark.parametrize("spec,message", [
    ("fix:no-such-fix", "unknown fix 'no-such-fix'"),
    ("from:0.9.9", "unknown release '0.9.9'"),
    ("gpu&fix:bogus", "unknown fix 'bogus'"),
    ("fix:", "unknown fix ''"),
    ("everything", "unknown release set 'everything'"),
    ("patched&", "unknown release set ''"),
    ("fix:#26866", "unknown fix '#26866'"),  # PR numbers are selection aliases, not release-set names
])
def test_release_set_rejects_unknown(spec, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        releases.release_set(spec)


def test_module_cli():
    def run(*args):
        return subprocess.run([sys.executable, "-m", "sglang_specv2_fixes.releases", *args], capture_output=True,
                              text=True, cwd=ROOT, timeout=60)

    p = run("set", "patched")
    assert p.returncode == 0 and p.stdout.split() == releases.release_set("patched")
    p = run("set", "gpu&fix:tree-drafting")
    assert p.returncode == 0 and p.stdout.split() == releases.release_set("gpu&fix:tree-drafting")
    p = run("cpu-overlays")
    rows = [ln.split() for ln in p.stdout.splitlines()]
    assert [r[0] for r in rows] == releases.release_set("cpu")
    for r in rows:
        assert r[1] == f"sglang=={r[0]}" and tuple(r[2:]) == releases.RELEASES[r[0]].cpu
    p = run("source-only")
    assert p.stdout.split() == [v for v, r in releases.RELEASES.items() if not r.cpu]
    assert run().returncode == 2 and run("bogus").returncode == 2
