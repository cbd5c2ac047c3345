"""live-accept-metrics on the real ``process_batch_result_decode`` (stock vs plugin body) of the release:
a late overlap result carrying one live, one finished and one retracted request. SGLang's own resolve
step and ``update_spec_metrics`` run; only the scheduler plumbing not under test is stubbed."""

import types

import pytest
from conftest import LINE, requires_sglang
from scenarios import resolve_name, stale_batch_case

from sglang_specv2_fixes.bodies import build
from sglang_specv2_fixes.fixes import live_accept_metrics, skip_stale_overlap_updates

pytestmark = requires_sglang


def scheduler_class():
    import sglang.srt.managers.scheduler  # noqa: F401  (import order SGLang itself uses: no import cycle)
    from sglang.srt.managers.scheduler_output_processor_mixin import SchedulerOutputProcessorMixin
    from sglang.srt.observability.scheduler_metrics_mixin import SchedulerMetricsMixin

    class Sched(SchedulerOutputProcessorMixin, SchedulerMetricsMixin):
        # plumbing outside the counters under test
        def _handle_finished_req(self, *a, **k):
            pass

        def stream_output(self, *a, **k):
            pass

        def report_decode_stats(self, *a, **k):
            self.reported = k

        def _mamba_prefix_cache_update(self, *a, **k):
            pass

    return Sched


_BODIES = {}


def body(fix_module, fix_name):
    """The fix's body for this release, compiled once per process (as the plugin does)."""
    if fix_name not in _BODIES:
        (patch,) = fix_module.FIX.patches(LINE)
        _BODIES[fix_name] = build(patch, fix_name)
    return _BODIES[fix_name]


def prepare(use_plugin_body, only_stale=False, log_interval=40):
    """The case ready to run: (fn, sched, batch, result, live request or None); ``fn(sched, batch, result)``
    runs it once (bench/hot_path_overhead.py times exactly that call)."""
    from sglang.srt.managers.scheduler_output_processor_mixin import SchedulerOutputProcessorMixin as M

    stand_in, result, batch = stale_batch_case()
    if only_stale:  # a late result holding only the finished and the retracted request
        batch.reqs = batch.reqs[1:]
        result.accept_lens = result.accept_lens[1:]
        result.next_token_ids = result.next_token_ids[4:]
    sched = scheduler_class()()
    sched.server_args = types.SimpleNamespace(decode_log_interval=log_interval)
    sched.__dict__.update(vars(stand_in))
    sched.enable_overlap, sched.enable_overlap_mlx, sched.enable_metrics = True, False, False
    sched.num_generated_tokens = sched.forward_ct_decode = 0
    for name in ("spec_num_accepted_tokens", "spec_num_accept_tokens", "spec_num_forward_ct"):
        setattr(sched, name, 0)
    sched.token_to_kv_pool_allocator = types.SimpleNamespace(free_group_begin=lambda: None, free_group_end=lambda: None)
    sched.model_config = types.SimpleNamespace(think_end_id=None)
    if LINE == "0.5.11":  # resolve with #23456 as the plugin ships it (the stock one corrupts the stale requests)
        setattr(sched, resolve_name(), body(skip_stale_overlap_updates, "skip-stale-overlap-updates").__get__(sched))
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    batch.spec_algorithm = SpeculativeAlgorithm.EAGLE3
    batch.is_spec_v2, batch.return_logprob = True, False
    batch.batch_size = lambda: len(batch.reqs)
    result.copy_done = result.routed_experts_output = None
    if hasattr(result, "indexer_topk_output"):
        result.indexer_topk_output = None
    result.logits_output, result.can_run_cuda_graph = types.SimpleNamespace(hidden_states=None), False
    if use_plugin_body:
        fn = body(live_accept_metrics, "live-accept-metrics")
    else:
        fn = M.__dict__["process_batch_result_decode"]
    live = batch.reqs[0] if not only_stale else None
    for r in batch.reqs:
        r.vocab_size = 1024  # what the scheduler passes to Req() for the tiny vocab
        r.sampling_params.normalize(None)  # as the tokenizer manager does before a request reaches the scheduler
    return fn, sched, batch, result, live


def run(use_plugin_body, only_stale=False, log_interval=40):
    fn, sched, batch, result, live = prepare(use_plugin_body, only_stale, log_interval)
    fn(sched, batch, result)
    # the release's own counter name (renamed in 0.5.12)
    accepted = sched.spec_num_accepted_tokens if LINE == "0.5.11" else sched.spec_num_accept_tokens
    if live is None:
        return dict(accepted=accepted, forward=sched.spec_num_forward_ct, reported=hasattr(sched, "reported"))
    drafts = getattr(live, "spec_accepted_drafts", getattr(live, "spec_num_correct_drafts", None))
    return dict(accepted=accepted, forward=sched.spec_num_forward_ct, generated=sched.num_generated_tokens,
                live_verify=live.spec_verify_ct, live_drafts=drafts, live_out=len(live.output_ids))


def test_stock_counts_the_stale_requests():
    s = run(False)
    # 3 requests with accept length 3 each: stock counts all of them although only the live one emitted tokens
    assert (s["forward"], s["accepted"]) == (3, 9)
    assert s["live_out"] == 3 and s["live_verify"] == 1


def test_plugin_counts_live_requests_only():
    s = run(True)
    assert (s["forward"], s["accepted"]) == (1, 3)
    # the scheduler-wide counters now equal what the per-request meta_info reports for the same requests
    assert s["forward"] == s["live_verify"] and s["accepted"] == s["live_drafts"] + s["live_verify"]
    assert s["live_out"] == 3


def test_body_differs_from_upstream_only_in_the_counters():
    import difflib
    import inspect

    from sglang.srt.managers.scheduler_output_processor_mixin import SchedulerOutputProcessorMixin as M

    from sglang_specv2_fixes.bodies import body_source

    (patch,) = live_accept_metrics.FIX.patches(LINE)
    ours = body_source(patch)[0].splitlines()
    theirs = inspect.getsource(M.process_batch_result_decode)
    import textwrap

    theirs = textwrap.dedent(theirs).splitlines()
    removed = [l for l in difflib.ndiff(theirs, ours) if l.startswith("- ")]
    assert [l[2:].strip() for l in removed] == [
        "self.num_generated_tokens += len(batch.reqs)",
        "self.update_spec_metrics(batch.batch_size(), result.%s)" % (
            "num_accepted_drafts" if LINE == "0.5.11" else "num_correct_drafts"),
    ]


def test_all_stale_result_skips_the_periodic_report_with_nothing_to_average():
    """Seen on the GPU (0.5.11, --decode-log-interval 1, 2026-11-22): a late result whose requests were all
    stale left its log interval with no live verify step, and upstream's periodic log (called from
    report_decode_stats) divides by that count. The body skips that one report; stock counts the stale
    requests, so it always has something to divide by."""
    assert run(True, only_stale=True, log_interval=1) == dict(accepted=0, forward=0, reported=False)
    assert run(False, only_stale=True, log_interval=1) == dict(accepted=6, forward=2, reported=True)
    # not a log step: the every-iteration part of the report still runs
    assert run(True, only_stale=True, log_interval=40)["reported"] is True
