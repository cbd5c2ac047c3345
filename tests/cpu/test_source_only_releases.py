"""Releases the CPU suite does not import (0.5.13 on; ci/setup_cpu_env.sh puts each one's source in
<venv>/releases/<release> or <venv>/src/<release>, which is only read here): the plan against that tree must find every fix in the state
this file expects, verified by fingerprint (the code that carries the fix upstream, the buggy code a patch
file was written against, or the code that replaced the buggy design), and the packagers' series must be
exactly the patched fixes.

EXPECTED is written from reading each release's source, independently
of the release table, for the fixes the catalogue has no source marker for, as the bug's status: U the fix is
upstream, NA the buggy code shape is gone, B the bug is present (the table must then patch it, or say open). A
wrong table entry fails here.
  0.5.13 / 0.5.13.post1  everything upstream (#26651's draft-extend KV range and #26800's chunked-prefill
                draft chain included) except live-accept-metrics (update_spec_metrics fed with the
                whole batch) and routed-experts-draft-guard (no draft-worker guard in
                init_routed_experts_capturer; tree verify returns the capture rows uncompacted)
  0.5.14        same picture; the v2 sample moved to eagle_utils.eagle_sample
  0.5.15(.post1) #26980's guard landed, the capture-row compaction did not (still B); the #22651 bonus
                pre-claim is gone (eagle_prepare_for_decode claims nothing, resolve commits drafts + bonus)
  0.5.16 … 0.5.23  as 0.5.15; tree compaction moved to eagle_worker_common, Req.kv holds the allocation;
                live-accept-metrics still counts stale requests (0.5.22+ keeps length-finished ones out of
                the next batch only)
  0.5.12 on      #25015 (draft-decode-positions): draft_forward advances the positions after each draft decode
                forward (0.5.11 before it: patched there)
  every release  multi-token-finish: the check first in update_finish_state's order wins wherever in the
                accepted run it matches, not the first finish in the run (0.5.18 on: a stop string after a stop
                token ends the run at the string; open upstream as of 0.5.23); up to 0.5.17 also #33758:
                max_new_tokens checked before the stops of the run; up to 0.5.13 also the stop-string window of
                the last stop_str_max_len + 1 tokens, no finished_len at a stop string, EOS before the stop string
                (#23802 / #25980 / #28802, upstream in 0.5.14)
  every release  #28986 (grammar-result-order): event_loop_overlap builds the next batch before it processes
                the pending result; the forced spec + grammar sync then finishes requests of a batch that is
                launched next (EAGLE/EAGLE3 up to 0.5.16; from 0.5.17 only NGRAM, which has no grammar overlap)
  fixes whose every catalogue record carries a source marker (MARKED below: the records of
                sglang_specv2_fixes/known_bugs.json, docs/known-bugs.md): "bug present" is what those markers read
                in the release's source, read here when the test runs; elsewhere upstream, or not-applicable where
                NOT_APPLICABLE_ON says the buggy code shape is absent
  0.5.13 on      overlap-war-barrier: event_loop_overlap issues schedule_stream.wait_stream(forward_stream) before the
                next batch is built (0.5.13), through _apply_war_barrier from 0.5.14, so the previous batch's result
                processing after the next launch is unordered against its reads (B: patched up to 0.5.15.post1);
                0.5.16 issues it right after run_batch (#31687, U)
  every release  outlines-spec-guard: traverse_tree reads the vocab mask as packed int32 words and rolls the grammar
                back; OutlinesGrammar keeps a bool mask and has no rollback (B: refused at startup; open upstream)
  0.5.16 on      fp4-kv-verify-workspace: the FlashInfer dequant workspace is prepared for extends without speculation
                only; a verify hands it extend_prefix_lens_cpu None (B: refused at startup; open upstream); absent
                before 0.5.16 (NA)
  0.5.14 … 0.5.18  pd-prebuilt-staging-order: get_new_prebuilt_batch stages request rows of the FutureMap without
                waiting for the forward in flight (the WAR barrier's read-done event comes before its tail) (B); 0.5.13.x
                waits for the whole forward stream first (NA); 0.5.19 drains it before process_prebuilt (U)
  0.5.15.post1 on  dp-draft-graph-rank-agree: EagleDraftWorker.draft turns the draft CUDA graph off only on busy ranks
                whose batch has no DSA top-k seed; idle DP ranks replay it (B: open upstream); 0.5.15 and before have
                no such switch (NA)
  0.5.13.x       draft-graph-eager-registry: ModelRunner._ensure_eager_registry drops the eager input registry it
                replaces by a larger one, and the multi-step draft CUDA graph baked the draft runner's (B); from 0.5.14
                EagerRunner builds one fixed-size registry at init and load_batch always fills it (U)
  0.5.13.x       eagle-target-prefill-graph (marked): PiecewiseCudaGraphRunner captures NULL hidden states unless
                --enable-return-hidden-states, the spec-v2 EAGLE target asks FULL, can_run rejects it (B); 0.5.14 gives an
                EAGLE target on tc_piecewise (its default) the eager runner and no such graph (NA); from 0.5.15 the
                default breakable prefill graph captures FULL for it (U)
"""

