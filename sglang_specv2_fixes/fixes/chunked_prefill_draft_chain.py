"""#26800 - spec-v2 EAGLE draft prefill: next prompt token at the end of a non-final chunk.

What: the EAGLE draft prefill (``EagleDraftWorker._draft_extend_for_prefill``) rotates the target's
input ids left by one so the draft sees, at position ``p``, the target hidden state of ``p`` and the
token of ``p + 1``. The last position of each request gets ``next_token_ids[i]``, the token the target
just sampled. That is right at the end of a prompt, but at the end of a non-final chunked-prefill chunk
the token at ``p + 1`` is already known: the next prompt token. SGLang 0.5.11 / 0.5.12.x put the
target's prediction there, so the draft KV at every chunk boundary is built from a token the prompt
does not have.

Why it matters: every later draft step attends to those wrong KV entries: lower acceptance length for
prompts longer than ``--chunked-prefill-size`` (more chunks, more wrong positions). Output text is not
affected (the target verifies every token).

The patch (patches/chunked-prefill-draft-chain/0.5.11.patch and 0.5.12.patch, the latter also for
0.5.12.post1): before the rotation, the tail token of a request whose fill of this batch
(``extend_prefix_lens[i] + extend_seq_lens[i]``) ends before ``len(origin_input_ids)`` becomes
``origin_input_ids[fill_len]`` (unless that id is outside the vocab, a multimodal placeholder: upstream's 0.5.14
refinement of ``_compute_chunked_req_next_prompt_token``). Upstream (#26800, in 0.5.13) snapshots the same token on ``ScheduleBatch``
(``chunked_req_next_prompt_token`` from ``_compute_chunked_req_next_prompt_token``) and applies it in
``eagle_utils._eagle_prefill_tail_tokens``; in these releases the worker gets a ``ModelWorkerBatch``
without that field, so the patched function reads the batch's own ``reqs`` and length lists (built when
the batch was, so the same snapshot; only the chunked request can end before its prompt). The draft
input returned for the next step is unchanged, as upstream. Same limits as upstream: a retracted and
resumed request whose chunk boundary falls in its output tokens keeps the prediction (upstream #28254,
open), and the multi-layer EAGLE draft worker is unchanged (upstream left it with a TODO).

Removal: delete when 0.5.11 and 0.5.12.x leave the supported releases (upstream from 0.5.13).
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="chunked-prefill-draft-chain",
    upstream=("#26800",),
    title="spec-v2 EAGLE draft prefill uses the next prompt token at a chunk boundary",
    what=(
        "EagleDraftWorker._draft_extend_for_prefill: the rotated-in tail token of a request whose fill ends "
        "before its prompt (a non-final chunked-prefill chunk) is origin_input_ids[fill_len] instead of the "
        "target's sampled token"
    ),
    why=(
        "the draft KV at every chunked-prefill boundary was built from the target's prediction instead of the "
        "prompt token: lower acceptance for prompts longer than --chunked-prefill-size (text unaffected)"
    ),
    removal="delete when 0.5.11 and 0.5.12.x leave the supported releases (upstream from 0.5.13)",
)
