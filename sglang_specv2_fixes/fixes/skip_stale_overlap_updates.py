"""#23456 - skip stale state updates in the spec-v2 overlap resolve step.

With the overlap scheduler a decode result is processed one iteration late. By then a request of that
batch may already be finished (its KV released by an earlier result) or retracted (its KV released
and ``reset_for_retract()`` zeroed its counters). SGLang 0.5.11 applies the late ``accept_lens`` to
such requests anyway: a retracted request ends with ``kv_committed_len > kv_allocated_len == 0``, a
finished one keeps growing its committed length after its KV was freed, and both get spurious
``spec_verify_ct`` / acceptance-histogram updates. Upstream fixed it in #23456 (first release 0.5.12).

The body is 0.5.12's ``_resolve_spec_overlap_tokens`` logic written with 0.5.11's names
(``_resolve_spec_overlap_token_ids``, ``num_accepted_drafts*``, ``spec_accepted_drafts``,
``update_spec_acceptance_histogram``, stride from ``self.draft_worker``).
"""

from __future__ import annotations

from ..catalog import Fix, Patch, ReleaseNote, UPSTREAM

MIXIN = "sglang.srt.managers.scheduler_output_processor_mixin"
_BRP = "sglang.srt.managers.scheduler_components.batch_result_processor"


class v0_5_11:
    def _resolve_spec_overlap_token_ids(
        self: Scheduler, result: GenerationBatchResult, batch: ScheduleBatch
    ) -> List[List[int]]:
        """Resolve the padding next token ids for speculative decoding with overlap."""
        assert result.next_token_ids.is_cpu
        assert result.accept_lens.is_cpu

        next_token_ids = result.next_token_ids.tolist()
        accept_lens = result.accept_lens.tolist()
        result.num_accepted_drafts = sum(accept_lens) - len(batch.reqs)
        result.num_accepted_drafts_per_req_cpu = [x - 1 for x in accept_lens]

        predict_tokens = []
        stride = self.draft_worker.speculative_num_draft_tokens

        for i, req in enumerate(batch.reqs):
            predict_tokens.append(
                next_token_ids[i * stride : i * stride + accept_lens[i]]
            )

            if req.is_retracted:
                # reset_for_retract() already zeroes committed/allocated KV.
                continue

            if req.finished():
                # -1 because prepare_for_decode pre-claimed the bonus slot.
                req.kv_committed_len -= 1
                continue

            # -1 because prepare_for_decode pre-claimed the bonus slot.
            req.kv_committed_len += accept_lens[i] - 1
            req.spec_verify_ct += 1

            accepted_draft_tokens = result.num_accepted_drafts_per_req_cpu[i]
            req.spec_accepted_drafts += accepted_draft_tokens
            req.update_spec_acceptance_histogram(accepted_draft_tokens)

        return predict_tokens


FIX = Fix(
    name="skip-stale-overlap-updates",
    pr="#23456",
    title="skip stale state updates in spec-v2 overlap",
    what=(
        "SchedulerOutputProcessorMixin._resolve_spec_overlap_token_ids (0.5.11) replaced: retracted "
        "requests get no update, finished requests only roll back the bonus slot pre-claimed by "
        "prepare_for_decode, per-request spec statistics only for live requests"
    ),
    why=(
        "late overlap results extend the committed KV of finished/retracted requests past their "
        "allocation and add spurious acceptance statistics"
    ),
    removal="delete when 0.5.11 leaves the supported releases (upstream from 0.5.12)",
    lines={
        "0.5.11": [
            Patch(
                module=MIXIN,
                qualname="SchedulerOutputProcessorMixin._resolve_spec_overlap_token_ids",
                fingerprint="d5b36905163a3f04",
                body=(v0_5_11, "_resolve_spec_overlap_token_ids"),
            )
        ],
        "0.5.12": ReleaseNote(
            UPSTREAM,
            "upstream since 0.5.12 (_resolve_spec_overlap_tokens skips retracted/finished requests)",
            check=(MIXIN, "SchedulerOutputProcessorMixin._resolve_spec_overlap_tokens", "a1880655aef27b21"),
        ),
        "0.5.13.post1": ReleaseNote(
            UPSTREAM,
            "upstream (scheduler_components SchedulerBatchResultProcessor._resolve_spec_v2_tokens)",
            check=(_BRP, "SchedulerBatchResultProcessor._resolve_spec_v2_tokens", "6772ae0cd329ca86"),
        ),
        "0.5.14": ReleaseNote(
            UPSTREAM,
            "upstream (SchedulerBatchResultProcessor._resolve_spec_v2_tokens skips retracted requests and "
            "only rolls back the pre-claimed bonus slot of finished ones)",
            check=(_BRP, "SchedulerBatchResultProcessor._resolve_spec_v2_tokens", "a566b5757f77d5a8"),
        ),
        **{
            line: ReleaseNote(
                UPSTREAM,
                "upstream (SchedulerBatchResultProcessor._resolve_spec_v2_tokens: finished and retracted "
                "requests get no KV or statistics update); the finished-request bonus-slot rollback is "
                "superseded: no worker pre-claims the bonus any more, resolve commits the full accepted run "
                "of live requests only",
                check=(_BRP, "SchedulerBatchResultProcessor._resolve_spec_v2_tokens", fp),
            )
            for line, fp in (
                ("0.5.15", "9e0ca40ab277ef7a"),
                ("0.5.16", "f2046557f69151de"),
                ("0.5.17", "2c4bc18f7e2bf70a"),
            )
        },
    },
)