import os
import sys

import pytest

from sglang_specv2_fixes import catalog, core, export, installed, known_bugs, patchfile, releases, selection
from sglang_specv2_fixes.catalog import Patched
from sglang_specv2_fixes.fixes import ALL_FIXES



def pristine_root(version):
    """Directory holding release ``version``'s pristine ``sglang`` package here (its CPU overlay
    <venv>/releases/<v>, or its unpacked wheel <venv>/src/<v>), or None."""
    for d in (os.path.join(sys.prefix, "releases", version), os.path.join(sys.prefix, "src", version)):
        if os.path.isfile(os.path.join(d, "sglang", "__init__.py")):
            return d
    return None


U, B, NA = "upstream", "bug present", "not-applicable"
_0_5_13 = {
    "skip-stale-overlap-updates": U,
    "tree-drafting": U,
    "live-accept-metrics": B,
    "routed-experts-draft-guard": B,
    "draft-extend-kv-range": U,
    "chunked-prefill-draft-chain": U,
    "bonus-slot-accounting": U,
    "accept-length-split": U,
    "seq-lens-helper": U,
    "grammar-result-order": B,
    "draft-decode-positions": U,
    "multi-token-finish": B,
    # 0.5.13.x replaces the eager registry the draft CUDA graph baked; 0.5.14's EagerRunner builds one and keeps it
    "draft-graph-eager-registry": B,
}
_FROM_0_5_14 = dict(_0_5_13, **{"draft-graph-eager-registry": U})
_FROM_0_5_15 = dict(_FROM_0_5_14, **{"bonus-slot-accounting": NA})
EXPECTED = {
    "0.5.13": _0_5_13,
    "0.5.13.post1": _0_5_13,
    "0.5.14": _FROM_0_5_14,
    **{v: _FROM_0_5_15 for v in ("0.5.15", "0.5.15.post1", "0.5.16", "0.5.17")},
    **{v: _FROM_0_5_15 for v in ("0.5.18", "0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23")},
}
# the fixes whose every catalogue record carries a source marker: their state on a release is read from its source
# (known_bugs.evidence_affected) when the test runs, not written here
_RECORDS = {f.name: [b for b in known_bugs.BUGS if b.answer == f.name] for f in ALL_FIXES}
MARKED = {name for name, recs in _RECORDS.items() if recs and all(b.evidence for b in recs)}
NOT_APPLICABLE_ON = {  # where a marked fix's buggy code shape does not exist (elsewhere without the bug: upstream)
    "inkling-draft-extend-track-guard": set(releases.release_set("up-to:0.5.15.post1")),  # no Inkling before 0.5.16
    # HybridLinearAttnBackend keeps the base class's needs_cpu_seq_lens = True: the mask is sized by the real sum
    "triton-verify-mask-size": {"0.5.13", "0.5.13.post1"},
    "draft-extend-read-done-order": {"0.5.13", "0.5.13.post1"},  # no read-done event (no _apply_war_barrier)
    "fp4-kv-verify-workspace": set(releases.release_set("up-to:0.5.15.post1")),  # no dequant workspace before 0.5.16
    "pd-prebuilt-staging-order": {"0.5.13", "0.5.13.post1"},  # the barrier waits for the whole forward stream first
    "dp-draft-graph-rank-agree": set(releases.release_set("up-to:0.5.15")),  # no busy-rank-only switch before
    # 0.5.14's default tc_piecewise gives an EAGLE target no prefill graph (eager runner); breakable captures FULL
    "eagle-target-prefill-graph": {"0.5.14"},
}
# issue 57's fixes: written here where a record carries no source marker (a marked fix's state is read below)
_ISSUE_57 = {
    "overlap-war-barrier": lambda v: B if v in releases.release_set("up-to:0.5.15.post1") else U,
    # outlines' dense mask / no rollback under a spec verify: open (#24413)
    "outlines-spec-guard": lambda v: B,
    # NVFP4 KV's dequant workspace (0.5.16 on) under a spec verify: open (#36010)
    "fp4-kv-verify-workspace": lambda v: NA if v in releases.release_set("up-to:0.5.15.post1") else B,
    # PD prebuilt staging vs the forward's FutureMap tail (#35748, in 0.5.19)
    "pd-prebuilt-staging-order": lambda v: NA if v in ("0.5.13", "0.5.13.post1") else
    B if v in releases.release_set("up-to:0.5.18") else U,
    # the busy-rank-only draft-graph switch (#32209, from 0.5.15.post1): open
    "dp-draft-graph-rank-agree": lambda v: NA if v in releases.release_set("up-to:0.5.15") else B,
}
for _v in EXPECTED:
    EXPECTED[_v] = dict(EXPECTED[_v], **{k: f(_v) for k, f in _ISSUE_57.items() if k not in MARKED})


