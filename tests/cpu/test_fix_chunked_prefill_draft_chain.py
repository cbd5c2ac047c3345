"""#26800 chunked-prefill-draft-chain: the real spec-v2 draft prefill rotation, stock vs patched.

The batches come from SGLang's own scheduler code on CPU (in a fresh interpreter, ``TRITON_INTERPRET=1``
for the release's Triton helpers): real ``Req`` objects, a real ``PrefillAdder`` with a chunk budget of 8
tokens (``--chunked-prefill-size 8``) over a real ``ReqToTokenPool`` / ``TokenToKVPoolAllocator`` /
``ChunkCache``, ``ScheduleBatch.init_new`` + ``prepare_for_extend`` + ``get_model_worker_batch`` per round,
and between rounds what ``Scheduler.get_next_batch_to_run`` / ``get_new_batch_prefill`` do with the chunked
request (``maybe_cache_unfinished_req(..., chunked=True)``, ``init_next_round_input``,
``PrefillAdder.add_chunked_req``). Request ``b`` (3 tokens) fits; request ``a`` (20 tokens) is split
5 / 8 / 7.

Each real ``ModelWorkerBatch`` then goes through ``EagleDraftWorker._draft_extend_for_prefill`` (stock, or
compiled from the patch file) with the target's sampled tokens 900, 901; only the draft model forward is a
stand-in (it records the draft's input ids), and ``ForwardBatch.init_new`` is replaced by a record of the
batch's ids (it needs a model runner). The draft must see, at each prompt position, the next prompt token:
stock puts the target's sample at the end of each non-final chunk of ``a`` (901, then 900); patched puts
the prompt tokens 15 and 23 there. Final chunks and complete requests keep the sample in both.
"""

import json
import os
import subprocess
import sys
import types

import pytest
from conftest import LINE, ROOT, child_env, requires_sglang

FIX_NAME = "chunked-prefill-draft-chain"
PATCH_FOR_LINE = {"0.5.11": "0.5.11", "0.5.12": "0.5.12"}  # until releases.py names it

pytestmark = [requires_sglang, pytest.mark.skipif(LINE not in PATCH_FOR_LINE, reason="fix patches 0.5.11 / 0.5.12.x only"), pytest.mark.release_scoped]

TARGET = "sglang.srt.speculative.eagle_worker_v2.EagleDraftWorker._draft_extend_for_prefill"
CHUNK = 8
VOCAB = 1000
PROMPT_A = list(range(10, 30))  # 20 tokens: chunks of 5 (after b's 3), 8, 7
PROMPT_B = [5, 6, 7]
SAMPLE = 900  # the target's sampled token for request i is SAMPLE + i


def patch_file():
    from sglang_specv2_fixes import catalog, patchfile, releases

    try:
        entry = releases.entry(FIX_NAME, LINE)
        name = entry.name if isinstance(entry, catalog.Patched) else PATCH_FOR_LINE[LINE]
    except KeyError:
        name = PATCH_FOR_LINE[LINE]
    return patchfile.patch_path(FIX_NAME, name)


# ------------------------------------------------------------------ the scenario (child interpreter)
def _server_args():
    """ServerArgs field defaults without __post_init__ (there is no model to resolve here): what the
    scheduler-side code reads through get_global_server_args()."""
    from sglang_specv2_fixes.testing.scenarios import server_args

    return server_args(speculative_algorithm="EAGLE3", chunked_prefill_size=CHUNK, page_size=1)


def _worker_batches():
    """The ModelWorkerBatch of every prefill round, built by the release's scheduler code."""
    import torch

    from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
    from sglang.srt.managers.schedule_policy import PrefillAdder
    from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.chunk_cache import ChunkCache
    from sglang.srt.mem_cache.common import maybe_cache_unfinished_req
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.server_args import set_global_server_args_for_scheduler
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    set_global_server_args_for_scheduler(_server_args())
    kv = MHATokenToKVPool(size=512, page_size=1, dtype=torch.float32, head_num=1, head_dim=8, layer_num=1,
                          device="cpu", enable_memory_saver=False)
    rtp = ReqToTokenPool(size=8, max_context_len=128, device="cpu", enable_memory_saver=False)
    alloc = TokenToKVPoolAllocator(512, torch.float32, "cpu", kv, need_sort=False)
    cache = ChunkCache(CacheInitParams(disable=True, req_to_token_pool=rtp, token_to_kv_pool_allocator=alloc,
                                       page_size=1))
    model_config = types.SimpleNamespace(vocab_size=VOCAB, is_encoder_decoder=False, is_multimodal=False,
                                         hf_config=None, context_len=128, is_matryoshka=False, is_hybrid_swa=False)
    spec = SpeculativeAlgorithm.from_string("EAGLE3")

    def req(rid, ids):
        sp = SamplingParams(max_new_tokens=4, temperature=0)
        sp.normalize(None)
        return Req(rid, "", list(ids), sp, vocab_size=VOCAB)

    def adder():
        running = ScheduleBatch.init_new([], rtp, alloc, cache, model_config, True, spec)
        return PrefillAdder(1, cache, alloc, running, 0.0, 10000, CHUNK)

    def build(can_run, chunked_req):
        batch = ScheduleBatch.init_new(can_run, rtp, alloc, cache, model_config, True, spec, chunked_req=chunked_req)
        batch.prepare_for_extend()
        return batch.get_model_worker_batch()

    a, b = req("a", PROMPT_A), req("b", PROMPT_B)
    ad = adder()
    for r in (b, a):
        r.init_next_round_input(cache)
        ad.add_one_req(r, has_chunked_req=False, truncation_align_size=None)
    chunked = ad.new_chunked_req
    assert chunked is a, "the chunk budget must split request a"
    batches = [build(ad.can_run_list, chunked)]
    while chunked is not None:  # Scheduler.get_next_batch_to_run / get_new_batch_prefill for the chunked req
        maybe_cache_unfinished_req(chunked, cache, chunked=True)
        ad = adder()
        chunked.init_next_round_input()
        nxt = ad.add_chunked_req(chunked)
        batches.append(build(ad.can_run_list, nxt))
        chunked = nxt
    return batches, model_config


