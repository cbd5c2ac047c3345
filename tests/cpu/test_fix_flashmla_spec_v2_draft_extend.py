"""flashmla-spec-v2-draft-extend on the release's real FlashMLABackend (#24640): spec v2's draft extend
(``ForwardMode.DRAFT_EXTEND_V2``) on the draft runner's FlashMLA backend.

The chain, on the release's real functions: ``FlashMLABackend.init_forward_metadata`` (real) hands the draft extend to
its FlashInfer MLA parent, whose planner (a stand-in: it plans a flashinfer wrapper on the GPU) sets the parent's real
``PrefillMetadata``; then ``FlashMLABackend.forward_extend`` (the release's or the plugin's) runs the layer. 0.5.11 -
0.5.12.post1 stock: the draft extend takes the verify branch and reads ``block_kv_indices`` from that
``PrefillMetadata``: ``AttributeError``, the scheduler's crash. Plugin: the parent's ``forward_extend`` (a stand-in
that records the batch it runs) gets the draft extend. A target verify still runs FlashMLA's own kernel on its
``FlashMLADecodeMetadata`` on both sides (``flash_mla_with_kvcache`` is a stand-in that records its block table).
0.5.13 - 0.5.15.post1 stock hands the draft extend to the parent itself (the table's upstream note).

Stand-ins: the backend is made without ``__init__`` (only the fields these functions read), the KV pool takes writes and
returns a small CPU buffer.
"""

import types

import pytest
import torch
from conftest import VERSION, requires_sglang, where_patched

from sglang_specv2_fixes import core, releases
from sglang_specv2_fixes.fixes import flashmla_spec_v2_draft_extend

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIX = flashmla_spec_v2_draft_extend.FIX.name
FIXED_HERE = where_patched(FIX, "the plugin's FlashMLABackend.forward_extend")
TARGET = "sglang.srt.layers.attention.flashmla_backend.FlashMLABackend.forward_extend"
PARENT_ROUTES_V2 = set(releases.release_set("up-to:0.5.15.post1")) - set(releases.release_set("up-to:0.5.12.post1"))
BS, D, HEADS, LORA, ROPE = 2, 4, 2, 8, 4


class _Pool:
    def set_kv_buffer(self, layer, loc, k, v):
        pass

    def get_key_buffer(self, layer_id):
        return torch.zeros(64, 1, LORA + ROPE)


@pytest.fixture
def mla(monkeypatch):
    """(module, backend, parent_runs, kernel_tables): a FlashMLABackend of the release with the parent's planner and
    forward_extend, and FlashMLA's kernel, replaced by recorders."""
    from sglang.srt.layers.attention import flashinfer_mla_backend, flashmla_backend

    parent_runs, kernel_tables = [], []
    parent = flashinfer_mla_backend.FlashInferMLAAttnBackend

    def plan(self, forward_batch):
        self.forward_metadata = flashinfer_mla_backend.PrefillMetadata(prefill_wrapper="paged-wrapper",
                                                                       use_ragged=False)

    def parent_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True):
        parent_runs.append((forward_batch.forward_mode, self.forward_metadata))
        return q

    def kernel(**kw):
        kernel_tables.append(kw["block_table"])
        q = kw["q"]
        return q.new_zeros(q.shape[0], q.shape[1], q.shape[2], LORA), None

    monkeypatch.setattr(parent, "init_forward_metadata", plan)
    monkeypatch.setattr(parent, "forward_extend", parent_extend)
    monkeypatch.setattr(flashmla_backend, "flash_mla_with_kvcache", kernel)
    be = object.__new__(flashmla_backend.FlashMLABackend)
    pool = _Pool()
    be.__dict__.update(kv_lora_rank=LORA, kv_cache_dim=LORA + ROPE, num_draft_tokens=D, is_fp8_kvcache=False,
                       forward_metadata=None, token_to_kv_pool=pool)
    return flashmla_backend, be, parent_runs, kernel_tables


