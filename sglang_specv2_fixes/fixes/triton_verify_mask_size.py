"""Hybrid linear-attention targets on triton, spec v2 (0.5.14 - 0.5.16): a verify at the largest captured batch size
overflows the verify graph's custom-mask buffer (upstream #32920's Triton sizing, in 0.5.17).

The spec-v2 draft builds the FULL_MASK tree mask after drafting. A target backend that preallocates a mask hands it
over (``get_verify_buffers_to_fill_after_draft``) and the tree kernel fills it in place; otherwise the draft allocates
one of ``num_draft_tokens * (seq_lens_sum + bs * num_draft_tokens)`` cells, and when ``batch.seq_lens_sum`` is None
(lazy: no backend asked for the CPU seq lens) it takes ``bs * max_context_len`` for ``seq_lens_sum``.

From 0.5.14 ``HybridLinearAttnBackend`` (Qwen3-Next / Qwen3.5 GDN, Kimi-Linear, ...) opts out of the CPU seq lens
when its two sub-backends do (triton and the GDN backend both do), yet it hands out no verify buffers (the base
class's ``[None, None]``): every verify allocates ``num_draft_tokens * bs * (max_context_len + num_draft_tokens)``
cells. In the verify CUDA graph the triton backend copies that mask into ``cuda_graph_custom_mask``, sized
``max_num_tokens * max_context_len`` = ``max_bs * num_draft_tokens * max_context_len``: at ``bs == max_bs`` the copy
needs ``max_bs * num_draft_tokens * num_draft_tokens`` cells more and stops the scheduler
(``RuntimeError: The expanded size of the tensor (131072) must match the existing size (131200)`` for the tiny
Qwen3-Next, 4096 context, 4 draft tokens, graphs up to bs 8). Up to 0.5.13.post1 the hybrid backend keeps the base
class's ``needs_cpu_seq_lens = True`` (0.5.11 / 0.5.12.x compute ``seq_lens_sum`` eagerly anyway), so the draft sizes
the mask by the real sum, which the buffer holds. 0.5.17 (#32920) sizes the buffer ``max_bs * num_draft_tokens *
(max_context_len + num_draft_tokens)`` (``verify_mask.tree_mask_numel``) and lets the hybrid backend hand out its
full-attention backend's buffer.

The patch gives ``TritonAttnBackend.init_cuda_graph_state``'s ``cuda_graph_custom_mask`` 0.5.17's size,
``max_num_tokens * (max_context_len + num_draft_tokens)``: what the tree kernel writes per request (``num_draft_tokens``
rows of ``seq_len + num_draft_tokens``), so the hybrid draft's ``bs * max_context_len`` allocation fits at every
captured batch size (``max_num_tokens * num_draft_tokens`` bytes more: 128 for the tiny model). The hybrid backend
still hands out no buffer: delegating it as 0.5.17 does would also have eager batches past the largest captured size
write the graph buffer, which only 0.5.17's ``VerifyMask.fits`` guards (an allocation per verify stays, as stock does
below the largest size).

Removal: per release once it sizes the buffer itself (upstream from 0.5.17, #32920).
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="triton-verify-mask-size",
    upstream=("#32920",),
    title="hybrid GDN target on triton: the verify graph's mask buffer holds the draft's mask",
    what=(
        "TritonAttnBackend.init_cuda_graph_state sizes cuda_graph_custom_mask max_num_tokens * (max_context_len + "
        "num_draft_tokens), what the tree kernel writes per request (0.5.17's VerifyMask size), instead of "
        "max_num_tokens * max_context_len"
    ),
    why=(
        "hybrid linear-attention targets (Qwen3-Next / GDN) with EAGLE/MTP spec v2 on --attention-backend triton, "
        "0.5.14 - 0.5.16: the draft sizes the tree mask for bs * max_context_len (seq_lens_sum lazy, no preallocated "
        "mask handed out), and a verify at the largest captured CUDA-graph batch size stops the scheduler "
        "(RuntimeError: expanded size ... must match, in TritonAttnBackend._update_target_verify_buffers)"
    ),
    removal="per release once it sizes the buffer itself (upstream from 0.5.17, #32920)",
    # not on_import: a scheduler process has imported triton_backend before plugins load (0.5.14 - 0.5.16), so
    # registering this one there adds no import
)
