"""DP attention + EAGLE/MTP with a DSA draft that seeds its indexer top-k from the draft extend: every rank makes the
same draft CUDA-graph decision (0.5.15.post1 - 0.5.23; upstream #32209, #39072, open; #32527).

``EagleDraftWorker.draft`` turns the draft CUDA graph off for one batch when it is not idle, the worker seeds the DSA
indexer top-k from the draft extend (``seed_dsa_topk_from_draft_extend``: MTP index sharing on a model with
``index_topk``, GLM-5.x / DeepSeek-V3.2-class) and the batch carries no seed (``dsa_topk_indices`` None: a PD decode
prebuilt batch, or a batch merged with one). An idle DP-attention rank never meets that condition and replays the
graph, while the busy rank runs the draft eagerly: the ranks issue different collectives and the server hangs (seen on
PD decode + DP attention, #32209 / #39072).

The patch decides from what every rank shares, the server config: where the worker seeds from the draft extend and DP
attention is on, every rank, idle or busy, drafts eagerly, so no collective is needed to agree. The busy-rank condition
is kept as it is (it still applies without DP attention). Cost: the draft CUDA graph on that configuration only; the
eager draft is what the busy ranks already ran whenever a batch had no seed. Proof: CPU only (the per-rank decision of
the release's real ``draft``, tests/cpu/test_fix_dp_draft_graph_rank_agree.py); a GPU row needs two GPUs and a DSA
model.

Removal: per release once upstream makes the decision agree across ranks (open as of 0.5.23).
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="dp-draft-graph-rank-agree",
    upstream=(),
    related=("#32209", "#39072", "#32527"),
    title="DP attention + DSA MTP draft: every rank takes the same draft CUDA-graph decision",
    what=(
        "EagleDraftWorker.draft: where the worker seeds the DSA indexer top-k from the draft extend and DP attention "
        "is on, every rank (idle or busy) runs the draft eagerly, decided from the server config"
    ),
    why=(
        "the draft CUDA graph is turned off only on busy ranks whose batch has no top-k seed; idle DP ranks replay "
        "it, the ranks' collectives mismatch and the server hangs (PD decode + DP attention + EAGLE/MTP on DSA models)"
    ),
    removal="per release once upstream makes the decision agree across ranks (open as of 0.5.23)",
)


def draft_eagerly_on_every_rank(seed_dsa_topk_from_draft_extend, dp_attention) -> bool:
    """True where the release's busy-rank condition can hold on some rank while another is idle: the worker seeds
    the top-k from the draft extend and DP attention is on. Both come from the server config, the same on every
    rank."""
    return bool(seed_dsa_topk_from_draft_extend) and bool(dp_attention)
