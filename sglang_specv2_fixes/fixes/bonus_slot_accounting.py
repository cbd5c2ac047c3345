"""#22651 - streaming sessions under spec v2: pre-claim the bonus slot in prepare_for_decode.

Upstream in every supported release (0.5.11 and 0.5.12.x carry the pre-claim, the ``- 1`` in the
resolve step and the removal of the open_session gate), so nothing is patched. Listed so that
``status`` explains it and verifies the release source carries it. 0.5.15 and later replaced the
scheme (#28754: no pre-claim, resolve commits drafts + bonus; not-applicable there): this plugin must
never mix the two.
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="bonus-slot-accounting",
    upstream=('#22651',),
    title="spec v2 bonus-slot accounting for streaming sessions",
    what="nothing patched: upstream in all supported releases",
    why="a finished turn's cached KV was one token short, breaking streaming-session KV inheritance",
    removal="informational entry; keep while releases without it could be supported",
)
