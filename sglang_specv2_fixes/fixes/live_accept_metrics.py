"""Beyond upstream: speculative acceptance counters over live requests only (issue: stale overlap results).

With the overlap scheduler a decode result is processed one step late, so its batch can still hold
requests that finished or were retracted in between. SGLang drops those requests' tokens (the loop in
``process_batch_result_decode`` skips them, and #23456 keeps their per-request statistics unchanged),
but the scheduler-wide counters are still fed with the whole batch:
``update_spec_metrics(batch.batch_size(), result.num_accepted_drafts)`` adds every stale request's
accept length and verify step to ``spec_num_accepted_tokens`` / ``spec_num_forward_ct`` (behind
``avg_spec_accept_length`` in ``/server_info``, the "accept len" log line and the Prometheus gauge), and
``num_generated_tokens`` (generation throughput) counts their discarded bonus tokens. The global
numbers then disagree with the per-request ``meta_info`` (``spec_verify_ct``, accepted drafts) of the
very same requests. Flagged in upstream review, still open in every release up to 0.5.23.

The patch changes each release's own ``process_batch_result_decode`` (SchedulerOutputProcessorMixin up
to 0.5.12, SchedulerBatchResultProcessor from 0.5.13) in three places: a stale mask taken on
entry (the same condition the loop uses to skip a request), the counters fed with the live requests'
count and accepted drafts, and the periodic stats report skipped for a step whose log interval then
holds no live verify step at all (upstream's log divides by that count; stock never has zero, and the
first GPU run of this fix with ``--decode-log-interval 1`` hit ZeroDivisionError there). Everything
else is verbatim.
"""

from __future__ import annotations

from ..catalog import Fix

FIX = Fix(
    name="live-accept-metrics",
    upstream=(),
    title="acceptance counters over live requests only",
    what=(
        "process_batch_result_decode: the stale (finished/retracted) requests of a late overlap result are "
        "left out of the acceptance counters (update_spec_metrics and, where the release has them, the "
        "block-accept / cap counters) and of num_generated_tokens"
    ),
    why="avg_spec_accept_length, spec verify counts and generation throughput include requests whose tokens were discarded, so they disagree with the per-request meta_info of the same run",
    removal="delete per release once upstream counts live requests only (open upstream as of 0.5.23)",
)
