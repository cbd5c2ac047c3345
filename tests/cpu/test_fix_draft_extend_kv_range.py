"""#26651 draft-extend-kv-range: the real triton draft-extend CUDA-graph metadata, stock vs patched.

Runs in a fresh interpreter with ``TRITON_INTERPRET=1``: Triton's own interpreter executes the release's
real kernels on CPU tensors (``create_flashinfer_kv_indices_triton`` and the extend attention kernel).
The scenario follows what the spec-v2 draft extend does on a GPU with the triton backend:

* a real ``TritonAttnBackend`` (built by its ``__init__`` from a model-runner stand-in holding a real
  ``ReqToTokenPool`` and ``MHATokenToKVPool`` on CPU) and its real ``init_cuda_graph_state``;
* capture: ``init_forward_metadata_capture_cuda_graph`` for DRAFT_EXTEND_V2 with the runner's padded
  batch (raw bs 2 padded to 3, ``seq_lens`` at the fill value, no ``extend_seq_lens_tensor``), exactly
  the arguments ``EAGLEDraftExtendCudaGraphRunner.capture_one_batch_size`` passes;
* replay: ``seq_lens = prefix + num_draft_tokens`` (the bump of
  ``prepare_for_extend_to_fill_draft_kvcache``), ``spec_info.extend_seq_lens_tensor`` = the runner's
  ``extend_seq_lens`` buffer, then ``init_forward_metadata_replay_cuda_graph`` as the runner's ``replay``
  calls it;
* the graph body's attention: the backend's real ``forward_extend`` (writes the draft K/V to the pool,
  runs the triton extend kernel with the captured metadata).

Each draft query must equal causal attention over the prefix and the draft tokens up to itself. Stock
puts the draft tokens in the cached range too (``kv_indptr`` = cumsum(prefix + 4)): every query also
sees the later draft tokens (error ~0.9 on unit-variance data); patched: prefix only, error ~1e-7.

The same scenario at tree width (topk > 1: 8 draft tokens per request, steps 3) checks the #27545 part,
which the tree-width draft-extend graph (tree-drafting, docs/design/tree-draft-extend-graph.md) relies on:
stock strides the queries by steps + 1 (``qo_indptr`` [0, 4, 8, 12], ``max_extend_len`` 4), so request 1's
rows are read as request 0's; patched strides and sizes them by num_draft_tokens and every row is causal.
"""

import json
import os
import subprocess
import sys
import types

import pytest
from conftest import LINE, ROOT, child_env, requires_sglang

FIX_NAME = "draft-extend-kv-range"
# patch file per code line until releases.py names it (the same functions on 0.5.11 and 0.5.12.x)
PATCH_FOR_LINE = {"0.5.11": "0.5.11", "0.5.12": "0.5.11"}

pytestmark = [requires_sglang, pytest.mark.skipif(LINE not in PATCH_FOR_LINE, reason="fix patches 0.5.11 / 0.5.12.x only"), pytest.mark.release_scoped]

H, D, KVH = 2, 16, 2
STEPS, ND = 3, 4  # topk 1 chain: num_draft_tokens == steps + 1
TREE_ND = 8  # topk > 1: the spec-v2 draft extend runs the whole verify block, num_draft_tokens per request
PREFIX = [5, 9]  # tokens cached per request before this draft extend
CAPTURE_BS = 3  # graph batch size the runner pads raw bs 2 to
MAX_BS, CTX = 4, 32
TARGETS = (
    "sglang.srt.layers.attention.triton_backend.TritonAttnBackend.init_forward_metadata_capture_cuda_graph",
    "sglang.srt.layers.attention.triton_backend.TritonAttnBackend.init_forward_metadata_replay_cuda_graph",
)


def patch_file():
    try:
        from sglang_specv2_fixes import catalog, releases

        entry = releases.entry(FIX_NAME, LINE)
        if isinstance(entry, catalog.Patched):
            name = entry.name
        else:
            name = PATCH_FOR_LINE[LINE]
    except KeyError:
        name = PATCH_FOR_LINE[LINE]
    from sglang_specv2_fixes import patchfile

    return patchfile.patch_path(FIX_NAME, name)


