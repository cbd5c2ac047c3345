"""Stale overlap results on real SGLang request objects (shared by the in-process and subprocess tests).

State is produced with SGLang's own methods where it has them (``reset_for_retract``, finish reasons);
the KV counters are set to what ``prepare_for_decode`` leaves behind (allocation grown, bonus slot
pre-claimed), which needs a GPU pool to produce for real.
"""

import functools
import types

import torch

from sglang_specv2_fixes import core, installed, releases
from sglang_specv2_fixes.fixes import live_accept_metrics, skip_stale_overlap_updates


def stale_batch_case():
    from sglang.srt.managers.schedule_batch import FINISH_LENGTH, Req
    from sglang.srt.managers.utils import GenerationBatchResult
    from sglang.srt.sampling.sampling_params import SamplingParams

    def req(rid):
        r = Req(rid, "", [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], SamplingParams(max_new_tokens=64))
        r.req_pool_idx = 0
        r.kv_committed_len = 11  # 10 prompt tokens + the bonus slot pre-claimed for this decode
        r.kv_allocated_len = 18
        return r

    live, finished, retracted = req("live"), req("finished"), req("retracted")
    finished.finished_reason = FINISH_LENGTH(length=1)  # finished by the previous result
    retracted.reset_for_retract()  # retracted while this batch was in flight
    reqs = [live, finished, retracted]
    stride = 4
    accept_lens = [3, 3, 3]
    result = GenerationBatchResult(
        next_token_ids=torch.arange(stride * len(reqs), dtype=torch.int64),
        accept_lens=torch.tensor(accept_lens, dtype=torch.int32),
    )
    if hasattr(result, "speculative_num_draft_tokens"):  # 0.5.12 records the stride on the result
        result.speculative_num_draft_tokens = stride
    batch = types.SimpleNamespace(reqs=reqs)
    scheduler = types.SimpleNamespace(
        draft_worker=types.SimpleNamespace(speculative_num_draft_tokens=stride),
        model_worker=types.SimpleNamespace(on_verify_complete_cpu=lambda *_: None),
    )
    return scheduler, result, batch


def spec_counter(req):
    return getattr(req, "spec_accepted_drafts", getattr(req, "spec_num_correct_drafts", None))


def observe(resolve):
    """Run a resolve function on the stale case and return what happened to each request."""
    scheduler, result, batch = stale_batch_case()
    before = {r.rid: r.kv_committed_len for r in batch.reqs}
    tokens = resolve(scheduler, result, batch)
    out = {"tokens": tokens}
    for r in batch.reqs:
        out[r.rid] = dict(
            committed_before=before[r.rid],
            committed=r.kv_committed_len,
            allocated=r.kv_allocated_len,
            verify_ct=r.spec_verify_ct,
            accepted=spec_counter(r),
        )
    return out


def resolve_name():
    from sglang.srt.managers.scheduler_output_processor_mixin import SchedulerOutputProcessorMixin as M

    return "_resolve_spec_overlap_token_ids" if hasattr(M, "_resolve_spec_overlap_token_ids") else "_resolve_spec_overlap_tokens"


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


@functools.lru_cache(maxsize=None)
def _line():
    # once per process: importlib.metadata scans sys.path, which right before a timed call would also
    # evict the caches that call runs on (bench/hot_path_overhead.py)
    return releases.code_line(installed.version())


_BODIES = {}


def body(fix_module, fix_name):
    """The fix's patched function for this release (its patch file applied to the installed source),
    compiled once per process, as the plugin does; the fix must patch exactly one function here."""
    if fix_name not in _BODIES:
        (fn,) = core.build_fix(fix_module.FIX.name).values()
        _BODIES[fix_name] = fn
    return _BODIES[fix_name]


def decode_case(use_plugin_body, only_stale=False, log_interval=40):
    """``process_batch_result_decode`` (stock, or the live-accept-metrics body) on the stale case, ready to run:
    (fn, sched, batch, result, live request or None); ``fn(sched, batch, result)`` runs it once (the
    live-accept-metrics tests run it, bench/hot_path_overhead.py times exactly that call)."""
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
    if _line() == "0.5.11":  # resolve with #23456 as the plugin ships it (the stock one corrupts the stale requests)
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
