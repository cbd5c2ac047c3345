"""triton-verify-mask-size on the release's real objects: a hybrid linear-attention target (``HybridLinearAttnBackend``
over a ``TritonAttnBackend``) whose spec-v2 draft builds the verify tree mask, then the verify CUDA graph's metadata
(``TritonAttnBackend._update_target_verify_buffers``) copies it into the graph's ``cuda_graph_custom_mask`` at the
largest captured batch size. The sizes are the GPU crash's: 4096 context, 4 draft tokens (3 steps, topk 1), graphs up
to bs 8 (``max_num_tokens`` 32).

0.5.14 … 0.5.16 stock: the hybrid backend opts out of the CPU seq lens (``decide_needs_cpu_seq_lens`` False, so the
draft's ``seq_lens_sum`` is None) and hands out no verify buffer, so the draft allocates ``4 * (8 * 4096 + 8 * 4)`` =
131200 cells, and the copy into the 131072-cell buffer raises the GPU run's ``RuntimeError``. Plugin: the buffer has
0.5.17's size, 131200 cells, and the copy holds the whole mask; a non-hybrid triton target still gets the buffer itself
from the draft (filled in place). 0.5.13.x: the hybrid backend keeps ``needs_cpu_seq_lens`` True (the draft sizes the
mask by the real sum); 0.5.11 / 0.5.12.x hand the draft the batch's eager ``seq_lens_sum``; 0.5.17 on: the buffer is
``verify_mask.tree_mask_numel`` (with the draft term) and the hybrid backend hands out its full backend's.

Functions under test: the release's (or the plugin's) ``TritonAttnBackend.init_cuda_graph_state``, its
``_update_target_verify_buffers`` and ``get_verify_buffers_to_fill_after_draft``, the real
``HybridLinearAttnBackend.__init__`` and ``decide_needs_cpu_seq_lens``, the release's draft tail
(``EagleDraftWorker.draft`` on 0.5.14 / 0.5.15.x, ``eagle_worker_common.build_eagle_verify_input`` on 0.5.16) and its
``build_tree_kernel_efficient``. Stand-ins: the triton backend is made without ``__init__`` (only the fields these
functions read, on CPU), the GDN backend is made without ``__init__``, the draft's preparation and
forward return fixed tensors, the CUDA tree kernel records the mask it is given and stops the draft, and
``_fill_kv_indptr_and_indices`` (a Triton kernel) returns the indptr.
"""

import types

import pytest
import torch
from conftest import VERSION, requires_sglang, where_patched

from sglang_specv2_fixes import core, releases
from sglang_specv2_fixes.fixes import triton_verify_mask_size
from sglang_specv2_fixes.testing.scenarios import TreeKernelStop, capture_tree_mask

pytestmark = [requires_sglang, pytest.mark.release_scoped]

FIX = triton_verify_mask_size.FIX.name
FIXED_HERE = where_patched(FIX, "the plugin's TritonAttnBackend.init_cuda_graph_state")
LAZY_HYBRID = set(releases.release_set("up-to:0.5.16")) - set(releases.release_set("up-to:0.5.13.post1"))
EAGER_SUM = set(releases.release_set("up-to:0.5.12.post1"))
CONTEXT, D, STEPS, MAX_BS = 4096, 4, 3, 8
TARGET = "sglang.srt.layers.attention.triton_backend.TritonAttnBackend.init_cuda_graph_state"


def triton(plugin):
    """A target TritonAttnBackend (CPU, one head) with its CUDA-graph state from the release's (or the plugin's)
    init_cuda_graph_state for graphs up to MAX_BS verifies of D tokens."""
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    be = object.__new__(TritonAttnBackend)
    be.__dict__.update(
        num_head=1, max_kv_splits=1, v_head_dim=1, swa_v_head_dim=None, device="cpu", max_context_len=CONTEXT,
        skip_prefill=False, is_draft_runner=False, sliding_window_size=None, use_sliding_window_kv_pool=False,
        num_draft_tokens=D, speculative_num_steps=STEPS, topk=1, token_to_kv_pool=None, req_to_token_pool=None,
        qo_indptr=torch.zeros(MAX_BS * D + 1, dtype=torch.int32), kv_indptr=torch.zeros(MAX_BS * D + 1, dtype=torch.int32),
        mask_indptr=torch.zeros(MAX_BS * D + 1, dtype=torch.int64),
        window_kv_indptr=torch.zeros(MAX_BS * D + 1, dtype=torch.int32), _translate_kv_loc=None)
    init = core.build_fix(FIX)[TARGET] if plugin else TritonAttnBackend.init_cuda_graph_state
    init(be, MAX_BS, MAX_BS * D)

    def fill(bs, seq_lens, req_pool_indices, kv_indices):  # a Triton kernel on the GPU: the indptr only
        kv_indptr = be.kv_indptr[: bs + 1]
        kv_indptr[1:] = torch.cumsum(seq_lens, dim=0)
        return kv_indptr

    be._fill_kv_indptr_and_indices = fill
    return be


