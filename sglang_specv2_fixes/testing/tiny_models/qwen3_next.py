"""Tiny Qwen3-Next shape (config.json + tokenizer, no weights): a hybrid linear-attention target (Gated DeltaNet
layers mixed with full attention) for spec v2 EAGLE / MTP rows on a GPU with ``--load-format dummy``.

`build(out_dir)` writes OUT_DIR/qwen3_next once per stamp (``llama.build_once``); the same folder is the target
(``Qwen3NextForCausalLM``) and the draft (``--speculative-draft-model-path``: ``ModelConfig._config_draft_model``
renames the architecture to ``Qwen3NextForCausalLMMTP`` and sets ``num_nextn_predict_layers`` 1). The draft model
(models/qwen3_next_mtp.py ``Qwen3NextForCausalLMMTP.__init__``) builds one full-attention layer from the same config
(``num_hidden_layers`` 1, ``full_attention_interval`` 1: on a deep copy from 0.5.13 on, in place before). Both
runners are hybrid GDN: ``hf_config`` is SGLang's ``Qwen3NextConfig`` (model_type ``qwen3_next``, utils/
hf_transformers/common.py ``_CONFIG_REGISTRY``), which ``ModelRunner.hybrid_gdn_config`` (0.5.11 … 0.5.15.post1)
and configs/hybrid_arch.py ``hybrid_gdn_config`` (0.5.16, 0.5.17) detect by ``isinstance``; layers/attention/
attention_registry.py ``attn_backend_wrapper`` then wraps the full-attention backend in ``HybridLinearAttnBackend``.

Server flags of a row (ServerArgs resolved on CPU with ``prepare_server_args`` for 0.5.11 … 0.5.17):
* ``--speculative-algorithm NEXTN`` (ServerArgs turns it into ``EAGLE``; ``EAGLE`` works the same) and
  ``--speculative-draft-model-path <this folder>``: unlike the DeepSeek / GLM MTP archs, ServerArgs does not fill the
  draft path for Qwen3-Next, and tp_worker.py ``_init_model_config`` loads the draft from it.
* ``--speculative-eagle-topk 1`` (0.5.11 … 0.5.12.post1 turn the overlap scheduler, hence spec v2, off for topk > 1),
  e.g. ``--speculative-num-steps 3 --speculative-num-draft-tokens 4``; no ``--disable-overlap-schedule``.
  ``SGLANG_ENABLE_SPEC_V2`` is on by default in 0.5.11 … 0.5.13.post1 (``0`` means spec v1) and removed in 0.5.14+
  (only a warning).
* ``--mamba-scheduler-strategy extra_buffer``: required on 0.5.11 … 0.5.13.post1 (``_handle_mamba_radix_cache``:
  spec + radix cache + ``no_buffer`` raises ValueError); 0.5.14+ take it as the deprecated alias of
  ``--mamba-radix-cache-strategy`` and pick ``extra_buffer`` with spec by themselves. Radix cache stays on.
* ``--load-format dummy --speculative-draft-load-format dummy``; page size 1 (the default) passes the extra_buffer
  checks (``mamba_track_interval`` 256 % page size, FLA_CHUNK_SIZE 64 vs page size).
* ``--attention-backend triton`` (the rows' COMMON) or ``fa3`` (the SM90 default for topk 1): both resolve; the
  linear layers run ``--linear-attn-backend`` triton (default; FLA kernels).

Shape: hidden 256, 4 target layers (linear 0-2, full 3), every layer MoE (8 experts, top 2, intermediate 256, one
shared expert 256), vocab 1024 (``llama.write_tokenizer``). Non-obvious fields (file:function of the releases):

* ``full_attention_interval`` 4: configs/qwen3_next.py ``Qwen3NextConfig.layers_block_type`` (layer l is full
  attention iff (l+1) % interval == 0; ``linear_layer_ids`` [0, 1, 2], ``full_attention_layer_ids`` [3]); models/
  qwen3_next.py ``Qwen3NextModel.__init__`` picks the decoder class from it. ``layer_types`` (the HF key) is read by
  no release, so it is left out. Same pattern as the hub (48 layers, interval 4): layer 0 is linear.
* ``linear_num_key_heads`` 2, ``linear_num_value_heads`` 4, ``linear_key_head_dim`` / ``linear_value_head_dim`` 128,
  ``linear_conv_kernel_dim`` 4: ``Qwen3GatedDeltaNet.__init__`` and ``Qwen3NextConfig.mamba2_cache_params`` (state
  per layer: temporal (4, 128, 128), conv dim 2*256+512). Head dims are the hub's (the FLA kernels' tested size);
  value heads = 2 x key heads as on the hub (16 / 32).
* ``num_attention_heads`` 4, ``num_key_value_heads`` 2, ``head_dim`` 256, ``partial_rotary_factor`` 0.25:
  ``Qwen3HybridAttentionDecoderLayer.__init__`` (q projection doubled by ``attn_output_gate``, default on; rotary dim
  64). head_dim 256 is the hub's; rotary_embedding/base.py ``RotaryEmbedding`` has its CUDA kernel for 64/128/256/512.
* ``num_experts`` 8, ``num_experts_per_tok`` 2, ``moe_intermediate_size`` 256, ``shared_expert_intermediate_size``
  256, ``norm_topk_prob``: MoE is not optional (``is_layer_sparse = True`` hard-coded in both decoder layers, so
  ``decoder_sparse_step`` / ``mlp_only_layers`` / ``intermediate_size`` are read by no release and left out);
  models/qwen2_moe.py ``Qwen2MoeSparseMoeBlock`` (shared expert + ``shared_expert_gate`` when its size > 0).
* ``num_nextn_predict_layers`` 1: the draft gets 1 anyway (``_config_draft_model``); on the target it only marks
  the model as MTP-capable (model_runner.py ``model_has_mtp_layers``; layer count stays ``num_hidden_layers``).
* ``rope_theta`` 10000, ``rope_scaling`` null: SGLang's ``Qwen3NextConfig`` keeps ``rope_parameters`` None, so
  ``Qwen3HybridAttentionDecoderLayer`` passes no scaling to ``get_rope``. ``rms_norm_eps`` (GemmaRMSNorm, the GDN
  gated norm), ``hidden_act`` silu, ``dtype`` bfloat16 (``config.torch_dtype`` of the GDN norm).

Checked on CPU: each release's ModelConfig (tests/cpu/test_tiny_qwen3_next.py), ServerArgs with the flags above,
and building ``Qwen3NextForCausalLM`` and ``Qwen3NextForCausalLMMTP`` on the meta device (0.5.11 … 0.5.17, ad hoc).
Not checked without a GPU: the FLA / triton GDN kernels, fused MoE and attention kernels with these sizes, mamba
pool sizing under the rows' ``--mem-fraction-static`` / ``--max-total-tokens``, CUDA graphs of the draft.
"""
from . import llama as tm