def _scenario(which, path):
    import copy

    import torch

    import sglang.srt.speculative.eagle_worker_v2 as w

    from sglang_specv2_fixes import installed, patchfile

    if which == "stock":
        fn = w.EagleDraftWorker._draft_extend_for_prefill
        assert not hasattr(fn, patchfile.MARK)
    else:
        pf = patchfile.parse(open(path, encoding="utf-8").read(), path)
        fn = patchfile.build(pf, os.path.dirname(installed.sglang_root()))[TARGET]
    batches, model_config = _worker_batches()
    seen = []

    class DraftRunner:  # stand-in for the draft ModelRunner: records what the draft model is fed
        def forward(self, forward_batch):
            seen.append(forward_batch.input_ids.tolist())
            n = len(forward_batch.seq_lens)
            return types.SimpleNamespace(logits_output=types.SimpleNamespace(
                next_token_logits=torch.zeros(n, VOCAB), hidden_states=torch.zeros(n, 4)))

    worker = types.SimpleNamespace(draft_runner=DraftRunner(), topk=1,
                                   target_worker=types.SimpleNamespace(model_config=model_config))
    real = w.ForwardBatch
    w.ForwardBatch = types.SimpleNamespace(init_new=lambda batch, runner: types.SimpleNamespace(
        input_ids=batch.input_ids, seq_lens=batch.seq_lens, return_logprob=batch.return_logprob))
    try:
        for mwb in batches:
            batch = copy.copy(mwb)
            batch.input_ids = mwb.input_ids.clone()
            fn(worker, batch, torch.zeros(len(batch.input_ids), 4), torch.tensor([SAMPLE + i for i in range(len(batch.reqs))]))
    finally:
        w.ForwardBatch = real
    return dict(target_inputs=[m.input_ids.tolist() for m in batches], reqs=[[r.rid for r in m.reqs] for m in batches],
                draft_inputs=seen)


def run(which):
    p = subprocess.run([sys.executable, os.path.abspath(__file__), which, patch_file()], capture_output=True,
                       text=True, timeout=600, cwd=ROOT, env=child_env(TRITON_INTERPRET="1"))
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def results():
    return {which: run(which) for which in ("stock", "patched")}


def draft_chain_of_a(r):
    """The draft's input ids at request a's positions, over all its chunks."""
    out = []
    for rids, ids in zip(r["reqs"], r["draft_inputs"]):
        start = 0 if rids[0] == "a" else len(PROMPT_B)
        out.extend(ids[start:])
    return out


def test_real_scheduler_chunks_request_a(results):
    for r in results.values():
        assert r["reqs"] == [["b", "a"], ["a"], ["a"]]
        assert r["target_inputs"] == [PROMPT_B + PROMPT_A[:5], PROMPT_A[5:13], PROMPT_A[13:]]


def test_stock_feeds_the_target_prediction_at_chunk_ends(results):
    chain = draft_chain_of_a(results["stock"])
    assert chain[4] == SAMPLE + 1 and chain[12] == SAMPLE  # ends of chunks 1 and 2 (a is row 1, then row 0)
    assert chain != PROMPT_A[1:] + [SAMPLE]


def test_patched_feeds_the_next_prompt_token(results):
    patched = results["patched"]
    assert draft_chain_of_a(patched) == PROMPT_A[1:] + [SAMPLE]  # the prompt shifted by one, then the sample
    assert patched["draft_inputs"][0][: len(PROMPT_B)] == PROMPT_B[1:] + [SAMPLE]  # complete request b unchanged


if __name__ == "__main__":
    print(json.dumps(_scenario(sys.argv[1], sys.argv[2])))
