"""Patch index: every fix this plugin knows (what, why, upstream PRs, which patch file on which release,
removal plan). The block below is generated (``sglang-specv2-fixes index``) and a CPU test fails when it
drifts from the fix records, the release table or the patch files.

BEGIN INDEX
skip-stale-overlap-updates  [#23456]  skip stale state updates in spec-v2 overlap
    What: SchedulerOutputProcessorMixin._resolve_spec_overlap_token_ids (0.5.11) replaced: retracted
        requests get no update, finished requests only roll back the bonus slot pre-claimed by
        prepare_for_decode, per-request spec statistics only for live requests
    Why: late overlap results extend the committed KV of finished/retracted requests past their
        allocation and add spurious acceptance statistics
    - applied: patches/skip-stale-overlap-updates/0.5.11.patch (0.5.11)
    - upstream (0.5.12 … 0.5.23)
    Removal: delete when 0.5.11 leaves the supported releases (upstream from 0.5.12)

tree-drafting  [#26866]  spec v2 tree drafting (EAGLE topk > 1) with page_size == 1
    What: ServerArgs._handle_speculative_decoding routes topk > 1 after
        auto_choose_speculative_params (an auto-chosen attention backend is re-chosen by upstream's
        default rule on the final topk; page_size == 1 dense models on flashinfer/triton keep spec
        v2, everything else spec v1 with a warning); EAGLEWorkerV2.verify uses the accepted width as
        bonus stride and compacts the accepted tree path (target KV via
        move_accepted_tokens_to_target_kvcache, predict, hidden states) to the front of each request
        block; move_accepted_tokens_to_target_kvcache launches bs * accept_index.shape[1];
        EagleDraftWorker.init_cuda_graphs skips the num_steps+1-wide draft-extend graph for trees
        (and captures flashinfer's for chains where flashinfer-draft-extend-graph's rule allows);
        the busy leak check runs for spec v2 tree drafting
    Why: default EAGLE/EAGLE3 params (auto-chosen topk 4) keep the overlap scheduler on and run the
        unfinished spec v2 tree path: out-of-bounds reads (device-side assert 'vectorized gather
        kernel index out of bounds' under concurrency) and wrong bonus tokens / hidden states / KV
    - applied: patches/tree-drafting/0.5.11.patch (0.5.11)
    - applied: patches/tree-drafting/0.5.12.patch (0.5.12 … 0.5.12.post1)
    - upstream (0.5.13 … 0.5.23)
    Switch: SGLANG_SPECV2_FIXES_TREE_DRAFT_GRAPH (unset: on) =0: a tree's draft extend runs eagerly
        (no tree-width draft-extend CUDA graph, on any backend)
    Switch: SGLANG_SPECV2_FIXES_FA3_TREES (unset: on) =0: no spec-v2 trees on fa3 (an explicit fa3
        tree runs spec v1, the default invocation gets flashinfer)
    Removal: delete when 0.5.11 and 0.5.12.x leave the supported releases (upstream re-landed it in
        0.5.13.post1, where spec v1 is gone)

live-accept-metrics  [beyond upstream]  acceptance counters over live requests only
    What: process_batch_result_decode: the stale (finished/retracted) requests of a late overlap
        result are left out of the acceptance counters (update_spec_metrics and, where the release
        has them, the block-accept / cap counters) and of num_generated_tokens
    Why: avg_spec_accept_length, spec verify counts and generation throughput include requests whose
        tokens were discarded, so they disagree with the per-request meta_info of the same run
    - applied: patches/live-accept-metrics/0.5.11.patch (0.5.11)
    - applied: patches/live-accept-metrics/0.5.12.patch (0.5.12 … 0.5.12.post1)
    - applied: patches/live-accept-metrics/0.5.13.patch (0.5.13 … 0.5.13.post1)
    - applied: patches/live-accept-metrics/0.5.14.patch (0.5.14)
    - applied: patches/live-accept-metrics/0.5.15.patch (0.5.15 … 0.5.15.post1)
    - applied: patches/live-accept-metrics/0.5.16.patch (0.5.16)
    - applied: patches/live-accept-metrics/0.5.17.patch (0.5.17 … 0.5.18)
    - applied: patches/live-accept-metrics/0.5.19.patch (0.5.19)
    - applied: patches/live-accept-metrics/0.5.20.patch (0.5.20 … 0.5.21)
    - applied: patches/live-accept-metrics/0.5.22.patch (0.5.22 … 0.5.23)
    Removal: delete per release once upstream counts live requests only (open upstream as of 0.5.23)

routed-experts-draft-guard  [#26980]  routed experts with EAGLE drafts: the target's capturer is kept, tree rows are
    compacted
    What: ModelRunner.init_routed_experts_capturer returns early for the draft worker (#26980;
        0.5.11 … 0.5.14); from 0.5.13 on, where tree drafting is upstream, the spec-v2 tree verify
        also compacts the routed-experts / indexer top-k capture rows with the accepted path (on
        0.5.11 / 0.5.12.x tree-drafting's verify does that)
    Why: with --enable-return-routed-experts and an EAGLE/EAGLE3 draft the scheduler dies at startup
        (the draft re-creates the process-wide capturer from its dense config); with tree drafting
        the routed experts returned for accepted tokens are the rows of other tree nodes
    - applied: patches/routed-experts-draft-guard/0.5.11.patch (0.5.11 … 0.5.12.post1)
    - applied: patches/routed-experts-draft-guard/0.5.13.patch (0.5.13 … 0.5.13.post1)
    - applied: patches/routed-experts-draft-guard/0.5.14.patch (0.5.14)
    - applied: patches/routed-experts-draft-guard/0.5.15.patch (0.5.15 … 0.5.15.post1)
    - applied: patches/routed-experts-draft-guard/0.5.16.patch (0.5.16)
    - applied: patches/routed-experts-draft-guard/0.5.17.patch (0.5.17)
    - applied: patches/routed-experts-draft-guard/0.5.18.patch (0.5.18 … 0.5.19)
    - applied: patches/routed-experts-draft-guard/0.5.20.patch (0.5.20)
    - applied: patches/routed-experts-draft-guard/0.5.21.patch (0.5.21)
    - applied: patches/routed-experts-draft-guard/0.5.22.patch (0.5.22 … 0.5.23)
    Removal: the guard: per release once it ships #26980 (upstream from 0.5.15); the compaction:
        once upstream compacts capture rows in _finalize_accept_tree_path (open through 0.5.23)

draft-extend-kv-range  [#26651, #27545]  triton spec-v2 draft-extend CUDA graph: KV range over the prefix only
    What: TritonAttnBackend.init_forward_metadata_capture_cuda_graph /
        init_forward_metadata_replay_cuda_graph: for DRAFT_EXTEND_V2 kv_indptr / kv_indices cover
        seq_lens - extend_seq_lens (the prefix), not the seq_lens already bumped by the draft
        tokens, and qo_indptr / max_extend_len stride num_draft_tokens per request (#27545: the
        width spec v2 extends, > steps + 1 for trees); spec v1 DRAFT_EXTEND unchanged
    Why: the triton draft-extend CUDA graph counted the just-written draft KV twice and let each
        draft query see the later draft tokens: lower acceptance length on the triton backend (text
        unaffected)
    - applied: patches/draft-extend-kv-range/0.5.11.patch (0.5.11 … 0.5.12.post1)
    - upstream (0.5.13 … 0.5.23)
    Removal: delete when 0.5.11 and 0.5.12.x leave the supported releases (upstream from 0.5.13)

chunked-prefill-draft-chain  [#26800]  spec-v2 EAGLE draft prefill uses the next prompt token at a chunk boundary
    What: EagleDraftWorker._draft_extend_for_prefill: the rotated-in tail token of a request whose
        fill ends before its prompt (a non-final chunked-prefill chunk) is
        origin_input_ids[fill_len] instead of the target's sampled token
    Why: the draft KV at every chunked-prefill boundary was built from the target's prediction
        instead of the prompt token: lower acceptance for prompts longer than --chunked-prefill-size
        (text unaffected)
    - applied: patches/chunked-prefill-draft-chain/0.5.11.patch (0.5.11)
    - applied: patches/chunked-prefill-draft-chain/0.5.12.patch (0.5.12 … 0.5.12.post1)
    - upstream (0.5.13 … 0.5.23)
    Removal: delete when 0.5.11 and 0.5.12.x leave the supported releases (upstream from 0.5.13)

bonus-slot-accounting  [#22651]  spec v2 bonus-slot accounting for streaming sessions
    What: nothing patched: upstream in all supported releases
    Why: a finished turn's cached KV was one token short, breaking streaming-session KV inheritance
    - upstream (0.5.11 … 0.5.14)
    - not-applicable (0.5.15 … 0.5.23)
    Removal: informational entry; keep while releases without it could be supported

accept-length-split  [#23962]  accept_length split into drafts-only and drafts+bonus counters
    What: nothing patched: upstream in all supported releases
    Why: one field meant both 'accepted drafts' and 'accepted drafts + bonus', inviting off-by-one
        bugs
    - upstream (0.5.11 … 0.5.23)
    Removal: informational entry

seq-lens-helper  [#25818]  consolidate seq_lens_cpu/seq_lens_sum maintenance into one helper
    What: nothing patched: the code shape it fixes does not exist in the supported releases
    Why: stale seq_lens_cpu/seq_lens_sum after an overlap snapshot/restore
    - not-applicable (0.5.11 … 0.5.12.post1)
    - upstream (0.5.13 … 0.5.23)
    Removal: informational entry

grammar-result-order  [#28986, #28039]  spec + grammar + overlap: process the pending result before the next batch is
    built
    What: Scheduler.event_loop_overlap: when the release's is_disable_overlap_for_batch says the
        pending speculative grammar decode batch syncs on its result, that result is processed
        before get_next_batch_to_run (and not popped again after the launch), and so is a prefill's
        result where the release's rule says the decode step its requests join syncs; the same in
        the PD decode loop (event_loop_overlap_disagg_decode), which up to 0.5.13 also gets 0.5.14's
        missing grammar sync (#28039)
    Why: requests finished by the pending result (grammar EOS, stop, length) are launched in the
        next verify after their request slot and KV were released (hybrid Mamba/GDN targets crash;
        dense targets compute and write KV for freed slots); in PD decode up to 0.5.13 the verify's
        vocab mask comes from a grammar that has not accepted the previous step (grammar-illegal
        tokens, 'Tokens not accepted' aborts, a DP-attention hang)
    - applied: patches/grammar-result-order/0.5.11.patch (0.5.11 … 0.5.12.post1)
    - applied: patches/grammar-result-order/0.5.13.patch (0.5.13 … 0.5.13.post1)
    - applied: patches/grammar-result-order/0.5.14.patch (0.5.14)
    - applied: patches/grammar-result-order/0.5.15.patch (0.5.15 … 0.5.15.post1)
    - applied: patches/grammar-result-order/0.5.16.patch (0.5.16 … 0.5.17)
    - applied: patches/grammar-result-order/0.5.18.patch (0.5.18)
    - applied: patches/grammar-result-order/0.5.19.patch (0.5.19)
    - applied: patches/grammar-result-order/0.5.20.patch (0.5.20)
    - applied: patches/grammar-result-order/0.5.21.patch (0.5.21)
    - applied: patches/grammar-result-order/0.5.22.patch (0.5.22 … 0.5.23)
    Removal: delete per release once upstream #28986 (open as of 0.5.23) or an equivalent reordering
        lands in both loops (the PD loop's sync alone, #28039, is upstream from 0.5.14)

draft-decode-positions  [#25015]  EAGLE draft decode steps run at the position of the slot they write
    What: EagleDraftWorker.draft_forward (spec v2) and EAGLEWorker.draft_forward (spec v1) advance
        the draft positions after each draft decode forward instead of before it; the draft decode
        CUDA graph restores the positions buffer after capture
    Why: draft decode step i ran at RoPE position seq_lens + i + 1 while writing the KV slot of
        seq_lens + i: every draft step saw the prefix one position off, lowering acceptance (text
        unaffected)
    - applied: patches/draft-decode-positions/0.5.11.patch (0.5.11)
    - upstream (0.5.12 … 0.5.23)
    Removal: delete when 0.5.11 leaves the supported releases (upstream from 0.5.12)

grammar-run-end  [#28682]  spec v2 + grammar: an accepted run ends at the token that terminates the grammar
    What: Scheduler.process_batch_result: before a spec-v2 decode result with grammar requests
        reaches the decode step, each live request's accepted run is walked through its grammar
        (accept_token, then rollback, as the release's verify mask builder does) and
        result.accept_lens is cut at the token that terminates it
    Why: the verify's vocab mask allows every token after the grammar's terminal token, so tokens
        past the grammar's end are accepted, committed to KV and appended to output_ids (shown to
        the client where no stop token cuts them)
    - applied: patches/grammar-run-end/0.5.11.patch (0.5.11)
    - applied: patches/grammar-run-end/0.5.12.patch (0.5.12 … 0.5.12.post1)
    - applied: patches/grammar-run-end/0.5.13.patch (0.5.13 … 0.5.13.post1)
    - upstream (0.5.14 … 0.5.23)
    Removal: delete when 0.5.13.x leaves the supported releases (upstream from 0.5.14)

multi-token-finish  [#23802, #25980, #28802, #31738, #33758]  finish checks see the whole accepted run; the first finish
    in the run wins
    What: Req.tail_str / Req._check_str_based_finish (0.5.11 … 0.5.13): the stop-string window
        covers the whole accepted run and a matched stop string or regex sets finished_len at the
        stop; Req._check_vocab_boundary_finish: >= vocab_size, no upper bound without a vocab size;
        Req.check_finished (0.5.11 / 0.5.12.x) / Req.update_finish_state (0.5.13 … 0.5.23): every
        check's finish position in the run is found without committing and the earliest wins (a tie:
        the release's own one-token order; max_new_tokens a finish at the cap, so a stop past it is
        a length finish there)
    Why: with speculative decoding a stop string early in an accepted run is missed (the request
        runs on) or leaks the tokens accepted after it, a run that holds EOS / a stop and crosses
        max_new_tokens returns the tokens after the stop with finish_reason length, and on every
        release the check first in the order wins wherever in the run it matches (a stop string
        after a stop token ends the run at the string, emitting the tokens after the stop token),
        where one-token decoding stops at the first
    - applied: patches/multi-token-finish/0.5.11.patch (0.5.11 … 0.5.12.post1)
    - applied: patches/multi-token-finish/0.5.13.patch (0.5.13 … 0.5.13.post1)
    - applied: patches/multi-token-finish/0.5.14.patch (0.5.14 … 0.5.16)
    - applied: patches/multi-token-finish/0.5.17.patch (0.5.17)
    - applied: patches/multi-token-finish/0.5.18.patch (0.5.18 … 0.5.23)
    Removal: A is upstream from 0.5.14, B from 0.5.18; beyond upstream: the first finish in the run
        wins — open upstream as of 0.5.23, so every release keeps its patch file until upstream
        finishes a run at its first finish; then the 0.5.11 / 0.5.13 patch files go when 0.5.13
        leaves the supported releases, the 0.5.14 / 0.5.17 ones when 0.5.17 does

radix-overshoot  [#35694]  speculative overshoot past the stop kept out of the radix cache
    What: Req.pop_committed_kv_cache (0.5.11 … 0.5.15.post1), Req.effective_kv_committed_len (0.5.16
        … 0.5.20), Req.owned_kv_len (0.5.21): a finished speculative request's cached KV length is
        the prompt plus output_ids_through_stop; the accepted tokens past the stop are freed with
        the over-allocated range (hybrid mamba requests and non-speculative decoding unchanged)
    Why: a verify step commits the whole accepted run, so the radix tree keyed and kept the tokens
        past the stop that no follow-up turn reproduces: KV held by an unreachable suffix (hybrid
        models: the follow-up misses the decode region)
    - applied: patches/radix-overshoot/0.5.11.patch (0.5.11 … 0.5.15.post1)
    - applied: patches/radix-overshoot/0.5.16.patch (0.5.16)
    - applied: patches/radix-overshoot/0.5.17.patch (0.5.17 … 0.5.18)
    - applied: patches/radix-overshoot/0.5.19.patch (0.5.19 … 0.5.20)
    - applied: patches/radix-overshoot/0.5.21.patch (0.5.21)
    - upstream (0.5.22 … 0.5.23)
    Removal: delete when 0.5.21 leaves the supported releases (an equivalent change is upstream from
        0.5.22)

reasoning-tokens-through-stop  [beyond upstream (#39826, #37450)]  usage.reasoning_tokens counts only the tokens sent
    What: SchedulerOutputProcessorMixin.stream_output_generation (0.5.11 / 0.5.12.x),
        _GenerationStreamAccumulator.accept (0.5.13+): the reasoning token count sent with a request
        is min(req.reasoning_tokens, len(output_ids_through_stop)), the reasoning tokens among the
        tokens sent
    Why: a verify step adds its whole accepted run to the reasoning count before the stop / length
        trim, so usage.reasoning_tokens could exceed usage.completion_tokens
    - applied: patches/reasoning-tokens-through-stop/0.5.11.patch (0.5.11)
    - applied: patches/reasoning-tokens-through-stop/0.5.12.patch (0.5.12 … 0.5.12.post1)
    - applied: patches/reasoning-tokens-through-stop/0.5.13.patch (0.5.13 … 0.5.13.post1)
    - applied: patches/reasoning-tokens-through-stop/0.5.14.patch (0.5.14)
    - applied: patches/reasoning-tokens-through-stop/0.5.15.patch (0.5.15 … 0.5.15.post1)
    - applied: patches/reasoning-tokens-through-stop/0.5.16.patch (0.5.16)
    - applied: patches/reasoning-tokens-through-stop/0.5.17.patch (0.5.17 … 0.5.18)
    - applied: patches/reasoning-tokens-through-stop/0.5.19.patch (0.5.19 … 0.5.20)
    - applied: patches/reasoning-tokens-through-stop/0.5.21.patch (0.5.21)
    - applied: patches/reasoning-tokens-through-stop/0.5.22.patch (0.5.22)
    - applied: patches/reasoning-tokens-through-stop/0.5.23.patch (0.5.23)
    Removal: delete per release once upstream counts reasoning tokens through the stop (#39826 is
        closed, but no release up to 0.5.23 has a fix)

multi-layer-grammar-mask  [#31978]  multi-layer EAGLE v2 verify: the grammar's vocab mask; eager batches planned
    (0.5.13+)
    What: MultiLayerEagleWorkerV2.verify: for a batch with grammar the draft tree is copied to the
        CPU before the target forward and the release's generate_token_bitmask mask is passed to the
        sampler, as the release's EAGLEWorkerV2.verify does; from 0.5.13 the verify no longer marks
        a batch outside the CUDA graphs as planned, so forward_extend plans it
    Why: with --enable-multi-layer-eagle (MiMo-V2, Step-3.5) the verify ignores the grammar: draft
        and bonus tokens the grammar forbids are accepted, the grammar rejects them and every
        constrained request is aborted; 0.5.13 - 0.5.15.post1: a verify outside the CUDA graphs runs
        on the previous forward's attention metadata (MiMo-V2: the scheduler stops)
    - applied: patches/multi-layer-grammar-mask/0.5.11.patch (0.5.11)
    - applied: patches/multi-layer-grammar-mask/0.5.12.patch (0.5.12 … 0.5.12.post1)
    - applied: patches/multi-layer-grammar-mask/0.5.13.patch (0.5.13 … 0.5.13.post1)
    - applied: patches/multi-layer-grammar-mask/0.5.14.patch (0.5.14 … 0.5.15.post1)
    - upstream (0.5.16 … 0.5.23)
    Removal: delete when 0.5.15.x leaves the supported releases (upstream from 0.5.16:
        run_eagle_verify)

multi-layer-draft  [#33892]  multi-layer EAGLE draft: tree mask sized, eager MTP runners planned, idle rounds skipped
    What: MultiLayerEagleDraftWorker.draft: build_tree_kernel_efficient gets the sum the release's
        EagleWorkerV2.draft uses when batch.seq_lens_sum is None (0 with a preallocated mask, else
        batch size x max_context_len); _draft_extend_for_decode outside the CUDA graph plans runner
        i's attention backend before MTP step i (i >= 1; 0.5.16 / 0.5.17 plan every step), never on
        an idle round (DP attention), and marks each step's plan replan_equivalent so that the
        runner's forward plans again after the DP-attention padding (0.5.18 … 0.5.23: this mark
        only, the rest is upstream)
    Why: batch.seq_lens_sum is None after the decode preparation (lazy since 0.5.13): with --enable-
        multi-layer-eagle on a backend without a preallocated verify mask the first decode stops the
        scheduler with a TypeError; an eager draft extend runs MTP steps 2.. on attention metadata
        of an earlier forward (MiMo-V2: the scheduler stops); with DP attention, a rank without
        requests plans an empty batch in the eager draft extend and its scheduler stops (0.5.16 /
        0.5.17, #33892), and on a rank with fewer tokens than the largest the attention writes the
        padded batch's K/V to the unpadded plan's locations (fa3: 'Size mismatch' in set_kv_buffer,
        the scheduler stops; every release from 0.5.13, open upstream)
    - not-applicable (0.5.11 … 0.5.12.post1)
    - applied: patches/multi-layer-draft/0.5.13.patch (0.5.13 … 0.5.13.post1)
    - applied: patches/multi-layer-draft/0.5.14.patch (0.5.14)
    - applied: patches/multi-layer-draft/0.5.15.patch (0.5.15 … 0.5.15.post1)
    - applied: patches/multi-layer-draft/0.5.16.patch (0.5.16)
    - applied: patches/multi-layer-draft/0.5.17.patch (0.5.17)
    - applied: patches/multi-layer-draft/0.5.18.patch (0.5.18)
    - applied: patches/multi-layer-draft/0.5.19.patch (0.5.19)
    - applied: patches/multi-layer-draft/0.5.20.patch (0.5.20 … 0.5.21)
    - applied: patches/multi-layer-draft/0.5.22.patch (0.5.22)
    - applied: patches/multi-layer-draft/0.5.23.patch (0.5.23)
    Removal: the 0.5.18 … 0.5.23 patches (the DP-padding re-plan alone) when upstream re-plans the
        eager draft extend after the padding; the rest when 0.5.17 leaves the supported releases
        (#33892 upstream from 0.5.18)

tbo-verify-seq-lens  [#24319]  two-batch overlap + spec v2: the verify input carries seq_lens_cpu for the split
    What: EagleVerifyInputV2Mixin.prepare_for_v2_verify copies batch.seq_lens_cpu and
        batch.seq_lens_sum to the verify input (the draft built it with None)
    Why: --enable-two-batch-overlap with EAGLE/MTP on spec v2: split_spec_info slices the tree mask
        by spec_info.seq_lens_cpu, None there: AttributeError at the first verify
    - applied: patches/tbo-verify-seq-lens/0.5.11.patch (0.5.11)
    - upstream (0.5.12 … 0.5.23)
    Removal: delete when 0.5.11 leaves the supported releases (upstream from 0.5.12: #24319)

mamba-track-freed-rows  [#29449]  hybrid mamba + spec v2: a freed request's verify track row is skipped
    What: the spec-v2 verify's mamba track indices (EagleVerifyInputV2Mixin.prepare_for_v2_verify on
        0.5.11 / 0.5.12.x, set_mamba_track_indices_from_reqs from 0.5.13) are -1 for requests whose
        mamba_next_track_idx is None (freed or retracted), which the post-verify track scatter skips
    Why: hybrid Mamba/GDN targets with MTP/EAGLE and --mamba-scheduler-strategy extra_buffer: a
        freed request in a verify stops the scheduler with a TypeError (up to 0.5.15.post1), or its
        row points at a track slot another request may own and the commit overwrites that request's
        mamba state (0.5.16 - 0.5.21)
    - applied: patches/mamba-track-freed-rows/0.5.11.patch (0.5.11)
    - applied: patches/mamba-track-freed-rows/0.5.12.patch (0.5.12 … 0.5.12.post1)
    - applied: patches/mamba-track-freed-rows/0.5.13.patch (0.5.13 … 0.5.15.post1)
    - applied: patches/mamba-track-freed-rows/0.5.16.patch (0.5.16)
    - applied: patches/mamba-track-freed-rows/0.5.17.patch (0.5.17)
    - applied: patches/mamba-track-freed-rows/0.5.18.patch (0.5.18)
    - applied: patches/mamba-track-freed-rows/0.5.19.patch (0.5.19 … 0.5.21)
    - upstream (0.5.22 … 0.5.23)
    Removal: per release once it marks freed rows itself (upstream from 0.5.22, #29449's approach)

inkling-draft-extend-track-guard  [beyond upstream (#29449)]  Inkling MTP draft extend: no write at a freed request's -1
    track slot
    What: ShortConvolution._update_sconv_cache_for_draft_extend tracks only rows whose mamba track
        index is >= 0 (crossed is false for a -1 row), from 0.5.16
    Why: Inkling + MTP with the mamba extra_buffer: a request freed before the verify has track
        index -1 (0.5.22 on, or mamba-track-freed-rows), and the draft extend's kernel writes its
        window before the cache
    - not-applicable (0.5.11 … 0.5.15.post1)
    - applied: patches/inkling-draft-extend-track-guard/0.5.16.patch (0.5.16)
    - applied: patches/inkling-draft-extend-track-guard/0.5.17.patch (0.5.17)
    - applied: patches/inkling-draft-extend-track-guard/0.5.18.patch (0.5.18 … 0.5.19)
    - applied: patches/inkling-draft-extend-track-guard/0.5.20.patch (0.5.20 … 0.5.21)
    - applied: patches/inkling-draft-extend-track-guard/0.5.22.patch (0.5.22 … 0.5.23)
    Removal: per release once upstream guards the draft extend's track slot (open as of 0.5.23)

triton-verify-mask-size  [#32920]  hybrid GDN target on triton: the verify graph's mask buffer holds the draft's mask
    What: TritonAttnBackend.init_cuda_graph_state sizes cuda_graph_custom_mask max_num_tokens *
        (max_context_len + num_draft_tokens), what the tree kernel writes per request (0.5.17's
        VerifyMask size), instead of max_num_tokens * max_context_len
    Why: hybrid linear-attention targets (Qwen3-Next / GDN) with EAGLE/MTP spec v2 on --attention-
        backend triton, 0.5.14 - 0.5.16: the draft sizes the tree mask for bs * max_context_len
        (seq_lens_sum lazy, no preallocated mask handed out), and a verify at the largest captured
        CUDA-graph batch size stops the scheduler (RuntimeError: expanded size ... must match, in
        TritonAttnBackend._update_target_verify_buffers)
    - not-applicable (0.5.11 … 0.5.13.post1)
    - applied: patches/triton-verify-mask-size/0.5.14.patch (0.5.14)
    - applied: patches/triton-verify-mask-size/0.5.15.patch (0.5.15 … 0.5.15.post1)
    - applied: patches/triton-verify-mask-size/0.5.16.patch (0.5.16)
    - upstream (0.5.17 … 0.5.23)
    Removal: per release once it sizes the buffer itself (upstream from 0.5.17, #32920)

overlap-war-barrier  [#26380, #26646, #31687]  overlap scheduler: the schedule stream's writes wait for the forward just
    launched
    What: event_loop_overlap, event_loop_overlap_disagg_prefill and event_loop_overlap_disagg_decode
        issue schedule_stream.wait_stream(forward_stream) right after run_batch launches a batch,
        where 0.5.16 has it (#31687): on 0.5.11 / 0.5.12.x through war_barrier (an overlap loop on
        CUDA; by default for hybrid-SWA pools only, SGLANG_SPECV2_FIXES_WAR_BARRIER=all: every
        overlap scheduler, which costs a chain's throughput), on 0.5.13 - 0.5.15.post1 the release's
        own barrier moved there from the loop top
    Why: with the overlap scheduler, processing the previous batch's result (radix insert, frees)
        and building the next batch write req_to_token rows and the SWA index mapping on the
        schedule stream while the forward just launched may still read them: a write-after-read race
        (flaky accuracy, wrong KV, illegal memory access on hybrid-SWA targets such as gpt-oss +
        EAGLE3, DSv4); a barrier at the loop top (0.5.13 - 0.5.15.post1) leaves the result
        processing after the launch unordered
    - applied: patches/overlap-war-barrier/0.5.11.patch (0.5.11 … 0.5.12.post1)
    - applied: patches/overlap-war-barrier/0.5.13.patch (0.5.13 … 0.5.13.post1)
    - applied: patches/overlap-war-barrier/0.5.14.patch (0.5.14)
    - applied: patches/overlap-war-barrier/0.5.15.patch (0.5.15 … 0.5.15.post1)
    - upstream (0.5.16 … 0.5.23)
    Switch: SGLANG_SPECV2_FIXES_WAR_BARRIER (unset: hybrid-SWA pools only) =all: the barrier on
        every overlap scheduler, as upstream 0.5.13
    Removal: delete when 0.5.15.post1 and the releases before it leave the supported releases
        (upstream from 0.5.16)

fa3-draft-extend-graph  [#40762, #36324]  the spec-v2 draft-extend CUDA graph on fa3 (trees opt-in)
    What: EagleDraftWorker._capture_cuda_graphs (init_cuda_graphs before 0.5.14) also lists
        FlashAttentionBackend among the backends whose draft-extend graph it captures (0.5.23's
        line), for chains and trees on fa3 whose draft-extend metadata lives in the graph (trees on
        0.5.11 / 0.5.12.x through tree-drafting's tree-width rule); chains by default, trees with
        SGLANG_SPECV2_FIXES_FA3_DRAFT_GRAPH=1 (no clear gain for a tree at real size; =0: neither)
    Why: fa3 implements the spec-v2 draft-extend graph metadata but is missing from the capture list
        before 0.5.23: Hopper's default setups (a chain, the default invocation's tree) run their
        draft extend eagerly every decode step
    - applied: patches/fa3-draft-extend-graph/0.5.11.patch (0.5.11)
    - applied: patches/fa3-draft-extend-graph/0.5.12.patch (0.5.12 … 0.5.12.post1)
    - applied: patches/fa3-draft-extend-graph/0.5.13.patch (0.5.13 … 0.5.13.post1)
    - applied: patches/fa3-draft-extend-graph/0.5.14.patch (0.5.14)
    - applied: patches/fa3-draft-extend-graph/0.5.15.patch (0.5.15 … 0.5.15.post1)
    - applied: patches/fa3-draft-extend-graph/0.5.16.patch (0.5.16)
    - applied: patches/fa3-draft-extend-graph/0.5.17.patch (0.5.17)
    - applied: patches/fa3-draft-extend-graph/0.5.18.patch (0.5.18)
    - applied: patches/fa3-draft-extend-graph/0.5.19.patch (0.5.19)
    - applied: patches/fa3-draft-extend-graph/0.5.20.patch (0.5.20 … 0.5.21)
    - applied: patches/fa3-draft-extend-graph/0.5.22.patch (0.5.22)
    - upstream (0.5.23)
    Switch: SGLANG_SPECV2_FIXES_FA3_DRAFT_GRAPH (unset: chains on, trees off) =1: trees (topk > 1)
        capture it too; =0: chains run their draft extend eagerly
    Removal: delete when 0.5.22 leaves the supported releases (upstream from 0.5.23)

flashinfer-draft-extend-graph  [#28782]  flashinfer spec-v2 draft-extend CUDA graph with a sync-free replay plan
    What: FlashInferAttnBackend's graph metadata (0.5.11 / 0.5.12.x:
        init_forward_metadata_capture_cuda_graph / init_forward_metadata_replay_cuda_graph;
        0.5.13.x: _prepare_cuda_graph_metadata / init_forward_metadata_out_graph) gets a
        DRAFT_EXTEND_V2 branch (causal paged prefill, prefix_lens=None, no ragged part) with a
        constant num_draft_tokens query layout per request; the draft-extend graph is captured for
        chains and trees by tree-drafting's init_cuda_graphs (0.5.11 / 0.5.12.x) and by 0.5.13.x's
        init_cuda_graphs (flashinfer_graph_backends).
        FlashInferIndicesUpdaterPrefill.call_begin_forward plans the graph's replays from host-known
        indptrs (upstream 0.5.14's fast_prefill_plan layout, through flashinfer's own plan) for
        chains and trees; SGLANG_SPECV2_FIXES_FLASHINFER_FAST_PLAN=0 keeps flashinfer's own plan
    Why: flashinfer's spec-v2 draft extend runs eagerly in these releases (one launch per layer and
        a paged_kernel_lens.sum().item() sync per step); upstream 0.5.14 captures it (#28782: ~10%
        median latency); the replay's flashinfer plan copies its indptrs to the host, a wait on the
        whole GPU queue (0.5.14: fast_prefill_plan)
    - applied: patches/flashinfer-draft-extend-graph/0.5.11.patch (0.5.11 … 0.5.12.post1)
    - applied: patches/flashinfer-draft-extend-graph/0.5.13.patch (0.5.13 … 0.5.13.post1)
    - upstream (0.5.14 … 0.5.23)
    Switch: SGLANG_SPECV2_FIXES_FLASHINFER_FAST_PLAN (unset: chains on, trees off) =0: the graph's
        replays use flashinfer's own plan (its device-to-host copies); =1: trees too
    Removal: delete when 0.5.13.post1 leaves the supported releases (upstream from 0.5.14)

verify-handoff  [#25879, #28633]  decode preparation without the host wait on the verify (triton and fa3, CUDA graphs)
    What: ScheduleBatch.maybe_wait_verify_done makes the schedule stream wait for verify_done
        instead of the host, and filter_batch / merge_batch /
        EagleDraftInputV2Mixin.prepare_for_decode drop the seq_lens D2H (seq_lens_cpu None,
        seq_lens_sum the allocated-length bound, pinned non-blocking H2D), the draft extend takes
        its prefix lengths from the device seq_lens (ForwardBatch.init_new accepts them), and
        EAGLEWorkerV2.forward_batch_generation restores the exact host mirror where a CUDA graph
        cannot run; for triton with CUDA graphs, chains and trees (a tree wider than steps + 1 only
        with its tree-width draft-extend graph), and for fa3 (its replay and eager draft-extend
        metadata bound the KV length by the page tables' width, as 0.5.17, and the target-verify and
        draft-extend graph replays pass no stale mirror; SGLANG_SPECV2_FIXES_VERIFY_HANDOFF_FA3=0
        leaves fa3 out); on 0.5.13.x decide_needs_cpu_seq_lens no longer forces the host mirror
        under piecewise CUDA graphs for a triton EAGLE server (as 0.5.14), so the scheduler copies
        no seq_lens to the host and waits for no verify
    Why: 0.5.11 / 0.5.12.x block the scheduler thread until the previous verify ends
        (verify_done.synchronize, seq_lens.cpu()) to build the draft extend's positions on the host,
        so the next batch is prepared only during the draft extend and the GPU idles for the host
        every decode step (0.5.13 keeps the host a step ahead, except under piecewise CUDA graphs,
        the default: 0.5.13.x still publish the host mirror there, and the host waits for each
        verify's publish event)
    - applied: patches/verify-handoff/0.5.11.patch (0.5.11)
    - applied: patches/verify-handoff/0.5.12.patch (0.5.12 … 0.5.12.post1)
    - applied: patches/verify-handoff/0.5.13.patch (0.5.13 … 0.5.13.post1)
    - upstream (0.5.14 … 0.5.23)
    Switch: SGLANG_SPECV2_FIXES_VERIFY_HANDOFF_FA3 (unset: on) =0: fa3 servers keep the release's
        host wait
    Removal: delete when 0.5.13.post1 leaves the supported releases (upstream from 0.5.14)

draft-extend-read-done-order  [#37988, #37936]  the draft-extend graph's WAR read-done event after its replay
    What: EAGLEDraftExtendCudaGraphRunner.execute records the read-done event the overlap
        scheduler's WAR barrier waits on after _replay_graph instead of before it (0.5.22's
        POST_REPLAY, for every backend); on by default: the schedule stream's next writes wait for
        the graph's end, which leaves TPOT unchanged at real size
    Why: the event is published once the out-of-graph metadata is built, before the replay: on a
        backend that reads req_to_token / the SWA mapping inside the graph, the next batch's writes
        race those reads
    - not-applicable (0.5.11 … 0.5.13.post1)
    - applied: patches/draft-extend-read-done-order/0.5.14.patch (0.5.14)
    - applied: patches/draft-extend-read-done-order/0.5.15.patch (0.5.15 … 0.5.15.post1)
    - applied: patches/draft-extend-read-done-order/0.5.16.patch (0.5.16)
    - applied: patches/draft-extend-read-done-order/0.5.17.patch (0.5.17)
    - applied: patches/draft-extend-read-done-order/0.5.18.patch (0.5.18 … 0.5.19)
    - applied: patches/draft-extend-read-done-order/0.5.20.patch (0.5.20)
    - applied: patches/draft-extend-read-done-order/0.5.21.patch (0.5.21)
    - upstream (0.5.22 … 0.5.23)
    Removal: delete when 0.5.21 leaves the supported releases (upstream from 0.5.22)

draft-graph-eager-registry  [beyond upstream]  the draft CUDA graph's eager input buffers are kept when the registry
    grows
    What: ModelRunner._ensure_eager_registry keeps the registry it replaces by a larger one alive
        for the runner's lifetime (0.5.13.x)
    Why: the multi-step EAGLE draft CUDA graph bakes the draft runner's eager decode registry; a
        draft decode above the largest captured bs rebuilds it and frees those buffers: later draft
        replays write freed memory, and after /flush_cache the next one dies with CUDA illegal
        memory access
    - not-applicable (0.5.11 … 0.5.12.post1)
    - applied: patches/draft-graph-eager-registry/0.5.13.patch (0.5.13 … 0.5.13.post1)
    - upstream (0.5.14 … 0.5.23)
    Removal: delete when 0.5.13.post1 leaves the supported releases (upstream from 0.5.14 by the
        EagerRunner redesign: one fixed-size registry, never replaced)

min-tokens-per-position  [beyond upstream (#33643, #22049)]  min_tokens counted per draft position, not per verify step
    What: the spec-v2 decode feed (EagleDraftInputV2Mixin.prepare_for_decode up to 0.5.14,
        eagle_utils.eagle_prepare_for_decode from 0.5.15) hands the verify each request's last
        masked position (min_new_tokens + prompt length - 1) and holds the per-step counter at
        min_new_tokens; SamplingBatchInfo.copy_for_forward carries that gate to the forward; the
        verify's sampling (EagleVerifyInputV2Mixin.sample / eagle_sample) masks the stop tokens at
        the draft positions whose position id is below it
    Why: spec v2 counts min_tokens in verify steps: EOS and the stop tokens stay masked for about
        (mean accept length) x min_tokens tokens, every draft position of a step alike, so the
        output is longer than asked and differs from the target served without speculation
    - applied: patches/min-tokens-per-position/0.5.11.patch (0.5.11)
    - applied: patches/min-tokens-per-position/0.5.12.patch (0.5.12 … 0.5.12.post1)
    - applied: patches/min-tokens-per-position/0.5.13.patch (0.5.13 … 0.5.13.post1)
    - applied: patches/min-tokens-per-position/0.5.14.patch (0.5.14)
    - applied: patches/min-tokens-per-position/0.5.15.patch (0.5.15 … 0.5.15.post1)
    - applied: patches/min-tokens-per-position/0.5.16.patch (0.5.16)
    - applied: patches/min-tokens-per-position/0.5.17.patch (0.5.17)
    - applied: patches/min-tokens-per-position/0.5.18.patch (0.5.18)
    - applied: patches/min-tokens-per-position/0.5.19.patch (0.5.19)
    - applied: patches/min-tokens-per-position/0.5.20.patch (0.5.20)
    - applied: patches/min-tokens-per-position/0.5.21.patch (0.5.21)
    - applied: patches/min-tokens-per-position/0.5.22.patch (0.5.22)
    - applied: patches/min-tokens-per-position/0.5.23.patch (0.5.23)
    Removal: delete when upstream checks min_new_tokens per draft position in the spec-v2 verify
        (open: #33643)

outlines-spec-guard  [beyond upstream (#24413, #24889)]  --grammar-backend outlines + speculative decoding: refused at
    startup, not wrong tokens
    What: create_grammar_backend raises ValueError at scheduler startup when the stock outlines
        backend is chosen and a speculative algorithm is set, naming the combination and the way out
        (--grammar-backend xgrammar or llguidance, or no speculative decoding)
    Why: the speculative verify's traverse_tree reads the vocab mask as packed 32-bit words while
        outlines keeps a dense bool mask (wrong allowed tokens), then calls grammar.rollback, which
        OutlinesGrammar lacks (NotImplementedError in the middle of serving)
    - applied: patches/outlines-spec-guard/0.5.11.patch (0.5.11)
    - applied: patches/outlines-spec-guard/0.5.12.patch (0.5.12 … 0.5.14)
    - applied: patches/outlines-spec-guard/0.5.15.patch (0.5.15 … 0.5.15.post1)
    - applied: patches/outlines-spec-guard/0.5.16.patch (0.5.16)
    - applied: patches/outlines-spec-guard/0.5.17.patch (0.5.17)
    - applied: patches/outlines-spec-guard/0.5.18.patch (0.5.18 … 0.5.20)
    - applied: patches/outlines-spec-guard/0.5.21.patch (0.5.21 … 0.5.23)
    Removal: per release once upstream refuses the combination or fixes the outlines mask and
        rollback (open as of 0.5.23)

fp4-kv-verify-workspace  [beyond upstream (#36001, #36010)]  NVFP4 KV on FlashInfer + speculative decoding: refused at
    startup, not a verify crash
    What: FlashInferAttnBackend._resolve_swa_kv_pool (the first step of its __init__) raises
        ValueError at startup when the KV cache method's FlashInfer prefill access is the dequant
        workspace (NVFP4 KV) and the model runner has a speculative algorithm, naming the
        combination and the way out (--kv-cache-dtype fp8_e4m3 or auto, or no speculative decoding)
    Why: the dequant workspace is prepared only for extends without speculation; a speculative
        verify hands extend_prefix_lens_cpu = None to get_flashinfer_dequant_workspace_kv_buffer and
        the server crashes
    - not-applicable (0.5.11 … 0.5.15.post1)
    - applied: patches/fp4-kv-verify-workspace/0.5.16.patch (0.5.16 … 0.5.23)
    Removal: per release once upstream fills the dequant workspace for speculative batches (open as
        of 0.5.23)

pd-prebuilt-staging-order  [#35748]  PD decode: prebuilt staging waits for the forward in flight before its FutureMap
    writes
    What: SchedulerDisaggregationDecodeMixin.get_new_prebuilt_batch issues
        schedule_stream.wait_stream(forward_stream) before process_prebuilt when the overlap
        scheduler is on (0.5.19's order)
    Why: on a PD decode server with overlap, the staging of newly arrived requests writes their
        request rows of the FutureMap while a finished request's redundant forward may still write
        the same (reused) row: a race on the speculative state of the new request
    - not-applicable (0.5.11 … 0.5.13.post1)
    - applied: patches/pd-prebuilt-staging-order/0.5.14.patch (0.5.14)
    - applied: patches/pd-prebuilt-staging-order/0.5.15.patch (0.5.15 … 0.5.15.post1)
    - applied: patches/pd-prebuilt-staging-order/0.5.16.patch (0.5.16)
    - applied: patches/pd-prebuilt-staging-order/0.5.17.patch (0.5.17)
    - applied: patches/pd-prebuilt-staging-order/0.5.18.patch (0.5.18)
    - upstream (0.5.19 … 0.5.23)
    Removal: delete when 0.5.18 and the releases before it leave the supported releases (upstream
        from 0.5.19)

dp-draft-graph-rank-agree  [beyond upstream (#32209, #39072, #32527)]  DP attention + DSA MTP draft: every rank takes
    the same draft CUDA-graph decision
    What: EagleDraftWorker.draft: where the worker seeds the DSA indexer top-k from the draft extend
        and DP attention is on, every rank (idle or busy) runs the draft eagerly, decided from the
        server config
    Why: the draft CUDA graph is turned off only on busy ranks whose batch has no top-k seed; idle
        DP ranks replay it, the ranks' collectives mismatch and the server hangs (PD decode + DP
        attention + EAGLE/MTP on DSA models)
    - not-applicable (0.5.11 … 0.5.15)
    - applied: patches/dp-draft-graph-rank-agree/0.5.15.post1.patch (0.5.15.post1)
    - applied: patches/dp-draft-graph-rank-agree/0.5.16.patch (0.5.16)
    - applied: patches/dp-draft-graph-rank-agree/0.5.17.patch (0.5.17 … 0.5.20)
    - applied: patches/dp-draft-graph-rank-agree/0.5.21.patch (0.5.21)
    - applied: patches/dp-draft-graph-rank-agree/0.5.22.patch (0.5.22 … 0.5.23)
    Removal: per release once upstream makes the decision agree across ranks (open as of 0.5.23)

eagle-target-prefill-graph  [beyond upstream (#28809, #28870, #28386, #29248)]  the spec-v2 EAGLE target's prefills
    replay the piecewise CUDA graph
    What: PiecewiseCudaGraphRunner.__init__ (0.5.11 - 0.5.13.x) captures FULL hidden states for the
        EAGLE / EAGLE3 target of a spec-v2 worker on a dense model (not MoE, not hybrid linear
        attention), as it does for --enable-return-hidden-states; drafts and every other runner keep
        the release's NULL
    Why: the piecewise prefill graph is captured with NULL hidden states while the spec-v2 target
        asks FULL on every prefill, and can_run rejects the mismatch: the graph is never replayed
        and every target prefill runs eagerly (slower time to first token; text unaffected)
    - applied: patches/eagle-target-prefill-graph/0.5.11.patch (0.5.11)
    - applied: patches/eagle-target-prefill-graph/0.5.12.patch (0.5.12 … 0.5.12.post1)
    - applied: patches/eagle-target-prefill-graph/0.5.13.patch (0.5.13 … 0.5.13.post1)
    - not-applicable (0.5.14)
    - upstream (0.5.15 … 0.5.23)
    Removal: delete when 0.5.13.post1 leaves the supported releases (0.5.14 captures nothing there;
        from 0.5.15 the default breakable prefill graph captures FULL for the EAGLE target)

flashmla-spec-v2-draft-extend  [#24640]  FlashMLA + spec v2: the draft extend runs the FlashInfer MLA prefill its parent
    planned
    What: FlashMLABackend.forward_extend hands ForwardMode.DRAFT_EXTEND_V2 to its FlashInfer MLA
        parent with EXTEND and DRAFT_EXTEND, as 0.5.13 does (#24640), instead of FlashMLA's target-
        verify kernel
    Why: --attention-backend flashmla with EAGLE / MTP on spec v2: init_forward_metadata lets the
        parent plan the draft extend, but forward_extend runs it through the verify branch, which
        reads block_kv_indices from the parent's PrefillMetadata: AttributeError at the first draft
        extend
    - applied: patches/flashmla-spec-v2-draft-extend/0.5.11.patch (0.5.11 … 0.5.12.post1)
    - upstream (0.5.13 … 0.5.23)
    Removal: delete when 0.5.12.post1 leaves the supported releases (upstream from 0.5.13: #24640)
END INDEX

Each module holds one fix's record (``FIX``) and any code its patched functions call; the changes
themselves are the unified diffs in ``patches/<fix>/``; which release gets which file, or why it gets
none, is ``releases.py``.
"""

