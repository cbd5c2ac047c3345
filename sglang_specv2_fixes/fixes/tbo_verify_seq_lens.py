"""Two-batch overlap with spec v2 (0.5.11; upstream #24319, in 0.5.12).

The spec-v2 draft builds the ``EagleVerifyInput`` with ``seq_lens_cpu=None`` and ``seq_lens_sum=None`` (spec v1 passes
the batch's), and ``prepare_for_v2_verify`` fills the batch's lengths but never the verify input's. Under
``--enable-two-batch-overlap`` (which needs a MoE all-to-all backend such as DeepEP) the verify batch is split in two,
and ``two_batch_overlap.split_spec_info`` slices the tree mask per request from ``spec_info.seq_lens_cpu``: every verify
with a tree mask stops the scheduler with ``AttributeError: 'NoneType' object has no attribute 'shape'``. The patch
copies the batch's ``seq_lens_cpu`` and ``seq_lens_sum`` to the verify input in ``prepare_for_v2_verify``, as 0.5.12
does. They are the lengths before the draft tokens, which is what the mask's row layout (``seq_len + draft_token_num``
per draft token) and ``_compute_mask_offset`` use. No copy from the device is added: ``prepare_for_decode`` has
already made ``seq_lens_cpu`` on 0.5.11.

Proof: CPU only (tests/cpu/test_fix_tbo_verify_seq_lens.py, the release's real ``prepare_for_v2_verify`` and
``split_spec_info``). Two-batch overlap needs DeepEP and several GPUs, which the GPU machines here cannot run.
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="tbo-verify-seq-lens",
    upstream=("#24319",),
    title="two-batch overlap + spec v2: the verify input carries seq_lens_cpu for the split",
    what=(
        "EagleVerifyInputV2Mixin.prepare_for_v2_verify copies batch.seq_lens_cpu and batch.seq_lens_sum to the verify "
        "input (the draft built it with None)"
    ),
    why=(
        "--enable-two-batch-overlap with EAGLE/MTP on spec v2: split_spec_info slices the tree mask by "
        "spec_info.seq_lens_cpu, None there: AttributeError at the first verify"
    ),
    removal="delete when 0.5.11 leaves the supported releases (upstream from 0.5.12: #24319)",
)
