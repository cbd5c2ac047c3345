"""#26651 - triton spec-v2 draft-extend CUDA graph: cached-KV range over the prefix only.

What: in SGLang 0.5.11 / 0.5.12.x the spec-v2 draft extend (``ForwardMode.DRAFT_EXTEND_V2``) runs with
``seq_lens = prefix + num_draft_tokens``: ``EagleDraftInputV2Mixin.prepare_for_extend_to_fill_draft_kvcache``
bumps them before the forward. The triton backend's CUDA-graph metadata
(``TritonAttnBackend.init_forward_metadata_capture_cuda_graph`` and
``init_forward_metadata_replay_cuda_graph``, draft-extend branch) builds ``kv_indptr`` / ``kv_indices``
from those ``seq_lens``, while the triton extend kernel also receives the draft tokens' K/V as its extend
inputs (already written to the pool by ``forward_extend``). The just-written KV is therefore counted
twice, and because the "prefix" part of the kernel is not causally masked, every draft query also sees
the draft tokens after it. The eager draft extend (generic EXTEND metadata from ``extend_prefix_lens``)
is correct; only the CUDA graph replay (triton is the only CUDA backend that captures this graph in
these releases) is wrong.

Why it matters: the draft model's hidden states / KV after each verify are computed with a leaked future
and duplicated keys, so its next proposals are worse: lower acceptance length on the triton backend
with the draft-extend CUDA graph on (the default when CUDA graphs are enabled). Output text is not
affected (the target verifies every token).

The patch (patches/draft-extend-kv-range/0.5.11.patch, same function fingerprints on 0.5.11, 0.5.12 and
0.5.12.post1): in both functions, for DRAFT_EXTEND_V2 only, the KV range is ``clamp(seq_lens -
spec_info.extend_seq_lens_tensor, 0)`` (the tensor the draft-extend runner attaches at replay; zeros at
capture), as upstream #26651 did before the metadata code was unified (0.5.13's
``TritonAttnBackend._update_draft_extend_buffers``). Spec v1 ``DRAFT_EXTEND`` (seq_lens = prefix) is
unchanged. Also #27545: for DRAFT_EXTEND_V2 the query stride (``qo_indptr``) and, at capture,
``max_extend_len`` are ``num_draft_tokens`` per request, the width spec v2 extends (upstream 0.5.13's
``_update_draft_extend_buffers``). For chains that equals steps + 1 (topk 1 forces it), so nothing changes
there; it is what the tree-width draft-extend graph of tree-drafting needs (its runner is sized the same way;
docs/design/tree-draft-extend-graph.md), which is why that graph is captured only while this fix is applied.

Removal: delete when 0.5.11 and 0.5.12.x leave the supported releases (upstream from 0.5.13, in
``TritonAttnBackend._update_draft_extend_buffers``).
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="draft-extend-kv-range",
    upstream=("#26651", "#27545"),
    title="triton spec-v2 draft-extend CUDA graph: KV range over the prefix only",
    what=(
        "TritonAttnBackend.init_forward_metadata_capture_cuda_graph / init_forward_metadata_replay_cuda_graph: "
        "for DRAFT_EXTEND_V2 kv_indptr / kv_indices cover seq_lens - extend_seq_lens (the prefix), not the "
        "seq_lens already bumped by the draft tokens, and qo_indptr / max_extend_len stride num_draft_tokens "
        "per request (#27545: the width spec v2 extends, > steps + 1 for trees); spec v1 DRAFT_EXTEND unchanged"
    ),
    why=(
        "the triton draft-extend CUDA graph counted the just-written draft KV twice and let each draft query "
        "see the later draft tokens: lower acceptance length on the triton backend (text unaffected)"
    ),
    removal="delete when 0.5.11 and 0.5.12.x leave the supported releases (upstream from 0.5.13)",
)
