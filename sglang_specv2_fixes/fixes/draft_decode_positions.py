"""#25015 - EAGLE draft decode steps run one RoPE position too far.

What: ``draft_forward`` (spec v2 ``EagleDraftWorker`` and spec v1 ``EAGLEWorker``) runs ``steps - 1`` draft
decode forwards on a ``ForwardBatch`` whose positions start at ``seq_lens``, and writes step ``i``'s draft KV into
the slot of position ``seq_lens + i`` (``assign_draft_cache_locs``). SGLang 0.5.11 advances the positions
(``positions.add_(1)``) *before* each forward, so step ``i`` rotates its query and key as position
``seq_lens + i + 1``: one past the slot it writes and past the draft extend's positions (``seq_lens + j``).

Why it matters: every draft decode step sees the prefix at a distance one larger than the truth, so a draft that
relies on relative position (every real EAGLE head: RoPE attention over the prefix) proposes worse tokens -> lower
acceptance length, on spec v1 and v2, with or without CUDA graphs. Output text is not affected (the target
verifies every token). The tiny standard draft attends to its own position only and cannot see it; the
previous-token detector draft of the registered rows can (tests/registered/test_draft_decode_positions.py).

The patch (patches/draft-decode-positions/0.5.11.patch), as upstream #25015 (shipped in 0.5.12): the
``positions.add_(1)`` moves after the forward in both ``draft_forward`` functions, and the draft decode CUDA
graph's ``run_once`` (``EAGLEDraftCudaGraphRunner.capture_one_batch_size``) subtracts the ``steps - 1`` advances
again, so the captured graph leaves the shared positions buffer as it found it.

Removal: delete when 0.5.11 leaves the supported releases (upstream from 0.5.12).
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="draft-decode-positions",
    upstream=("#25015",),
    title="EAGLE draft decode steps run at the position of the slot they write",
    what=(
        "EagleDraftWorker.draft_forward (spec v2) and EAGLEWorker.draft_forward (spec v1) advance the draft "
        "positions after each draft decode forward instead of before it; the draft decode CUDA graph restores "
        "the positions buffer after capture"
    ),
    why=(
        "draft decode step i ran at RoPE position seq_lens + i + 1 while writing the KV slot of seq_lens + i: "
        "every draft step saw the prefix one position off, lowering acceptance (text unaffected)"
    ),
    removal="delete when 0.5.11 leaves the supported releases (upstream from 0.5.12)",
)
