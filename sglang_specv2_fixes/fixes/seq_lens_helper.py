"""#25818 - one helper maintaining ``seq_lens_cpu`` / ``seq_lens_sum`` under spec v2 overlap.

Not applicable to 0.5.11 / 0.5.12.x: those releases compute the sums eagerly and take no overlap
snapshot of the batch, so the stale-snapshot bug the helper prevents cannot occur (the code shape it
fixes arrived later; 0.5.13.post1 has its equivalent as FutureMap.resolve_seq_lens_cpu).
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="seq-lens-helper",
    upstream=('#25818',),
    title="consolidate seq_lens_cpu/seq_lens_sum maintenance into one helper",
    what="nothing patched: the code shape it fixes does not exist in the supported releases",
    why="stale seq_lens_cpu/seq_lens_sum after an overlap snapshot/restore",
    removal="informational entry",
)
