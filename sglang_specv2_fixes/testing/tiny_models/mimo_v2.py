"""Tiny MiMo-V2-Flash shape (config.json + tokenizer, no weights) for multi-layer EAGLE on a GPU with
``--load-format dummy``.

`build(out_dir)` writes OUT_DIR/mimo_v2 once per stamp (``llama.build_once``); the same folder is the target
(``MiMoV2FlashForCausalLM``) and the draft (``--speculative-draft-model-path``: ``ModelConfig._config_draft_model``
renames the architecture to ``MiMoV2MTP``). With ``--speculative-algorithm EAGLE`` ServerArgs
``_handle_model_specific_adjustments`` sets ``enable_multi_layer_eagle`` for MiMoV2 archs (0.5.11 … 0.5.15.post1),
so SGLang runs ``MultiLayerEagleWorkerV2``: one draft ModelRunner per step (``TpModelWorker.
_init_multi_layer_eagle_model_runners``, ``draft_model_idx`` 0 … num_steps-1), each a one-layer ``MiMoV2MTP``.

Served with ``--attention-backend fa3`` (tests/registered/test_grammar_multi_layer.py, fa3 carried to the GPU
machine in parts: ci/gpu/lease.sh fa3-parts / add / inst). Nothing else the device bundle has can serve it: flashinfer refuses the ``sinks=``
every MiMo-V2 attention call passes; triton with CUDA graphs gives the sliding-window MTP layer no window indices
in the draft-extend graph (known bug ``triton-draft-extend-swa``), and triton eager meets a ``seq_lens_sum`` of None
in the multi-layer draft on 0.5.13 … 0.5.15.post1 (``multi-layer-tree-mask-seq-lens-sum``).

Shape: hidden 256, 4 target layers (2 full, 2 sliding-window), all dense MLP (intermediate 512), 4 query heads,
vocab 1024 (``llama.write_tokenizer``). Non-obvious fields (file:function of the releases that read them):

* ``architectures`` ``MiMoV2FlashForCausalLM``: the text-only alias (models/mimo_v2.py ``EntryClass``);
  ``MiMoV2ForCausalLM`` is also the multimodal arch (configs/model_config.py ``MIMO_V2_MULTIMODAL_ARCHS``) and the
  one ServerArgs ``_handle_model_specific_adjustments`` checks for a fused-qkv TP layout.
* ``model_type`` ``llama``: no transformers release pinned by 0.5.11 … 0.5.15.post1 (5.6.0, 5.8.1, 5.12.1) knows
  ``mimo_v2_flash`` (the hub checkpoint ships remote code); ``LlamaConfig`` keeps every extra key as an attribute.
  It moves ``rope_theta`` into ``rope_parameters`` (rope_type ``default``), which mimo_v2.py
  ``MiMoV2DecoderLayer.__init__`` / mimo_v2_nextn.py ``MiMoV2MTPLayer.__init__`` map back to no scaling and
  ``getattr(config, "rope_theta", 10000)``: so ``rope_theta`` is 10000, the same either way.
* ``hybrid_layer_pattern`` [0, 1, 1, 0] (1 = sliding window): ``MiMoV2DecoderLayer.is_swa_layer`` and
  configs/model_config.py ``get_hybrid_layer_ids`` (swa [1, 2], full [0, 3]). Every MiMoV2 arch is hybrid SWA
  (``is_hybrid_swa_model``); the MTP layer is always sliding-window (``MiMoV2MTPLayer``; ``get_hybrid_layer_ids``
  swa [0], full []).
* ``sliding_window_size`` (read by ``MiMoV2DecoderLayer`` / ``MiMoV2MTPLayer``) and ``sliding_window`` (the hub key;
  ``ModelConfig._get_sliding_window_size`` tries ``sliding_window_size`` first): 16, so short prompts already
  slide out of the window.
* full and SWA attention: 2 KV heads each, 4 query heads, head dim 64 for Q/K and V (hub: 4 vs 8 KV heads,
  192 / 128). The triton backend (``TritonAttnBackend.__init__``) sizes its kernels from one KV head count and one
  V head dim for every layer; with the hub's asymmetric heads (tried first: 1 vs 2 KV heads, V dim 32) the first
  prefill on the GPU hit an illegal memory access (0.5.14). The SWA pool still gets its own
  ``swa_*`` fields (``model_runner_kv_cache_mixin.py``, ``is_hybrid_swa_compress``).
* ``add_swa_attention_sink_bias`` true, ``add_full_attention_sink_bias`` false (hub values): sinks on the SWA layers
  and the MTP layer (``MiMoV2Attention``; ``ModelConfig._detect_attention_sinks``); fa3 and triton take ``sinks``.
* ``partial_rotary_factor`` 0.5, ``attention_value_scale`` 0.707, ``swa_rope_theta``: ``MiMoV2Attention``.
* ``moe_layer_freq`` all 0: ``MiMoV2DecoderLayer.is_moe_layer`` is false for every layer, so no MoE (the MTP layer is
  always dense ``MiMoV2MLP``). No ``n_routed_experts``: only ``MiMoV2ForCausalLM.load_weights`` reads it, which the
  dummy loader (model_loader/loader.py ``DummyModelLoader.load_model``) never calls.
* ``num_nextn_predict_layers`` 3: the target ModelRunner sizes the draft KV share from it (model_runner.py
  ``eagle_draft_num_layers``); each draft runner holds one layer (``model_num_layers = 1`` for ``MiMoV2MTP``).
  ``--speculative-num-steps`` is not checked against it.
* ``layernorm_epsilon`` (not ``rms_norm_eps``), ``attention_bias``, ``hidden_act`` silu: read unguarded.
"""
from . import llama as tm

NAME = "mimo_v2"
H, I, L, NH, V = tm.H, 512, 4, tm.NH, tm.V
HD, VHD = 64, 64                       # Q/K head dim, V head dim (full and SWA)
FULL_KV, SWA_KV = 2, 2
PATTERN = [0, 1, 1, 0]                 # 0 full, 1 sliding window
WINDOW = 16
MTP_LAYERS = 3


def config():
    return {
        "architectures": ["MiMoV2FlashForCausalLM"], "model_type": "llama",
        "hidden_size": H, "intermediate_size": I, "num_hidden_layers": L, "vocab_size": V,
        "num_attention_heads": NH, "num_key_value_heads": FULL_KV, "head_dim": HD, "v_head_dim": VHD,
        "swa_num_attention_heads": NH, "swa_num_key_value_heads": SWA_KV, "swa_head_dim": HD, "swa_v_head_dim": VHD,
        "hybrid_layer_pattern": PATTERN, "sliding_window_size": WINDOW, "sliding_window": WINDOW,
        "add_swa_attention_sink_bias": True, "add_full_attention_sink_bias": False,
        "moe_layer_freq": [0] * L, "num_nextn_predict_layers": MTP_LAYERS,
        "partial_rotary_factor": 0.5, "rope_theta": 10000.0, "swa_rope_theta": 10000.0, "rope_scaling": None,
        "attention_value_scale": 0.707, "attention_bias": False, "hidden_act": "silu", "layernorm_epsilon": 1e-5,
        "max_position_embeddings": 4096, "tie_word_embeddings": False, "initializer_range": 0.02,
        "use_cache": True, "bos_token_id": tm.BOS, "eos_token_id": tm.EOS, "pad_token_id": tm.PAD,
        "torch_dtype": "bfloat16",
    }


def build(out_dir):
    """Write OUT_DIR/mimo_v2 (config.json + tokenizer files) once per stamp; return its path."""
    return tm.build_shape(out_dir, NAME, config(), __file__)
