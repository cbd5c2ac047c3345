"""PD-disaggregation decode: the prebuilt staging waits for the forward still in flight before it writes request rows
of the FutureMap (0.5.14 - 0.5.18; upstream #35748, in 0.5.19; supersedes #34077).

With the overlap scheduler the FutureMap's rows are the request-pool rows (``future_indices = batch.req_pool_indices``,
from 0.5.13). On the PD decode server ``get_new_prebuilt_batch`` builds the batch of requests whose KV arrived and
stages their first decode input (``ScheduleBatch.process_prebuilt``: the draft input, ``build_eagle_disagg_draft_input``
for EAGLE, or the relay's ``stash``) into their rows. A request that finished can still have one redundant forward in
flight, which writes its row's FutureMap entries at the forward's end; if the row was freed and handed to a new request,
the staging and that write race on the schedule and forward streams. The overlap WAR barrier does not order them: from
0.5.14 it waits for the forward's read-done event where one was published (``_apply_war_barrier``, #28363), which comes
before the forward's tail. 0.5.19 issues ``schedule_stream.wait_stream(forward_stream)`` right before
``process_prebuilt`` when the overlap scheduler is on; the patch does the same.

Not applicable: 0.5.11 / 0.5.12.x allocate the future rows from a ring (``FutureMap.alloc_future_indices``), not from
request rows; 0.5.13.x's barrier waits for the whole forward stream (``wait_stream``) before the batch getter runs (and,
with overlap-war-barrier, right after each launch), which already orders the staging after the forward's tail.

Removal: delete when 0.5.18 and the releases before it leave the supported releases (upstream from 0.5.19).
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="pd-prebuilt-staging-order",
    upstream=("#35748",),
    title="PD decode: prebuilt staging waits for the forward in flight before its FutureMap writes",
    what=(
        "SchedulerDisaggregationDecodeMixin.get_new_prebuilt_batch issues schedule_stream.wait_stream(forward_stream) "
        "before process_prebuilt when the overlap scheduler is on (0.5.19's order)"
    ),
    why=(
        "on a PD decode server with overlap, the staging of newly arrived requests writes their request rows of the "
        "FutureMap while a finished request's redundant forward may still write the same (reused) row: a race on the "
        "speculative state of the new request"
    ),
    removal="delete when 0.5.18 and the releases before it leave the supported releases (upstream from 0.5.19)",
)