def _batch(mode, pool):
    return types.SimpleNamespace(
        forward_mode=mode, batch_size=BS, seq_lens=torch.tensor([7, 9]), seq_lens_cpu=torch.tensor([7, 9]),
        out_cache_loc=torch.arange(BS * D), token_to_kv_pool=pool)


def _layer():
    return types.SimpleNamespace(layer_id=0, tp_q_head_num=HEADS, head_dim=LORA + ROPE, v_head_dim=LORA,
                                 scaling=1.0, k_scale=None)


def _forward_extend(plugin):
    from sglang.srt.layers.attention.flashmla_backend import FlashMLABackend

    return core.build_fix(FIX)[TARGET] if plugin else FlashMLABackend.forward_extend


def draft_extend(be, plugin):
    """Spec v2's draft extend of BS requests, D tokens each, through the real init_forward_metadata and the release's
    (or the plugin's) forward_extend."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    fb = _batch(ForwardMode.DRAFT_EXTEND_V2, be.token_to_kv_pool)
    be.init_forward_metadata(fb)
    q = torch.zeros(BS * D, HEADS * (LORA + ROPE))
    k = torch.zeros(BS * D, 1, LORA + ROPE)
    return _forward_extend(plugin)(be, q, k, k[..., :LORA], _layer(), fb)


@FIXED_HERE
def test_stock_draft_extend_reads_flashmla_metadata_the_parent_never_set(mla):
    _, be, parent_runs, kernel_tables = mla
    with pytest.raises(AttributeError, match="block_kv_indices"):
        draft_extend(be, plugin=False)
    assert parent_runs == [] and kernel_tables == []


@FIXED_HERE
def test_plugin_draft_extend_runs_the_parent_on_the_metadata_it_planned(mla):
    from sglang.srt.layers.attention.flashinfer_mla_backend import PrefillMetadata
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    _, be, parent_runs, kernel_tables = mla
    draft_extend(be, plugin=True)
    assert len(parent_runs) == 1
    mode, meta = parent_runs[0]
    assert mode == ForwardMode.DRAFT_EXTEND_V2
    assert isinstance(meta, PrefillMetadata) and meta.prefill_wrapper == "paged-wrapper"
    assert kernel_tables == []


@FIXED_HERE
@pytest.mark.parametrize("plugin", [False, True], ids=["stock", "plugin"])
def test_target_verify_keeps_flashmla_kernel(mla, plugin):
    """What the patch leaves alone: a target verify runs FlashMLA's kernel on its own block table (EXTEND goes to
    the parent on both sides)."""
    module, be, parent_runs, kernel_tables = mla
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    table = torch.arange(BS * 2, dtype=torch.int32).view(BS, 2)
    be.forward_metadata = module.FlashMLADecodeMetadata(None, None, table)
    q = torch.zeros(BS * D, HEADS * (LORA + ROPE))
    out = _forward_extend(plugin)(be, q, None, None, _layer(), _batch(ForwardMode.TARGET_VERIFY, be.token_to_kv_pool))
    assert out.shape == (BS * D, HEADS * LORA)
    assert len(kernel_tables) == 1 and torch.equal(kernel_tables[0], table)
    assert parent_runs == []
    _forward_extend(plugin)(be, q, None, None, _layer(), _batch(ForwardMode.EXTEND, be.token_to_kv_pool))
    assert [m for m, _ in parent_runs] == [ForwardMode.EXTEND]


@pytest.mark.skipif(VERSION not in PARENT_ROUTES_V2,
                    reason=f"sglang {VERSION}: the draft extend is patched here (0.5.11 - 0.5.12.post1) or served by "
                           "FlashMLA's own kernel (0.5.16 on)")
def test_upstream_releases_hand_the_draft_extend_to_the_parent(mla):
    """0.5.13 - 0.5.15.post1 (#24640, the table's upstream note): stock's own forward_extend gives the parent the
    draft extend."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    _, be, parent_runs, _ = mla
    draft_extend(be, plugin=False)
    assert [m for m, _ in parent_runs] == [ForwardMode.DRAFT_EXTEND_V2]
