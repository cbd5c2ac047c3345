"""Report-only releases, whose sources are only read (ci/setup_cpu_env.sh puts each one's wheel in
<venv>/src/<release>): the plan must find every fix in the state this table says, with the code that
carries it (upstream), that is still buggy (open) or that replaced the buggy design (not-applicable)
verified by fingerprint, and nothing to patch or export.

EXPECTED is written from reading each release's source, independently of the catalogue (so a wrong
catalogue entry fails here):
  0.5.13.post1  everything upstream except live-accept-metrics (update_spec_metrics fed with the whole
                batch) and routed-experts-draft-guard (no draft-worker guard in init_routed_experts_capturer)
  0.5.14        same picture as 0.5.13.post1; the v2 sample moved to eagle_utils.eagle_sample
  0.5.15(.post1) #26980 landed (draft guard + no on_forward_end in the draft forward); the #22651 bonus
                pre-claim is gone (eagle_prepare_for_decode claims nothing, resolve commits drafts + bonus)
  0.5.16 / 0.5.17  as 0.5.15; tree compaction moved to eagle_worker_common, Req.kv holds the allocation
"""

import os
import sys

import pytest

from sglang_specv2_fixes import catalog, core, export, release, selection
from sglang_specv2_fixes.fixes import ALL_FIXES

SRC = os.path.join(sys.prefix, "src")
TREES = sorted(d for d in os.listdir(SRC)) if os.path.isdir(SRC) else []

U, O, NA = catalog.UPSTREAM, catalog.NOT_BACKPORTED, catalog.NOT_APPLICABLE
_OPEN_0_5_13 = {
    "skip-stale-overlap-updates": U,
    "tree-drafting": U,
    "live-accept-metrics": O,
    "routed-experts-draft-guard": O,
    "bonus-slot-accounting": U,
    "accept-length-split": U,
    "seq-lens-helper": U,
}
_FROM_0_5_15 = dict(_OPEN_0_5_13, **{"routed-experts-draft-guard": U, "bonus-slot-accounting": NA})
EXPECTED = {
    "0.5.13.post1": _OPEN_0_5_13,
    "0.5.14": _OPEN_0_5_13,
    "0.5.15": _FROM_0_5_15,
    "0.5.15.post1": _FROM_0_5_15,
    "0.5.16": _FROM_0_5_15,
    "0.5.17": _FROM_0_5_15,
}


def test_source_trees_present():
    missing = sorted(set(EXPECTED) - set(TREES))
    assert not missing, f"run ci/setup_cpu_env.sh (source trees missing under {SRC}: {missing})"


def test_every_report_only_release_is_expected_here():
    report_only = {v for v, line in release.SUPPORTED_RELEASES.items() if line in release.REPORT_ONLY_LINES}
    assert report_only == set(EXPECTED)
    for line in release.REPORT_ONLY_LINES:
        assert all(fix.patches(line) == [] for fix in ALL_FIXES), line


@pytest.mark.parametrize("version", sorted(EXPECTED))
def test_states_match_the_source_and_are_verified(version, monkeypatch, tmp_path):
    root = os.path.join(SRC, version, "sglang")
    assert os.path.isdir(root), f"run ci/setup_cpu_env.sh ({root} missing)"
    monkeypatch.setattr(release, "sglang_root", lambda: root)
    report = core.plan(selection.parse("auto", ALL_FIXES), version=version)
    assert report.supported and report.warnings == []
    assert {st.name for st in report.fixes} == set(EXPECTED[version])
    for st in report.fixes:
        assert st.state == EXPECTED[version][st.name], (version, st.name, st.state, st.reason)
        assert "source verified" in st.reason, (st.name, st.reason)
        assert st.targets and all(t.ok for t in st.targets)
    assert export.export(version, root, str(tmp_path)) == []
    assert open(tmp_path / "series").read() == ""
