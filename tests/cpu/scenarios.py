"""Stale overlap results on real SGLang request objects (shared by the in-process and subprocess tests).

State is produced with SGLang's own methods where it has them (``reset_for_retract``, finish reasons);
the KV counters are set to what ``prepare_for_decode`` leaves behind (allocation grown, bonus slot
pre-claimed), which needs a GPU pool to produce for real.
"""

import types

import torch


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
