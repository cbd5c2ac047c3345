"""The catalogue of known upstream bugs (the data sglang_specv2_fixes/known_bugs.json, read by known_bugs.py): it
agrees with the release table (a fix's record written "table" takes its releases from it), every record's source
markers agree with every release's source present here, docs/known-bugs.md and the README's sentence are generated
from it, and the wheel ships the data. Release-independent: the release sources are read as files."""

import dataclasses
import json
import os
import zipfile

import pytest
from conftest import ROOT
from release_trees import release_root

from sglang_specv2_fixes import catalog, known_bugs, releases
from sglang_specv2_fixes.catalog import Note, Patched
from sglang_specv2_fixes.fixes import ALL_FIXES
from sglang_specv2_fixes.known_bugs import BUGS, NOT_AFFECTED, NOT_BACKPORTED, UPSTREAM, Bug

pytestmark = pytest.mark.release_independent  # ci/run_cpu_tests.sh: on the first anchor release only

SURVEY_ITEMS = "ABCDEFGHIJKLM"  # ../shared/notes/upstream-bug-survey.md section 1; N is the watch list
WATCH_LIST = {"#32459", "#39826", "#29858", "#28569", "#35822", "#26357"}  # one ref of each watch-list item
FIXED_BEFORE = {"#21589", "#22049", "#16310", "#23037", "#19730"}  # plus the adaptive-spec clamp (no ref)
# issue 57's nine bugs (one ref each) and the fix each one names where a fix is written for it (None: not-backported)
ISSUE_57 = {"#31687": "overlap-war-barrier", "#32209": "dp-draft-graph-rank-agree", "#24413": "outlines-spec-guard",
            "#36001": "fp4-kv-verify-workspace", "#40681": None, "#35748": "pd-prebuilt-staging-order",
            "#32334": None, "#30393": None, "#26351": None}


def test_the_data_reads_back():
    assert known_bugs.parse_releases(["0.5.14 -"]) == known_bugs.since("0.5.14")
    assert known_bugs.parse_releases(["0.5.11", "0.5.13 - 0.5.13.post1"]) == ("0.5.11", "0.5.13", "0.5.13.post1")
    with pytest.raises(ValueError, match="not a release of the table"):
        known_bugs.parse_releases(["0.5.11 - 0.5.99"])
    with open(known_bugs.DATA, encoding="utf-8") as f:
        written = json.load(f)["bugs"]
    assert [d["id"] for d in written] == [b.id for b in BUGS]
    # every fix's record that covers exactly the table's releases takes them from the table instead of a copy
    for b in BUGS:
        if b.is_fix and not b.from_table and b.affected == known_bugs.table_affected(b.answer):
            assert len([r for r in BUGS if r.answer == b.answer]) > 1 or b.fixed_in != known_bugs.table_fixed_in(
                b.answer), f"{b.id}: write affected / fixed_in as \"table\""
    assert sum(b.from_table for b in BUGS) >= 20


def test_bad_data_is_refused(tmp_path):
    good = {"id": "x", "title": "t", "refs": [], "found": "here", "symptom": "s", "affected": ["0.5.11"], "fixed_in": "0.5.12",
            "answer": NOT_BACKPORTED, "reason": "r", "verified": "report only"}
    path = tmp_path / "bugs.json"
    for bad, match in ((dict(good, colour="red"), "unknown keys"), (dict(good, affected="table"), "together"),
                       (dict(good, affected="table", fixed_in="table"), "for a fix's record"),
                       (dict(good, affected=["0.5.99"]), "not a release"),
                       ({k: v for k, v in good.items() if k != "title"}, "a title")):
        path.write_text(json.dumps({"bugs": [bad]}))
        with pytest.raises(ValueError, match=match):
            known_bugs.load(str(path))
    path.write_text(json.dumps({"bugs": [good]}))
    assert known_bugs.load(str(path))[0].affected == ("0.5.11",)


