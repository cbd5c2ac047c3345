"""The release table's second half: each code line's fix entries (releases.py has the releases and the queries).

Each code line after the first lists only what differs from the line before it (``_derive``); a fix a line does
not name is not applicable there. Entries: ``patch(NAME)`` (apply ``patches/<fix>/NAME.patch``) or ``note(STATE,
reason, check=(module, qualname, fingerprint))``; in a derived line, a bare fingerprint string keeps the base
line's note and re-fingerprints its checked function. Nothing here imports sglang.
"""

from __future__ import annotations

from typing import Dict, Union

from .catalog import NOT_APPLICABLE, UPSTREAM, Note, Patched, note, patch

Entry = Union[Patched, Note]

def absent(fix: str) -> Note:
    """The entry of a fix on a code line that does not name it."""
    return note(NOT_APPLICABLE, f"{fix} is not in this release's row of the release table: the code it fixes does "
                                f"not exist here")


def _derive(base: str, changes: Dict[str, Union[Entry, str]]) -> Dict[str, Entry]:
    """The fix entries of code line ``base`` with ``changes`` applied (a fix may first appear on a later line: before
    it, it is not applicable). A change given as a bare fingerprint keeps the base line's note (state, reason, checked
    function): only that function's source changed in this line."""
    out = dict(_FIXES[base])
    for fix, change in changes.items():
        if isinstance(change, str):
            prev = out.get(fix)
            if not isinstance(prev, Note) or prev.check is None:
                raise ValueError(f"{fix}: a bare fingerprint needs a checked note on line {base}")
            change = note(prev.state, prev.reason, check=(*prev.check[:2], change))
        out[fix] = change
    return out