def hybrid(full):
    """The release's HybridLinearAttnBackend over ``full`` and a Gated-DeltaNet backend (made without ``__init__``: the
    hybrid's reads only its class's needs_cpu_seq_lens)."""
    from sglang.srt.layers.attention import hybrid_linear_attn_backend as mod
    from sglang.srt.layers.attention.linear.gdn_backend import GDNAttnBackend

    return mod.HybridLinearAttnBackend(full, object.__new__(GDNAttnBackend), [3])


def needs_cpu_seq_lens(target, draft):
    """The release's decision whether FutureMap publishes seq_lens_sum for these spec-v2 backends (NEXTN is EAGLE once the server args are resolved; no TBO)."""
    from sglang.srt.managers.overlap_utils import decide_needs_cpu_seq_lens

    args = types.SimpleNamespace(enable_two_batch_overlap=False, speculative_algorithm="EAGLE",
                                 disable_piecewise_cuda_graph=True)
    return decide_needs_cpu_seq_lens(args, [target, draft])


def draft_mask(monkeypatch, target_backend, seq_lens):
    """Run the release's spec-v2 draft tail for a decode batch with ``seq_lens`` (seq_lens_sum None: lazy) against
    ``target_backend``; returns the tree mask its build_tree_kernel_efficient hands the CUDA kernel."""
    from sglang.srt.speculative import eagle_utils

    got = capture_tree_mask(monkeypatch)
    bs = len(seq_lens)
    draft_input = types.SimpleNamespace(bonus_tokens=torch.arange(bs))
    batch = types.SimpleNamespace(spec_info=draft_input, seq_lens=torch.tensor(seq_lens), seq_lens_sum=None,
                                  seq_lens_cpu=None, forward_mode=types.SimpleNamespace(is_idle=lambda: False))
    target_worker = types.SimpleNamespace(model_runner=types.SimpleNamespace(attn_backend=target_backend))
    outputs = ([torch.zeros(bs, 1)], torch.arange(STEPS).repeat(bs, 1), torch.arange(bs * STEPS).view(bs, STEPS), None)
    try:
        from sglang.srt.speculative import eagle_worker_common as common

        build = getattr(common, "build_eagle_verify_input", None)
    except ImportError:
        build = None
    with pytest.raises(TreeKernelStop):
        if build is not None:  # 0.5.16: the shared draft tail
            build(batch, draft_input, *outputs, target_worker=target_worker, topk=1, num_steps=STEPS,
                  num_draft_tokens=D, tree_mask_mode=eagle_utils.TreeMaskMode.FULL_MASK, device="cpu")
        else:  # 0.5.14 / 0.5.15.x: EagleDraftWorker.draft, its CUDA-graph draft replaced by fixed outputs
            from sglang.srt.speculative import eagle_worker_v2 as mod

            worker = object.__new__(mod.EagleDraftWorker)
            worker.__dict__.update(
                req_to_token_pool=None, draft_runner=types.SimpleNamespace(canary_manager=None), topk=1,
                speculative_num_steps=STEPS, speculative_num_draft_tokens=D, target_worker=target_worker,
                tree_mask_mode=eagle_utils.TreeMaskMode.FULL_MASK, seed_dsa_topk_from_draft_extend=False,
                prepare_for_draft=lambda *a, **k: (types.SimpleNamespace(forward_mode=batch.forward_mode), True),
                cuda_graph_runner=types.SimpleNamespace(execute=lambda fb: outputs))
            mod.EagleDraftWorker.draft(worker, batch)
    return got["tree_mask"]


def verify_graph_metadata(backend, seq_lens, mask):
    """The release's verify-graph metadata fill for a batch of len(seq_lens) (its custom-mask copy included)."""
    bs = len(seq_lens)
    return backend._update_target_verify_buffers(bs, torch.tensor(seq_lens), torch.arange(bs),
                                                 types.SimpleNamespace(custom_mask=mask))


SEQ_LENS = [100 + 37 * i for i in range(MAX_BS)]  # the largest captured batch size


@pytest.mark.skipif(VERSION not in LAZY_HYBRID, reason=f"sglang {VERSION}: the hybrid target's draft sizes the mask "
                    "by the real seq_lens_sum (up to 0.5.13.post1) or 0.5.17's VerifyMask holds it")
def test_stock_verify_at_the_largest_graph_overflows_the_mask_buffer(monkeypatch):
    full = triton(plugin=False)
    target = hybrid(full)
    assert not needs_cpu_seq_lens(target, full)  # seq_lens_sum stays None for the draft
    assert target.get_verify_buffers_to_fill_after_draft() == [None, None]  # the base class's: no buffer handed out
    mask = draft_mask(monkeypatch, target, SEQ_LENS)
    assert mask.numel() == D * (MAX_BS * CONTEXT + MAX_BS * D) == 131200
    assert full.cuda_graph_custom_mask.numel() == MAX_BS * D * CONTEXT == 131072
    with pytest.raises(RuntimeError, match=r"expanded size of the tensor \(131072\) must match the existing size "
                       r"\(131200\)"):
        verify_graph_metadata(full, SEQ_LENS, mask)


