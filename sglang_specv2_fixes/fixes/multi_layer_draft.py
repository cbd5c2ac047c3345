"""The multi-layer EAGLE v2 draft worker lacks two things the release's ``EagleDraftWorker`` has (0.5.13 … 0.5.15.post1;
upstream from 0.5.16, where the draft calls ``eagle_worker_common.build_eagle_verify_input`` and the eager draft extend
plans each runner), 0.5.16 / 0.5.17 plan an idle round (upstream #33892, in 0.5.18), and every release from 0.5.13
plans the eager draft extend before the DP-attention padding without a re-plan (beyond upstream, open through 0.5.23).

**The tree mask.** 0.5.13 made ``ScheduleBatch.seq_lens_sum`` lazy: the decode preparation leaves it None, so that no
step pays a ``.sum().item()`` device-to-host copy. The same release taught ``EagleWorkerV2.draft`` to size the tree mask
without it (over-size is safe: the mask's rows are addressed from ``seq_lens``), but
``MultiLayerEagleDraftWorker.draft`` (the draft of ``--enable-multi-layer-eagle``, which SGLang switches on for MiMo-V2
and Step-3.5) still passes ``batch.seq_lens_sum`` to ``build_tree_kernel_efficient``. Wherever the target's attention
backend has no preallocated verify mask (``get_verify_buffers_to_fill_after_draft`` of the base class: fa3, flashinfer,
triton without CUDA graphs), ``FULL_MASK`` computes ``None * num_verify_tokens`` and the scheduler stops with a
``TypeError`` at the first decode: multi-layer EAGLE cannot serve at all there. The patch passes
:func:`tree_mask_seq_lens_sum` instead: the release's own rule from ``EagleWorkerV2.draft`` (the batch's sum when it is
known; 0 when the backend hands over a preallocated mask, which the kernel fills without sizing; otherwise the batch
size times the backend's ``max_context_len``). No device-to-host copy is added.

**The eager draft extend.** Outside its CUDA graph (more requests than the largest captured size,
``--disable-cuda-graph``) ``_draft_extend_for_decode`` runs MTP step ``i`` on ``draft_runner_list[i]``, each with its
own attention backend, but the preparation plans runner 0's backend only and marks the batch planned, so steps 1.. run
on their backends' metadata of an earlier forward (on MiMo-V2's sliding-window layers the scheduler stops: ``Size
mismatch`` in ``set_kv_buffer``). The patch plans each later step's runner before its forward, with the same
``init_forward_metadata`` call the preparation makes for runner 0, except on an idle round.

**The idle round (#33892).** 0.5.16 brought that per-step planning upstream, for every step, but also on an idle
round: with DP attention a rank that has no requests still runs the draft extend, on an empty batch, and the backend's
``init_forward_metadata`` fails on it (fa3: ``seq_lens_cpu.max()`` of an empty tensor), which stops the scheduler of
that rank. 0.5.18 skips the planning on an idle round, and so do the patches of 0.5.13 … 0.5.17. The runner's own idle
forward (``EagerRunner._execute_idle``) plans a padded idle batch itself and drops stale metadata otherwise.

**The DP padding (beyond upstream, open through 0.5.23).** With DP attention the runner's forward first pads the batch
to the largest rank's token count (``ForwardBatch.prepare_mlp_sync_batch``, MAX_LEN), but every plan of the eager draft
extend is made before that (the preparation's of runner 0, "Planned pre-pad", and the per-step ones), and the
preparation marks the batch so that the forward does not plan again: the attention writes the padded K/V to the plan's
unpadded cache locations (fa3 takes the sliding-window write locations from its plan: ``Size mismatch for
shape#0('batch_size'): expected 28 but got 24`` in ``set_kv_buffer``, and the rank with fewer tokens stops; GPU row
test_dp2_multi_layer_idle.py on 0.5.16 / 0.5.17). The patches of 0.5.13 … 0.5.17 mark each step's plan
``replan_equivalent``: the forward plans again, with the same backend, exactly when the padding reshaped the batch (as
the loop's own comment asks: "each step's forward must init its own metadata post-pad"); without DP attention, or on
the rank with the most tokens, nothing more is planned. 0.5.18 … 0.5.23 run the same loop, with #33892's idle guard,
after the same "Planned pre-pad" preparation: their patches (0.5.18, 0.5.19, 0.5.20 (also 0.5.21, the same function),
0.5.22, 0.5.23) add this mark and nothing else. Not patched on 0.5.11 … 0.5.12.post1, which plan the same way
(``skip_attn_backend_init=True``) but were not read for it (known bug ``multi-layer-dp-padding``). The preparation's
comment gives upstream's reason for not re-planning: DSA's indexer cannot re-plan a DP-padded batch (#27091's
``_batch_size == batch_size`` assertion). No release switches multi-layer EAGLE on for a DSA model (MiMo-V2, Step-3.5 /
3.7: sliding window; GigaChat 3.5 in 0.5.23: MLA and GDN layers, no indexer); a DSA model run that way would need
``--specv2-fixes auto,-multi-layer-draft``.

**Part upstream, part applied (0.5.16 … 0.5.23).** The release table has one entry per fix and release: ``patch`` or a
note (``upstream`` / ``open`` / ``not-applicable``), no "part upstream, part applied". Where part of this fix is
upstream and the rest is not, the entry is the release's patch file, which changes only the missing part: on 0.5.16 /
0.5.17 the tree mask and the per-step planning are upstream and the patch adds the idle guard and the re-plan; on 0.5.18
… 0.5.23 the idle guard (#33892) is upstream too and the patch adds the re-plan only. The upstream part is still
verified against the source, by the patch's ``before`` fingerprint (the whole function, guard included): a release whose
loop lost the guard gets the patch ``refused``. ``status`` and the README matrix show these releases ``ready`` /
``applied`` like any patched one; this docstring and the patch files' headers say which part is upstream.

``on_import`` as ``multi-layer-grammar-mask``: SGLang imports ``multi_layer_eagle_worker_v2`` only when multi-layer
EAGLE is on.
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="multi-layer-draft",
    upstream=("#33892",),
    title="multi-layer EAGLE draft: tree mask sized, eager MTP runners planned, idle rounds skipped",
    what=(
        "MultiLayerEagleDraftWorker.draft: build_tree_kernel_efficient gets the sum the release's EagleWorkerV2.draft "
        "uses when batch.seq_lens_sum is None (0 with a preallocated mask, else batch size x max_context_len); "
        "_draft_extend_for_decode outside the CUDA graph plans runner i's attention backend before MTP step i (i >= 1; "
        "0.5.16 / 0.5.17 plan every step), never on an idle round (DP attention), and marks each step's plan "
        "replan_equivalent so that the runner's forward plans again after the DP-attention padding (0.5.18 … 0.5.23: "
        "this mark only, the rest is upstream)"
    ),
    why=(
        "batch.seq_lens_sum is None after the decode preparation (lazy since 0.5.13): with --enable-multi-layer-eagle "
        "on a backend without a preallocated verify mask the first decode stops the scheduler with a TypeError; an "
        "eager draft extend runs MTP steps 2.. on attention metadata of an earlier forward (MiMo-V2: the scheduler "
        "stops); with DP attention, a rank without requests plans an empty batch in the eager draft extend and its "
        "scheduler stops (0.5.16 / 0.5.17, #33892), and on a rank with fewer tokens than the largest the attention "
        "writes the padded batch's K/V to the unpadded plan's locations (fa3: 'Size mismatch' in set_kv_buffer, the "
        "scheduler stops; every release from 0.5.13, open upstream)"
    ),
    removal="the 0.5.18 … 0.5.23 patches (the DP-padding re-plan alone) when upstream re-plans the eager draft extend "
    "after the padding; the rest when 0.5.17 leaves the supported releases (#33892 upstream from 0.5.18)",
    on_import=True,  # SGLang imports the multi-layer worker only for --enable-multi-layer-eagle
)


def tree_mask_seq_lens_sum(batch, attn_backend, tree_mask_buf) -> int:
    """The ``seq_lens_sum`` that sizes ``build_tree_kernel_efficient``'s FULL_MASK tree mask, by the rule of the
    release's ``EagleWorkerV2.draft``: the batch's when it is known; 0 when ``tree_mask_buf`` is preallocated (the
    kernel then ignores it); else ``len(batch.seq_lens) * attn_backend.max_context_len``, an upper bound that needs no
    copy from the device. Beyond that rule: a backend without ``max_context_len`` (the base class has none, e.g.
    ``HybridAttnBackend``) gets the exact sum, one copy from the device, instead of an ``AttributeError``."""
    if batch.seq_lens_sum is not None:
        return batch.seq_lens_sum
    if tree_mask_buf is not None:
        return 0
    max_context_len = getattr(attn_backend, "max_context_len", None)
    if max_context_len is None:
        return int(batch.seq_lens.sum())
    return batch.seq_lens.shape[0] * max_context_len
