"""Hybrid Mamba/GDN targets with spec v2 and the radix ``extra_buffer``: freed requests' rows in the verify's track
indices (upstream #27325 / #29449; 0.5.22 marks them).

Before a TARGET_VERIFY forward the scheduler builds ``batch.mamba_track_indices``, one mamba track slot per request
(its ping-pong buffer at ``mamba_next_track_idx``), into which the post-verify commit scatters the state at the
interval-crossing step. A request freed or retracted before the verify launch has ``mamba_next_track_idx = None``:

* up to 0.5.15.post1 the index list is built unguarded and the verify stops the scheduler with a ``TypeError``
  (#27325, #28407, #28484, #34786);
* from 0.5.16 (#27998) ``None`` becomes ping-pong position 0 of the freed request's row, a slot that may belong to a
  live request by now; the scatter then overwrites that request's tracked state, silently (#29449).

The patch does what 0.5.22's ``set_mamba_track_indices_from_reqs`` does: such a row is gathered in bounds and its
track index set to -1, which the post-verify scatter skips (``fused_mamba_state_scatter_with_mask`` ignores a
negative destination on every release here). Rows of live requests are built exactly as before.
``grammar-result-order`` closes the known way a freed request reaches a verify on every release (the grammar sync of
#28986).

On 0.5.11 (and 0.5.12.x) the indices are built inline in ``prepare_for_v2_verify`` (no callee to patch instead), which
``tbo-verify-seq-lens`` also changes on 0.5.11. This fix's 0.5.11 patch file is written against the upstream function
like any other, so it applies alone, and carries a ``compose:`` line for tbo-verify-seq-lens: with both selected the
function is built once from both files, tbo's first (``patchfile.build_stack``). On 0.5.11 / 0.5.12.x only a retracted
request has ``mamba_next_track_idx`` None (``Req.reset_for_retract``; freeing a finished request keeps it), and
``retract_decode`` drops it from the batch before the verify is built, so no stock path to the ``TypeError`` is known
there: the patch is defence in depth on those two lines.

Proof: CPU (tests/cpu/test_fix_mamba_track_freed_rows.py, each release's real function). The GPU row needs a tiny
hybrid target with an MTP draft (issue 27), not built yet.
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="mamba-track-freed-rows",
    upstream=("#29449",),
    title="hybrid mamba + spec v2: a freed request's verify track row is skipped",
    what=(
        "the spec-v2 verify's mamba track indices (EagleVerifyInputV2Mixin.prepare_for_v2_verify on 0.5.11 / 0.5.12.x, "
        "set_mamba_track_indices_from_reqs from 0.5.13) are -1 for requests whose mamba_next_track_idx is None "
        "(freed or retracted), which the post-verify track scatter skips"
    ),
    why=(
        "hybrid Mamba/GDN targets with MTP/EAGLE and --mamba-scheduler-strategy extra_buffer: a freed request in a "
        "verify stops the scheduler with a TypeError (up to 0.5.15.post1), or its row points at a track slot another "
        "request may own and the commit overwrites that request's mamba state (0.5.16 - 0.5.21)"
    ),
    removal="per release once it marks freed rows itself (upstream from 0.5.22, #29449's approach)",
)
