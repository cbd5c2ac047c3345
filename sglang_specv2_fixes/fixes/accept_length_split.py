"""#23962 - split ``accept_length`` into drafts-only and drafts+bonus counters.

Upstream in every supported release (0.5.11: ``num_accepted_drafts`` / ``num_accepted_tokens``;
0.5.12 renamed them ``num_correct_drafts`` / ``num_accept_tokens`` with ``fill_bonus_tokens``).
Nothing is patched; the other fixes' patches use each release's own names.
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="accept-length-split",
    upstream=('#23962',),
    title="accept_length split into drafts-only and drafts+bonus counters",
    what="nothing patched: upstream in all supported releases",
    why="one field meant both 'accepted drafts' and 'accepted drafts + bonus', inviting off-by-one bugs",
    removal="informational entry",
)
