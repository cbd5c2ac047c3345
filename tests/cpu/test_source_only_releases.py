"""Releases whose sources are only read (ci/setup_cpu_env.sh puts them in <venv>/src/<release>): the
plan must find every upstream fix with its source verified, the bugs still open upstream named as
open (their buggy code verified by fingerprint), and nothing to patch or export."""

import os
import sys

import pytest

from sglang_specv2_fixes import catalog, core, export, release, selection
from sglang_specv2_fixes.fixes import ALL_FIXES

SRC = os.path.join(sys.prefix, "src")
TREES = sorted(d for d in os.listdir(SRC)) if os.path.isdir(SRC) else []


def test_source_trees_present():
    assert "0.5.13.post1" in TREES, f"run ci/setup_cpu_env.sh (no source trees under {SRC})"


@pytest.mark.parametrize("version", TREES)
def test_upstream_or_open_and_verified(version, monkeypatch, tmp_path):
    root = os.path.join(SRC, version, "sglang")
    monkeypatch.setattr(release, "sglang_root", lambda: root)
    report = core.plan(selection.parse("auto", ALL_FIXES), version=version)
    assert report.supported and report.warnings == []
    still_open = {"live-accept-metrics", "routed-experts-draft-guard"}  # open upstream (see the fix modules)
    for st in report.fixes:
        assert st.state == (catalog.NOT_BACKPORTED if st.name in still_open else catalog.UPSTREAM), (st.name, st.state, st.reason)
        assert "source verified" in st.reason, (st.name, st.reason)
        assert st.targets and all(t.ok for t in st.targets)
    assert export.export(version, root, str(tmp_path)) == []
    assert open(tmp_path / "series").read() == ""