# Each code line after the first lists only what differs from the line before it (_derive).
_FIXES = {}
_FIXES["0.5.11"] = {
    "dp-draft-graph-rank-agree": note(
        NOT_APPLICABLE,
        "EagleDraftWorker.draft has no per-rank draft CUDA-graph switch for the DSA top-k seed before 0.5.15.post1: "
        "every rank takes the same graph decision",
        check=('sglang.srt.speculative.eagle_worker_v2', 'EagleDraftWorker.draft', 'ba19786f1da81be9'),
    ),
    "pd-prebuilt-staging-order": note(
        NOT_APPLICABLE,
        "the overlap FutureMap rows come from a ring (FutureMap.alloc_future_indices in run_batch), not from request "
        "rows: a prebuilt request's staging never writes a row a finished request's forward still writes",
        check=('sglang.srt.managers.scheduler', 'Scheduler.run_batch', '3b234f77a7646d82'),
    ),
    "fp4-kv-verify-workspace": note(
        NOT_APPLICABLE,
        "no FlashInfer dequant-workspace KV access before 0.5.16 (FlashInferAttnBackend has no "
        "_check_kv_attention_access, no prefill_kv_access): an NVFP4 KV cache never reaches a verify through it",
        check=('sglang.srt.layers.attention.flashinfer_backend', 'FlashInferAttnBackend._check_kv_attention_access', None),
    ),
    "outlines-spec-guard": patch("0.5.11"),  # refused at startup: outlines + a speculative algorithm (#24413)
    "min-tokens-per-position": patch("0.5.11"),
    "multi-token-finish": patch("0.5.11"),
    "draft-decode-positions": patch("0.5.11"),
    "grammar-result-order": patch("0.5.11"),
    "draft-extend-kv-range": patch("0.5.11"),
    "chunked-prefill-draft-chain": patch("0.5.11"),
    "skip-stale-overlap-updates": patch("0.5.11"),
    "tree-drafting": patch("0.5.11"),
    "live-accept-metrics": patch("0.5.11"),
    "routed-experts-draft-guard": patch("0.5.11"),
    "grammar-run-end": patch("0.5.11"),
    "radix-overshoot": patch("0.5.11"),
    "reasoning-tokens-through-stop": patch("0.5.11"),
    "multi-layer-grammar-mask": patch("0.5.11"),
    "tbo-verify-seq-lens": patch("0.5.11"),
    "mamba-track-freed-rows": patch("0.5.11"),  # composes with tbo-verify-seq-lens on prepare_for_v2_verify
    "inkling-draft-extend-track-guard": note(
        NOT_APPLICABLE,
        "no Inkling model before 0.5.16: its short-convolution draft extend is absent",
        check=('sglang.srt.models.inkling_common.sconv', 'ShortConvolution._update_sconv_cache_for_draft_extend', None),
    ),
    "multi-layer-draft": note(
        NOT_APPLICABLE,
        "seq_lens_sum is not lazy before 0.5.13: MultiLayerEagleDraftWorker.draft passes model_worker_batch.seq_lens_sum, "
        "which is set (the eager draft extend's runners: see the fix's record)",
        check=('sglang.srt.speculative.multi_layer_eagle_worker_v2', 'MultiLayerEagleDraftWorker.draft', '40166fce88e3b99f'),
    ),
    "bonus-slot-accounting": note(
        UPSTREAM,
        "pre-claim in prepare_for_decode",
        check=('sglang.srt.speculative.eagle_info_v2', 'EagleDraftInputV2Mixin.prepare_for_decode', '479436d2ab730a31'),
    ),
    "accept-length-split": note(
        UPSTREAM,
        "num_accepted_drafts / num_accepted_tokens",
        check=('sglang.srt.speculative.eagle_info_v2', 'EagleVerifyInputV2Mixin.sample', 'f4882cf41e15caa7'),
    ),
    "seq-lens-helper": note(
        NOT_APPLICABLE,
        "eager seq_lens_sum and no overlap batch snapshot in this release: nothing can go "
        "stale",
    ),
    "triton-verify-mask-size": note(
        NOT_APPLICABLE,
        "seq_lens_sum is eager before 0.5.13: the draft sizes a hybrid target's tree mask by the batch's real "
        "seq_lens_sum, never bs * max_context_len (HybridLinearAttnBackend has no max_context_len here)",
        check=('sglang.srt.layers.attention.hybrid_linear_attn_backend', 'HybridLinearAttnBackend.__init__',
               '0b50408978b3bc73'),
    ),
    "overlap-war-barrier": patch("0.5.11"),
    "flashinfer-draft-extend-graph": patch("0.5.11"),  # the same flashinfer functions on 0.5.12.x
    # chains by default, trees with SGLANG_SPECV2_FIXES_FA3_DRAFT_GRAPH=1; composes after tree-drafting on init_cuda_graphs
    "fa3-draft-extend-graph": patch("0.5.11"),
    "verify-handoff": patch("0.5.11"),  # auto,-verify-handoff leaves it out
    "draft-extend-read-done-order": note(
        NOT_APPLICABLE,
        "no read-done event before 0.5.14: the overlap scheduler has no _apply_war_barrier; its WAR barrier (0.5.13's, "
        "overlap-war-barrier's on 0.5.11 / 0.5.12.x) waits for the whole forward stream",
        check=('sglang.srt.managers.scheduler', 'Scheduler._apply_war_barrier', None),
    ),
    "draft-graph-eager-registry": note(
        NOT_APPLICABLE,
        "no eager input registry before 0.5.13: ModelRunner.forward_decode runs the model on the batch's own "
        "tensors, so the draft CUDA graph bakes no buffer that a larger batch could replace",
        check=('sglang.srt.model_executor.model_runner', 'ModelRunner.forward_decode', 'cf36fad1e0b51400'),
    ),
    "eagle-target-prefill-graph": patch("0.5.11"),
    "flashmla-spec-v2-draft-extend": patch("0.5.11"),  # the same forward_extend on 0.5.12.x
}
_FIXES["0.5.12"] = _derive("0.5.11", {
    "dp-draft-graph-rank-agree": "12b2cbfb51355912",  # EagleDraftWorker.draft
    "pd-prebuilt-staging-order": "7714706c5b12632e",  # Scheduler.run_batch
    "outlines-spec-guard": patch("0.5.12"),
    "min-tokens-per-position": patch("0.5.12"),
    "fa3-draft-extend-graph": patch("0.5.12"),
    "draft-decode-positions": note(
        UPSTREAM,
        "#25015: draft_forward advances the positions after each draft decode forward",
        check=('sglang.srt.speculative.eagle_worker_v2', 'EagleDraftWorker.draft_forward', 'b901024895a0f9a9'),
    ),
    "chunked-prefill-draft-chain": patch("0.5.12"),
    "skip-stale-overlap-updates": note(
        UPSTREAM,
        "_resolve_spec_overlap_tokens skips retracted/finished requests",
        check=('sglang.srt.managers.scheduler_output_processor_mixin', 'SchedulerOutputProcessorMixin._resolve_spec_overlap_tokens', 'a1880655aef27b21'),
    ),
    "tree-drafting": patch("0.5.12"),
    "live-accept-metrics": patch("0.5.12"),
    "grammar-run-end": patch("0.5.12"),
    "bonus-slot-accounting": "6ee69b3410f0a06c",
    "accept-length-split": note(
        UPSTREAM,
        "renamed num_correct_drafts / num_accept_tokens",
        check=('sglang.srt.speculative.eagle_info_v2', 'EagleVerifyInputV2Mixin.sample', '6e817b9a418683c9'),
    ),
    "reasoning-tokens-through-stop": patch("0.5.12"),
    "multi-layer-grammar-mask": patch("0.5.12"),
    "multi-layer-draft": "1d177ec71f7aa8e0",
    "tbo-verify-seq-lens": note(
        UPSTREAM,
        "#24319: prepare_for_v2_verify copies the batch's seq_lens_cpu / seq_lens_sum to the verify input",
        check=('sglang.srt.speculative.eagle_info_v2', 'EagleVerifyInputV2Mixin.prepare_for_v2_verify',
               '9ad6b05a2ca12517'),
    ),
    "mamba-track-freed-rows": patch("0.5.12"),
    "verify-handoff": patch("0.5.12"),
    "eagle-target-prefill-graph": patch("0.5.12"),
})
_FIXES["0.5.13"] = _derive("0.5.12", {
    "dp-draft-graph-rank-agree": "df8353a93f7211e1",
    "pd-prebuilt-staging-order": note(
        NOT_APPLICABLE,
        "the FutureMap rows are request rows, but the PD decode loop's WAR barrier waits for the whole forward stream "
        "(schedule_stream.wait_stream(forward_stream)) before get_new_prebuilt_batch stages them",
        check=('sglang.srt.disaggregation.decode', 'SchedulerDisaggregationDecodeMixin.event_loop_overlap_disagg_decode',
               'a67509a5a7237819'),
    ),
    "min-tokens-per-position": patch("0.5.13"),
    # #25879 is upstream (no host wait on verify_done); the patch drops the host mirror piecewise CUDA graphs still
    # force in decide_needs_cpu_seq_lens, as 0.5.14 (#28633); the same function on 0.5.13.post1
    "verify-handoff": patch("0.5.13"),
    "fa3-draft-extend-graph": patch("0.5.13"),
    # the graph metadata moved to _prepare_cuda_graph_metadata / init_forward_metadata_out_graph; the same functions
    # on 0.5.13.post1
    "flashinfer-draft-extend-graph": patch("0.5.13"),
    "multi-token-finish": patch("0.5.13"),
    "draft-decode-positions": note(  # draft_forward differs between 0.5.13 and 0.5.13.post1; the graph runner not
        UPSTREAM,
        "#25015: the draft decode graph restores the positions draft_forward advances after each forward",
        check=('sglang.srt.speculative.eagle_draft_cuda_graph_runner', 'EAGLEDraftCudaGraphRunner.capture_one_batch_size', '699492fa642f8911'),
    ),
    "grammar-result-order": patch("0.5.13"),
    "draft-extend-kv-range": note(
        UPSTREAM,
        "#26651: the triton draft-extend graph's KV range is the prefix only "
        "(TritonAttnBackend._update_draft_extend_buffers)",
        check=('sglang.srt.layers.attention.triton_backend', 'TritonAttnBackend._update_draft_extend_buffers', '3c3b37d29278ed09'),
    ),
    "chunked-prefill-draft-chain": note(
        UPSTREAM,
        "#26800: a chunk's draft chain ends with the next prompt token "
        "(eagle_utils._eagle_prefill_tail_tokens)",
        check=('sglang.srt.speculative.eagle_utils', '_eagle_prefill_tail_tokens', 'e2180501f98cf020'),
    ),
    "skip-stale-overlap-updates": note(
        UPSTREAM,
        "SchedulerBatchResultProcessor._resolve_spec_v2_tokens skips retracted requests; "
        "finished ones only roll back the pre-claimed bonus slot",
        check=('sglang.srt.managers.scheduler_components.batch_result_processor', 'SchedulerBatchResultProcessor._resolve_spec_v2_tokens', '6772ae0cd329ca86'),
    ),
    "tree-drafting": note(
        UPSTREAM,
        "EAGLEWorkerV2._finalize_accept_tree_path compacts KV/predict/hidden states (spec v1 "
        "removed); routed-experts/indexer top-k compaction is NOT upstream and is carried by "
        "routed-experts-draft-guard's patch",
        check=('sglang.srt.speculative.eagle_worker_v2', 'EAGLEWorkerV2._finalize_accept_tree_path', '262f15c339d14aee'),
    ),
    "live-accept-metrics": patch("0.5.13"),
    "routed-experts-draft-guard": patch("0.5.13"),
    "grammar-run-end": patch("0.5.13"),
    "bonus-slot-accounting": note(
        UPSTREAM,
        "pre-claim in EagleDraftInputV2Mixin.prepare_for_decode, resolve adds accept_lens - 1",
        check=('sglang.srt.speculative.eagle_info_v2', 'EagleDraftInputV2Mixin.prepare_for_decode', '9017d8dab86d36c8'),
    ),
    "accept-length-split": note(
        UPSTREAM,
        "num_correct_drafts / num_accept_tokens (EagleVerifyInputV2Mixin.sample)",
        check=('sglang.srt.speculative.eagle_info_v2', 'EagleVerifyInputV2Mixin.sample', 'c756e172672bef6e'),
    ),
    "seq-lens-helper": note(
        UPSTREAM,
        "FutureMap.resolve_seq_lens_cpu syncs seq_lens_cpu/seq_lens_sum of the overlap "
        "snapshot",
        check=('sglang.srt.managers.overlap_utils', 'FutureMap.resolve_seq_lens_cpu', '0e06bbae78da2463'),
    ),
    "reasoning-tokens-through-stop": patch("0.5.13"),
    "multi-layer-grammar-mask": patch("0.5.13"),
    "multi-layer-draft": patch("0.5.13"),
    "tbo-verify-seq-lens": "68d3991f75450d87",
    "mamba-track-freed-rows": patch("0.5.13"),
    "triton-verify-mask-size": note(
        NOT_APPLICABLE,
        "HybridLinearAttnBackend keeps the base class's needs_cpu_seq_lens = True (its opt-out and max_context_len "
        "came in 0.5.14): FutureMap publishes seq_lens_sum and the draft sizes the tree mask by the real sum",
        check=('sglang.srt.layers.attention.hybrid_linear_attn_backend', 'HybridLinearAttnBackend.__init__',
               '58e2c245b9c945b6'),
    ),
    # #26380's barrier is upstream at each overlap loop's top; the patch moves it to right after run_batch (#31687)
    "overlap-war-barrier": patch("0.5.13"),
    # ModelRunner._ensure_eager_registry replaces the registry the draft CUDA graph baked (0.5.13.post1: the same)
    "draft-graph-eager-registry": patch("0.5.13"),
    "eagle-target-prefill-graph": patch("0.5.13"),
    "flashmla-spec-v2-draft-extend": note(
        UPSTREAM,
        "#24640: FlashMLABackend.forward_extend hands DRAFT_EXTEND_V2 to the FlashInfer MLA parent",
        check=('sglang.srt.layers.attention.flashmla_backend', 'FlashMLABackend.forward_extend', 'a7737c7505ed8c8f'),
    ),
})
_FIXES["0.5.14"] = _derive("0.5.13", {
    "dp-draft-graph-rank-agree": "50caeff4b561fae4",  # the same draft on 0.5.15
    "flashmla-spec-v2-draft-extend": "5d646549d8623a39",  # forward_extend, the same through 0.5.15.post1
    "pd-prebuilt-staging-order": patch("0.5.14"),
    "min-tokens-per-position": patch("0.5.14"),
    "verify-handoff": note(
        UPSTREAM,
        "#25879: no host wait on verify_done (ScheduleBatch.maybe_wait_verify_done is gone); the next batch's seq_lens "
        "is gathered on the GPU behind the verify's publish event (FutureMap.resolve_seq_lens_cpu) and, where no "
        "attention backend needs the host mirror (triton), never copied to the host; the draft extend takes device "
        "prefix lengths (gpu_only). #28633: piecewise CUDA graphs no longer force the mirror "
        "(decide_needs_cpu_seq_lens; two-batch overlap still does)",
        check=('sglang.srt.managers.overlap_utils', 'FutureMap.resolve_seq_lens_cpu', '03bc17e32f9094ff'),
    ),
    "fa3-draft-extend-graph": patch("0.5.14"),
    "flashinfer-draft-extend-graph": note(
        UPSTREAM,
        "#28782: FlashInferAttnBackend._prepare_cuda_graph_metadata / init_forward_metadata_out_graph have the "
        "DRAFT_EXTEND_V2 branch and flashinfer is in the draft-extend graph list",
        check=('sglang.srt.layers.attention.flashinfer_backend', 'FlashInferAttnBackend._prepare_cuda_graph_metadata',
               'aeb8237fd1b4615f'),
    ),
    "multi-token-finish": patch("0.5.14"),
    "draft-decode-positions": note(
        UPSTREAM,
        "#25015: draft_forward advances the positions after each draft decode forward",
        check=('sglang.srt.speculative.eagle_worker_v2', 'EagleDraftWorker.draft_forward', 'c74df8b61055b747'),
    ),
    "grammar-result-order": patch("0.5.14"),
    "draft-extend-kv-range": "0de3096b9461d8ec",
    "skip-stale-overlap-updates": "a566b5757f77d5a8",
    "tree-drafting": "2ce7801a49d5769b",
    "live-accept-metrics": patch("0.5.14"),
    "routed-experts-draft-guard": patch("0.5.14"),
    "grammar-run-end": note(
        UPSTREAM,
        "#28682: _resolve_spec_v2_tokens ends the run at the grammar's terminating token "
        "(SchedulerBatchResultProcessor._accept_grammar_tokens)",
        check=('sglang.srt.managers.scheduler_components.batch_result_processor', 'SchedulerBatchResultProcessor._accept_grammar_tokens', 'b4dec65038608d72'),
    ),
    "bonus-slot-accounting": "f9901a957593abcb",
    "accept-length-split": note(
        UPSTREAM,
        "num_correct_drafts / num_accept_tokens (v2 sample is eagle_utils.eagle_sample)",
        check=('sglang.srt.speculative.eagle_utils', 'eagle_sample', '5e49f3d99001edb5'),
    ),
    "seq-lens-helper": "03bc17e32f9094ff",
    "reasoning-tokens-through-stop": patch("0.5.14"),
    "multi-layer-grammar-mask": patch("0.5.14"),
    "multi-layer-draft": patch("0.5.14"),
    "tbo-verify-seq-lens": note(
        UPSTREAM,
        "#24319: eagle_prepare_for_verify sets the verify input's seq_lens_cpu / seq_lens_sum from the batch",
        check=('sglang.srt.speculative.eagle_utils', 'eagle_prepare_for_verify', 'befaa4f3ac4e4ba7'),
    ),
    "triton-verify-mask-size": patch("0.5.14"),
    # the same move on 0.5.14 … 0.5.21 (on by default: its cost is the schedule stream's wait for the graph's end)
    "draft-extend-read-done-order": patch("0.5.14"),
    "overlap-war-barrier": patch("0.5.14"),  # _apply_war_barrier (#28363's read-done event), moved as on 0.5.13
    "draft-graph-eager-registry": note(
        UPSTREAM,
        "by the EagerRunner redesign (no PR of its own): EagerRunner builds one fixed-size eager registry at init "
        "(max_running_requests x tokens per request, and the prefill ceiling) and load_batch always fills it; nothing "
        "replaces it, so the addresses the draft CUDA graph bakes stay valid",
        check=('sglang.srt.model_executor.runner.eager_runner', 'EagerRunner.load_batch', '9ea8b0fe6d0f5853'),
    ),
    "eagle-target-prefill-graph": note(
        NOT_APPLICABLE,
        "no graph captured below the EAGLE target's FULL: init_prefill_cuda_graph gives an EAGLE target on "
        "tc_piecewise, this release's default prefill backend, the eager runner (#28386); "
        "--cuda-graph-backend-prefill=breakable captures FULL for it (#28870)",
        check=('sglang.srt.model_executor.model_runner', 'ModelRunner.init_prefill_cuda_graph', 'f6ad016ba5bd705d'),
    ),
})
_FIXES["0.5.15"] = _derive("0.5.14", {
    "pd-prebuilt-staging-order": patch("0.5.15"),
    "outlines-spec-guard": patch("0.5.15"),
    "min-tokens-per-position": patch("0.5.15"),
    "verify-handoff": "42648b6d836794f3",
    "fa3-draft-extend-graph": patch("0.5.15"),
    "flashinfer-draft-extend-graph": "317261c6a2b3da53",
    "draft-decode-positions": "8a9134a65c6747d0",
    "grammar-result-order": patch("0.5.15"),
    "draft-extend-kv-range": "17151866856faf02",
    "skip-stale-overlap-updates": note(
        UPSTREAM,
        "SchedulerBatchResultProcessor._resolve_spec_v2_tokens gives finished/retracted "
        "requests no KV or statistics update (bonus rollback superseded: no pre-claim since "
        "#28754)",
        check=('sglang.srt.managers.scheduler_components.batch_result_processor', 'SchedulerBatchResultProcessor._resolve_spec_v2_tokens', '9e0ca40ab277ef7a'),
    ),
    "live-accept-metrics": patch("0.5.15"),
    "routed-experts-draft-guard": patch("0.5.15"),
    "bonus-slot-accounting": note(
        NOT_APPLICABLE,
        "pre-claim scheme removed (#28754): eagle_utils.eagle_prepare_for_decode claims no "
        "bonus slot, resolve commits drafts + bonus of live requests",
        check=('sglang.srt.speculative.eagle_utils', 'eagle_prepare_for_decode', '71f4d923deb606d9'),
    ),
    "accept-length-split": "a71fa4dd6851e3c0",
    "seq-lens-helper": "42648b6d836794f3",
    "reasoning-tokens-through-stop": patch("0.5.15"),
    "multi-layer-draft": patch("0.5.15"),
    "tbo-verify-seq-lens": "1c47bb30577eb240",
    "triton-verify-mask-size": patch("0.5.15"),
    "draft-extend-read-done-order": patch("0.5.15"),
    "draft-graph-eager-registry": "010ca4008d11518f",  # EagerRunner.load_batch
    "overlap-war-barrier": patch("0.5.15"),
    "eagle-target-prefill-graph": note(
        UPSTREAM,
        "#28870: the breakable prefill graph, the default prefill backend on CUDA from here, captures FULL hidden "
        "states for the EAGLE target (LAST for the draft), so its prefills replay it; tc_piecewise still gives the "
        "EAGLE target the eager runner (#28386)",
        check=('sglang.srt.model_executor.runner.prefill_cuda_graph_runner', 'PrefillCudaGraphRunner.__init__',
               'f6225acc8bf38c81'),
    ),
})
# 0.5.15.post1: its own line from here (EagleDraftWorker.draft gained the busy-rank draft-graph switch, #32209)
_FIXES["0.5.15.post1"] = _derive("0.5.15", {
    "dp-draft-graph-rank-agree": patch("0.5.15.post1"),
})
_FIXES["0.5.16"] = _derive("0.5.15.post1", {
    "dp-draft-graph-rank-agree": patch("0.5.16"),
    "flashmla-spec-v2-draft-extend": note(
        UPSTREAM,
        "FlashMLABackend serves DRAFT_EXTEND_V2 with its own fixed-q kernel on FlashMLA metadata (forward_extend "
        "hands only EXTEND to the parent)",
        check=('sglang.srt.layers.attention.flashmla_backend', 'FlashMLABackend.forward_extend', 'fd521e1f48d06a75'),
    ),
    "pd-prebuilt-staging-order": patch("0.5.16"),
    # refused at startup: NVFP4 KV + speculative decoding (#36010); the same _resolve_swa_kv_pool through 0.5.23
    "fp4-kv-verify-workspace": patch("0.5.16"),
    "outlines-spec-guard": patch("0.5.16"),
    "min-tokens-per-position": patch("0.5.16"),
    "verify-handoff": "0bc94a38081f5f9b",
    "draft-decode-positions": "c40e353048697ee2",
    "grammar-result-order": patch("0.5.16"),
    "draft-extend-kv-range": "722bbd00a1baf647",
    "skip-stale-overlap-updates": "f2046557f69151de",
    "tree-drafting": note(
        UPSTREAM,
        "eagle_worker_common._finalize_accept_tree_path (called from run_eagle_verify for "
        "topk > 1); routed-experts/indexer top-k compaction is NOT upstream and is carried by "
        "routed-experts-draft-guard's patch",
        check=('sglang.srt.speculative.eagle_worker_common', '_finalize_accept_tree_path', '763824351d7a2f90'),
    ),
    "live-accept-metrics": patch("0.5.16"),
    "routed-experts-draft-guard": patch("0.5.16"),
    "grammar-run-end": "e5e337765bdec508",
    "bonus-slot-accounting": "8889cbb3fc0f55cd",
    "accept-length-split": "2e8d7fe3e06f453a",
    "seq-lens-helper": "0bc94a38081f5f9b",
    "radix-overshoot": patch("0.5.16"),
    "reasoning-tokens-through-stop": patch("0.5.16"),
    "multi-layer-grammar-mask": note(
        UPSTREAM,
        "#31380: MultiLayerEagleWorkerV2.verify is eagle_worker_common.run_eagle_verify, which builds the grammar "
        "bitmask (generate_token_bitmask) and passes it to eagle_sample",
        check=('sglang.srt.speculative.eagle_worker_common', 'run_eagle_verify', 'bf9e41acc5759953'),
    ),
    "multi-layer-draft": patch("0.5.16"),
    "tbo-verify-seq-lens": "d52cc152aa529b83",
    "mamba-track-freed-rows": patch("0.5.16"),
    "inkling-draft-extend-track-guard": patch("0.5.16"),
    "triton-verify-mask-size": patch("0.5.16"),
    "overlap-war-barrier": note(
        UPSTREAM,
        "_apply_war_barrier (#26380, #28363), called right after each run_batch launch from here (#31687)",
        check=('sglang.srt.managers.scheduler', 'Scheduler._apply_war_barrier', '86e93caf5148008c'),
    ),
    "fa3-draft-extend-graph": patch("0.5.16"),
    "draft-extend-read-done-order": patch("0.5.16"),
    "eagle-target-prefill-graph": "0b5db4b79020cf07",  # PrefillCudaGraphRunner.__init__
})
_FIXES["0.5.17"] = _derive("0.5.16", {
    "dp-draft-graph-rank-agree": patch("0.5.17"),
    "pd-prebuilt-staging-order": patch("0.5.17"),
    "outlines-spec-guard": patch("0.5.17"),
    "min-tokens-per-position": patch("0.5.17"),
    "fa3-draft-extend-graph": patch("0.5.17"),
    "multi-token-finish": patch("0.5.17"),
    "draft-decode-positions": "e2c44d33d10a95e8",
    "skip-stale-overlap-updates": "2c4bc18f7e2bf70a",
    "live-accept-metrics": patch("0.5.17"),
    "routed-experts-draft-guard": patch("0.5.17"),
    "bonus-slot-accounting": "a838c68eae04cb10",
    "accept-length-split": "140530ac2567d399",
    "radix-overshoot": patch("0.5.17"),
    "reasoning-tokens-through-stop": patch("0.5.17"),
    "multi-layer-grammar-mask": note(
        UPSTREAM,
        "MultiLayerEagleWorkerV2.verify is eagle_worker_common.run_eagle_verify, which builds the grammar mask "
        "(build_grammar_vocab_mask) and passes it to eagle_sample",
        check=('sglang.srt.speculative.eagle_worker_common', 'run_eagle_verify', 'b28934fac7cbc4ce'),
    ),
    "multi-layer-draft": patch("0.5.17"),
    "tbo-verify-seq-lens": "88a18f0cd5dd5d59",
    "mamba-track-freed-rows": patch("0.5.17"),
    "inkling-draft-extend-track-guard": patch("0.5.17"),
    "triton-verify-mask-size": note(
        UPSTREAM,
        "#32920: init_cuda_graph_state allocates the mask through maybe_create_verify_mask, max_bs * "
        "num_draft_tokens * (max_context_len + num_draft_tokens) cells (verify_mask.tree_mask_numel), and "
        "HybridLinearAttnBackend.verify_mask hands out its full-attention backend's",
        check=('sglang.srt.layers.attention.triton_backend', 'TritonAttnBackend.init_cuda_graph_state',
               '8e1138a2163fa0fe'),
    ),
    "draft-extend-read-done-order": patch("0.5.17"),
    "eagle-target-prefill-graph": "a3b746a42722875f",  # PrefillCudaGraphRunner.__init__
})
_FIXES["0.5.18"] = _derive("0.5.17", {
    "pd-prebuilt-staging-order": patch("0.5.18"),
    "outlines-spec-guard": patch("0.5.18"),
    "min-tokens-per-position": patch("0.5.18"),
    "fa3-draft-extend-graph": patch("0.5.18"),
    "multi-token-finish": patch("0.5.18"),
    "draft-decode-positions": "c09f81690f3fea54",
    "grammar-result-order": patch("0.5.18"),
    "chunked-prefill-draft-chain": "6d8174b2ccc9cd62",
    "routed-experts-draft-guard": patch("0.5.18"),
    "accept-length-split": "8dd1c176a3cab4e3",
    "multi-layer-grammar-mask": "528ea3df035482fa",
    # #33892's idle guard is upstream from here (the patch's `before` fingerprint is that code); the patch adds only
    # the DP-padding re-plan (known bug multi-layer-dp-padding, open upstream): see fixes/multi_layer_draft.py
    "multi-layer-draft": patch("0.5.18"),
    "mamba-track-freed-rows": patch("0.5.18"),
    "inkling-draft-extend-track-guard": patch("0.5.18"),
    "overlap-war-barrier": "b77eca6dce141bc7",
    "draft-extend-read-done-order": patch("0.5.18"),  # the read-done attribute is shared_read_done_event from here
    "eagle-target-prefill-graph": "8f1f1db300c32755",  # PrefillCudaGraphRunner.__init__
})
_FIXES["0.5.19"] = _derive("0.5.18", {
    "pd-prebuilt-staging-order": note(
        UPSTREAM,
        "#35748: get_new_prebuilt_batch drains the forward stream (schedule_stream.wait_stream(forward_stream)) before "
        "process_prebuilt under overlap",
        check=('sglang.srt.disaggregation.decode', 'SchedulerDisaggregationDecodeMixin.get_new_prebuilt_batch',
               'b8c76e3c15ec4a74'),
    ),
    "min-tokens-per-position": patch("0.5.19"),
    "fa3-draft-extend-graph": patch("0.5.19"),
    "draft-decode-positions": "ca3661c7f59d4063",
    "grammar-result-order": patch("0.5.19"),
    "draft-extend-kv-range": "635cb9720a796435",
    "skip-stale-overlap-updates": "a85cdc7e0eb07311",
    "live-accept-metrics": patch("0.5.19"),
    "bonus-slot-accounting": "92107f907b9478f0",
    "accept-length-split": "a71354e818d059a4",
    "radix-overshoot": patch("0.5.19"),
    "reasoning-tokens-through-stop": patch("0.5.19"),
    "mamba-track-freed-rows": patch("0.5.19"),
    "multi-layer-draft": patch("0.5.19"),
    "triton-verify-mask-size": "d2e280ca5a1bad8c",
    "eagle-target-prefill-graph": "31ba64c403b1b1fd",  # PrefillCudaGraphRunner.__init__
})
_FIXES["0.5.20"] = _derive("0.5.19", {
    "min-tokens-per-position": patch("0.5.20"),
    "fa3-draft-extend-graph": patch("0.5.20"),
    "grammar-result-order": patch("0.5.20"),
    "draft-extend-kv-range": "5899519d5b353719",
    "skip-stale-overlap-updates": "dbac21de4849625d",
    "live-accept-metrics": patch("0.5.20"),
    "routed-experts-draft-guard": patch("0.5.20"),
    "accept-length-split": "55d7626f9ed09a40",
    "multi-layer-grammar-mask": "107574408fdb6f11",
    "multi-layer-draft": patch("0.5.20"),
    "tbo-verify-seq-lens": "548760d639a05b86",
    "inkling-draft-extend-track-guard": patch("0.5.20"),
    "triton-verify-mask-size": "9f6c8ac2bfd4b46f",
    "draft-extend-read-done-order": patch("0.5.20"),
    "eagle-target-prefill-graph": "15a7a406f1ff6ac8",  # PrefillCudaGraphRunner.__init__
})
_FIXES["0.5.21"] = _derive("0.5.20", {
    "dp-draft-graph-rank-agree": patch("0.5.21"),
    "pd-prebuilt-staging-order": note(
        UPSTREAM,
        "#35748: the drain (schedule_stream.wait_stream(forward_stream) under overlap) moved into "
        "_get_new_prebuilt_batch, before get_new_prebuilt_batch calls process_prebuilt",
        check=('sglang.srt.disaggregation.decode', 'SchedulerDisaggregationDecodeMixin._get_new_prebuilt_batch',
               '738f02fe6d4118a2'),
    ),
    "outlines-spec-guard": patch("0.5.21"),
    "min-tokens-per-position": patch("0.5.21"),
    "draft-decode-positions": "1db04a9b1887b395",
    "grammar-result-order": patch("0.5.21"),
    "routed-experts-draft-guard": patch("0.5.21"),
    "accept-length-split": "93d1ca9cde811c58",
    "radix-overshoot": patch("0.5.21"),
    "reasoning-tokens-through-stop": patch("0.5.21"),
    "multi-layer-grammar-mask": "c13dbd37177caa08",
    "draft-extend-read-done-order": patch("0.5.21"),
    "eagle-target-prefill-graph": "1ce5e2870746f6f1",  # PrefillCudaGraphRunner.__init__
})
_FIXES["0.5.22"] = _derive("0.5.21", {
    "pd-prebuilt-staging-order": "97fa8ddb579f3c64",  # _get_new_prebuilt_batch
    "flashmla-spec-v2-draft-extend": "2b41b92575d173ac",  # forward_extend
    "dp-draft-graph-rank-agree": patch("0.5.22"),
    "min-tokens-per-position": patch("0.5.22"),
    "fa3-draft-extend-graph": patch("0.5.22"),
    "draft-decode-positions": "ec3e3bb28dda5c70",
    "grammar-result-order": patch("0.5.22"),
    "draft-extend-kv-range": "dbf5921f7afff96d",
    "live-accept-metrics": patch("0.5.22"),
    "routed-experts-draft-guard": patch("0.5.22"),
    "bonus-slot-accounting": "3aecac2a9354fc3a",
    "accept-length-split": "2af287281c12dd0d",
    "radix-overshoot": note(
        UPSTREAM,
        "Req.owned_kv_len caps a finished request's cached KV at the prompt plus output_ids_through_stop "
        "(equivalent of #35694; hybrid caches fall back to the previous mamba checkpoint)",
        check=('sglang.srt.managers.schedule_batch', 'Req.owned_kv_len', '496ba1318b4ead14'),
    ),
    "reasoning-tokens-through-stop": patch("0.5.22"),
    "multi-layer-grammar-mask": "65dfae7bd3c395ed",
    "multi-layer-draft": patch("0.5.22"),
    "mamba-track-freed-rows": note(
        UPSTREAM,
        "#29449's approach: set_mamba_track_indices_from_reqs marks the rows of freed requests -1, which the "
        "post-verify track scatter skips",
        check=('sglang.srt.managers.schedule_batch', 'set_mamba_track_indices_from_reqs', '33bec99d4ec53628'),
    ),
    "inkling-draft-extend-track-guard": patch("0.5.22"),
    "tbo-verify-seq-lens": "de13591ee64bf29e",
    "triton-verify-mask-size": "d353e393d7cf5c55",
    "draft-extend-read-done-order": note(
        UPSTREAM,
        "EAGLEDraftExtendCudaGraphRunner.execute publishes the read-done event per the draft-extend backend's "
        "shared_read_ends: before the replay for PRE_REPLAY, after it for IN_REPLAY / POST_REPLAY, none for UNKNOWN "
        "(the base class's answer for the draft extend: the scheduler waits for the whole forward)",
        check=('sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner', 'EAGLEDraftExtendCudaGraphRunner.execute',
               '029508bd6f69a46a'),
    ),
    "eagle-target-prefill-graph": "61511ddd3b626b55",  # PrefillCudaGraphRunner.__init__
})
_FIXES["0.5.23"] = _derive("0.5.22", {
    "min-tokens-per-position": patch("0.5.23"),
    "verify-handoff": "8d9a4a2634685aaa",
    "fa3-draft-extend-graph": note(
        UPSTREAM,
        "EagleDraftWorker._capture_cuda_graphs lists FlashAttentionBackend among the draft-extend graph backends "
        "(CUDA only)",
        check=('sglang.srt.speculative.eagle_worker_v2', 'EagleDraftWorker._capture_cuda_graphs', 'a70f8ce00cc49154'),
    ),
    "draft-decode-positions": "3cd7b89c0f5625e2",
    "grammar-run-end": "d1920b0bff48fe89",
    "draft-extend-kv-range": "fc26eab5837ecb6f",
    "skip-stale-overlap-updates": "27570b6ba67bebbd",
    "bonus-slot-accounting": "9149bf599e4ff6f9",
    "accept-length-split": "61266326a73fcba5",
    "seq-lens-helper": "8d9a4a2634685aaa",
    "reasoning-tokens-through-stop": patch("0.5.23"),
    "multi-layer-draft": patch("0.5.23"),
    "mamba-track-freed-rows": "1b130b4ba2edea99",
    "triton-verify-mask-size": "3189ebc4a59c870b",
    "draft-extend-read-done-order": "4d66940e30d50873",
    "eagle-target-prefill-graph": "d734bf810251c13d",  # PrefillCudaGraphRunner.__init__
})
