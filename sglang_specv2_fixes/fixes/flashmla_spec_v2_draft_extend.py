"""FlashMLA with EAGLE / MTP on spec v2 (0.5.11 - 0.5.12.post1): the draft extend takes FlashMLA's verify kernel on
metadata it never built (upstream #24640, in 0.5.13).

``FlashMLABackend`` (``--attention-backend flashmla``, SGLang's Hopper MLA kernel for DeepSeek-class targets) derives
from the FlashInfer MLA backend: decode and target verify run FlashMLA's fixed-q kernel on FlashMLA metadata
(``FlashMLADecodeMetadata``: tile-scheduler metadata, splits, ``block_kv_indices``), every other mode is handed to the
parent, which plans its own prefill wrapper (``PrefillMetadata``). The draft worker has no FlashMLA draft-extend
backend (``DraftBackendFactory._create_flashmla_prefill_backend`` returns None), so the draft model runner's own
FlashMLABackend serves spec v2's draft extend, ``ForwardMode.DRAFT_EXTEND_V2``: ``init_forward_metadata`` hands that
mode to the parent (it is neither decode nor verify), but ``forward_extend`` hands the parent only ``EXTEND`` and
``DRAFT_EXTEND`` (spec v1's) and sends ``DRAFT_EXTEND_V2`` down its verify branch, which reads
``self.forward_metadata.block_kv_indices`` from the parent's ``PrefillMetadata``: the first draft extend after a
verify stops the scheduler (``AttributeError``). 0.5.13 (#24640) adds ``DRAFT_EXTEND_V2`` to the modes
``forward_extend`` hands to the parent, which is what the patch does: the draft extend then runs the FlashInfer MLA
prefill the parent planned for it, as it does for the flashinfer backend on these releases. 0.5.16 rewrites the
method to serve the draft extend with FlashMLA's own kernel and metadata.

Removal: delete when 0.5.12.post1 leaves the supported releases (upstream from 0.5.13: #24640).
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="flashmla-spec-v2-draft-extend",
    upstream=("#24640",),
    title="FlashMLA + spec v2: the draft extend runs the FlashInfer MLA prefill its parent planned",
    what=(
        "FlashMLABackend.forward_extend hands ForwardMode.DRAFT_EXTEND_V2 to its FlashInfer MLA parent with EXTEND and "
        "DRAFT_EXTEND, as 0.5.13 does (#24640), instead of FlashMLA's target-verify kernel"
    ),
    why=(
        "--attention-backend flashmla with EAGLE / MTP on spec v2: init_forward_metadata lets the parent plan the "
        "draft extend, but forward_extend runs it through the verify branch, which reads block_kv_indices from the "
        "parent's PrefillMetadata: AttributeError at the first draft extend"
    ),
    removal="delete when 0.5.12.post1 leaves the supported releases (upstream from 0.5.13: #24640)",
    on_import=True,  # flashmla_backend: imported by a flashmla server's attention backend, not by every process
)