def test_a_table_record_follows_the_table(monkeypatch):
    """tree-drafting's record is written "table": patch it on 0.5.13's line too and the record says 0.5.11 …
    0.5.13.post1 affected, fixed upstream in 0.5.14, without an edit to the data."""
    assert known_bugs.by_id("tree-drafting").affected == known_bugs.span("0.5.11", "0.5.12.post1")
    lines = dict(releases.LINES)
    lines["0.5.13"] = dataclasses.replace(lines["0.5.13"], fixes={**lines["0.5.13"].fixes,
                                                                   "tree-drafting": Patched("0.5.13")})
    monkeypatch.setattr(releases, "LINES", lines)
    b = next(r for r in known_bugs.load() if r.id == "tree-drafting")
    assert b.from_table and b.affected == known_bugs.span("0.5.11", "0.5.13.post1") and b.fixed_in == "0.5.14"
    assert b.reason.startswith("patched on 0.5.11 … 0.5.13.post1; upstream from 0.5.14")


def test_a_fix_absent_from_a_code_line_is_not_applicable_there(monkeypatch):
    lines = dict(releases.LINES)
    lines["0.5.23"] = dataclasses.replace(lines["0.5.23"], fixes={
        n: e for n, e in lines["0.5.23"].fixes.items() if n != "live-accept-metrics"})
    monkeypatch.setattr(releases, "LINES", lines)
    states = known_bugs.table_states("live-accept-metrics")
    assert states["0.5.23"] == catalog.NOT_APPLICABLE and states["0.5.22"] == catalog.APPLIED
    assert known_bugs.table_affected("live-accept-metrics") == known_bugs.span("0.5.11", "0.5.22")


def test_the_wheel_ships_the_data(tmp_path):
    from test_readme import _build  # pip wheel of a copy of the package (no network)

    _, whl = _build(tmp_path)
    with zipfile.ZipFile(whl) as z:
        shipped = z.read("sglang_specv2_fixes/known_bugs.json").decode("utf-8")
        assert "sglang_specv2_fixes/known_bugs.py" in z.namelist()
    with open(known_bugs.DATA, encoding="utf-8") as f:
        assert shipped == f.read()


def test_catalogue_agrees_with_the_release_table():
    assert known_bugs.problems() == []


def test_every_fix_and_every_survey_item_has_a_record():
    assert {b.answer for b in BUGS if b.is_fix} == {f.name for f in ALL_FIXES}
    assert {b.id for b in BUGS if b.found == "release table"} <= {f.name for f in ALL_FIXES}
    for item in SURVEY_ITEMS:
        assert [b for b in BUGS if b.found == f"survey {item}"], f"survey item {item} has no record"
    refs = {r for b in BUGS for r in b.refs}
    assert WATCH_LIST <= refs and FIXED_BEFORE <= refs
    assert any(b.id == "adaptive-spec-downswitch" for b in BUGS)
    assert {b.answer for b in BUGS} <= {f.name for f in ALL_FIXES} | {UPSTREAM, NOT_AFFECTED, NOT_BACKPORTED}


def test_issue_57_bugs_have_records_with_markers():
    for ref, fix in ISSUE_57.items():
        recs = [b for b in BUGS if ref in b.refs]
        assert len(recs) == 1, ref
        b = recs[0]
        assert b.evidence and b.affected, b.id
        if b.from_table:  # the fix landed on exactly the record's releases: the table is the one source
            assert fix and b.answer == fix and b.fix is None, b.id
            continue
        assert b.fix == fix, b.id
        # answered by its fix exactly when the table patches it on every affected release; else not-backported
        assert b.answer in ({fix, NOT_BACKPORTED} if fix else {NOT_BACKPORTED}), b.id


def _table_with(monkeypatch, fix, versions):
    """The release table with ``fix`` patched (a stand-in patch name) on ``versions``' lines, nothing elsewhere."""
    lines = {releases.RELEASES[v].line for v in versions}
    patched = {name: dataclasses.replace(L, fixes={**L.fixes, fix: Patched("x") if name in lines else
                                                   Note(catalog.NOT_APPLICABLE, "stand-in")})
               for name, L in releases.LINES.items()}
    monkeypatch.setattr(releases, "LINES", patched)