# ------------------------------------------------------------------ the scenario (child interpreter)
def _backend(ND):
    import torch

    import sglang.srt.layers.attention.triton_backend as tb
    from sglang.srt.configs.model_config import AttentionArch
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool

    pool = MHATokenToKVPool(size=256, page_size=1, dtype=torch.float32, head_num=KVH, head_dim=D, layer_num=1,
                            device="cpu", enable_memory_saver=False)
    req_pool = ReqToTokenPool(size=MAX_BS + 1, max_context_len=CTX, device="cpu", enable_memory_saver=False)
    runner = types.SimpleNamespace(  # the ModelRunner attributes TritonAttnBackend.__init__ reads
        req_to_token_pool=req_pool, token_to_kv_pool=pool, token_to_kv_pool_allocator=None,
        sliding_window_size=None, device="cpu", gpu_id=0,
        hybrid_gdn_config=None, kimi_linear_config=None, linear_attn_model_spec=None,
        server_args=types.SimpleNamespace(
            speculative_num_draft_tokens=ND, speculative_num_steps=STEPS, triton_attention_num_kv_splits=8,
            disable_cuda_graph=False, chunked_prefill_size=8192, enable_deterministic_inference=False,
            triton_attention_split_tile_size=None),
        model_config=types.SimpleNamespace(
            attention_arch=AttentionArch.MHA, num_attention_heads=H, get_num_kv_heads=lambda tp: KVH,
            v_head_dim=D, swa_v_head_dim=D, context_len=CTX, is_encoder_decoder=False),
    )
    tb.get_attention_tp_size = lambda: 1  # no parallel state in this process
    backend = tb.TritonAttnBackend(runner)
    backend.init_cuda_graph_state(MAX_BS, MAX_BS * ND)
    return backend, pool, req_pool


def _scenario(which, path, ND):
    import torch

    import sglang.srt.layers.attention.triton_backend as tb
    from sglang.srt.layers.radix_attention import RadixAttention
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    from sglang_specv2_fixes import installed, patchfile

    torch.manual_seed(0)
    backend, pool, req_pool = _backend(ND)
    if which == "stock":
        cls = tb.TritonAttnBackend
        assert not any(hasattr(getattr(cls, t.rsplit(".", 1)[1]), patchfile.MARK) for t in TARGETS)
        capture = cls.init_forward_metadata_capture_cuda_graph
        replay = cls.init_forward_metadata_replay_cuda_graph
    else:
        pf = patchfile.parse(open(path, encoding="utf-8").read(), path)
        fns = patchfile.build(pf, os.path.dirname(installed.sglang_root()))
        capture, replay = (fns[t] for t in TARGETS)
    mode = ForwardMode.DRAFT_EXTEND_V2

    rows = [1, 2]  # req pool rows; slots of request r at 40 * r + 1 ...
    for r, p in zip(rows, PREFIX):
        req_pool.req_to_token[r, : p + ND] = torch.arange(p + ND, dtype=torch.int32) + 1 + 40 * r
    k_buf, v_buf = pool.get_key_buffer(0), pool.get_value_buffer(0)
    k_buf.copy_(torch.randn_like(k_buf))
    v_buf.copy_(torch.randn_like(v_buf))

    # the runner's graph input buffers (EAGLEDraftExtendCudaGraphRunner.__init__ / replay)
    seq_lens = torch.full((MAX_BS,), backend.get_cuda_graph_seq_len_fill_value(), dtype=torch.int32)
    req_pool_indices = torch.zeros(MAX_BS, dtype=torch.int64)
    extend_seq_lens = torch.full((MAX_BS,), ND, dtype=torch.int32)

    capture(backend, bs=CAPTURE_BS, num_tokens=CAPTURE_BS * ND, req_pool_indices=req_pool_indices[:CAPTURE_BS],
            seq_lens=seq_lens[:CAPTURE_BS], encoder_lens=None, forward_mode=mode,
            spec_info=types.SimpleNamespace())  # the capture-time EagleDraftInput has no extend_seq_lens_tensor
    meta = backend.forward_metadata  # what the captured graph reads (views of the backend's buffers)

    raw_bs = len(rows)
    seq_lens[:raw_bs] = torch.tensor(PREFIX, dtype=torch.int32) + ND  # prepare_for_extend_to_fill_draft_kvcache
    req_pool_indices[:raw_bs] = torch.tensor(rows)
    spec_info = types.SimpleNamespace(extend_seq_lens_tensor=extend_seq_lens[:CAPTURE_BS])
    replay(backend, bs=CAPTURE_BS, req_pool_indices=req_pool_indices, seq_lens=seq_lens,
           seq_lens_sum=int(seq_lens[:CAPTURE_BS].sum()), encoder_lens=None, forward_mode=mode,
           spec_info=spec_info, seq_lens_cpu=seq_lens.clone())

    n = CAPTURE_BS * ND
    out_cache_loc = torch.zeros(n, dtype=torch.int64)  # padded rows write slot 0, as the runner does
    for i, (r, p) in enumerate(zip(rows, PREFIX)):
        out_cache_loc[i * ND : (i + 1) * ND] = req_pool.req_to_token[r, p : p + ND]
    q, k, v = torch.randn(n, H * D), torch.randn(n, KVH, D), torch.randn(n, KVH, D)
    layer = RadixAttention(H, D, scaling=D**-0.5, num_kv_heads=KVH, layer_id=0)
    fb = types.SimpleNamespace(token_to_kv_pool=pool, out_cache_loc=out_cache_loc, forward_mode=mode)
    o = backend.forward_extend(q, k, v, layer, fb).view(n, H, D)

    errs = []
    for i, (r, p) in enumerate(zip(rows, PREFIX)):
        slots = req_pool.req_to_token[r, : p + ND].long()
        keys, vals = k_buf[slots], v_buf[slots]  # prefix + the draft K/V forward_extend just wrote
        for j in range(ND):
            qj = q[i * ND + j].view(H, D)
            att = torch.softmax((qj[:, None, :] * keys[: p + j + 1].transpose(0, 1)).sum(-1) * D**-0.5, dim=-1)
            ref = (att[:, :, None] * vals[: p + j + 1].transpose(0, 1)).sum(1)
            errs.append(float((o[i * ND + j] - ref).abs().max()))
    end = int(meta.kv_indptr[CAPTURE_BS])
    return dict(kv_indptr=meta.kv_indptr[: CAPTURE_BS + 1].tolist(), kv_indices=meta.kv_indices[:end].tolist(),
                qo_indptr=meta.qo_indptr[: CAPTURE_BS + 1].tolist(), max_extend_len=meta.max_extend_len,
                errs=errs)


