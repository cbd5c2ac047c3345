"""#23456 - skip stale state updates in the spec-v2 overlap resolve step.

With the overlap scheduler a decode result is processed one iteration late. By then a request of that
batch may already be finished (its KV released by an earlier result) or retracted (its KV released
and ``reset_for_retract()`` zeroed its counters). SGLang 0.5.11 applies the late ``accept_lens`` to
such requests anyway: a retracted request ends with ``kv_committed_len > kv_allocated_len == 0``, a
finished one keeps growing its committed length after its KV was freed, and both get spurious
``spec_verify_ct`` / acceptance-histogram updates. Upstream fixed it in #23456 (first release 0.5.12).

The patch ports 0.5.12's ``_resolve_spec_overlap_tokens`` logic written with 0.5.11's names
(``_resolve_spec_overlap_token_ids``, ``num_accepted_drafts*``, ``spec_accepted_drafts``,
``update_spec_acceptance_histogram``, stride from ``self.draft_worker``).
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="skip-stale-overlap-updates",
    upstream=('#23456',),
    title="skip stale state updates in spec-v2 overlap",
    what="SchedulerOutputProcessorMixin._resolve_spec_overlap_token_ids (0.5.11) replaced: retracted requests get no update, finished requests only roll back the bonus slot pre-claimed by prepare_for_decode, per-request spec statistics only for live requests",
    why="late overlap results extend the committed KV of finished/retracted requests past their allocation and add spurious acceptance statistics",
    removal="delete when 0.5.11 leaves the supported releases (upstream from 0.5.12)",
)