def test_a_record_answers_its_fix_only_where_the_table_patches_it(monkeypatch):
    b = known_bugs.by_id("war-barrier-after-launch")  # written with the fix it names (not from the table)
    written = next(r for r in known_bugs._RECORDS if r.id == b.id)
    fix = "stand-in-fix"
    rec = dataclasses.replace(written, fix=fix)
    got = known_bugs.resolve(rec)  # not in the table at all
    assert got.answer == NOT_BACKPORTED and "not in this plugin's release table yet" in got.reason
    _table_with(monkeypatch, fix, rec.affected[:-1])  # patched on all but the newest affected release
    got = known_bugs.resolve(rec)
    assert got.answer == NOT_BACKPORTED and f"is not patched on {rec.affected[-1]}" in got.reason
    _table_with(monkeypatch, fix, rec.affected)
    got = known_bugs.resolve(rec)
    assert got.answer == fix and got.reason.startswith(f"patched on 0.5.11 … 0.5.15.post1 by {fix}")
    # a record naming a fix must be written not-backported; one that names no affected release is wrong
    assert any("answers 'upstream'" in p for p in _with(monkeypatch, ("war-barrier-after-launch",
                                                                        dict(answer=UPSTREAM))))
    assert any("but no release is affected" in p for p in _with(
        monkeypatch, ("war-barrier-after-launch", dict(affected=()))))


def _with(monkeypatch, *changes):
    """BUGS with records replaced (id -> fields to change) or added (a Bug)."""
    bugs = list(BUGS)
    for ch in changes:
        if isinstance(ch, Bug):
            bugs.append(ch)
            continue
        bug_id, fields = ch
        i = next(i for i, b in enumerate(bugs) if b.id == bug_id)
        bugs[i] = dataclasses.replace(bugs[i], **fields)
    monkeypatch.setattr(known_bugs, "BUGS", tuple(bugs))
    return known_bugs.problems()


def test_the_check_fails_where_catalogue_and_table_disagree(monkeypatch):
    one = ("0.5.11",)
    # a record names a fix the table does not have (e.g. one still being written): fails, never tolerated
    assert any("neither a fix of the release table" in p for p in _with(
        monkeypatch, ("hicache-eagle-hang", dict(answer="hicache-eagle-hang"))))
    # a fix's records call fewer / more releases affected than the table patches
    assert any("fix tree-drafting: its records call 0.5.11 affected" in p for p in _with(
        monkeypatch, ("tree-drafting", dict(affected=one))))
    assert any("fix draft-decode-positions" in p for p in _with(
        monkeypatch, ("draft-decode-positions", dict(affected=known_bugs.span("0.5.11", "0.5.12")))))
    # a fix the table calls upstream on a release cannot be affected there (that is the patched set too)
    assert any("fix bonus-slot-accounting" in p for p in _with(
        monkeypatch, ("bonus-slot-accounting", dict(affected=one, fixed_in=None))))
    # refs that name none of the fix's upstream PRs; no refs at all is a bug found here (covered beyond upstream)
    assert any("name none of tree-drafting's upstream PRs" in p for p in _with(
        monkeypatch, ("tree-drafting", dict(refs=("#1",)))))
    assert not any("upstream PRs" in p for p in _with(monkeypatch, ("tree-drafting", dict(refs=()))))
    # a fix without a record; a duplicate id
    assert any("fix seq-lens-helper of the release table has no record" in p for p in _with(
        monkeypatch, ("seq-lens-helper", dict(answer=NOT_AFFECTED))))
    assert any("is used twice" in p for p in _with(monkeypatch, known_bugs.by_id("spec-v2-logprobs")))
    # answers that contradict affected / fixed_in
    assert any("answer 'upstream' but affected" in p for p in _with(
        monkeypatch, ("spec-v2-logprobs", dict(affected=one, fixed_in=None))))
    assert any("answer 'not-backported' but no release" in p for p in _with(
        monkeypatch, ("pd-decode-grammar-double-accept", dict(affected=()))))
    assert any("fixed upstream in 0.5.14 but affected on" in p for p in _with(
        monkeypatch, ("pd-decode-grammar-double-accept", dict(affected=known_bugs.span("0.5.11", "0.5.14")))))
    # three records answer multi-token-finish: their union must be the patched set, each may cover part of it
    assert any("fix multi-token-finish" in p for p in _with(
        monkeypatch, ("first-finish-in-run", dict(affected=known_bugs.span("0.5.11", "0.5.22"), fixed_in="0.5.23"))))
    assert any("fix radix-overshoot" in p for p in _with(
        monkeypatch, ("radix-overshoot", dict(answer=NOT_BACKPORTED))))
    assert any("open upstream (fixed_in None) but the newest release" in p for p in _with(
        monkeypatch, ("hicache-eagle-hang", dict(affected=one))))
    assert any("not a release of the table" in p for p in _with(
        monkeypatch, ("stop-string-multi-token", dict(fixed_in="0.5.99"))))