from . import (
    accept_length_split,
    bonus_slot_accounting,
    chunked_prefill_draft_chain,
    draft_decode_positions,
    draft_extend_kv_range,
    draft_extend_read_done_order,
    dp_draft_graph_rank_agree,
    draft_graph_eager_registry,
    eagle_target_prefill_graph,
    flashinfer_draft_extend_graph,
    fa3_draft_extend_graph,
    flashmla_spec_v2_draft_extend,
    fp4_kv_verify_workspace,
    grammar_result_order,
    grammar_run_end,
    inkling_draft_extend_track_guard,
    live_accept_metrics,
    mamba_track_freed_rows,
    min_tokens_per_position,
    multi_layer_grammar_mask,
    multi_layer_draft,
    multi_token_finish,
    outlines_spec_guard,
    overlap_war_barrier,
    pd_prebuilt_staging_order,
    radix_overshoot,
    reasoning_tokens_through_stop,
    routed_experts_draft_guard,
    seq_lens_helper,
    skip_stale_overlap_updates,
    tbo_verify_seq_lens,
    tree_drafting,
    triton_verify_mask_size,
    verify_handoff,
)

ALL_FIXES = [m.FIX for m in (
    skip_stale_overlap_updates, tree_drafting, live_accept_metrics, routed_experts_draft_guard,
    draft_extend_kv_range, chunked_prefill_draft_chain, bonus_slot_accounting, accept_length_split,
    seq_lens_helper, grammar_result_order, draft_decode_positions, grammar_run_end, multi_token_finish,
    radix_overshoot, reasoning_tokens_through_stop, multi_layer_grammar_mask, multi_layer_draft,
    tbo_verify_seq_lens, mamba_track_freed_rows, inkling_draft_extend_track_guard, triton_verify_mask_size,
    overlap_war_barrier, fa3_draft_extend_graph, flashinfer_draft_extend_graph, verify_handoff,
    draft_extend_read_done_order, draft_graph_eager_registry, min_tokens_per_position, outlines_spec_guard,
    fp4_kv_verify_workspace, pd_prebuilt_staging_order, dp_draft_graph_rank_agree, eagle_target_prefill_graph,
    flashmla_spec_v2_draft_extend,
)]
