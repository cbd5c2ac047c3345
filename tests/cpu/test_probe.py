"""The probe / check mode observing SGLang's own resolve step on real request objects."""

import types

import pytest
from conftest import LINE, MIXIN_ONLY, requires_sglang

from sglang_specv2_fixes import core, probe, releases
from sglang_specv2_fixes.fixes import skip_stale_overlap_updates
from sglang_specv2_fixes.testing.scenarios import resolve_name, set_kv, stale_batch_case

pytestmark = requires_sglang


def resolve_fn(use_plugin_body):
    from sglang.srt.managers.scheduler_output_processor_mixin import SchedulerOutputProcessorMixin as M

    if use_plugin_body:
        (fn,) = core.build_fix(skip_stale_overlap_updates.FIX.name).values()
        return fn
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


@MIXIN_ONLY
def test_fixed_resolve_is_silent_even_in_check_mode():
    s = run(LINE == "0.5.11", strict=True)  # 0.5.11: plugin body; 0.5.12: upstream code
    assert (s["stale_finished_seen"], s["stale_retracted_seen"]) == (1, 1)
    assert s["examples"] == [] and s["live_committed_over_allocated"] == 0


def test_live_request_over_commit_is_caught():
    def bad_resolve(self, result, batch):
        r = batch.reqs[0]
        set_kv(r, committed=probe._allocated(r) + 1, allocated=probe._allocated(r))

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


def _decode_batch(seq_lens, seq_lens_sum, spec="EAGLE3", v2=True):
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    return types.SimpleNamespace(
        forward_mode=ForwardMode.DECODE, spec_algorithm=SpeculativeAlgorithm.from_string(spec), is_spec_v2=v2,
        seq_lens_cpu=torch.tensor(seq_lens, dtype=torch.int64), seq_lens_sum=seq_lens_sum,
        reqs=[_live(f"r{i}") for i in range(len(seq_lens))],
    )


def _live(rid, finished_reason=None, req_pool_idx=0):
    return types.SimpleNamespace(rid=rid, finished_reason=finished_reason, req_pool_idx=req_pool_idx,
                                 finished=lambda: finished_reason is not None)


def _run_batch(batch, strict):
    probe.reset()
    probe._strict = strict
    ran = []
    try:
        probe._around_run_batch(lambda self, b: ran.append(b), None, batch)
    finally:
        probe._strict = False
    return probe.snapshot(), ran


def test_seq_lens_sum_invariant_on_decode_batches():
    s, ran = _run_batch(_decode_batch([5, 7, 9], 21), strict=True)
    assert (s["seq_lens_checks"], s["seq_lens_sum_mismatch"]) == (1, 0) and len(ran) == 1
    s, _ = _run_batch(_decode_batch([5, 7, 9], 22), strict=False)
    assert (s["seq_lens_checks"], s["seq_lens_sum_mismatch"]) == (1, 1)
    assert "seq_lens_sum 22 != sum(seq_lens_cpu) 21" in s["examples"][0]
    with pytest.raises(probe.InvariantViolation, match="seq_lens_sum 22"):
        _run_batch(_decode_batch([5, 7, 9], 22), strict=True)
    # spec v1 rewrites its batch inside the worker: not checked
    s, ran = _run_batch(_decode_batch([5, 7, 9], 22, v2=False), strict=True)
    assert s["seq_lens_checks"] == 0 and len(ran) == 1


def test_finished_request_at_launch_is_counted():
    """#28986 class: a speculative decode batch launched with a finished request (or one whose req-pool slot is
    released) is counted per request over launch_checks; check mode raises with its rid. Non-spec and spec v1
    batches are not checked (the end-to-end scenario on the release's real event loop:
    test_issue_28986_overlap_grammar.py)."""
    batch = _decode_batch([5, 7, 9], 21)
    s, ran = _run_batch(batch, strict=True)
    assert (s["launch_checks"], s["finished_in_launch"]) == (1, 0) and len(ran) == 1
    batch.reqs = [_live("a"), _live("done", finished_reason="FINISH_LENGTH(1)"), _live("freed", req_pool_idx=None)]
    s, ran = _run_batch(batch, strict=False)
    assert (s["launch_checks"], s["finished_in_launch"]) == (1, 2) and len(ran) == 1
    assert [e.split(":")[0] for e in s["examples"]] == ["launch rid=done", "launch rid=freed"]
    with pytest.raises(probe.InvariantViolation, match="launch rid=done: finished"):
        _run_batch(batch, strict=True)
    for spec, v2 in (("NONE", False), ("EAGLE3", False)):  # no spec / spec v1: not checked
        other = _decode_batch([5, 7, 9], 21, spec=spec, v2=v2)
        other.reqs = batch.reqs
        s, ran = _run_batch(other, strict=True)
        assert s["launch_checks"] == 0 and len(ran) == 1


