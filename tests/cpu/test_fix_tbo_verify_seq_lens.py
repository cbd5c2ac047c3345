"""tbo-verify-seq-lens on the release's real objects: the verify input of the spec-v2 draft (an ``EagleVerifyInput``
built as the release's ``EagleDraftWorker.draft`` builds it: a FULL_MASK tree mask, ``seq_lens_cpu=None``,
``seq_lens_sum=None``) goes through the release's ``prepare_for_v2_verify`` (stock, or the plugin's, compiled from the
release's source and the patch file), then through two-batch overlap's real ``split_spec_info``, which splits a verify
batch of three requests into requests [0, 1) and [1, 3).

Stock 0.5.11: ``split_spec_info`` raises ``AttributeError`` on ``seq_lens_cpu`` (upstream #24319). Plugin: each half
gets exactly its requests' rows of the tree mask (``(seq_len + draft_token_num) * draft_token_num`` per request, in
order) and its sequence lengths. The release's 0.5.12 / 0.5.13.x ``prepare_for_v2_verify`` does the same by itself.

Stand-ins: the forward batch (``ForwardBatch.init_new`` needs a model runner; the test keeps the verify input the batch
carries), no CUDA graph runner, an attention backend that records its planning, the global server args (no mamba).
"""

import types

import pytest
import torch
from conftest import VERSION, requires_sglang, where_patched

from sglang_specv2_fixes.fixes import tbo_verify_seq_lens

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIX = tbo_verify_seq_lens.FIX.name
FIXED_HERE = where_patched(FIX, "the plugin's EagleVerifyInputV2Mixin.prepare_for_v2_verify")
HAS_V2_VERIFY_PREP = VERSION in ("0.5.11", "0.5.12", "0.5.12.post1", "0.5.13", "0.5.13.post1")
SEQ_LENS, D = [5, 9, 3], 4  # three requests; a chain of four verify tokens each


def verify_input():
    from sglang.srt.speculative.eagle_info import EagleVerifyInput

    rows = [torch.full(((s + D) * D,), i, dtype=torch.int32) for i, s in enumerate(SEQ_LENS)]  # row i: request i
    return EagleVerifyInput(
        draft_token=torch.arange(len(SEQ_LENS) * D), custom_mask=torch.cat(rows),
        positions=torch.arange(len(SEQ_LENS) * D), retrieve_index=torch.zeros(len(SEQ_LENS), D, dtype=torch.long),
        retrieve_next_token=torch.zeros(len(SEQ_LENS), D, dtype=torch.long),
        retrieve_next_sibling=torch.zeros(len(SEQ_LENS), D, dtype=torch.long), retrieve_cum_len=None, spec_steps=D - 1,
        topk=1, draft_token_num=D, capture_hidden_mode=None, seq_lens_sum=None, seq_lens_cpu=None)


def prepared(plugin, monkeypatch):
    """The verify input after the release's (or the plugin's) prepare_for_v2_verify on a three-request decode batch."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative import eagle_info_v2 as mod

    from sglang_specv2_fixes import core

    monkeypatch.setattr(mod, "get_global_server_args",
                        lambda: types.SimpleNamespace(enable_mamba_extra_buffer=lambda: False))
    monkeypatch.setattr(mod.ForwardBatch, "init_new",
                        staticmethod(lambda batch, runner: types.SimpleNamespace(spec_info=batch.spec_info)))
    spec = verify_input()
    bs = len(SEQ_LENS)
    seq_lens_cpu = torch.tensor(SEQ_LENS, dtype=torch.int64)
    batch = types.SimpleNamespace(  # the ModelWorkerBatch after prepare_for_decode: lengths set on the host
        forward_mode=ForwardMode.DECODE, req_pool_indices=torch.arange(bs), seq_lens=seq_lens_cpu.clone(),
        seq_lens_cpu=seq_lens_cpu, seq_lens_sum=int(seq_lens_cpu.sum()), spec_info=spec, reqs=[None] * bs,
        device="cpu", model_config=types.SimpleNamespace(vocab_size=1024))  # 0.5.13: checks the draft's token ids
    planned = []
    backend = types.SimpleNamespace(init_forward_metadata=planned.append)
    worker = types.SimpleNamespace(model_runner=types.SimpleNamespace(  # 0.5.12 on: STANDALONE picks the hidden mode
        graph_runner=None, attn_backend=backend, spec_algorithm=types.SimpleNamespace(is_standalone=lambda: False)))
    pool = types.SimpleNamespace(req_to_token=torch.arange(bs * 64).view(bs, 64))
    fn = core.build_fix(FIX)[f"{mod.__name__}.EagleVerifyInputV2Mixin.prepare_for_v2_verify"] if plugin \
        else mod.EagleVerifyInputV2Mixin.prepare_for_v2_verify
    fb, can_graph = fn(spec, pool, batch, worker)
    assert fb.spec_info is spec and can_graph is False and len(planned) <= 1  # 0.5.13 plans in the forward
    return spec


def split(spec):
    """two_batch_overlap's split of the verify: requests [0, 1) and [1, 3), tokens by D per request."""
    from sglang.srt.batch_overlap.two_batch_overlap import split_spec_info

    return split_spec_info(spec, 0, 1, 0, D), split_spec_info(spec, 1, len(SEQ_LENS), D, len(SEQ_LENS) * D)


def check_halves(spec):
    a, b = split(spec)
    assert a.custom_mask.tolist() == [0] * ((SEQ_LENS[0] + D) * D)
    assert b.custom_mask.tolist() == [1] * ((SEQ_LENS[1] + D) * D) + [2] * ((SEQ_LENS[2] + D) * D)
    assert a.seq_lens_cpu.tolist() == SEQ_LENS[:1] and b.seq_lens_cpu.tolist() == SEQ_LENS[1:]
    assert int(a.seq_lens_sum) == SEQ_LENS[0] and int(b.seq_lens_sum) == sum(SEQ_LENS[1:])
    assert a.draft_token.tolist() == list(range(D)) and b.draft_token.tolist() == list(range(D, 3 * D))


@pytest.mark.skipif(VERSION != "0.5.11", reason=f"sglang {VERSION}: prepare_for_v2_verify fills the verify input")
def test_stock_split_fails_on_the_verify_input(monkeypatch):
    spec = prepared(False, monkeypatch)
    assert spec.seq_lens_cpu is None
    with pytest.raises(AttributeError, match="shape"):
        split(spec)


@FIXED_HERE
def test_plugin_verify_input_splits_by_request(monkeypatch):
    check_halves(prepared(True, monkeypatch))


@pytest.mark.skipif(not HAS_V2_VERIFY_PREP or VERSION == "0.5.11",
                    reason=f"sglang {VERSION}: not the upstream prepare_for_v2_verify of 0.5.12 - 0.5.13.post1")
def test_upstream_verify_input_splits_by_request(monkeypatch):
    """What the release table's upstream note claims on 0.5.12 - 0.5.13.x, on the release's own function (from 0.5.14
    eagle_utils.eagle_prepare_for_verify, fingerprint-checked only)."""
    check_halves(prepared(False, monkeypatch))
