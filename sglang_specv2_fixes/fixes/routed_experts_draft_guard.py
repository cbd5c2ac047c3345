"""#26980 (first half) - the draft model must not replace the routed-experts capturer; and, from 0.5.13 on,
the tree verify compacts the captured rows with the accepted path.

``--enable-return-routed-experts`` keeps one process-wide capturer (``set_global_experts_capturer``),
sized from the *target's* MoE config. ``ModelRunner.initialize`` calls ``init_routed_experts_capturer``
for every runner, so with speculative decoding the draft's runner, initialised after the target's,
re-creates it from the draft's config: a dense EAGLE/EAGLE3 draft has no ``num_experts_per_tok`` and the
scheduler dies at startup (``AttributeError``), stock and plugin, spec v1 and v2 alike; a MoE draft
silently replaces the target's capturer with one of the wrong shape. Upstream #26980 returns early for
draft workers. Needed so that routed experts can be returned with speculative decoding at all, and the
precondition for tree-drafting's routed-experts compaction to matter.

Not backported: #26980's second guard (the draft runner's forward still calls the capturer's
``on_forward_end``). On spec v2 that output is dropped (the verify result carries the target forward's);
spec v1 copies device rows to the host after draft forwards too, so routed experts with spec v1 remain
unreliable in these releases.
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="routed-experts-draft-guard",
    upstream=("#26980",),
    title="routed experts with EAGLE drafts: the target's capturer is kept, tree rows are compacted",
    what=(
        "ModelRunner.init_routed_experts_capturer returns early for the draft worker (#26980; 0.5.11 … 0.5.14); "
        "from 0.5.13 on, where tree drafting is upstream, the spec-v2 tree verify also compacts the "
        "routed-experts / indexer top-k capture rows with the accepted path (on 0.5.11 / 0.5.12.x "
        "tree-drafting's verify does that)"
    ),
    why=(
        "with --enable-return-routed-experts and an EAGLE/EAGLE3 draft the scheduler dies at startup (the "
        "draft re-creates the process-wide capturer from its dense config); with tree drafting the routed "
        "experts returned for accepted tokens are the rows of other tree nodes"
    ),
    removal=(
        "the guard: per release once it ships #26980 (upstream from 0.5.15); the compaction: once upstream "
        "compacts capture rows in _finalize_accept_tree_path (open through 0.5.23)"
    ),
    # on_import: on 0.5.12 - 0.5.14 nothing else has imported model_runner when plugins load (the launcher never
    # does); importing it there cost ~28 ms of the plugin's start (0.5.14). A scheduler imports it before any forward
    on_import=True,
)
