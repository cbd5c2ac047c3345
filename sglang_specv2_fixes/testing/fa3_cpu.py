"""fa3's real ``FlashAttentionBackend`` on CPU, for the CPU tests that drive its metadata as SGLang does
(tests/cpu/test_fix_fa3_draft_extend_graph.py, tests/cpu/test_fix_verify_handoff_fa3.py): a model-runner stand-in over
a real ``ReqToTokenPool`` / ``MHATokenToKVPool``, fa3's kernel replaced by its reference semantics (``paged_attention``)
and the forward's rows compared with causal attention over each request's KV (``causal_ref.causal_errors``). Up to
0.5.16 (the ModelRunner attributes ``FlashAttentionBackend.__init__`` reads there)."""

import types

from .causal_ref import D, H, KVH


def paged_attention(q, k_cache, v_cache, page_table, cache_seqlens, cu_seqlens_q, max_seqlen_q, softmax_scale,
                    causal=True, **kwargs):
    """fa3's ``flash_attn_with_kvcache`` as ``forward_extend`` uses it for a chain: paged KV (page_table in pages of
    k_cache.shape[1] slots, enough of them for every request's KV), each request's queries aligned to the end of its
    cache_seqlens KV (causal), at most max_seqlen_q of them (the value a graph keeps)."""
    import torch

    page = k_cache.shape[1]
    kf, vf = k_cache.reshape(-1, *k_cache.shape[2:]), v_cache.reshape(-1, *v_cache.shape[2:])
    out = torch.zeros(q.shape[0], q.shape[1], v_cache.shape[-1])
    for b in range(cache_seqlens.shape[0]):
        q0, q1, n = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1]), int(cache_seqlens[b])
        assert q1 - q0 <= max_seqlen_q, (q1 - q0, max_seqlen_q)
        assert n <= page_table.shape[1] * page, (n, page_table.shape)
        slots = torch.tensor([int(page_table[b, i // page]) * page + i % page for i in range(n)], dtype=torch.long)
        keys, vals = kf[slots], vf[slots]
        for j in range(q0, q1):
            upto = n - (q1 - j) + 1
            att = torch.softmax((q[j][:, None, :] * keys[:upto].transpose(0, 1)).sum(-1) * softmax_scale, -1)
            out[j] = (att[:, :, None] * vals[:upto].transpose(0, 1)).sum(1)
    return out


def fa3_backend(*, page_size, max_bs, ctx, topk, steps, draft_tokens, draft_step=None, is_draft_worker=False,
                pool_size=512):
    """(backend, pool, req_pool): ``FlashAttentionBackend(runner, skip_prefill=False)`` (a target's or a draft
    extend's backend) or, with ``draft_step``, one step of ``FlashAttentionMultiStepBackend``, with its graph state for
    ``max_bs`` and ``paged_attention`` as its kernel."""
    import torch

    import sglang.srt.layers.attention.flashattention_backend as fa
    from sglang.srt.configs.model_config import AttentionArch
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool

    pool = MHATokenToKVPool(size=pool_size, page_size=page_size, dtype=torch.float32, head_num=KVH, head_dim=D,
                            layer_num=1, device="cpu", enable_memory_saver=False)
    req_pool = ReqToTokenPool(size=max_bs + 1, max_context_len=ctx, device="cpu", enable_memory_saver=False)
    server_args = types.SimpleNamespace(
        speculative_eagle_topk=topk, speculative_num_draft_tokens=draft_tokens, speculative_num_steps=steps,
        kv_cache_dtype="auto", enable_deterministic_inference=False, disable_cuda_graph=False, is_embedding=False,
        chunked_prefill_size=8192, disable_radix_cache=False, speculative_algorithm="EAGLE3",
        enable_dp_attention=False, enable_prefill_cp=False)
    runner = types.SimpleNamespace(  # the ModelRunner attributes FlashAttentionBackend.__init__ reads (to 0.5.16)
        server_args=server_args, req_to_token_pool=req_pool, token_to_kv_pool=pool, device="cpu",
        kv_cache_dtype=torch.float32, kv_cache_dtype_str="auto", page_size=page_size, sliding_window_size=None,
        attn_cp_size=1, tp_size=1, attention_chunk_size=None, is_draft_worker=is_draft_worker,
        ps=types.SimpleNamespace(attn_cp_size=1, tp_size=1, attn_tp_size=1, attn_dp_size=1),
        model_config=types.SimpleNamespace(
            attention_arch=AttentionArch.MHA, context_len=ctx, get_num_kv_heads=lambda tp: KVH, head_dim=D,
            hf_text_config=types.SimpleNamespace(num_attention_heads=H), is_encoder_decoder=False,
            is_local_attention_model=False))
    if draft_step is None:
        backend = fa.FlashAttentionBackend(runner, skip_prefill=False)
    else:
        backend = fa.FlashAttentionBackend(runner, speculative_step_id=draft_step, topk=topk,
                                           speculative_num_steps=steps)
    backend.init_cuda_graph_state(max_bs, max_bs * draft_tokens)
    fa.flash_attn_with_kvcache = backend.flash_attn_with_kvcache = paged_attention
    return backend, pool, req_pool
