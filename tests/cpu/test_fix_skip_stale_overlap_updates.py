"""#23456 on real SGLang objects: stock vs plugin body (0.5.11), upstream check (0.5.12.x)."""

import pytest
from conftest import LINE, requires_sglang

from sglang_specv2_fixes import catalog, core, releases, selection
from sglang_specv2_fixes.catalog import Note
from sglang_specv2_fixes.fixes import ALL_FIXES, skip_stale_overlap_updates
from sglang_specv2_fixes.testing.scenarios import observe, resolve_name

pytestmark = [requires_sglang, pytest.mark.release_scoped]
FIX = skip_stale_overlap_updates.FIX


def stock():
    from sglang.srt.managers.scheduler_output_processor_mixin import SchedulerOutputProcessorMixin as M

    return M.__dict__[resolve_name()]


def patched():
    (fn,) = core.build_fix(FIX.name).values()  # the patch file applied to the installed source, compiled
    assert fn.__qualname__ == f"SchedulerOutputProcessorMixin.{resolve_name()}"
    return fn


def assert_fixed(obs):
    live, fin, ret = obs["live"], obs["finished"], obs["retracted"]
    assert obs["tokens"] == [[0, 1, 2], [4, 5, 6], [8, 9, 10]]
    # live request: committed grows by accepted drafts (the bonus slot was pre-claimed), stats counted
    assert live["committed"] == live["committed_before"] + 2
    assert (live["verify_ct"], live["accepted"]) == (1, 2)
    # finished request: only the pre-claimed bonus slot is rolled back, no statistics
    assert fin["committed"] == fin["committed_before"] - 1
    assert (fin["verify_ct"], fin["accepted"]) == (0, 0)
    # retracted request: untouched, committed never exceeds its (zeroed) allocation
    assert ret["committed"] == 0 <= ret["allocated"] and (ret["verify_ct"], ret["accepted"]) == (0, 0)


@pytest.mark.skipif(LINE != "0.5.11", reason="the bug is in 0.5.11 only")
def test_stock_0_5_11_corrupts_stale_requests():
    obs = observe(stock())
    assert obs["finished"]["committed"] > obs["finished"]["committed_before"]  # KV grows after release
    assert obs["retracted"]["committed"] > obs["retracted"]["allocated"]  # committed > allocated == 0
    assert obs["retracted"]["verify_ct"] == 1 and obs["finished"]["verify_ct"] == 1


@pytest.mark.skipif(LINE != "0.5.11", reason="patched only on 0.5.11")
def test_plugin_body_fixes_0_5_11():
    assert_fixed(observe(patched()))


@pytest.mark.skipif(LINE != "0.5.12", reason="upstream from 0.5.12")
def test_upstream_0_5_12_behaves_like_our_backport():
    assert_fixed(observe(stock()))
    st = core.plan(selection.parse("auto", ALL_FIXES)).get(FIX.name)
    assert st.state == catalog.UPSTREAM and "source verified" in st.reason
    assert isinstance(releases.entry(FIX.name, LINE), Note) and st.patch is None
    with pytest.raises(LookupError, match="not patched"):
        core.build_fix(FIX.name)