def test_spec_v2_only_lines_and_req_kv_layout(monkeypatch):
    """0.5.14+: no ScheduleBatch.is_spec_v2 (every spec batch is v2); 0.5.16+: req.kv.kv_allocated_len."""
    v2_only = {line for line, L in releases.LINES.items() if L.spec_v2_only}
    assert {"0.5.14", "0.5.15", "0.5.16", "0.5.17"} <= v2_only
    assert all(releases.LINES[line].probe_decode and releases.LINES[line].run_batch for line in v2_only)
    monkeypatch.setattr(probe, "_spec_v2_only", True)
    batch = _decode_batch([5, 7, 9], 22)
    del batch.is_spec_v2
    s, _ = _run_batch(batch, strict=False)
    assert (s["seq_lens_checks"], s["seq_lens_sum_mismatch"]) == (1, 1)

    live = types.SimpleNamespace(rid="live", kv_committed_len=9, kv=types.SimpleNamespace(kv_allocated_len=8),
                                 is_retracted=False, req_pool_idx=0, spec_verify_ct=0, finished=lambda: False)
    gone = types.SimpleNamespace(rid="gone", kv_committed_len=0, kv=None, is_retracted=True, req_pool_idx=None,
                                 spec_verify_ct=0, finished=lambda: False)
    assert probe._allocated(live) == 8 and probe._allocated(gone) == 0
    batch = types.SimpleNamespace(spec_algorithm=batch.spec_algorithm, reqs=[live, gone])
    probe.reset()
    probe._around(lambda self, b, r: None, None, batch, None)
    s = probe.snapshot()
    assert (s["spec_v2_results"], s["stale_retracted_seen"], s["live_committed_over_allocated"]) == (1, 1, 1)
    assert s["committed_over_allocated"] == 0


def test_register_for_an_unknown_line_hooks_nothing():
    """The plugin registers the probe only on a known code line; asked for another one, probe.register
    fails before it hooks anything or changes its mode."""
    from sglang.srt.plugins.hook_registry import HookRegistry

    before = {k: list(v) for k, v in HookRegistry._hooks.items() if v}
    with pytest.raises(KeyError, match="0.0.0-no-such-line"):
        probe.register("0.0.0-no-such-line", strict=True)
    assert {k: list(v) for k, v in HookRegistry._hooks.items() if v} == before
    assert probe._strict is False


@pytest.mark.release_scoped
def test_spec_counters_reads_the_release_own_counters():
    """What /server_info's ``specv2_fixes.spec_counters`` reports (the registered live-accept-metrics row compares
    it with the requests' meta_info): the counters the release's decode step just fed, on the scheduler (0.5.11 /
    0.5.12.x) or its metrics_reporter (0.5.13+)."""
    from sglang_specv2_fixes.testing.scenarios import decode_case, decode_counters

    fn, sched, batch, result, live = decode_case(True)
    fn(sched, batch, result)
    c = decode_counters(sched)
    assert c["forward"] == 1 and c["accepted"] == 3  # the live request: 2 accepted drafts + its bonus token
    assert probe.spec_counters(sched) == {"accepted_tokens": c["accepted"], "verify_steps": c["forward"]}


@pytest.mark.release_scoped
def test_probe_observes_the_release_decode_step():
    """The probe around the release's real decode step (its resolve step included) on real Req objects of the
    release, whatever its KV layout (Req attributes, ``req.kv.kv_allocated_len`` from 0.5.16,
    ``req.kv.kv_committed_len`` from 0.5.19): the stale requests are seen and, with the fixes in place (upstream,
    or #23456 as the plugin ships it on 0.5.11), nothing is flagged; check mode stays silent."""
    from sglang_specv2_fixes.testing.scenarios import decode_case

    fn, sched, batch, result, live = decode_case(True)
    probe.reset()
    probe._strict = True
    try:
        probe._around(fn, sched, batch, result)
    finally:
        probe._strict = False
    s = probe.snapshot()
    assert (s["spec_v2_results"], s["stale_finished_seen"], s["stale_retracted_seen"]) == (1, 1, 1)
    flagged = ("stale_finished_kv_gain", "stale_retracted_kv_gain", "committed_over_allocated", "stale_stat_updates",
               "live_committed_over_allocated")
    assert {k: s[k] for k in flagged} == dict.fromkeys(flagged, 0) and s["examples"] == []
    assert len(live.output_ids) == 3  # the live request did get its tokens: the step really ran


def test_rank_views_round_trip(tmp_path, monkeypatch):
    """What the TP 2 rows read: each rank's view written by probe.write_rank_view on an internal-state query, read back
    per TP rank by testing.client.rank_views (stale files of an earlier query removed first)."""
    from sglang_specv2_fixes.testing import client

    (tmp_path / "probe-tp7-dpNone.json").write_text("{}")  # an earlier query's file: must not survive
    views = {0: {"rank": {"tp_rank": 0, "dp_rank": None}, "probe": {"spec_v2_results": 3}},
             1: {"rank": {"tp_rank": 1, "dp_rank": None}, "probe": {"spec_v2_results": 3}}}
    monkeypatch.setattr(client, "server_info", lambda: [probe.write_rank_view(str(tmp_path), v) for v in views.values()])
    assert client.rank_views(str(tmp_path)) == views
    probe.write_rank_view(None, views[0])  # no folder: nothing written, nothing raised


def test_radix_tokens_reads_the_scheduler_cache_size():
    """What /server_info's ``specv2_fixes.radix_tokens`` reports (the registered radix-overshoot row): SGLang's own
    ``tree_cache.total_size()``, None where there is no cache or no single token count."""
    from types import SimpleNamespace

    from sglang_specv2_fixes import probe

    assert probe.radix_tokens(SimpleNamespace(tree_cache=SimpleNamespace(total_size=lambda: 37))) == 37
    assert probe.radix_tokens(SimpleNamespace(tree_cache=SimpleNamespace(total_size=lambda: (37, 5)))) is None
    assert probe.radix_tokens(SimpleNamespace()) is None

    def broken():
        raise NotImplementedError

    assert probe.radix_tokens(SimpleNamespace(tree_cache=SimpleNamespace(total_size=broken))) is None