NAME = "qwen3_next"
H, L, V = tm.H, 4, tm.V
NH, NKV, HD = 4, 2, 256                # full attention: query heads, KV heads, head dim
INTERVAL = 4                           # layer l is full attention iff (l + 1) % INTERVAL == 0
LINEAR, FULL = [0, 1, 2], [3]
LK, LV, LKD, LVD, CONV = 2, 4, 128, 128, 4   # GDN key / value heads, key / value head dim, conv kernel
E, TOPK, IM, SIM = 8, 2, 256, 256      # experts, top-k, expert and shared-expert intermediate size
MTP_LAYERS = 1


def config():
    return {
        "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
        "hidden_size": H, "num_hidden_layers": L, "vocab_size": V,
        "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": HD, "partial_rotary_factor": 0.25,
        "full_attention_interval": INTERVAL,
        "linear_num_key_heads": LK, "linear_num_value_heads": LV, "linear_key_head_dim": LKD,
        "linear_value_head_dim": LVD, "linear_conv_kernel_dim": CONV,
        "num_experts": E, "num_experts_per_tok": TOPK, "moe_intermediate_size": IM,
        "shared_expert_intermediate_size": SIM, "norm_topk_prob": True, "num_nextn_predict_layers": MTP_LAYERS,
        "rope_theta": 10000.0, "rope_scaling": None, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6,
        "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False, "initializer_range": 0.02,
        "use_cache": True, "bos_token_id": tm.BOS, "eos_token_id": tm.EOS, "pad_token_id": tm.PAD,
        "dtype": "bfloat16",
    }


def build(out_dir):
    """Write OUT_DIR/qwen3_next (config.json + tokenizer files) once per stamp; return its path."""
    return tm.build_shape(out_dir, NAME, config(), __file__)