def present_trees():
    return [(v, release_root(v)) for v in releases.RELEASES if release_root(v)]


@pytest.mark.parametrize("bug", [b for b in BUGS if b.evidence], ids=lambda b: b.id)
def test_evidence_agrees_with_every_release_source_here(bug):
    trees = present_trees()
    if not trees:
        pytest.skip("no release source trees here (ci/setup_cpu_env.sh)")
    got = tuple(v for v, root in trees if known_bugs.evidence_affected(bug, root))
    want = tuple(v for v, _ in trees if v in bug.affected)
    assert got == want, f"{bug.id}: the source markers say {got}, the record says {want}"


def test_evidence_can_say_both(tmp_path):
    """A marker that matches / does not match flips the verdict (fixed marker: no match means affected)."""
    bug = known_bugs.by_id("radix-overshoot")
    (tmp_path / "sglang/srt/managers").mkdir(parents=True)
    f = tmp_path / "sglang/srt/managers/schedule_batch.py"
    f.write_text("def owned_kv_len(self):\n    pass\n")
    assert known_bugs.evidence_affected(bug, str(tmp_path)) is True
    f.write_text("# past the stop; the client never sees those tokens, so nothing matches\n")
    assert known_bugs.evidence_affected(bug, str(tmp_path)) is False
    assert known_bugs.evidence_affected(known_bugs.by_id("tree-drafting"), str(tmp_path)) is None


def test_records_without_markers_say_how_they_were_read():
    for b in BUGS:
        if b.evidence:
            continue
        # "GPU only": affected is what a GPU row reproduced on each release's stock side (no marker in the source yet)
        assert (b.verified.startswith("release table") and b.is_fix or b.verified.startswith("report only")
                or b.verified.startswith("GPU only") and not b.is_fix), b.id
        if b.verified.startswith("report only"):  # nothing located: no release (before upstream's fix) is ruled out
            order = list(releases.RELEASES)
            assert b.affected == tuple(order[: order.index(b.fixed_in)] if b.fixed_in else order), b.id


def test_docs_known_bugs_md_is_the_generated_one():
    with open(os.path.join(ROOT, "docs", "known-bugs.md"), encoding="utf-8") as f:
        text = f.read()
    assert text == known_bugs.markdown(), "regenerate: python -m sglang_specv2_fixes.known_bugs > docs/known-bugs.md"
    for b in BUGS:  # every record, its affected releases and its answer
        assert f"| [{b.id}](#{b.id}) |" in text and f"## {b.id}\n" in text and f"* Answer: `{b.answer}`" in text


def test_readme_carries_the_derived_claim():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    claim = known_bugs.readme_claim()
    assert claim in text, f"README.md must carry:\n{claim}"
    assert "No known bug is left" not in text
    c, flat = known_bugs.counts(), " ".join(claim.split())
    assert sum(c.values()) == len(BUGS) and f"Known upstream spec-v2 bugs: {len(BUGS)} (" in flat
    assert f"{c['fixed here']} fixed by this plugin" in flat and f"{c['not backported']} not backported" in flat