def expected(version):
    """Every fix's state on ``version``: EXPECTED's reading, and the marked fixes' read from the release's source
    (skips where that source is not here)."""
    root = pristine_root(version)
    if root is None:
        pytest.skip(f"sglang {version}'s source is not in this environment ({sys.prefix}/releases or /src; "
                    f"ci/setup_cpu_env.sh)")
    out = dict(EXPECTED[version])
    for name in MARKED:
        bug = any(known_bugs.evidence_affected(b, root) for b in _RECORDS[name])
        out[name] = B if bug else NA if version in NOT_APPLICABLE_ON.get(name, ()) else U
    return out
# 0.5.11 and 0.5.12.x: the releases the CPU suite imports and runs (test_catalog, test_fix_*, ...)
RUN_HERE = {"0.5.11", "0.5.12", "0.5.12.post1"}


def test_source_trees_present():
    """The trees CI builds; releases whose source is not unpacked here are only skipped below."""
    have = {v for v in EXPECTED if pristine_root(v)}
    # the trees this environment has always had: a regression in setup_cpu_env.sh shows here
    assert {"0.5.13.post1", "0.5.14", "0.5.15", "0.5.15.post1", "0.5.16", "0.5.17"} <= have, \
        f"run ci/setup_cpu_env.sh (source trees under {sys.prefix}/releases or /src: {sorted(have)})"


def test_every_later_release_is_expected_here():
    assert set(releases.RELEASES) - RUN_HERE == set(EXPECTED)
    assert len(MARKED) >= 10 and set(NOT_APPLICABLE_ON) <= MARKED
    for v in EXPECTED:
        assert not set(EXPECTED[v]) & MARKED, f"{v}: a marked fix's state is read from the source, not written here"
        assert set(EXPECTED[v]) | MARKED == {f.name for f in ALL_FIXES}, f"{v}: expectations for every fix"


@pytest.mark.parametrize("version", sorted(EXPECTED))
def test_table_agrees_with_the_source_reading(version):
    line = releases.code_line(version)
    for fix, status in expected(version).items():
        e = releases.entry(fix, line)
        if status == B:
            assert isinstance(e, Patched) or e.state == catalog.OPEN, (version, fix, e)
        else:
            assert not isinstance(e, Patched) and e.state == status, (version, fix, e)


@pytest.mark.parametrize("version", sorted(EXPECTED))
def test_states_match_the_source_and_are_verified(version, monkeypatch):
    want_of = expected(version)
    root = pristine_root(version)
    monkeypatch.setattr(installed, "sglang_root", lambda: os.path.join(root, "sglang"))
    report = core.plan(selection.parse("auto", ALL_FIXES), version=version)
    assert report.supported and report.warnings == []
    assert {st.name for st in report.fixes} == set(want_of)
    line = releases.code_line(version)
    for st in report.fixes:
        e = releases.entry(st.name, line)
        want = want_of[st.name]
        if isinstance(e, Patched):
            assert want == B and st.state == catalog.READY, (version, st.name, st.state, st.reason)
            # a file composed after another planned fix's (compose: line) says so
            ready = {x.name for x in report.fixes if x.state == catalog.READY}
            composed = "".join(f"; composed with {c.fix} on {c.qualname} (applied after it)"
                               for c in patchfile.load(st.name, e.name).composes if c.fix in ready)
            assert st.reason == f"fingerprints match patches/{st.name}/{e.name}.patch" + composed
        else:
            assert st.state == (catalog.OPEN if want == B else want), (version, st.name, st.state, st.reason)
            assert "source verified" in st.reason, (st.name, st.reason)
        assert st.targets and all(t.ok for t in st.targets), (st.name, st.targets)
    want = [f"{f}/{releases.entry(f, line).name}.patch" for f, s in want_of.items()
            if isinstance(releases.entry(f, line), Patched)]
    assert sorted(export.series(version)) == sorted(want)
