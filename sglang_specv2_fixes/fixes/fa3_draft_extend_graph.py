"""#40762 / #36324 - the spec-v2 draft-extend CUDA graph on fa3 (0.5.11 - 0.5.22; upstream in 0.5.23).

``EagleDraftWorker`` captures the draft-extend graph only for the backends it lists (``_capture_cuda_graphs``'
``graph_supported_backend_types`` from 0.5.14, the isinstance test of ``init_cuda_graphs`` before). fa3
(``FlashAttentionBackend``) implements that graph's metadata for ``DRAFT_EXTEND_V2`` (``draft_extend_metadata``, its
capture / replay branches; the multi-layer EAGLE runner replays it already) but is not listed before 0.5.23. On
Hopper ``--attention-backend`` defaults to fa3 for a chain (topk 1), so the most common EAGLE / EAGLE3 setup runs one
eager draft-extend forward per decode step while target verify and draft decode replay graphs. 0.5.23 appends
``FlashAttentionBackend`` to the list (CUDA only); the patch does the same on 0.5.11 - 0.5.22 through
``fa3_graph_backends``, with two limits of its own:

* fa3 only (``fa_impl_ver == 3``): fa4 (Blackwell) has not run here;
* only where the backend keeps that metadata in the graph (``draft_extend_metadata_captured_in_graph``: a hybrid-SWA
  pool without a full-to-SWA index mapping, and from 0.5.19 a translating KV index, build it outside; the multi-layer
  runner checks the same). Before 0.5.16 the backend has no such method: the pool gets the same test.

Before 0.5.16 (read for the backport, 0.5.11 - 0.5.15.post1): every release rebuilds fa3's DRAFT_EXTEND_V2 metadata
out of the graph before each replay into the buffers the graph reads (cache_seqlens, cu_seqlens_k / _q, the page
tables up to the host max of the KV lengths) and bakes max_seq_len_q at the captured width, the same statements as
0.5.16's ``_apply_cuda_graph_metadata`` branch (0.5.11 / 0.5.12.x: ``init_forward_metadata_capture_cuda_graph`` /
``init_forward_metadata_replay_cuda_graph``; 0.5.13 - 0.5.15.post1: ``_bind_metadata_buffers`` /
``_apply_cuda_graph_metadata`` through ``init_forward_metadata_out_graph``). 0.5.16 adds an in-graph copy of that
rebuild (``init_forward_metadata_in_graph``), which its runner runs after the same out-of-graph one. The host max
comes from the CPU mirror, which fa3 keeps published there (``needs_cpu_seq_lens``, True for EAGLE before 0.5.16).
On 0.5.11 / 0.5.12.x tree-drafting also replaces ``init_cuda_graphs``: this file composes after its file.

Trees (topk > 1; opt-in): the metadata is width-generic, so a tree's draft
extend is captured at its tree width (``speculative_num_draft_tokens`` per request) as 0.5.23 captures it (no topk
condition there): the query width the graph keeps is the captured one, the rest is rebuilt before each replay from the
runner's ``extend_seq_lens``; fa3's ``forward_extend`` is causal for a draft extend at any topk (its cascade is the
target verify's). On 0.5.13+ upstream's runner is already tree-wide; on 0.5.11 / 0.5.12.x tree-drafting's runner and
rule decide the width, and its rule takes fa3 through ``draft_extend_graph.fa3_tree_reason`` where this fix's list
ran. The rule itself (``draft_extend_graph.fa3_graph_reason``) is the shared draft-extend graph policy's.

**On by default for chains; trees with ``SGLANG_SPECV2_FIXES_FA3_DRAFT_GRAPH=1``** (``=0`` turns it off for both).
The decision goes to the log once and to ``/server_info`` (``serving.draft_extend_graph``, as tree-drafting's triton
graph does). GPU proof: ``tests/registered/test_fa3_draft_extend_graph.py`` (run with the switch at 1; stock fails
only each class's graph check, and an explicit tree on 0.5.11 / 0.5.12.x falls back to spec v1), a chain class and a
tree class. Trees stay opt-in for speed, not correctness: on the default invocation (fa3, steps 5 / topk 4 / 8 tokens)
the tree's graph shows no clear gain over its eager draft extend. On 0.5.11 / 0.5.12.x verify-handoff runs beside the
graph (``tests/registered/test_verify_handoff_fa3.py``'s graph class).

Removal: delete when 0.5.22 leaves the supported releases (upstream from 0.5.23).
"""

from __future__ import annotations

import logging
import sys

from ..catalog import Fix, switch
from . import draft_extend_graph as policy

logger = logging.getLogger("sglang_specv2_fixes")

FIX = Fix(
    name="fa3-draft-extend-graph",
    upstream=("#40762", "#36324"),
    title="the spec-v2 draft-extend CUDA graph on fa3 (trees opt-in)",
    what=(
        "EagleDraftWorker._capture_cuda_graphs (init_cuda_graphs before 0.5.14) also lists FlashAttentionBackend "
        "among the backends whose draft-extend graph it captures (0.5.23's line), for chains and trees on fa3 whose "
        "draft-extend metadata lives in the graph (trees on 0.5.11 / 0.5.12.x through tree-drafting's tree-width rule); "
        "chains by default, trees with SGLANG_SPECV2_FIXES_FA3_DRAFT_GRAPH=1 (no clear gain for a tree at real size; "
        "=0: neither)"
    ),
    why=(
        "fa3 implements the spec-v2 draft-extend graph metadata but is missing from the capture list before 0.5.23: "
        "Hopper's default setups (a chain, the default invocation's tree) run their draft extend eagerly every decode step"
    ),
    removal="delete when 0.5.22 leaves the supported releases (upstream from 0.5.23)",
    # on_import: the launcher never imports eagle_worker_v2; a scheduler does before it builds the draft worker
    on_import=True,
    switches=(switch("SGLANG_SPECV2_FIXES_FA3_DRAFT_GRAPH", "chains on, trees off",
                     "=1: trees (topk > 1) capture it too; =0: chains run their draft extend eagerly"),),
)

def fa3_graph_backends(worker, is_cuda) -> list:
    """Called by the patched ``EagleDraftWorker._capture_cuda_graphs`` (``init_cuda_graphs`` before 0.5.14) before it
    tests its backend list: the classes to add to it. ``[FlashAttentionBackend]`` where the draft-extend backend is fa3
    on CUDA and the policy's fa3 rule allows (draft_extend_graph.fa3_graph_reason), else none. For an fa3 worker the
    decision is logged once and kept for /server_info."""
    backend = worker.draft_extend_attn_backend
    if not is_cuda or not policy.is_fa3(backend):
        return []
    reason = policy.fa3_graph_reason(worker, backend)
    setattr(worker, policy.FA3_LISTED, reason)  # this fix's list ran: tree-drafting's tree-width rule takes it
    decision = policy.decision(worker.speculative_num_draft_tokens, reason, "fa3")
    policy.record(worker, decision)
    logger.info("sglang-specv2-fixes: spec v2 draft extend: %s", decision)
    return [] if reason else [sys.modules[policy.FA3_MODULE].FlashAttentionBackend]
