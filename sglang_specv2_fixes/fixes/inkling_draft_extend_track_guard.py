"""Inkling's MTP draft extend writes a freed request's tracked window at slot -1 (beyond upstream, open as of 0.5.23).

From 0.5.22 upstream marks the mamba track index of a request freed before a spec-v2 verify -1, and
``mamba-track-freed-rows`` does the same on 0.5.12 - 0.5.21. Every post-verify scatter of the target skips a negative
slot. The draft extend that follows the verify gets the same indices, and Inkling's short convolution
(``ShortConvolution._update_sconv_cache_for_draft_extend``, from 0.5.16) writes the window of each row whose accepted
range crosses a track interval at ``sconv_cache[track_index]``: its fused kernel (Triton and CUDA alike) has no bound
check, so a -1 row writes before the cache (the previous layer's last slot, or outside the buffer). Before the -1
marking such a row wrote into slot 0 of the freed request's row, which may belong to a live request by then (#29449).
The patch leaves rows with a negative track index untracked (``crossed`` false); the others are tracked as before.

``on_import``: SGLang imports the Inkling modules only to serve an Inkling model (or where its model registry imports
every model), so a process that never does pays nothing for this fix.

Proof: CPU (tests/cpu/test_fix_inkling_draft_extend_track_guard.py, the release's real method with the kernel call
recorded). Seen only by reading the source; no Inkling model runs on the GPU machines here.
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="inkling-draft-extend-track-guard",
    upstream=(),
    related=("#29449",),
    title="Inkling MTP draft extend: no write at a freed request's -1 track slot",
    what=(
        "ShortConvolution._update_sconv_cache_for_draft_extend tracks only rows whose mamba track index is >= 0 "
        "(crossed is false for a -1 row), from 0.5.16"
    ),
    why=(
        "Inkling + MTP with the mamba extra_buffer: a request freed before the verify has track index -1 (0.5.22 on, "
        "or mamba-track-freed-rows), and the draft extend's kernel writes its window before the cache"
    ),
    removal="per release once upstream guards the draft extend's track slot (open as of 0.5.23)",
    on_import=True,
)
