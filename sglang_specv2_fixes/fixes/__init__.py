"""Patch index: every fix this plugin knows, with what / why / related PR / removal plan.

| fix                         | PR     | 0.5.11         | 0.5.12.x       | 0.5.13.post1 | what is patched (and removal plan)         |
|-----------------------------|--------|----------------|----------------|--------------|--------------------------------------------|
| skip-stale-overlap-updates  | #23456 | applied        | upstream       | upstream     | _resolve_spec_overlap_token_ids; drop with |
|                             |        |                |                |              | 0.5.11                                     |
| tree-drafting               | #26866 | applied        | applied        | upstream     | v1/v2 routing after auto params, verify    |
|                             |        |                |                |              | compaction (tokens, hidden states, routed  |
|                             |        |                |                |              | experts), KV move, draft-extend graph      |
|                             |        |                |                |              | gate, busy check; drop once 0.5.13.post1   |
|                             |        |                |                |              | is the oldest supported release            |
| live-accept-metrics         | #23456 | applied        | applied        | open (not    | process_batch_result_decode: stale         |
|                             | follow |                |                | backported)  | requests left out of the spec counters;    |
|                             | -up    |                |                |              | drop once upstream fixes it (open in 0.5.23)|
| routed-experts-draft-guard  | #26980 | applied        | applied        | open         | ModelRunner.init_routed_experts_capturer:  |
|                             |        |                |                |              | draft keeps the target's capturer; drop    |
|                             |        |                |                |              | once a release ships #26980                |
| bonus-slot-accounting       | #22651 | upstream       | upstream       | upstream     | nothing (informational, source verified)   |
| accept-length-split         | #23962 | upstream       | upstream       | upstream     | nothing (informational, source verified)   |
| seq-lens-helper             | #25818 | not applicable | not applicable | upstream     | nothing (code shape absent before 0.5.13)  |

Report-only releases after 0.5.13.post1 (nothing patched; state verified by fingerprint, per fix):

| fix                         | 0.5.14   | 0.5.15 / .post1 | 0.5.16   | 0.5.17   | note                                   |
|-----------------------------|----------|-----------------|----------|----------|----------------------------------------|
| skip-stale-overlap-updates  | upstream | upstream        | upstream | upstream | 0.5.15+: finished-request rollback     |
|                             |          |                 |          |          | superseded (no bonus pre-claim)        |
| tree-drafting               | upstream | upstream        | upstream | upstream | 0.5.16+: eagle_worker_common           |
| live-accept-metrics         | open     | open            | open     | open     | whole batch fed to update_spec_metrics |
| routed-experts-draft-guard  | open     | upstream        | upstream | upstream | #26980 lands in 0.5.15                 |
| bonus-slot-accounting       | upstream | not applicable  | n/a      | n/a      | pre-claim replaced (#28754)            |
| accept-length-split         | upstream | upstream        | upstream | upstream | eagle_utils.eagle_sample               |
| seq-lens-helper             | upstream | upstream        | upstream | upstream | FutureMap.resolve_seq_lens_cpu         |

Each module holds the per-release bodies and fingerprints of one fix; ``FIX`` is its catalogue record.
``python -m sglang_specv2_fixes status`` prints the live version of this table for the installed
release, and README.md's compatibility table is generated from the same records.
"""

from . import (
    accept_length_split,
    bonus_slot_accounting,
    live_accept_metrics,
    routed_experts_draft_guard,
    seq_lens_helper,
    skip_stale_overlap_updates,
    tree_drafting,
)

_MODULES = [skip_stale_overlap_updates, tree_drafting, live_accept_metrics, routed_experts_draft_guard,
            bonus_slot_accounting, accept_length_split, seq_lens_helper]

ALL_FIXES = [m.FIX for m in _MODULES]


def by_name(name: str):
    for fix in ALL_FIXES:
        if name in fix.aliases:
            return fix
    raise KeyError(name)
