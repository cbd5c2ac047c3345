"""#26866 - spec v2 tree drafting (EAGLE topk > 1) with page_size == 1.

SGLang 0.5.11 / 0.5.12.x decide "topk > 1 -> spec v1" in ``ServerArgs._handle_speculative_decoding``
*before* ``auto_choose_speculative_params`` runs. With default spec params a Llama target gets
steps 5 / topk 4 / 8 draft tokens while the overlap scheduler stays on, i.e. the spec v2 tree path,
which those releases never finished: the bonus-token kernel reads with the tree width instead of
the accepted width, the accepted path is never compacted (predict / hidden states / target KV stay
scattered over tree node slots while the scheduler resolve, the draft extend and the committed KV
read a chain), and the draft-extend CUDA graph is sized for ``num_steps + 1`` tokens per request.
Under concurrency this dies with "vectorized gather kernel index out of bounds".

Upstream landed the fix in #26866 (reverted by #26981: "breaks the default behaviors when we use
topk > 1 under the default spec v2 settings"; its routing still ran before the auto-chosen params;
the worker side is in 0.5.13.post1 as ``_finalize_accept_tree_path`` / ``_compact_accept_to_front`` /
``move_accept_tokens_to_target_kvcache``). This module backports it per code line:

* routing on the final params (launcher): dense model + topk > 1 + page_size == 1 (+ fa3 /
  flashinfer / triton, no MLA, no MLP-sync padding, no multi-layer EAGLE) -> spec v2 tree drafting;
  any other topk > 1 setup -> spec v1 with one warning naming the reason; an explicit
  ``--disable-overlap-schedule`` is always kept; topk == 1 unchanged;
* ``EAGLEWorkerV2.verify``: bonus stride ``accept_index.shape[1]`` and accepted-path compaction;
* ``EAGLEWorkerV2.move_accepted_tokens_to_target_kvcache`` (dead upstream code until now): launch
  size ``bs * accept_index.shape[1]``; each release keeps its own count semantics;
* ``EagleDraftWorker.init_cuda_graphs``: no draft-extend graph when its width does not match;
* ``SchedulerRuntimeCheckerMixin.self_check_during_busy``: the busy leak check runs for spec v2
  tree drafting (it stays skipped for spec v1 tree drafting).

See docs/tree_drafting_notes.md for the per-release details and open risks.
"""

from __future__ import annotations

from ..catalog import UPSTREAM, Fix, Patch, ReleaseNote

SERVER_ARGS = "sglang.srt.server_args"
WORKER = "sglang.srt.speculative.eagle_worker_v2"
CHECKER = "sglang.srt.managers.scheduler_runtime_checker_mixin"


