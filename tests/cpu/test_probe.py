"""The probe / check mode observing SGLang's own resolve step on real request objects."""

import types

import pytest
from conftest import LINE, requires_sglang
from scenarios import resolve_name, stale_batch_case

from sglang_specv2_fixes import probe
from sglang_specv2_fixes.bodies import build
from sglang_specv2_fixes.fixes import skip_stale_overlap_updates

pytestmark = requires_sglang


def resolve_fn(use_plugin_body):
    from sglang.srt.managers.scheduler_output_processor_mixin import SchedulerOutputProcessorMixin as M

    if use_plugin_body:
        (patch,) = skip_stale_overlap_updates.FIX.patches(LINE)
        return build(patch, "skip-stale-overlap-updates")
    return M.__dict__[resolve_name()]


def process(resolve):
    """Stand-in for process_batch_result_decode: it is the real resolve step that changes the requests."""

    def original(self, batch, result):
        resolve(self, result, batch)

    return original


def run(use_plugin_body, strict):
    probe.reset()
    probe._strict = strict
    try:
        scheduler, result, batch = stale_batch_case()
        batch.is_spec_v2 = True
        probe._around(process(resolve_fn(use_plugin_body)), scheduler, batch, result)
    finally:
        probe._strict = False
    return probe.snapshot()


@pytest.mark.skipif(LINE != "0.5.11", reason="stock resolve is buggy on 0.5.11 only")
def test_stock_0_5_11_counted_and_stopped_in_check_mode():
    s = run(False, strict=False)
    assert (s["stale_finished_seen"], s["stale_retracted_seen"]) == (1, 1)
    assert (s["stale_finished_kv_gain"], s["stale_retracted_kv_gain"], s["committed_over_allocated"], s["stale_stat_updates"]) == (1, 1, 1, 2)
    assert any("retracted rid=retracted" in e for e in s["examples"])
    with pytest.raises(probe.InvariantViolation, match="rid=finished|rid=retracted"):
        run(False, strict=True)


def test_fixed_resolve_is_silent_even_in_check_mode():
    s = run(LINE == "0.5.11", strict=True)  # 0.5.11: plugin body; 0.5.12: upstream code
    assert (s["stale_finished_seen"], s["stale_retracted_seen"]) == (1, 1)
    assert s["examples"] == [] and s["live_committed_over_allocated"] == 0


def test_live_request_over_commit_is_caught():
    def bad_resolve(self, result, batch):
        batch.reqs[0].kv_committed_len = batch.reqs[0].kv_allocated_len + 1

    probe.reset()
    scheduler, result, batch = stale_batch_case()
    batch.is_spec_v2 = True
    probe._strict = True
    try:
        with pytest.raises(probe.InvariantViolation, match="live rid=live"):
            probe._around(process(bad_resolve), scheduler, batch, result)
    finally:
        probe._strict = False


def test_not_spec_v2_passes_through():
    probe.reset()
    calls = []
    probe._around(lambda self, b, r: calls.append(1), None, types.SimpleNamespace(is_spec_v2=False, reqs=[]), None)
    assert calls == [1] and probe.snapshot()["spec_v2_results"] == 0