@FIXED_HERE
def test_plugin_buffer_holds_the_hybrid_draft_mask(monkeypatch):
    full = triton(plugin=True)
    target = hybrid(full)
    assert not needs_cpu_seq_lens(target, full)
    assert full.cuda_graph_custom_mask.numel() == MAX_BS * D * (CONTEXT + D) == 131200  # 0.5.17's tree_mask_numel
    mask = draft_mask(monkeypatch, target, SEQ_LENS)
    for bs in (1, 5, MAX_BS):  # every batch the graphs serve (padded up to a captured size)
        seq_lens = SEQ_LENS[:bs]
        if bs != MAX_BS:
            mask = draft_mask(monkeypatch, target, seq_lens)
        out = verify_graph_metadata(full, seq_lens, mask)
        custom_mask, mask_indptr = out[2], out[3]
        assert custom_mask is full.cuda_graph_custom_mask
        assert torch.equal(custom_mask[: mask.numel()], mask.to(custom_mask.dtype))
        assert int(mask_indptr[bs]) == D * sum(s + D for s in seq_lens) <= custom_mask.numel()


@FIXED_HERE
def test_plugin_non_hybrid_target_still_fills_the_buffer_in_place(monkeypatch):
    full = triton(plugin=True)
    buf = full.get_verify_buffers_to_fill_after_draft()[0]
    assert buf is full.cuda_graph_custom_mask
    assert draft_mask(monkeypatch, full, SEQ_LENS) is buf  # the kernel writes the graph buffer itself
    out = verify_graph_metadata(full, SEQ_LENS, buf)
    assert out[2] is buf and bool(buf.all())


@FIXED_HERE
def test_plugin_sizes_only_the_target_verify_mask():
    """The other graph buffers are stock's; a backend without a spec config (num_draft_tokens None) keeps stock's
    mask size."""
    stock, ours = triton(plugin=False), triton(plugin=True)
    for name, value in vars(stock).items():
        if isinstance(value, torch.Tensor) and name != "cuda_graph_custom_mask":
            assert vars(ours)[name].shape == value.shape, name
    from sglang.srt.layers.attention.triton_backend import TritonAttnBackend

    be = object.__new__(TritonAttnBackend)
    be.__dict__.update({k: v for k, v in vars(ours).items() if not isinstance(v, torch.Tensor) or "indptr" in k})
    be.num_draft_tokens = None
    core.build_fix(FIX)[TARGET](be, MAX_BS, MAX_BS)
    assert be.cuda_graph_custom_mask.numel() == MAX_BS * CONTEXT


@pytest.mark.skipif(VERSION in LAZY_HYBRID or VERSION in EAGER_SUM,
                    reason=f"sglang {VERSION}: the hybrid backend opts out of the CPU seq lens (0.5.14 - 0.5.16) or "
                    "seq_lens_sum is eager (0.5.11 / 0.5.12.x)")
def test_elsewhere_the_hybrid_draft_gets_the_sum_or_a_sized_buffer():
    """The table's notes: 0.5.13.x publishes seq_lens_sum for the hybrid target; 0.5.17 on, the buffer has the draft
    term and the hybrid backend hands it out."""
    if releases.entry(FIX, releases.code_line(VERSION)).state == "not-applicable":  # 0.5.13.x
        full = triton(plugin=False)
        target = hybrid(full)
        assert needs_cpu_seq_lens(target, full)
        assert not hasattr(target, "max_context_len")
        return
    from sglang.srt.layers.attention import hybrid_linear_attn_backend as mod
    from sglang.srt.layers.attention.verify_mask import maybe_create_verify_mask

    # the triton target's call (its init_cuda_graph_state, fingerprinted by the table's note)
    mask = maybe_create_verify_mask(is_draft_runner=False, skip_prefill=False, max_bs=MAX_BS, max_context_len=CONTEXT,
                                    num_draft_tokens=D, device="cpu", is_read=True, dtype=torch.uint8)
    assert mask.buffer.numel() == MAX_BS * D * (CONTEXT + D) == 131200 and mask.fits(MAX_BS)
    target = object.__new__(mod.HybridLinearAttnBackend)
    target.full_attn_backend = types.SimpleNamespace(verify_mask=mask)
    assert target.verify_mask is mask


@pytest.mark.skipif(VERSION not in EAGER_SUM, reason=f"sglang {VERSION}: seq_lens_sum is lazy from 0.5.13")
def test_eager_releases_size_the_mask_by_the_batch_sum():
    """0.5.11 / 0.5.12.x: the draft passes the model worker batch's (eager) seq_lens_sum, and the hybrid backend has
    no max_context_len to size anything by (read: that draft needs a GPU)."""
    import inspect

    from sglang.srt.speculative import eagle_worker_v2

    src = inspect.getsource(eagle_worker_v2.EagleDraftWorker.draft)
    assert "model_worker_batch.seq_lens_sum," in src and "max_context_len" not in src
    assert not hasattr(hybrid(triton(plugin=False)), "max_context_len")