class v0_5_11:
    """Bodies for code line 0.5.11 (upstream source of 0.5.11, modified at ``# specv2-fixes:``)."""

    def _handle_speculative_decoding(self):
        if (
            self.speculative_draft_model_path is not None
            and self.speculative_draft_model_revision is None
        ):
            self.speculative_draft_model_revision = "main"

        # FlashInfer trtllm moe bf16 only support RenormalizeNaive routing method and Deepseek routing method
        # It is hard to tell the routing method in draft model, and the moe layer in draft model is not the bottleneck among
        # end to end, so we just avoid using trtllm_moe for speculative decoding.
        from sglang.srt.layers.moe.utils import MoeRunnerBackend

        if self.speculative_moe_runner_backend is None:
            self.speculative_moe_runner_backend = (
                "auto"
                if self.moe_runner_backend
                in ["flashinfer_trtllm", "flashinfer_trtllm_routed"]
                else self.moe_runner_backend
            )
        else:
            assert not MoeRunnerBackend(
                self.speculative_moe_runner_backend
            ).is_flashinfer_trtllm(), "Currently speculative MoE runner backend doesn't support flashinfer_trtllm, please use triton or auto backend for speculative moe runner instead."

        if self.speculative_algorithm == "NEXTN":
            self.speculative_algorithm = "EAGLE"

        if self.speculative_skip_dp_mlp_sync:
            assert self.speculative_algorithm == "EAGLE", (
                "--speculative-skip-dp-mlp-sync is only supported with "
                f"speculative_algorithm == EAGLE, got {self.speculative_algorithm}."
            )

        if self.speculative_algorithm == "DFLASH":
            if self.enable_dp_attention:
                raise ValueError(
                    "Currently DFLASH speculative decoding does not support dp attention."
                )

            if self.pp_size != 1:
                raise ValueError(
                    "Currently DFLASH speculative decoding only supports pp_size == 1."
                )

            if self.speculative_draft_model_path is None:
                raise ValueError(
                    "DFLASH speculative decoding requires setting --speculative-draft-model-path."
                )

            # DFLASH does not use EAGLE-style `num_steps`/`topk`, but those fields still
            # affect generic scheduler/KV-cache accounting (buffer sizing, KV freeing,
            # RoPE reservation). Force them to 1 to avoid surprising memory behavior.
            #
            # For DFlash, the natural unit is `block_size` (verify window length).
            if self.speculative_num_steps is None:
                self.speculative_num_steps = 1
            elif int(self.speculative_num_steps) != 1:
                logger.warning(
                    "DFLASH only supports speculative_num_steps == 1; overriding speculative_num_steps=%s to 1.",
                    self.speculative_num_steps,
                )
                self.speculative_num_steps = 1

            if self.speculative_eagle_topk is None:
                self.speculative_eagle_topk = 1
            elif int(self.speculative_eagle_topk) != 1:
                logger.warning(
                    "DFLASH only supports speculative_eagle_topk == 1; overriding speculative_eagle_topk=%s to 1.",
                    self.speculative_eagle_topk,
                )
                self.speculative_eagle_topk = 1

            if self.speculative_dflash_block_size is not None:
                if int(self.speculative_dflash_block_size) <= 0:
                    raise ValueError(
                        "DFLASH requires --speculative-dflash-block-size to be positive, "
                        f"got {self.speculative_dflash_block_size}."
                    )
                if self.speculative_num_draft_tokens is not None and int(
                    self.speculative_num_draft_tokens
                ) != int(self.speculative_dflash_block_size):
                    raise ValueError(
                        "Both --speculative-num-draft-tokens and --speculative-dflash-block-size are set "
                        "but they differ. For DFLASH they must match. "
                        f"speculative_num_draft_tokens={self.speculative_num_draft_tokens}, "
                        f"speculative_dflash_block_size={self.speculative_dflash_block_size}."
                    )
                self.speculative_num_draft_tokens = int(
                    self.speculative_dflash_block_size
                )

            window_size = None
            if self.speculative_dflash_draft_window_size is not None:
                window_size = int(self.speculative_dflash_draft_window_size)
                if window_size <= 0:
                    raise ValueError(
                        "DFLASH requires --speculative-dflash-draft-window-size "
                        f"to be positive, got {window_size}."
                    )
                self.speculative_dflash_draft_window_size = window_size

            if self.speculative_num_draft_tokens is None:
                from sglang.srt.speculative.dflash_utils import (
                    parse_dflash_draft_config,
                )

                model_override_args = json.loads(self.json_model_override_args)
                inferred_block_size = None
                try:
                    from sglang.srt.utils.hf_transformers_utils import get_config

                    draft_hf_config = get_config(
                        self.speculative_draft_model_path,
                        trust_remote_code=self.trust_remote_code,
                        revision=self.speculative_draft_model_revision,
                        model_override_args=model_override_args,
                    )
                    inferred_block_size = parse_dflash_draft_config(
                        draft_hf_config=draft_hf_config
                    ).resolve_block_size(default=None)
                except Exception as e:
                    logger.warning(
                        "Failed to infer DFLASH block_size from draft model config; "
                        "defaulting speculative_num_draft_tokens to 16. Error: %s",
                        e,
                    )

                if inferred_block_size is None:
                    inferred_block_size = 16
                    logger.warning(
                        "speculative_num_draft_tokens is not set; defaulting to %d for DFLASH.",
                        inferred_block_size,
                    )
                self.speculative_num_draft_tokens = inferred_block_size

            if window_size is not None:
                draft_tokens = int(self.speculative_num_draft_tokens)
                if window_size < draft_tokens:
                    raise ValueError(
                        "DFLASH --speculative-dflash-draft-window-size must be >= "
                        "--speculative-num-draft-tokens (block_size). "
                        f"window_size={window_size}, block_size={draft_tokens}."
                    )

            if self.max_running_requests is None:
                self.max_running_requests = 48
                logger.warning(
                    "Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting --max-running-requests."
                )

            self.disable_overlap_schedule = True
            logger.warning(
                "Overlap scheduler is disabled when using DFLASH speculative decoding (spec v2 is not supported yet)."
            )

            if self.enable_mixed_chunk:
                self.enable_mixed_chunk = False
                logger.warning(
                    "Mixed chunked prefill is disabled because of using dflash speculative decoding."
                )

        if self.speculative_algorithm in ("EAGLE", "EAGLE3", "STANDALONE"):
            if self.speculative_algorithm == "STANDALONE" and self.enable_dp_attention:
                # TODO: support dp attention for standalone speculative decoding
                raise ValueError(
                    "Currently standalone speculative decoding does not support dp attention."
                )

            if self.max_running_requests is None:
                self.max_running_requests = 48
                logger.warning(
                    "Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting --max-running-requests."
                )

            spec_v1_reason = None
            # specv2-fixes: the topk > 1 -> spec v1 decision and the v1/v2 log line moved
            # below auto_choose_speculative_params: decided here they missed an
            # auto-chosen topk > 1 (e.g. steps 5 / topk 4 / 8 draft tokens) and left it on
            # the spec v2 path.
            if (
                not envs.SGLANG_ENABLE_SPEC_V2.get()
                and not self.disable_overlap_schedule
            ):
                self.disable_overlap_schedule = True
                spec_v1_reason = "SGLANG_ENABLE_SPEC_V2=False"

            if self.enable_mixed_chunk:
                self.enable_mixed_chunk = False
                logger.warning(
                    "Mixed chunked prefill is disabled because of using "
                    "eagle speculative decoding."
                )

            model_arch = self.get_model_config().hf_config.architectures[0]
            if model_arch in [
                "DeepseekV32ForCausalLM",
                "DeepseekV3ForCausalLM",
                "Glm4MoeForCausalLM",
                "Glm4MoeLiteForCausalLM",
                "GlmMoeDsaForCausalLM",
                "BailingMoeForCausalLM",
                "BailingMoeV2ForCausalLM",
                "BailingMoeV2_5ForCausalLM",
                "MistralLarge3ForCausalLM",
                "PixtralForConditionalGeneration",
                "HYV3ForCausalLM",
            ]:
                if self.speculative_draft_model_path is None:
                    self.speculative_draft_model_path = self.model_path
                    self.speculative_draft_model_revision = self.revision
                else:
                    if model_arch not in [
                        "MistralLarge3ForCausalLM",
                        "PixtralForConditionalGeneration",
                    ]:
                        logger.warning(
                            "DeepSeek MTP does not require setting speculative_draft_model_path."
                        )

            if self.speculative_num_steps is None:
                assert (
                    self.speculative_eagle_topk is None
                    and self.speculative_num_draft_tokens is None
                )
                (
                    self.speculative_num_steps,
                    self.speculative_eagle_topk,
                    self.speculative_num_draft_tokens,
                ) = auto_choose_speculative_params(self)

            if (
                self.attention_backend == "trtllm_mha"
                or self.decode_attention_backend == "trtllm_mha"
                or self.prefill_attention_backend == "trtllm_mha"
            ):
                if self.speculative_eagle_topk > 1:
                    raise ValueError(
                        "trtllm_mha backend only supports topk = 1 for speculative decoding."
                    )

            if (
                self.speculative_eagle_topk == 1
                and self.speculative_num_draft_tokens != self.speculative_num_steps + 1
            ):
                logger.warning(
                    "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
                )
                self.speculative_num_draft_tokens = self.speculative_num_steps + 1

            # specv2-fixes: route topk > 1 on the final (explicit or auto-chosen) params.
            # Spec v2 tree drafting keeps the overlap scheduler only where its path is
            # complete in this release; everything else falls back to spec v1. A
            # disable_overlap_schedule that is already set is never undone.
            if self.speculative_eagle_topk > 1 and not self.disable_overlap_schedule:

                def _is_hybrid_linear_attn_model():
                    # Same model families the scheduler treats as Mamba / GDN / linear
                    # attention (ModelRunner.mambaish_config), read from the config only.
                    import sglang.srt.configs as hybrid_configs
                    from sglang.srt.configs.linear_attn_model_registry import (
                        get_linear_attn_config,
                    )

                    hf_config = self.get_model_config().hf_config
                    if (
                        get_linear_attn_spec_by_arch(hf_config.architectures[0])
                        is not None
                        or get_linear_attn_config(hf_config) is not None
                    ):
                        return True
                    hybrid_names = (
                        "BailingHybridConfig",
                        "FalconH1Config",
                        "InternS2PreviewConfig",
                        "JetNemotronConfig",
                        "JetVLMConfig",
                        "KimiLinearConfig",
                        "Lfm2Config",
                        "Lfm2MoeConfig",
                        "Lfm2VlConfig",
                        "NemotronHConfig",
                        "NemotronH_Nano_VL_V2_Config",
                        "Qwen3NextConfig",
                        "Qwen3_5Config",
                        "Qwen3_5MoeConfig",
                    )
                    hybrid_classes = tuple(
                        getattr(hybrid_configs, name)
                        for name in hybrid_names
                        if hasattr(hybrid_configs, name)
                    )
                    granite_cls = getattr(hybrid_configs, "GraniteMoeHybridConfig", None)
                    get_text_config = getattr(hf_config, "get_text_config", None)
                    candidates = [hf_config]
                    if get_text_config is not None:
                        candidates.append(get_text_config())
                    for cfg in candidates:
                        if granite_cls is not None and isinstance(cfg, granite_cls):
                            return any(
                                t == "mamba" for t in (getattr(cfg, "layer_types", None) or [])
                            )
                        if isinstance(cfg, hybrid_classes):
                            return True
                    return False

                def _spec_v2_tree_unsupported_reason():
                    if self.page_size is not None and self.page_size > 1:
                        return (
                            "spec v2 tree drafting (topk > 1) requires page_size == 1, "
                            f"got page_size={self.page_size}"
                        )
                    if self.enable_multi_layer_eagle:
                        return "spec v2 tree drafting (topk > 1) is not supported by multi-layer EAGLE"
                    if (
                        self.enable_dp_attention
                        or self.moe_dense_tp_size == 1
                        or self.moe_a2a_backend not in (None, "none")
                    ):
                        return (
                            "spec v2 tree drafting (topk > 1) is not supported with MLP-sync "
                            "token padding (DP attention / moe_dense_tp_size=1 / MoE A2A) in this release"
                        )
                    if self.use_mla_backend():
                        return (
                            "spec v2 tree drafting (topk > 1) needs a target KV move that the MLA "
                            "KV pool of this release lacks"
                        )
                    backends = set(self.get_attention_backends())
                    if self.speculative_draft_attention_backend is not None:
                        backends.add(self.speculative_draft_attention_backend)
                    unsupported = sorted(
                        str(b) for b in backends if b not in ("fa3", "flashinfer", "triton")
                    )
                    if unsupported:
                        return (
                            "spec v2 tree drafting (topk > 1) is only enabled for the fa3, "
                            f"flashinfer and triton attention backends, got {', '.join(unsupported)}"
                        )
                    if _is_hybrid_linear_attn_model():
                        return (
                            "spec v2 tree drafting (topk > 1) does not support hybrid "
                            "Mamba/GDN/linear-attention models"
                        )
                    return None

                tree_v1_reason = _spec_v2_tree_unsupported_reason()
                if tree_v1_reason is not None:
                    self.disable_overlap_schedule = True
                    spec_v1_reason = tree_v1_reason

            if self.disable_overlap_schedule:
                logger.warning(
                    "Spec v1 is used for eagle/eagle3/standalone speculative decoding because %s.",
                    spec_v1_reason or "overlap schedule is disabled",
                )
            elif self.speculative_eagle_topk > 1:
                logger.warning(
                    "Spec v2 is enabled with tree drafting (topk=%s, page_size=1) for "
                    "eagle/eagle3/standalone speculative decoding.",
                    self.speculative_eagle_topk,
                )
            else:
                logger.warning(
                    "Spec v2 is enabled by default for eagle/eagle3/standalone speculative decoding."
                )

            if (
                self.speculative_eagle_topk > 1
                and self.page_size > 1
                and self.attention_backend not in ["flashinfer", "fa3"]
            ):
                raise ValueError(
                    "speculative_eagle_topk > 1 with page_size > 1 is unstable and produces incorrect results for paged attention backends. This combination is only supported for the 'flashinfer' backend."
                )

        if self.speculative_algorithm == "NGRAM":
            if not self.device.startswith("cuda"):
                raise ValueError(
                    "Ngram speculative decoding only supports CUDA device."
                )

            if self.max_running_requests is None:
                self.max_running_requests = 48
                logger.warning(
                    "Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting --max-running-requests."
                )

            self.disable_overlap_schedule = True
            self.enable_mixed_chunk = False
            self.speculative_eagle_topk = self.speculative_ngram_max_bfs_breadth
            if self.speculative_num_draft_tokens is None:
                self.speculative_num_draft_tokens = 12
                logger.warning(
                    "speculative_num_draft_tokens is set to 12 by default for ngram speculative decoding. "
                    "You can override this by explicitly setting --speculative-num-draft-tokens."
                )
            if self.speculative_ngram_external_corpus_path is not None:
                if self.speculative_ngram_external_sam_budget <= 0:
                    raise ValueError(
                        "--speculative-ngram-external-sam-budget must be positive when "
                        "--speculative-ngram-external-corpus-path is set."
                    )
                if self.speculative_ngram_external_corpus_max_tokens <= 0:
                    raise ValueError(
                        "--speculative-ngram-external-corpus-max-tokens must be positive when "
                        "--speculative-ngram-external-corpus-path is set."
                    )
                if (
                    self.speculative_ngram_external_sam_budget
                    > self.speculative_num_draft_tokens - 1
                ):
                    raise ValueError(
                        "speculative_ngram_external_sam_budget must be less than or equal to "
                        f"speculative_num_draft_tokens - 1 ({self.speculative_num_draft_tokens - 1})."
                    )
            logger.warning(
                "The overlap scheduler and mixed chunked prefill are disabled because of "
                "using ngram speculative decoding."
            )

            if (
                self.speculative_eagle_topk > 1
                and self.page_size > 1
                and self.attention_backend != "flashinfer"
            ):
                raise ValueError(
                    f"speculative_eagle_topk({self.speculative_eagle_topk}) > 1 "
                    f"with page_size({self.page_size}) > 1 is unstable "
                    "and produces incorrect results for paged attention backends. "
                    "This combination is only supported for the 'flashinfer' backend."
                )
            if self.enable_dp_attention:
                # TODO: support dp attention for ngram speculative decoding
                raise ValueError(
                    "Currently ngram speculative decoding does not support dp attention."
                )

        if self.speculative_adaptive:
            from sglang.srt.speculative.adaptive_spec_params import (
                adaptive_unsupported_reason,
            )

            reason = adaptive_unsupported_reason(self)
            if reason is not None:
                logger.warning(
                    f"speculative_adaptive disabled: {reason}. "
                    "Falling back to static speculative params."
                )
                self.speculative_adaptive = False

    def verify(self, batch: ModelWorkerBatch):
        # Since batch.seq_lens is allocated in another stream, we need
        # record_stream() to prevent pytorch gc and reuse the gpu memory
        # while forward_stream is still running.
        batch.seq_lens.record_stream(
            torch.get_device_module(self.device).current_stream()
        )

        # Parse args
        verify_input: EagleVerifyInput = batch.spec_info
        verify_input.num_tokens_per_req = self.speculative_num_steps + 1
        bs = len(batch.seq_lens)

        # Batch 1: Target verify
        # Prepare for target verify in a separate stream
        with self.plan_stream_ctx:
            # Wait for the draft CUDA graph to finish before plan_stream
            # begins its work. Using an event is more targeted than
            # wait_stream(main_stream) — it only waits for draft GPU
            # work, not all queued main_stream operations.
            if self.plan_stream and hasattr(self, "_draft_done_event"):
                self.plan_stream.wait_event(self._draft_done_event)
            verify_forward_batch, can_run_cuda_graph = (
                verify_input.prepare_for_v2_verify(
                    self.req_to_token_pool,
                    batch,
                    self.target_worker,
                )
            )

        # Correct some buffers due to the overlap plan
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )

            # Some values such as custom_mask and position depend on the output of draft,
            # so the previous plan step used the wrong values. Here, we need to run the related
            # computation again to update them to the correct values.
            self.target_worker.model_runner.attn_backend.update_verify_buffers_to_fill_after_draft(
                verify_input,
                (
                    self.target_worker.model_runner.graph_runner.bs
                    if can_run_cuda_graph
                    else None
                ),
            )

        # Prepare grammar data on CPU if needed
        if batch.has_grammar:
            retrieve_next_token_cpu = verify_input.retrieve_next_token.cpu()
            retrieve_next_sibling_cpu = verify_input.retrieve_next_sibling.cpu()
            draft_tokens_cpu = verify_input.draft_token.view(
                verify_input.retrieve_next_token.shape
            ).cpu()

        # Run target verify batch in the main compute stream (GPU compute)
        forward_batch_output = self.target_worker.forward_batch_generation(
            model_worker_batch=None,
            forward_batch=verify_forward_batch,
            is_verify=True,
            skip_attn_backend_init=True,
        )
        logits_output = forward_batch_output.logits_output

        # Generate vocab mask for constrained decoding
        vocab_mask = None
        if batch.has_grammar:
            # Generate the logit mask for structured output.
            vocab_mask = generate_token_bitmask(
                batch.reqs,
                verify_input,
                retrieve_next_token_cpu,
                retrieve_next_sibling_cpu,
                draft_tokens_cpu,
                batch.sampling_info.vocab_size,
            )

            if vocab_mask is not None:
                assert verify_input.grammar is not None
                vocab_mask = vocab_mask.to(verify_input.retrieve_next_token.device)
                # NOTE: otherwise, this vocab mask will be the one from the previous extend stage
                # and will be applied to produce wrong results
                batch.sampling_info.vocab_mask = None

        # Sample
        maybe_detect_nan(logits_output.next_token_logits, "verify: target model logits")
        (
            predict,
            accept_lens,
            accept_index,
        ) = verify_input.sample(batch, logits_output, vocab_mask)
        new_seq_lens = batch.seq_lens + accept_lens

        # Update mamba state for hybrid GDN models after verification
        if (
            self.target_worker.model_runner.hybrid_gdn_config is not None
            or self.target_worker.model_runner.mamba2_config is not None
        ):
            self._mamba_verify_update(
                batch, verify_input, accept_lens, accept_index, bs
            )

        verify_done = torch.get_device_module(self.device).Event()
        verify_done.record()

        if not batch.forward_mode.is_idle():
            all_verified_id = predict[accept_index]
            verified_id = torch.empty_like(accept_lens, dtype=torch.int32)
            # specv2-fixes: stride = per-request width of all_verified_id, i.e.
            # accept_index.shape[1] (spec steps + 1). num_draft_tokens is the tree width:
            # equal for topk == 1, an over-read for topk > 1.
            fill_new_verified_id[(bs,)](
                all_verified_id,
                accept_lens,
                verified_id,
                accept_index.shape[1],
            )
        else:
            verified_id = torch.empty((0,), device=self.device, dtype=torch.int32)

        if batch.return_logprob and not batch.forward_mode.is_idle():
            compute_spec_v2_logprobs(
                batch, logits_output, predict, accept_index, self.speculative_num_steps
            )

        # specv2-fixes: tree drafting (topk > 1). The accepted path is scattered over the
        # tree's node slots; move it to the front of each request's block (target KV,
        # predict, hidden states): the scheduler resolve, the draft extend that follows
        # and the committed KV all read that chain layout. For topk == 1 the accepted
        # path already is the front chain (identity), so nothing runs.
        if not batch.forward_mode.is_idle() and self.topk > 1:

            def _compact_accept_to_front(x: torch.Tensor) -> torch.Tensor:
                # x is node-indexed ([bs * num_draft_tokens, ...]); accept_index holds
                # global node ids, -1 padded. Padded entries clamp to node 0 but land
                # past accept_lens, where nothing reads them.
                nd = self.speculative_num_draft_tokens
                s1 = accept_index.shape[1]
                safe = accept_index.to(torch.int64).clamp(min=0).reshape(-1)
                gathered = x[safe]
                out = x.clone(memory_format=torch.contiguous_format)
                out.view(bs, nd, *x.shape[1:])[:, :s1] = gathered.view(
                    bs, s1, *x.shape[1:]
                )
                return out

            # 0.5.11 semantics: the count includes the bonus slot, i.e. accept_lens.
            self.move_accepted_tokens_to_target_kvcache(batch, accept_index, accept_lens)
            predict = _compact_accept_to_front(predict)
            if logits_output.hidden_states is not None:
                logits_output.hidden_states = _compact_accept_to_front(
                    logits_output.hidden_states
                )
            # specv2-fixes: the routed-experts capture is a per-token tape keyed by KV slot
            # (finalize() scatters row r into out_cache_loc[r], requests read it back through
            # req_to_token). Its rows follow the tree nodes; move them with the accepted KV.
            routed_experts_output = forward_batch_output.routed_experts_output
            if routed_experts_output is not None:
                routed_experts_output.routed_experts = _compact_accept_to_front(
                    routed_experts_output.routed_experts
                )

        # Construct the next draft input
        next_draft_input = EagleDraftInput(
            verified_id=verified_id,
            new_seq_lens=new_seq_lens,
            verify_done=verify_done,
        )

        return GenerationBatchResult(
            logits_output=logits_output,
            next_token_ids=predict,
            can_run_cuda_graph=can_run_cuda_graph,
            next_draft_input=next_draft_input,
            accept_lens=accept_lens,
            routed_experts_output=forward_batch_output.routed_experts_output,
        )

    def move_accepted_tokens_to_target_kvcache(
        self,
        batch: ModelWorkerBatch,
        accept_index: torch.Tensor,
        num_accepted_drafts: torch.Tensor,
    ):
        """
        Move accepted tokens to the target KV cache.

        Args:
            batch: The batch to run.
            accept_index: The index of the accepted tokens.
            num_accepted_drafts: The length of the accepted tokens.
        """
        bs = len(batch.seq_lens)
        # specv2-fixes: one slot per accept_index element (bs * (spec steps + 1)).
        # bs * num_draft_tokens launched fill_accepted_out_cache_loc past the end of
        # accept_index for topk > 1. num_accepted_drafts here must include the bonus
        # slot (pass accept_lens), so that seq_lens + count covers every non -1 entry.
        size = bs * accept_index.shape[1]

        tgt_cache_loc = torch.zeros(
            size,
            dtype=torch.int64,
            device=self.device,
        )
        accepted_out_cache_loc = torch.zeros(
            size, dtype=torch.int64, device=self.device
        )
        assign_extend_cache_locs[(bs,)](
            batch.req_pool_indices,
            self.req_to_token_pool.req_to_token,
            batch.seq_lens,
            batch.seq_lens + num_accepted_drafts,
            tgt_cache_loc,
            self.req_to_token_pool.req_to_token.shape[1],
            next_power_of_2(bs),
        )
        fill_accepted_out_cache_loc[(size,)](
            accept_index,
            batch.out_cache_loc,
            accepted_out_cache_loc,
            next_power_of_2(size),
        )
        self.token_to_kv_pool_allocator.get_kvcache().move_kv_cache(
            tgt_cache_loc, accepted_out_cache_loc
        )

    def init_cuda_graphs(self):
        """Capture cuda graphs."""
        self.cuda_graph_runner = None
        self.cuda_graph_runner_for_draft_extend = None

        if self.server_args.disable_cuda_graph:
            return

        if self.server_args.model_impl == "mindspore":
            return

        Device2DraftCudaGraphRunner = {
            "npu": EAGLEDraftNpuGraphRunner,
            "cuda": EAGLEDraftCudaGraphRunner,
            "musa": EAGLEDraftCudaGraphRunner,
        }
        # Capture draft
        if self.speculative_num_steps > 1:
            tic = time.perf_counter()
            before_mem = get_available_gpu_memory(self.device, self.gpu_id)
            logger.info(
                f"Capture draft cuda graph begin. This can take up to several minutes. avail mem={before_mem:.2f} GB"
            )
            self.cuda_graph_runner = Device2DraftCudaGraphRunner[
                self.target_worker.device
            ](self)
            after_mem = get_available_gpu_memory(self.device, self.gpu_id)
            logger.info(
                f"Capture draft cuda graph end. Time elapsed: {time.perf_counter() - tic:.2f} s. mem usage={(before_mem - after_mem):.2f} GB. avail mem={after_mem:.2f} GB."
            )

        Device2ExtendCudaGraphRunner = {
            "npu": EAGLEDraftExtendNpuGraphRunner,
            "cuda": EAGLEDraftExtendCudaGraphRunner,
            "musa": EAGLEDraftCudaGraphRunner,
        }
        supports_hip_aiter_draft_extend_graph = False
        if _is_hip:
            # Keep import local so non-HIP environments do not require aiter.
            from sglang.srt.layers.attention.aiter_backend import (
                AiterMultiStepDraftBackend,
            )

            supports_hip_aiter_draft_extend_graph = isinstance(
                self.draft_attn_backend, AiterMultiStepDraftBackend
            )

        supports_cuda_draft_extend_graph = (_is_cuda or _is_musa) and (
            isinstance(self.draft_extend_attn_backend, TritonAttnBackend)
            or isinstance(self.draft_extend_attn_backend, TRTLLMMLABackend)
        )
        # specv2-fixes: the draft-extend graph of this release (runner buffers, triton
        # metadata) is sized for speculative_num_steps + 1 tokens per request, while spec v2
        # draft extend runs speculative_num_draft_tokens per request; they differ for tree
        # drafting (topk > 1), so draft extend runs eagerly then.
        draft_extend_width_matches = (
            self.speculative_num_draft_tokens == self.speculative_num_steps + 1
        )
        # Capture extend
        # TODO: support draft extend cuda graph for more attention backends
        if (
            self.draft_extend_attn_backend
            and draft_extend_width_matches
            and (
                _is_npu
                or supports_cuda_draft_extend_graph
                or supports_hip_aiter_draft_extend_graph
            )
        ):
            tic = time.perf_counter()
            before_mem = get_available_gpu_memory(self.device, self.gpu_id)
            logger.info(
                f"Capture draft extend cuda graph begin. This can take up to several minutes. avail mem={before_mem:.2f} GB"
            )
            self.cuda_graph_runner_for_draft_extend = Device2ExtendCudaGraphRunner[
                self.target_worker.device
            ](self)
            after_mem = get_available_gpu_memory(self.device, self.gpu_id)
            logger.info(
                f"Capture draft extend cuda graph end. Time elapsed: {time.perf_counter() - tic:.2f} s. mem usage={(before_mem - after_mem):.2f} GB. avail mem={after_mem:.2f} GB."
            )

    def self_check_during_busy(self: Scheduler):
        if self.last_batch is None:
            return

        spec_topk = self.server_args.speculative_eagle_topk or 1
        # specv2-fixes: spec v2 tree drafting allocates only in prepare_for_decode
        # (kv_allocated_len tracks it exactly) and frees nothing per verify, so the busy
        # check holds for it; only spec v1 tree drafting keeps the early return.
        is_spec_v2 = self.enable_overlap and not self.spec_algorithm.is_none()
        if spec_topk > 1 and not is_spec_v2:
            warnings.warn(
                "Runtime memory check (busy) is not supported when speculation topk > 1."
            )
            return

        ps = self.get_pool_stats()
        full_uncached, swa_uncached = self._get_total_uncached_sizes()

        full_leak, full_msg = self._check_full_pool(ps, uncached=full_uncached)

        swa_leak, swa_msg = False, ""
        if self.is_hybrid_swa:
            swa_leak, swa_msg = self._check_swa_pool(ps, uncached=swa_uncached)

        if envs.SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY.get() > 1:
            logger.info(f"[Mem Check (BUSY)] {full_msg}")
            if swa_msg:
                logger.info(f"[Mem Check (BUSY)] {swa_msg}")
        assert not full_leak, f"Full Pool Mem Leak Detected! {full_msg}"
        assert not swa_leak, f"SWA Pool Mem Leak Detected! {swa_msg}"


