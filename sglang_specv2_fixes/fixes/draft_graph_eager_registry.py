"""0.5.13.x: the multi-step EAGLE draft CUDA graph keeps using the eager input registry after it is freed (upstream
fixed it by the EagerRunner redesign of 0.5.14, not by a PR).

0.5.13 copies every eager forward's inputs into buffers of an "eager input registry" (``ModelRunner._eager_fb_view``)
that ``ModelRunner._ensure_eager_registry`` builds lazily and *replaces* with a larger one when a batch exceeds its
capacity, dropping the only reference to the old one. The draft ``TpModelWorker`` has no graph runner of its own, so
``EAGLEDraftCudaGraphRunner``'s capture runs ``draft_forward`` -> ``draft_runner.forward`` -> ``forward_decode`` ->
``_eager_fb_view``: the draft graphs bake the addresses of the draft runner's decode registry, built at the largest
captured bs during the capture warm-up (outside the graph pool). A later eager draft decode with more requests than
that bs (``--cuda-graph-bs 1 2 4 8`` and 9+ running requests) grows the registry and frees the baked buffers: every
later draft replay writes into freed memory (silent corruption of whatever reuses it), and after ``/flush_cache``'s
``torch.cuda.empty_cache()`` the next draft replay faults (CUDA illegal memory access, known bug
``flush-then-prefill-0513``). The patch keeps each replaced registry alive for the runner's lifetime (a list in
the cache object's ``__dict__``: a function patch cannot add a dataclass field). Capacities grow by powers of two, so a
runner retires at most log2(largest bs) + log2(largest token count) registries, each no larger than the live one:
a few KB each for decode; the eager prefill registry's (kept too, though no graph bakes it) are a few int64 buffers
of a prefill's token count.

Proof: CPU (tests/cpu/test_fix_draft_graph_eager_registry.py: the release's real ``_ensure_eager_registry`` and
``build_decode_registry`` in capture order, then a larger eager batch: stock frees the captured buffers, the patch keeps
them). GPU: tests/registered/test_draft_graph_eager_registry.py (0.5.13, 0.5.13.post1): stock dies with a CUDA
illegal memory access at the first request after ``/flush_cache``; the plugin serves on with greedy output equal to the
target alone.

Removal: delete when 0.5.13.post1 leaves the supported releases (from 0.5.14 ``EagerRunner`` builds one fixed-size
registry at init and never replaces it; 0.5.12.x and earlier have no eager registry).
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="draft-graph-eager-registry",
    upstream=(),
    title="the draft CUDA graph's eager input buffers are kept when the registry grows",
    what=(
        "ModelRunner._ensure_eager_registry keeps the registry it replaces by a larger one alive for the runner's "
        "lifetime (0.5.13.x)"
    ),
    why=(
        "the multi-step EAGLE draft CUDA graph bakes the draft runner's eager decode registry; a draft decode above "
        "the largest captured bs rebuilds it and frees those buffers: later draft replays write freed memory, and "
        "after /flush_cache the next one dies with CUDA illegal memory access"
    ),
    removal=(
        "delete when 0.5.13.post1 leaves the supported releases (upstream from 0.5.14 by the EagerRunner redesign: one "
        "fixed-size registry, never replaced)"
    ),
    # model_runner is imported by a scheduler before any forward, not when plugins load (routed-experts-draft-guard)
    on_import=True,
)
