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

The body is the release's own ``process_batch_result_decode`` with three changes: a stale mask taken on
entry (the same condition the loop uses to skip a request), the counters fed with the live requests'
count and accepted drafts, and the periodic stats report skipped for a step whose log interval then
holds no live verify step at all (upstream's log divides by that count; stock never has zero, and the
first GPU run of this fix with ``--decode-log-interval 1`` hit ZeroDivisionError there). Everything
else is verbatim.
"""

from __future__ import annotations

from ..catalog import NOT_BACKPORTED, Fix, Patch, ReleaseNote

MIXIN = "sglang.srt.managers.scheduler_output_processor_mixin"
_BRP = "sglang.srt.managers.scheduler_components.batch_result_processor"  # 0.5.13.post1+


class v0_5_11:
    def process_batch_result_decode(
        self: Scheduler,
        batch: ScheduleBatch,
        result: GenerationBatchResult,
    ):
        if result.copy_done is not None:
            result.copy_done.synchronize()
        if result.routed_experts_output is not None:
            result.routed_experts_output.finalize()
            result.routed_experts_output = None

        # [specv2-fixes live-accept-metrics] A late overlap result still carries requests that finished
        # or were retracted since it was scheduled; their tokens are dropped below, so they must not
        # count in the acceptance / throughput counters either (mask taken before anything changes).
        stale_mask = (
            [req.finished() or req.is_retracted for req in batch.reqs]
            if batch.is_spec_v2 and (self.enable_overlap or self.enable_overlap_mlx)
            else None
        )

        logits_output, next_token_ids, can_run_cuda_graph = (
            result.logits_output,
            result.next_token_ids,
            result.can_run_cuda_graph,
        )

        if batch.spec_algorithm.is_none() or batch.is_spec_v2:
            if batch.is_spec_v2:
                next_token_ids = self._resolve_spec_overlap_token_ids(result, batch)
            elif isinstance(next_token_ids, list):
                pass  # MLX path: already a list[int], skip torch round-trip
            else:
                next_token_ids = next_token_ids.tolist()

            if batch.return_logprob:
                next_token_logprobs = logits_output.next_token_logprobs.tolist()
                if logits_output.next_token_top_logprobs_val:
                    logits_output.next_token_top_logprobs_val = [
                        v.tolist() for v in logits_output.next_token_top_logprobs_val
                    ]
                    logits_output.next_token_top_logprobs_idx = [
                        x.tolist() for x in logits_output.next_token_top_logprobs_idx
                    ]

                if logits_output.next_token_token_ids_logprobs_val:
                    logits_output.next_token_token_ids_logprobs_val = [
                        v.tolist()
                        for v in logits_output.next_token_token_ids_logprobs_val
                    ]
        # else: Spec V1 — output_ids, check_finished, grammar, and reasoning tokens
        # are already handled in the verify phase (eagle_info.py / ngram_info.py).

        num_live_reqs, num_live_drafts = batch.batch_size(), result.num_accepted_drafts
        if stale_mask is not None and any(stale_mask):
            num_live_reqs = stale_mask.count(False)
            num_live_drafts = sum(
                n
                for n, stale in zip(result.num_accepted_drafts_per_req_cpu, stale_mask)
                if not stale
            )
        self.num_generated_tokens += num_live_reqs
        if not batch.spec_algorithm.is_none():
            self.update_spec_metrics(num_live_reqs, num_live_drafts)
        if self.enable_metrics:
            self.metrics_collector.increment_decode_cuda_graph_pass(
                value=can_run_cuda_graph
            )

        self.token_to_kv_pool_allocator.free_group_begin()

        # Spec V1 handles output_ids, check_finished, grammar, and reasoning tokens
        # in the verify phase. Non-spec and V2 handle them here in post-processing.
        is_spec_v1 = not batch.spec_algorithm.is_none() and not batch.is_spec_v2

        for i, req in enumerate(batch.reqs):
            req: Req

            if (self.enable_overlap or self.enable_overlap_mlx) and (
                req.finished() or req.is_retracted
            ):
                # NOTE: This (req.finished() or req.is_retracted) should only happen when overlap scheduling is enabled.
                # And all the over-allocated tokens will be freed in `release_kv_cache`.
                continue

            if is_spec_v1:
                self._mamba_prefix_cache_update(req, batch, result, i)
                req.time_stats.set_last_decode_finish_time()
                self._handle_finished_req(req, i, logits_output)
                if req.return_hidden_states and logits_output.hidden_states is not None:
                    req.hidden_states.append(
                        logits_output.hidden_states[i].cpu().clone().tolist()
                    )
                if req.grammar is not None:
                    req.grammar.finished = req.finished()
                continue

            # Non-spec and V2: full post-processing
            next_token_id = next_token_ids[i]
            new_accepted_len = 1
            if batch.spec_algorithm.is_none():
                req.output_ids.append(next_token_id)
            else:
                req.output_ids.extend(next_token_id)
                new_accepted_len = len(next_token_id)

            self._maybe_update_reasoning_tokens(req, next_token_id)

            # Update Mamba last track seqlen
            self._mamba_prefix_cache_update(req, batch, result, i)
            req.time_stats.set_last_decode_finish_time()
            req.check_finished(new_accepted_len)

            self._handle_finished_req(req, i, logits_output)

            if req.return_logprob:
                # Spec v1 handles logprobs inside its own worker.
                # Normalize: non-spec has 1 token, spec v2 has multiple.
                if batch.is_spec_v2:
                    accepted_logprobs = next_token_logprobs[i]
                    accepted_ids = next_token_id
                    max_accept = len(accepted_logprobs)
                else:
                    accepted_logprobs = [next_token_logprobs[i]]
                    accepted_ids = [next_token_id]
                    max_accept = 1

                for j, tok_id in enumerate(accepted_ids):
                    req.output_token_logprobs_val.append(accepted_logprobs[j])
                    req.output_token_logprobs_idx.append(tok_id)
                    if req.top_logprobs_num > 0:
                        flat_idx = i * max_accept + j
                        req.output_top_logprobs_val.append(
                            logits_output.next_token_top_logprobs_val[flat_idx]
                        )
                        req.output_top_logprobs_idx.append(
                            logits_output.next_token_top_logprobs_idx[flat_idx]
                        )
                    if req.token_ids_logprob is not None:
                        flat_idx = i * max_accept + j
                        req.output_token_ids_logprobs_val.append(
                            logits_output.next_token_token_ids_logprobs_val[flat_idx]
                        )
                        req.output_token_ids_logprobs_idx.append(
                            logits_output.next_token_token_ids_logprobs_idx[flat_idx]
                        )

            if req.return_hidden_states and logits_output.hidden_states is not None:
                req.hidden_states.append(
                    logits_output.hidden_states[i].cpu().clone().tolist()
                )

            if req.grammar is not None:
                # FIXME: this try-except block is for handling unexpected xgrammar issue.
                try:
                    if batch.spec_algorithm.is_none():
                        # Normal decode: single token
                        req.grammar.accept_token(next_token_id)
                    elif batch.is_spec_v2:
                        # Speculative decode: next_token_id is a list of accepted tokens
                        for token_id in next_token_id:
                            req.grammar.accept_token(token_id)
                except ValueError as e:
                    # Grammar accept_token can raise ValueError if the token is not in the grammar.
                    # This can happen if the grammar is not set correctly or the token is invalid.
                    logger.error(
                        f"Grammar accept_token failed for req {req.rid} with token {next_token_id}: {e}"
                    )
                    self.abort_request(AbortReq(rid=req.rid))
                req.grammar.finished = req.finished()

        self.stream_output(batch.reqs, batch.return_logprob)
        self.token_to_kv_pool_allocator.free_group_end()

        self.forward_ct_decode = (self.forward_ct_decode + 1) % (1 << 30)
        if (
            stale_mask is not None
            and self.spec_num_forward_ct == 0
            and self.forward_ct_decode % self.server_args.decode_log_interval == 0
        ):
            # [specv2-fixes live-accept-metrics] no live verify step in this log interval (every
            # request of the late results was stale): the periodic log divides by that count, so
            # this step's report is skipped and the interval rolls over into the next one.
            return
        self.report_decode_stats(
            can_run_cuda_graph,
            running_batch=batch,
            num_accepted_drafts=result.num_accepted_drafts,
        )


class v0_5_12:
    def process_batch_result_decode(
        self: Scheduler,
        batch: ScheduleBatch,
        result: GenerationBatchResult,
    ):
        if result.copy_done is not None:
            result.copy_done.synchronize()
        if result.routed_experts_output is not None:
            result.routed_experts_output.finalize()
            result.routed_experts_output = None
        if result.indexer_topk_output is not None:
            result.indexer_topk_output.finalize()
            result.indexer_topk_output = None

        # [specv2-fixes live-accept-metrics] A late overlap result still carries requests that finished
        # or were retracted since it was scheduled; their tokens are dropped below, so they must not
        # count in the acceptance / throughput counters either (mask taken before anything changes).
        stale_mask = (
            [req.finished() or req.is_retracted for req in batch.reqs]
            if batch.is_spec_v2 and (self.enable_overlap or self.enable_overlap_mlx)
            else None
        )

        logits_output, next_token_ids, can_run_cuda_graph = (
            result.logits_output,
            result.next_token_ids,
            result.can_run_cuda_graph,
        )

        if batch.spec_algorithm.is_none() or batch.is_spec_v2:
            if batch.is_spec_v2:
                next_token_ids = self._resolve_spec_overlap_tokens(result, batch)
            elif isinstance(next_token_ids, list):
                pass  # MLX path: already a list[int], skip torch round-trip
            else:
                next_token_ids = next_token_ids.tolist()

            if batch.return_logprob:
                next_token_logprobs = logits_output.next_token_logprobs.tolist()
                if logits_output.next_token_top_logprobs_val:
                    logits_output.next_token_top_logprobs_val = [
                        v.tolist() for v in logits_output.next_token_top_logprobs_val
                    ]
                    logits_output.next_token_top_logprobs_idx = [
                        x.tolist() for x in logits_output.next_token_top_logprobs_idx
                    ]

                if logits_output.next_token_token_ids_logprobs_val:
                    logits_output.next_token_token_ids_logprobs_val = [
                        v.tolist()
                        for v in logits_output.next_token_token_ids_logprobs_val
                    ]
        # else: Spec V1 — output_ids, check_finished, grammar, and reasoning tokens
        # are already handled in the verify phase (eagle_info.py / ngram_info.py).

        num_live_reqs, num_live_drafts = batch.batch_size(), result.num_correct_drafts
        if stale_mask is not None and any(stale_mask):
            num_live_reqs = stale_mask.count(False)
            num_live_drafts = sum(
                n
                for n, stale in zip(result.num_correct_drafts_per_req_cpu, stale_mask)
                if not stale
            )
        self.num_generated_tokens += num_live_reqs
        if not batch.spec_algorithm.is_none():
            self.update_spec_metrics(num_live_reqs, num_live_drafts)
        if self.enable_metrics:
            self.metrics_collector.increment_decode_cuda_graph_pass(
                value=can_run_cuda_graph
            )

        self.token_to_kv_pool_allocator.free_group_begin()

        # Spec V1 handles output_ids, check_finished, grammar, and reasoning tokens
        # in the verify phase. Non-spec and V2 handle them here in post-processing.
        is_spec_v1 = not batch.spec_algorithm.is_none() and not batch.is_spec_v2

        for i, req in enumerate(batch.reqs):
            req: Req

            if (self.enable_overlap or self.enable_overlap_mlx) and (
                req.finished() or req.is_retracted
            ):
                # NOTE: This (req.finished() or req.is_retracted) should only happen when overlap scheduling is enabled.
                # And all the over-allocated tokens will be freed in `release_kv_cache`.
                continue

            if is_spec_v1:
                self._mamba_prefix_cache_update(req, batch, result, i)
                req.time_stats.set_last_decode_finish_time()
                self._handle_finished_req(req, i, logits_output)
                if req.return_hidden_states and logits_output.hidden_states is not None:
                    req.hidden_states.append(
                        logits_output.hidden_states[i].cpu().clone().tolist()
                    )
                if req.grammar is not None:
                    req.grammar.finished = req.finished()
                continue

            # Non-spec and V2: full post-processing
            next_token_id = next_token_ids[i]
            new_accepted_len = 1
            if batch.spec_algorithm.is_none():
                req.output_ids.append(next_token_id)
            else:
                req.output_ids.extend(next_token_id)
                new_accepted_len = len(next_token_id)

            self._maybe_update_reasoning_tokens(req, next_token_id)

            # Update Mamba last track seqlen
            self._mamba_prefix_cache_update(req, batch, result, i)
            req.time_stats.set_last_decode_finish_time()
            req.check_finished(new_accepted_len)

            self._handle_finished_req(req, i, logits_output)

            if req.return_logprob:
                # Spec v1 handles logprobs inside its own worker.
                # Normalize: non-spec has 1 token, spec v2 has multiple.
                if batch.is_spec_v2:
                    accepted_logprobs = next_token_logprobs[i]
                    accepted_ids = next_token_id
                    max_accept = len(accepted_logprobs)
                else:
                    accepted_logprobs = [next_token_logprobs[i]]
                    accepted_ids = [next_token_id]
                    max_accept = 1

                for j, tok_id in enumerate(accepted_ids):
                    req.output_token_logprobs_val.append(accepted_logprobs[j])
                    req.output_token_logprobs_idx.append(tok_id)
                    if req.top_logprobs_num > 0:
                        flat_idx = i * max_accept + j
                        req.output_top_logprobs_val.append(
                            logits_output.next_token_top_logprobs_val[flat_idx]
                        )
                        req.output_top_logprobs_idx.append(
                            logits_output.next_token_top_logprobs_idx[flat_idx]
                        )
                    if req.token_ids_logprob is not None:
                        flat_idx = i * max_accept + j
                        req.output_token_ids_logprobs_val.append(
                            logits_output.next_token_token_ids_logprobs_val[flat_idx]
                        )
                        req.output_token_ids_logprobs_idx.append(
                            logits_output.next_token_token_ids_logprobs_idx[flat_idx]
                        )

            if req.return_hidden_states and logits_output.hidden_states is not None:
                req.hidden_states.append(
                    logits_output.hidden_states[i].cpu().clone().tolist()
                )

            if req.grammar is not None:
                # FIXME: this try-except block is for handling unexpected xgrammar issue.
                try:
                    if batch.spec_algorithm.is_none():
                        # Normal decode: single token
                        req.grammar.accept_token(next_token_id)
                    elif batch.is_spec_v2:
                        # Speculative decode: next_token_id is a list of accepted tokens
                        for token_id in next_token_id:
                            req.grammar.accept_token(token_id)
                except ValueError as e:
                    # Grammar accept_token can raise ValueError if the token is not in the grammar.
                    # This can happen if the grammar is not set correctly or the token is invalid.
                    logger.error(
                        f"Grammar accept_token failed for req {req.rid} with token {next_token_id}: {e}"
                    )
                    self.abort_request(AbortReq(rid=req.rid))
                req.grammar.finished = req.finished()

        self.stream_output(batch.reqs, batch.return_logprob)
        self.token_to_kv_pool_allocator.free_group_end()

        self.forward_ct_decode = (self.forward_ct_decode + 1) % (1 << 30)
        if (
            stale_mask is not None
            and self.spec_num_forward_ct == 0
            and self.forward_ct_decode % self.server_args.decode_log_interval == 0
        ):
            # [specv2-fixes live-accept-metrics] no live verify step in this log interval (every
            # request of the late results was stale): the periodic log divides by that count, so
            # this step's report is skipped and the interval rolls over into the next one.
            return
        self.report_decode_stats(
            can_run_cuda_graph,
            running_batch=batch,
            num_correct_drafts=result.num_correct_drafts,
        )


FIX = Fix(
    name="live-accept-metrics",
    pr="#23456-followup",
    title="acceptance counters over live requests only",
    what=(
        "SchedulerOutputProcessorMixin.process_batch_result_decode replaced by the release's own body "
        "with the stale (finished/retracted) requests of a late overlap result left out of "
        "update_spec_metrics(...) and num_generated_tokens"
    ),
    why=(
        "avg_spec_accept_length, spec verify counts and generation throughput include requests whose "
        "tokens were discarded, so they disagree with the per-request meta_info of the same run"
    ),
    removal="delete per release once upstream counts live requests only (open upstream as of 0.5.23)",
    lines={
        "0.5.11": [
            Patch(
                module=MIXIN,
                qualname="SchedulerOutputProcessorMixin.process_batch_result_decode",
                fingerprint="5b2d5689c886b14d",
                body=(v0_5_11, "process_batch_result_decode"),
            )
        ],
        "0.5.12": [
            Patch(
                module=MIXIN,
                qualname="SchedulerOutputProcessorMixin.process_batch_result_decode",
                fingerprint="c7da8bd4d762ca43",
                body=(v0_5_12, "process_batch_result_decode"),
            )
        ],
        "0.5.13.post1": ReleaseNote(
            NOT_BACKPORTED,
            "bug present (batch_result_processor feeds metrics_reporter.update_spec_metrics with the whole "
            "batch); 0.5.13.post1 is report-only in this plugin version",
            check=(
                _BRP,
                "SchedulerBatchResultProcessor.process_batch_result_decode",
                "5ce509dbf9bec081",
            ),
        ),
        **{
            line: ReleaseNote(
                NOT_BACKPORTED,
                "bug present (process_batch_result_decode still feeds metrics_reporter.update_spec_metrics "
                "with batch.batch_size() and the whole batch's num_correct_drafts, and counts len(batch.reqs) "
                "generated tokens, stale requests included); report-only release in this plugin version",
                check=(
                    _BRP,
                    "SchedulerBatchResultProcessor.process_batch_result_decode",
                    fp,
                ),
            )
            for line, fp in (
                ("0.5.14", "5b11777872b8b330"),
                ("0.5.15", "c7223534eb68894c"),
                ("0.5.16", "3005c9221a9e3c6d"),
                ("0.5.17", "8cd056836d757676"),
            )
        },
    },
)