class v0_5_12:
    """Bodies for code line 0.5.12 (upstream source of 0.5.12, modified at ``# specv2-fixes:``)."""

    def _handle_speculative_decoding(self):
        if (
            self.speculative_draft_model_path is not None
            and self.speculative_draft_model_revision is None
        ):
            self.speculative_draft_model_revision = "main"

        if self.speculative_moe_runner_backend is None:
            self.speculative_moe_runner_backend = self.moe_runner_backend

        if self.speculative_algorithm is not None:
            self.speculative_algorithm = self.speculative_algorithm.upper()

        self.speculative_algorithm = _resolve_speculative_algorithm_alias(
            self.speculative_algorithm,
            self.speculative_draft_model_path,
            trust_remote_code=self.trust_remote_code,
        )

        if self.speculative_algorithm is not None:
            from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
            from sglang.srt.speculative.spec_registry import CustomSpecAlgo

            algo = SpeculativeAlgorithm.from_string(self.speculative_algorithm)

            # TODO: move the per-algorithm validation below into spec module hooks.
            if (
                isinstance(algo, CustomSpecAlgo)
                and algo.validate_server_args is not None
            ):
                algo.validate_server_args(self)

        if self.speculative_skip_dp_mlp_sync:
            assert self.speculative_algorithm == "EAGLE", (
                "--speculative-skip-dp-mlp-sync is only supported with "
                f"speculative_algorithm == EAGLE, got {self.speculative_algorithm}."
            )

        if self.speculative_algorithm == "DFLASH":
            if self.enable_dp_attention:
                raise ValueError(
                    "Currently DFLASH speculative decoding does not support dp attention."
                )

            if self.pp_size != 1:
                raise ValueError(
                    "Currently DFLASH speculative decoding only supports pp_size == 1."
                )

            if self.speculative_draft_model_path is None:
                raise ValueError(
                    "DFLASH speculative decoding requires setting --speculative-draft-model-path."
                )

            # DFLASH does not use EAGLE-style `num_steps`/`topk`, but those fields still
            # affect generic scheduler/KV-cache accounting (buffer sizing, KV freeing,
            # RoPE reservation). Force them to 1 to avoid surprising memory behavior.
            #
            # For DFlash, the natural unit is `block_size` (verify window length).
            if self.speculative_num_steps is None:
                self.speculative_num_steps = 1
            elif int(self.speculative_num_steps) != 1:
                logger.warning(
                    "DFLASH only supports speculative_num_steps == 1; overriding speculative_num_steps=%s to 1.",
                    self.speculative_num_steps,
                )
                self.speculative_num_steps = 1

            if self.speculative_eagle_topk is None:
                self.speculative_eagle_topk = 1
            elif int(self.speculative_eagle_topk) != 1:
                logger.warning(
                    "DFLASH only supports speculative_eagle_topk == 1; overriding speculative_eagle_topk=%s to 1.",
                    self.speculative_eagle_topk,
                )
                self.speculative_eagle_topk = 1

            if self.speculative_dflash_block_size is not None:
                if int(self.speculative_dflash_block_size) <= 0:
                    raise ValueError(
                        "DFLASH requires --speculative-dflash-block-size to be positive, "
                        f"got {self.speculative_dflash_block_size}."
                    )
                if self.speculative_num_draft_tokens is not None and int(
                    self.speculative_num_draft_tokens
                ) != int(self.speculative_dflash_block_size):
                    raise ValueError(
                        "Both --speculative-num-draft-tokens and --speculative-dflash-block-size are set "
                        "but they differ. For DFLASH they must match. "
                        f"speculative_num_draft_tokens={self.speculative_num_draft_tokens}, "
                        f"speculative_dflash_block_size={self.speculative_dflash_block_size}."
                    )
                self.speculative_num_draft_tokens = int(
                    self.speculative_dflash_block_size
                )

            window_size = None
            if self.speculative_draft_window_size is not None:
                window_size = int(self.speculative_draft_window_size)
                if window_size <= 0:
                    raise ValueError(
                        f"--speculative-draft-window-size must be positive, got {window_size}."
                    )
                self.speculative_draft_window_size = window_size

            if self.speculative_num_draft_tokens is None:
                from sglang.srt.speculative.dflash_utils import (
                    parse_dflash_draft_config,
                )

                model_override_args = json.loads(self.json_model_override_args)
                inferred_block_size = None
                try:
                    from sglang.srt.utils.hf_transformers_utils import get_config

                    draft_hf_config = get_config(
                        self.speculative_draft_model_path,
                        trust_remote_code=self.trust_remote_code,
                        revision=self.speculative_draft_model_revision,
                        model_override_args=model_override_args,
                    )
                    inferred_block_size = parse_dflash_draft_config(
                        draft_hf_config=draft_hf_config
                    ).resolve_block_size(default=None)
                except Exception as e:
                    logger.warning(
                        "Failed to infer DFLASH block_size from draft model config; "
                        "defaulting speculative_num_draft_tokens to 16. Error: %s",
                        e,
                    )

                if inferred_block_size is None:
                    inferred_block_size = 16
                    logger.warning(
                        "speculative_num_draft_tokens is not set; defaulting to %d for DFLASH.",
                        inferred_block_size,
                    )
                self.speculative_num_draft_tokens = inferred_block_size

            if window_size is not None:
                draft_tokens = int(self.speculative_num_draft_tokens)
                if window_size < draft_tokens:
                    raise ValueError(
                        "--speculative-draft-window-size must be >= "
                        "--speculative-num-draft-tokens (block_size). "
                        f"window_size={window_size}, block_size={draft_tokens}."
                    )

            if self.max_running_requests is None:
                self.max_running_requests = 48
                logger.warning(
                    "Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting --max-running-requests."
                )

            self.disable_overlap_schedule = True
            logger.warning(
                "Overlap scheduler is disabled when using DFLASH speculative decoding (spec v2 is not supported yet)."
            )

            if self.enable_mixed_chunk:
                self.enable_mixed_chunk = False
                logger.warning(
                    "Mixed chunked prefill is disabled because of using dflash speculative decoding."
                )

        if self.speculative_algorithm == "FROZEN_KV_MTP":
            if self.max_running_requests is None:
                self.max_running_requests = 48
                logger.warning(
                    "Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting --max-running-requests."
                )

            self.disable_overlap_schedule = True
            logger.warning(
                "Overlap scheduler is disabled when using Frozen-KV MTP speculative decoding (spec v2 is not supported yet)."
            )

            if self.enable_mixed_chunk:
                self.enable_mixed_chunk = False
                logger.warning(
                    "Mixed chunked prefill is disabled because of using "
                    "Frozen-KV MTP speculative decoding."
                )

        if self.speculative_algorithm in ("EAGLE", "EAGLE3", "STANDALONE"):
            if self.speculative_algorithm == "STANDALONE" and self.enable_dp_attention:
                # TODO: support dp attention for standalone speculative decoding
                raise ValueError(
                    "Currently standalone speculative decoding does not support dp attention."
                )

            if self.max_running_requests is None:
                self.max_running_requests = 48
                logger.warning(
                    "Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting --max-running-requests."
                )

            spec_v1_reason = None
            # specv2-fixes: the topk > 1 -> spec v1 decision and the v1/v2 log line moved
            # below auto_choose_speculative_params: decided here they missed an
            # auto-chosen topk > 1 (e.g. steps 5 / topk 4 / 8 draft tokens) and left it on
            # the spec v2 path.
            if (
                not envs.SGLANG_ENABLE_SPEC_V2.get()
                and not self.disable_overlap_schedule
            ):
                self.disable_overlap_schedule = True
                spec_v1_reason = "SGLANG_ENABLE_SPEC_V2=False"

            if self.enable_mixed_chunk:
                self.enable_mixed_chunk = False
                logger.warning(
                    "Mixed chunked prefill is disabled because of using "
                    "eagle speculative decoding."
                )

            model_arch = self.get_model_config().hf_config.architectures[0]
            if model_arch in [
                "DeepseekV32ForCausalLM",
                "DeepseekV3ForCausalLM",
                "DeepseekV4ForCausalLM",
                "Glm4MoeForCausalLM",
                "Glm4MoeLiteForCausalLM",
                "GlmMoeDsaForCausalLM",
                "BailingMoeForCausalLM",
                "BailingMoeV2ForCausalLM",
                "BailingMoeV2_5ForCausalLM",
                "MistralLarge3ForCausalLM",
                "PixtralForConditionalGeneration",
                "HYV3ForCausalLM",
            ]:
                if self.speculative_draft_model_path is None:
                    self.speculative_draft_model_path = self.model_path
                    self.speculative_draft_model_revision = self.revision
                else:
                    if model_arch not in [
                        "MistralLarge3ForCausalLM",
                        "PixtralForConditionalGeneration",
                    ]:
                        logger.warning(
                            "DeepSeek MTP does not require setting speculative_draft_model_path."
                        )

            if self.speculative_num_steps is None:
                assert (
                    self.speculative_eagle_topk is None
                    and self.speculative_num_draft_tokens is None
                )
                (
                    self.speculative_num_steps,
                    self.speculative_eagle_topk,
                    self.speculative_num_draft_tokens,
                ) = auto_choose_speculative_params(self)

            if (
                self.attention_backend == "trtllm_mha"
                or self.decode_attention_backend == "trtllm_mha"
                or self.prefill_attention_backend == "trtllm_mha"
            ):
                if self.speculative_eagle_topk > 1:
                    raise ValueError(
                        "trtllm_mha backend only supports topk = 1 for speculative decoding."
                    )

            if (
                self.speculative_eagle_topk == 1
                and self.speculative_num_draft_tokens != self.speculative_num_steps + 1
            ):
                logger.warning(
                    "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1"
                )
                self.speculative_num_draft_tokens = self.speculative_num_steps + 1

            # specv2-fixes: route topk > 1 on the final (explicit or auto-chosen) params.
            # Spec v2 tree drafting keeps the overlap scheduler only where its path is
            # complete in this release; everything else falls back to spec v1. A
            # disable_overlap_schedule that is already set is never undone.
            if self.speculative_eagle_topk > 1 and not self.disable_overlap_schedule:

                def _is_hybrid_linear_attn_model():
                    # Same model families the scheduler treats as Mamba / GDN / linear
                    # attention (ModelRunner.mambaish_config), read from the config only.
                    import sglang.srt.configs as hybrid_configs
                    from sglang.srt.configs.linear_attn_model_registry import (
                        get_linear_attn_config,
                    )

                    hf_config = self.get_model_config().hf_config
                    if (
                        get_linear_attn_spec_by_arch(hf_config.architectures[0])
                        is not None
                        or get_linear_attn_config(hf_config) is not None
                    ):
                        return True
                    hybrid_names = (
                        "BailingHybridConfig",
                        "FalconH1Config",
                        "InternS2PreviewConfig",
                        "JetNemotronConfig",
                        "JetVLMConfig",
                        "KimiLinearConfig",
                        "Lfm2Config",
                        "Lfm2MoeConfig",
                        "Lfm2VlConfig",
                        "NemotronHConfig",
                        "NemotronH_Nano_VL_V2_Config",
                        "Qwen3NextConfig",
                        "Qwen3_5Config",
                        "Qwen3_5MoeConfig",
                    )
                    hybrid_classes = tuple(
                        getattr(hybrid_configs, name)
                        for name in hybrid_names
                        if hasattr(hybrid_configs, name)
                    )
                    granite_cls = getattr(hybrid_configs, "GraniteMoeHybridConfig", None)
                    get_text_config = getattr(hf_config, "get_text_config", None)
                    candidates = [hf_config]
                    if get_text_config is not None:
                        candidates.append(get_text_config())
                    for cfg in candidates:
                        if granite_cls is not None and isinstance(cfg, granite_cls):
                            return any(
                                t == "mamba" for t in (getattr(cfg, "layer_types", None) or [])
                            )
                        if isinstance(cfg, hybrid_classes):
                            return True
                    return False

                def _spec_v2_tree_unsupported_reason():
                    if self.page_size is not None and self.page_size > 1:
                        return (
                            "spec v2 tree drafting (topk > 1) requires page_size == 1, "
                            f"got page_size={self.page_size}"
                        )
                    if self.enable_multi_layer_eagle:
                        return "spec v2 tree drafting (topk > 1) is not supported by multi-layer EAGLE"
                    if (
                        self.enable_dp_attention
                        or self.moe_dense_tp_size == 1
                        or self.moe_a2a_backend not in (None, "none")
                    ):
                        return (
                            "spec v2 tree drafting (topk > 1) is not supported with MLP-sync "
                            "token padding (DP attention / moe_dense_tp_size=1 / MoE A2A) in this release"
                        )
                    if self.use_mla_backend():
                        return (
                            "spec v2 tree drafting (topk > 1) needs a target KV move that the MLA "
                            "KV pool of this release lacks"
                        )
                    backends = set(self.get_attention_backends())
                    if self.speculative_draft_attention_backend is not None:
                        backends.add(self.speculative_draft_attention_backend)
                    unsupported = sorted(
                        str(b) for b in backends if b not in ("fa3", "flashinfer", "triton")
                    )
                    if unsupported:
                        return (
                            "spec v2 tree drafting (topk > 1) is only enabled for the fa3, "
                            f"flashinfer and triton attention backends, got {', '.join(unsupported)}"
                        )
                    if _is_hybrid_linear_attn_model():
                        return (
                            "spec v2 tree drafting (topk > 1) does not support hybrid "
                            "Mamba/GDN/linear-attention models"
                        )
                    return None

                tree_v1_reason = _spec_v2_tree_unsupported_reason()
                if tree_v1_reason is not None:
                    self.disable_overlap_schedule = True
                    spec_v1_reason = tree_v1_reason

            if self.disable_overlap_schedule:
                logger.warning(
                    "Spec v1 is used for eagle/eagle3/standalone speculative decoding because %s.",
                    spec_v1_reason or "overlap schedule is disabled",
                )
            elif self.speculative_eagle_topk > 1:
                logger.warning(
                    "Spec v2 is enabled with tree drafting (topk=%s, page_size=1) for "
                    "eagle/eagle3/standalone speculative decoding.",
                    self.speculative_eagle_topk,
                )
            else:
                logger.warning(
                    "Spec v2 is enabled by default for eagle/eagle3/standalone speculative decoding."
                )

            if (
                self.speculative_eagle_topk > 1
                and self.page_size > 1
                and self.attention_backend not in ["flashinfer", "fa3"]
            ):
                raise ValueError(
                    "speculative_eagle_topk > 1 with page_size > 1 is unstable and produces incorrect results for paged attention backends. This combination is only supported for the 'flashinfer' backend."
                )

        if self.speculative_algorithm == "NGRAM":
            if not self.device.startswith("cuda"):
                raise ValueError(
                    "Ngram speculative decoding only supports CUDA device."
                )

            if self.max_running_requests is None:
                self.max_running_requests = 48
                logger.warning(
                    "Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting --max-running-requests."
                )

            self.disable_overlap_schedule = True
            self.enable_mixed_chunk = False
            self.speculative_eagle_topk = self.speculative_ngram_max_bfs_breadth
            if self.speculative_num_draft_tokens is None:
                self.speculative_num_draft_tokens = 12
                logger.warning(
                    "speculative_num_draft_tokens is set to 12 by default for ngram speculative decoding. "
                    "You can override this by explicitly setting --speculative-num-draft-tokens."
                )
            if self.speculative_ngram_external_corpus_path is not None:
                if self.speculative_ngram_external_sam_budget <= 0:
                    raise ValueError(
                        "--speculative-ngram-external-sam-budget must be positive when "
                        "--speculative-ngram-external-corpus-path is set."
                    )
                if self.speculative_ngram_external_corpus_max_tokens <= 0:
                    raise ValueError(
                        "--speculative-ngram-external-corpus-max-tokens must be positive when "
                        "--speculative-ngram-external-corpus-path is set."
                    )
                if (
                    self.speculative_ngram_external_sam_budget
                    > self.speculative_num_draft_tokens - 1
                ):
                    raise ValueError(
                        "speculative_ngram_external_sam_budget must be less than or equal to "
                        f"speculative_num_draft_tokens - 1 ({self.speculative_num_draft_tokens - 1})."
                    )
            logger.warning(
                "The overlap scheduler and mixed chunked prefill are disabled because of "
                "using ngram speculative decoding."
            )

            if (
                self.speculative_eagle_topk > 1
                and self.page_size > 1
                and self.attention_backend != "flashinfer"
            ):
                raise ValueError(
                    f"speculative_eagle_topk({self.speculative_eagle_topk}) > 1 "
                    f"with page_size({self.page_size}) > 1 is unstable "
                    "and produces incorrect results for paged attention backends. "
                    "This combination is only supported for the 'flashinfer' backend."
                )
            if self.enable_dp_attention:
                # TODO: support dp attention for ngram speculative decoding
                raise ValueError(
                    "Currently ngram speculative decoding does not support dp attention."
                )

        if self.speculative_adaptive:
            from sglang.srt.speculative.adaptive_spec_params import (
                adaptive_unsupported_reason,
            )

            reason = adaptive_unsupported_reason(self)
            if reason is not None:
                logger.warning(
                    f"speculative_adaptive disabled: {reason}. "
                    "Falling back to static speculative params."
                )
                self.speculative_adaptive = False

    def verify(self, batch: ModelWorkerBatch):
        # Since batch.seq_lens is allocated in another stream, we need
        # record_stream() to prevent pytorch gc and reuse the gpu memory
        # while forward_stream is still running.
        batch.seq_lens.record_stream(
            torch.get_device_module(self.device).current_stream()
        )

        # Parse args
        verify_input: EagleVerifyInput = batch.spec_info
        verify_input.num_tokens_per_req = self.speculative_num_steps + 1
        bs = len(batch.seq_lens)

        # Batch 1: Target verify
        # Prepare for target verify in a separate stream
        with self.plan_stream_ctx:
            # Wait for the draft CUDA graph to finish before plan_stream
            # begins its work. Using an event is more targeted than
            # wait_stream(main_stream) — it only waits for draft GPU
            # work, not all queued main_stream operations.
            if self.plan_stream and hasattr(self, "_draft_done_event"):
                self.plan_stream.wait_event(self._draft_done_event)
            verify_forward_batch, can_run_cuda_graph = (
                verify_input.prepare_for_v2_verify(
                    self.req_to_token_pool,
                    batch,
                    self.target_worker,
                )
            )

        # Correct some buffers due to the overlap plan
        if self.plan_stream:
            torch.get_device_module(self.device).current_stream().wait_stream(
                self.plan_stream
            )
            if (
                _is_npu
                and self._target_worker.model_runner.model_is_mrope
                and batch.spec_info is not None
                and getattr(batch.spec_info, "positions", None) is not None
                and not batch.forward_mode.is_idle()
            ):
                # mrope_position depends on draft output in default stream and is computed in plan stream,
                # causing errors. Compute it here for correct values.
                verify_forward_batch.compute_spec_mrope_positions(
                    self._target_worker.model_runner, batch
                )

            # Some values such as custom_mask and position depend on the output of draft,
            # so the previous plan step used the wrong values. Here, we need to run the related
            # computation again to update them to the correct values.
            self.target_worker.model_runner.attn_backend.update_verify_buffers_to_fill_after_draft(
                verify_input,
                (
                    self.target_worker.model_runner.graph_runner.bs
                    if can_run_cuda_graph
                    else None
                ),
            )

        # Prepare grammar data on CPU if needed
        if batch.has_grammar:
            retrieve_next_token_cpu = verify_input.retrieve_next_token.cpu()
            retrieve_next_sibling_cpu = verify_input.retrieve_next_sibling.cpu()
            draft_tokens_cpu = verify_input.draft_token.view(
                verify_input.retrieve_next_token.shape
            ).cpu()

        # Run target verify batch in the main compute stream (GPU compute)
        forward_batch_output = self.target_worker.forward_batch_generation(
            model_worker_batch=None,
            forward_batch=verify_forward_batch,
            is_verify=True,
            skip_attn_backend_init=True,
        )
        logits_output = forward_batch_output.logits_output

        # Generate vocab mask for constrained decoding
        vocab_mask = None
        if batch.has_grammar:
            # Generate the logit mask for structured output.
            vocab_mask = generate_token_bitmask(
                batch.reqs,
                verify_input,
                retrieve_next_token_cpu,
                retrieve_next_sibling_cpu,
                draft_tokens_cpu,
                batch.sampling_info.vocab_size,
            )

            if vocab_mask is not None:
                assert verify_input.grammar is not None
                vocab_mask = vocab_mask.to(verify_input.retrieve_next_token.device)
                # NOTE: otherwise, this vocab mask will be the one from the previous extend stage
                # and will be applied to produce wrong results
                batch.sampling_info.vocab_mask = None

        # Sample
        maybe_detect_nan(logits_output.next_token_logits, "verify: target model logits")
        (
            predict,
            accept_lens,
            accept_index,
        ) = verify_input.sample(batch, logits_output, vocab_mask)
        new_seq_lens = batch.seq_lens + accept_lens

        # Update mamba state for hybrid GDN models after verification
        if (
            self.target_worker.model_runner.hybrid_gdn_config is not None
            or self.target_worker.model_runner.mamba2_config is not None
        ):
            self._mamba_verify_update(
                batch, verify_input, accept_lens, accept_index, bs
            )

        verify_done = torch.get_device_module(self.device).Event()
        verify_done.record()

        if not batch.forward_mode.is_idle():
            accept_tokens = predict[accept_index]
            bonus_tokens = torch.empty_like(accept_lens, dtype=torch.int32)
            # specv2-fixes: stride = per-request width of accept_tokens, i.e.
            # accept_index.shape[1] (spec steps + 1). num_draft_tokens is the tree width:
            # equal for topk == 1, an over-read for topk > 1.
            fill_bonus_tokens[(bs,)](
                accept_tokens,
                accept_lens,
                bonus_tokens,
                accept_index.shape[1],
            )
        else:
            bonus_tokens = torch.empty((0,), device=self.device, dtype=torch.int32)

        if batch.return_logprob and not batch.forward_mode.is_idle():
            compute_spec_v2_logprobs(
                batch, logits_output, predict, accept_index, self.speculative_num_steps
            )

        # specv2-fixes: tree drafting (topk > 1). The accepted path is scattered over the
        # tree's node slots; move it to the front of each request's block (target KV,
        # predict, hidden states): the scheduler resolve, the draft extend that follows
        # and the committed KV all read that chain layout. For topk == 1 the accepted
        # path already is the front chain (identity), so nothing runs.
        if not batch.forward_mode.is_idle() and self.topk > 1:

            def _compact_accept_to_front(x: torch.Tensor) -> torch.Tensor:
                # x is node-indexed ([bs * num_draft_tokens, ...]); accept_index holds
                # global node ids, -1 padded. Padded entries clamp to node 0 but land
                # past accept_lens, where nothing reads them.
                nd = self.speculative_num_draft_tokens
                s1 = accept_index.shape[1]
                safe = accept_index.to(torch.int64).clamp(min=0).reshape(-1)
                gathered = x[safe]
                out = x.clone(memory_format=torch.contiguous_format)
                out.view(bs, nd, *x.shape[1:])[:, :s1] = gathered.view(
                    bs, s1, *x.shape[1:]
                )
                return out

            # 0.5.12 semantics: num_correct_drafts (excludes the bonus slot).
            self.move_accepted_tokens_to_target_kvcache(
                batch, accept_index, accept_lens - 1
            )
            predict = _compact_accept_to_front(predict)
            if logits_output.hidden_states is not None:
                logits_output.hidden_states = _compact_accept_to_front(
                    logits_output.hidden_states
                )
            # specv2-fixes: the state captures (routed experts, indexer top-k) are per-token
            # tapes keyed by KV slot (finalize() scatters row r into out_cache_loc[r],
            # requests read them back through req_to_token). Their rows follow the tree
            # nodes; move them with the accepted KV.
            for capture_output in (
                forward_batch_output.routed_experts_output,
                forward_batch_output.indexer_topk_output,
            ):
                if capture_output is not None:
                    capture_output.topk = _compact_accept_to_front(capture_output.topk)

        # Construct the next draft input
        next_draft_input = EagleDraftInput(
            bonus_tokens=bonus_tokens,
            new_seq_lens=new_seq_lens,
            verify_done=verify_done,
        )

        return GenerationBatchResult(
            logits_output=logits_output,
            next_token_ids=predict,
            can_run_cuda_graph=can_run_cuda_graph,
            speculative_num_draft_tokens=self.speculative_num_draft_tokens,
            next_draft_input=next_draft_input,
            accept_lens=accept_lens,
            routed_experts_output=forward_batch_output.routed_experts_output,
            indexer_topk_output=forward_batch_output.indexer_topk_output,
        )

    def move_accepted_tokens_to_target_kvcache(
        self,
        batch: ModelWorkerBatch,
        accept_index: torch.Tensor,
        num_correct_drafts: torch.Tensor,
    ):
        """
        Move accepted tokens (drafts + bonus) to the target KV cache.

        Args:
            batch: The batch to run.
            accept_index: The index of the accepted tokens (incl. bonus).
            num_correct_drafts: Per-req count of correct drafts (excludes bonus);
                seq_lens is advanced by ``num_correct_drafts + 1`` to cover the bonus slot.
        """
        bs = len(batch.seq_lens)
        # specv2-fixes: one slot per accept_index element (bs * (spec steps + 1)).
        # bs * num_draft_tokens launched fill_accepted_out_cache_loc past the end of
        # accept_index for topk > 1.
        size = bs * accept_index.shape[1]

        tgt_cache_loc = torch.zeros(
            size,
            dtype=torch.int64,
            device=self.device,
        )
        accepted_out_cache_loc = torch.zeros(
            size, dtype=torch.int64, device=self.device
        )
        assign_extend_cache_locs[(bs,)](
            batch.req_pool_indices,
            self.req_to_token_pool.req_to_token,
            batch.seq_lens,
            batch.seq_lens + num_correct_drafts + 1,
            tgt_cache_loc,
            self.req_to_token_pool.req_to_token.shape[1],
            next_power_of_2(bs),
        )
        fill_accepted_out_cache_loc[(size,)](
            accept_index,
            batch.out_cache_loc,
            accepted_out_cache_loc,
            next_power_of_2(size),
        )
        self.token_to_kv_pool_allocator.get_kvcache().move_kv_cache(
            tgt_cache_loc, accepted_out_cache_loc
        )

    def init_cuda_graphs(self):
        """Capture cuda graphs."""
        self.cuda_graph_runner = None
        self.cuda_graph_runner_for_draft_extend = None

        if self.server_args.disable_cuda_graph:
            return

        if self.server_args.model_impl == "mindspore":
            return

        Device2DraftCudaGraphRunner = {
            "npu": EAGLEDraftNpuGraphRunner,
            "cuda": EAGLEDraftCudaGraphRunner,
            "musa": EAGLEDraftCudaGraphRunner,
        }
        # Capture draft
        if self.speculative_num_steps > 1:
            tic = time.perf_counter()
            before_mem = get_available_gpu_memory(self.device, self.gpu_id)
            log_info_on_rank0(
                logger,
                f"Capture draft cuda graph begin. This can take up to several minutes. avail mem={before_mem:.2f} GB",
            )
            self.cuda_graph_runner = Device2DraftCudaGraphRunner[
                self.target_worker.device
            ](self)
            after_mem = get_available_gpu_memory(self.device, self.gpu_id)
            log_info_on_rank0(
                logger,
                f"Capture draft cuda graph end. Time elapsed: {time.perf_counter() - tic:.2f} s. mem usage={(before_mem - after_mem):.2f} GB. avail mem={after_mem:.2f} GB.",
            )

        Device2ExtendCudaGraphRunner = {
            "npu": EAGLEDraftExtendNpuGraphRunner,
            "cuda": EAGLEDraftExtendCudaGraphRunner,
            "musa": EAGLEDraftCudaGraphRunner,
        }
        supports_hip_aiter_draft_extend_graph = False
        if _is_hip:
            # Keep import local so non-HIP environments do not require aiter.
            from sglang.srt.layers.attention.aiter_backend import (
                AiterMultiStepDraftBackend,
            )

            supports_hip_aiter_draft_extend_graph = isinstance(
                self.draft_attn_backend, AiterMultiStepDraftBackend
            )

        supports_cuda_draft_extend_graph = (_is_cuda or _is_musa) and (
            isinstance(self.draft_extend_attn_backend, TritonAttnBackend)
            or isinstance(self.draft_extend_attn_backend, TRTLLMMLABackend)
        )
        # specv2-fixes: the draft-extend graph of this release (runner buffers, triton
        # metadata) is sized for speculative_num_steps + 1 tokens per request, while spec v2
        # draft extend runs speculative_num_draft_tokens per request; they differ for tree
        # drafting (topk > 1), so draft extend runs eagerly then.
        draft_extend_width_matches = (
            self.speculative_num_draft_tokens == self.speculative_num_steps + 1
        )
        # Capture extend
        # TODO: support draft extend cuda graph for more attention backends
        if (
            self.draft_extend_attn_backend
            and draft_extend_width_matches
            and (
                _is_npu
                or supports_cuda_draft_extend_graph
                or supports_hip_aiter_draft_extend_graph
            )
        ):
            tic = time.perf_counter()
            before_mem = get_available_gpu_memory(self.device, self.gpu_id)
            log_info_on_rank0(
                logger,
                f"Capture draft extend cuda graph begin. This can take up to several minutes. avail mem={before_mem:.2f} GB",
            )
            self.cuda_graph_runner_for_draft_extend = Device2ExtendCudaGraphRunner[
                self.target_worker.device
            ](self)
            after_mem = get_available_gpu_memory(self.device, self.gpu_id)
            log_info_on_rank0(
                logger,
                f"Capture draft extend cuda graph end. Time elapsed: {time.perf_counter() - tic:.2f} s. mem usage={(before_mem - after_mem):.2f} GB. avail mem={after_mem:.2f} GB.",
            )

    def self_check_during_busy(self: Scheduler):
        if self.last_batch is None:
            return

        spec_topk = self.server_args.speculative_eagle_topk or 1
        # specv2-fixes: spec v2 tree drafting allocates only in prepare_for_decode
        # (kv_allocated_len tracks it exactly) and frees nothing per verify, so the busy
        # check holds for it; only spec v1 tree drafting keeps the early return.
        is_spec_v2 = self.enable_overlap and not self.spec_algorithm.is_none()
        if spec_topk > 1 and not is_spec_v2:
            warnings.warn(
                "Runtime memory check (busy) is not supported when speculation topk > 1."
            )
            return

        ps = self.get_pool_stats()
        full_uncached, swa_uncached = self._get_total_uncached_sizes()

        full_leak, full_msg = self._check_full_pool(ps, uncached=full_uncached)

        swa_leak, swa_msg = False, ""
        if self.is_hybrid_swa:
            swa_leak, swa_msg = self._check_swa_pool(ps, uncached=swa_uncached)

        if envs.SGLANG_ENABLE_STRICT_MEM_CHECK_DURING_BUSY.get() > 1:
            logger.info(f"[Mem Check (BUSY)] {full_msg}")
            if swa_msg:
                logger.info(f"[Mem Check (BUSY)] {swa_msg}")
        assert not full_leak, f"Full Pool Mem Leak Detected! {full_msg}"
        assert not swa_leak, f"SWA Pool Mem Leak Detected! {swa_msg}"