def run(which, nd=ND):
    p = subprocess.run([sys.executable, os.path.abspath(__file__), which, patch_file(), str(nd)], capture_output=True,
                       text=True, timeout=600, cwd=ROOT, env=child_env(TRITON_INTERPRET="1"))
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def results():
    return {which: run(which) for which in ("stock", "patched")}


@pytest.fixture(scope="module")
def tree_results():
    return {which: run(which, TREE_ND) for which in ("stock", "patched")}


def expected_indices(lens):
    return [s for r, n in zip((1, 2), lens) for s in range(40 * r + 1, 40 * r + 1 + n)]


def test_stock_counts_the_draft_tokens_in_the_cached_range(results):
    stock = results["stock"]
    # prefix + the 4 draft tokens for both requests; the padded row keeps its fill-value length 1
    assert stock["kv_indptr"] == [0, 5 + ND, 5 + ND + 9 + ND, 5 + ND + 9 + ND + 1]
    assert stock["kv_indices"][: 5 + ND + 9 + ND] == expected_indices([5 + ND, 9 + ND])
    assert max(stock["errs"]) > 0.1, "stock draft-extend attention unexpectedly matches causal attention"


def test_patched_range_is_the_prefix_and_attention_is_causal(results):
    patched = results["patched"]
    assert patched["kv_indptr"] == [0, 5, 14, 14]  # padded row: clamp(1 - 4, 0) = 0
    assert patched["kv_indices"] == expected_indices([5, 9])
    assert max(patched["errs"]) < 1e-4


def test_chain_query_layout_unchanged(results):
    # a chain extends steps + 1 == num_draft_tokens rows per request: qo_indptr / max_extend_len as before
    for r in results.values():
        assert r["qo_indptr"] == [0, ND, 2 * ND, 3 * ND] and r["max_extend_len"] == STEPS + 1


def test_stock_tree_width_reads_the_wrong_queries(tree_results):
    stock = tree_results["stock"]
    assert stock["qo_indptr"] == [0, STEPS + 1, 2 * (STEPS + 1), 3 * (STEPS + 1)]
    assert stock["max_extend_len"] == STEPS + 1
    assert len(stock["errs"]) == 2 * TREE_ND and max(stock["errs"]) > 0.1


def test_patched_tree_width_strides_by_num_draft_tokens_and_is_causal(tree_results):
    patched = tree_results["patched"]
    assert patched["qo_indptr"] == [0, TREE_ND, 2 * TREE_ND, 3 * TREE_ND]
    assert patched["max_extend_len"] == TREE_ND
    assert patched["kv_indptr"] == [0, 5, 14, 14] and patched["kv_indices"] == expected_indices([5, 9])
    assert len(patched["errs"]) == 2 * TREE_ND and max(patched["errs"]) < 1e-4


if __name__ == "__main__":
    print(json.dumps(_scenario(sys.argv[1], sys.argv[2], int(sys.argv[3]))))