def _patches(ns, fp):
    return [
        # Routing runs in the process that builds ServerArgs; the scheduler processes receive the
        # already-routed (pickled) ServerArgs and never re-run __post_init__.
        Patch(
            module=SERVER_ARGS,
            qualname="ServerArgs._handle_speculative_decoding",
            fingerprint=fp["routing"],
            body=(ns, "_handle_speculative_decoding"),
            processes=("launcher",),
        ),
        Patch(
            module=WORKER,
            qualname="EAGLEWorkerV2.verify",
            fingerprint=fp["verify"],
            body=(ns, "verify"),
        ),
        Patch(
            module=WORKER,
            qualname="EAGLEWorkerV2.move_accepted_tokens_to_target_kvcache",
            fingerprint=fp["move"],
            body=(ns, "move_accepted_tokens_to_target_kvcache"),
        ),
        Patch(
            module=WORKER,
            qualname="EagleDraftWorker.init_cuda_graphs",
            fingerprint=fp["graphs"],
            body=(ns, "init_cuda_graphs"),
        ),
        Patch(
            module=CHECKER,
            qualname="SchedulerRuntimeCheckerMixin.self_check_during_busy",
            fingerprint=fp["busy"],
            body=(ns, "self_check_during_busy"),
        ),
    ]


FIX = Fix(
    name="tree-drafting",
    pr="#26866",
    title="spec v2 tree drafting (EAGLE topk > 1) with page_size == 1",
    what=(
        "ServerArgs._handle_speculative_decoding routes topk > 1 after auto_choose_speculative_params "
        "(page_size == 1 dense models on fa3/flashinfer/triton keep spec v2, everything else spec v1 "
        "with a warning); EAGLEWorkerV2.verify uses the accepted width as bonus stride and compacts the "
        "accepted tree path (target KV via move_accepted_tokens_to_target_kvcache, predict, hidden "
        "states) to the front of each request block; move_accepted_tokens_to_target_kvcache launches "
        "bs * accept_index.shape[1]; EagleDraftWorker.init_cuda_graphs skips the num_steps+1-wide "
        "draft-extend graph for trees; the busy leak check runs for spec v2 tree drafting"
    ),
    why=(
        "default EAGLE/EAGLE3 params (auto-chosen topk 4) keep the overlap scheduler on and run the "
        "unfinished spec v2 tree path: out-of-bounds reads (device-side assert 'vectorized gather "
        "kernel index out of bounds' under concurrency) and wrong bonus tokens / hidden states / KV"
    ),
    removal=(
        "delete when 0.5.11 and 0.5.12.x leave the supported releases (upstream re-landed it in "
        "0.5.13.post1, where spec v1 is gone)"
    ),
    lines={
        "0.5.11": _patches(
            v0_5_11,
            {
                "routing": "3420876c1c697d04",
                "verify": "164ff56133eabf1b",
                "move": "f2d0796f2e73ee70",
                "graphs": "4b4930479c0b3d5f",
                "busy": "8bde503ff0b6e98e",
            },
        ),
        "0.5.12": _patches(
            v0_5_12,
            {
                "routing": "086308d9058d9a51",
                "verify": "4725a85acbb4557b",
                "move": "cb3099a90b637b9a",
                "graphs": "1a216285477a2d53",
                "busy": "8bde503ff0b6e98e",
            },
        ),
        "0.5.13.post1": ReleaseNote(
            UPSTREAM,
            "upstream (EAGLEWorkerV2._finalize_accept_tree_path; spec v1 removed, page_size > 1 trees supported); "
            "the routed-experts / indexer top-k compaction this plugin adds on 0.5.11/0.5.12.x is still open there",
            check=(WORKER, "EAGLEWorkerV2._finalize_accept_tree_path", "262f15c339d14aee"),
        ),
        **{
            line: ReleaseNote(
                UPSTREAM,
                "upstream (EAGLEWorkerV2._finalize_accept_tree_path; spec v1 removed); the routed-experts / "
                "indexer top-k compaction is still open there (verify returns them uncompacted)",
                check=(WORKER, "EAGLEWorkerV2._finalize_accept_tree_path", "2ce7801a49d5769b"),
            )
            for line in ("0.5.14", "0.5.15")
        },
        **{
            line: ReleaseNote(
                UPSTREAM,
                "upstream (moved to eagle_worker_common._finalize_accept_tree_path, called from the shared "
                "verify for topk > 1); the routed-experts / indexer top-k compaction is still open there",
                check=("sglang.srt.speculative.eagle_worker_common", "_finalize_accept_tree_path", "763824351d7a2f90"),
            )
            for line in ("0.5.16", "0.5.17")
        },
    },
)
