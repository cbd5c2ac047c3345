#!/usr/bin/env python3
"""Real-size model *shapes* for the serving benchmark: config.json + tokenizer only, served with dummy weights.

    python3 bench/real_size_models.py [OUT_DIR] [--model 8b|70b|dsv3-reduced]   # writes OUT_DIR/{target[,eagle3]};
                                                                                 # prints a JSON summary

Llama shapes: ``target``, a Llama-3.1-8B-shaped (``8b``, default) or Llama-3.1/3.3-70B-shaped ``LlamaForCausalLM``
(``SHAPES``, untied lm_head; ~8.0 / ~70.6 B parameters); ``eagle3``, a 1-layer ``LlamaForCausalLMEagle3`` draft of the
same width, shaped like the public EAGLE3 drafts of those models (draft vocab 32000, its own lm_head, the target's
embedding, SGLang's default aux layers). ``dsv3-reduced``: ``target`` only, a ``DeepseekV3ForCausalLM`` with
DeepSeek-V3's widths (hidden 7168, 128 MLA heads, q / kv LoRA ranks 1536 / 512, rope / nope / v head dims 64 / 128 /
128, expert width 2048, vocab 129280) reduced in depth and experts to fit two servers on one GPU: 8 of 61 layers (the
first 3 dense, as in V3), 16 of 256 routed experts (8 per token, 8 groups, top 4 groups) + 1 shared; ~8.3 B
parameters, and its one NextN (MTP) layer is the draft (``--speculative-algorithm EAGLE``, no draft path: SGLang takes
the target's). Every target gets the tiny models' word-level tokenizer design over its full vocabulary
(``sglang_specv2_fixes.testing.tiny_models.llama``: no download). No weights: the benchmark serves these with
``--load-format dummy --speculative-draft-load-format dummy``, so acceptance comes from ``SGLANG_SIMULATE_ACC_LEN``.
``build(out_dir, model)`` writes once per stamp (this file and the tiny-model module), under the tiny models' file
lock. Default OUT_DIR: $SPECV2_REAL_SIZE_MODELS (else /tmp/specv2-real-size-models), ``-70b`` appended for 70b.
"""

from __future__ import annotations

import json
import os
import sys
import time

# target shapes: Llama-3.1-8B and Llama-3.1/3.3-70B; their EAGLE3 drafts are 1 layer of the same width
SHAPES = {
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
               num_key_value_heads=8, head_dim=128, vocab_size=128256),
    "70b": dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
                num_key_value_heads=8, head_dim=128, vocab_size=128256),
}
# DeepSeek-V3's widths, reduced in depth (8 of 61 layers) and routed experts (16 of 256): labelled as reduced
SHAPES["dsv3-reduced"] = dict(
    hidden_size=7168, intermediate_size=18432, num_hidden_layers=8, num_attention_heads=128,
    num_key_value_heads=128, q_lora_rank=1536, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
    v_head_dim=128, n_routed_experts=16, num_experts_per_tok=8, n_shared_experts=1, moe_intermediate_size=2048,
    first_k_dense_replace=3, n_group=8, topk_group=4, vocab_size=129280)
NAMES = {"8b": "Llama-3.1-8B-shaped", "70b": "Llama-3.1-70B-shaped",
         "dsv3-reduced": "DeepSeek-V3-shaped, reduced (8 of 61 layers, 16 of 256 routed experts)"}
DEFAULT_MODEL = "8b"
DRAFT_VOCAB = 32000
CONTEXT = 8192           # max_position_embeddings of both: ample for the benchmark's 200 + 256 tokens
ROPE_THETA = 500000.0
MODELS = ("target", "eagle3")


def is_mla(model):
    """A DeepSeek-V3-class shape (MLA + MoE, its NextN layer the draft) rather than Llama + EAGLE3."""
    return "kv_lora_rank" in SHAPES[model]


def model_names(model=DEFAULT_MODEL):
    """The folders ``build`` writes: the target, and the EAGLE3 draft where the shape has one."""
    return ("target",) if is_mla(model) else MODELS


def tiny():
    """The tiny Llama models' module (tokenizer design, config(), build_once, file_stamp)."""
    from sglang_specv2_fixes.testing.tiny_models import llama

    return llama


def default_dir(model=DEFAULT_MODEL):
    base = os.environ.get("SPECV2_REAL_SIZE_MODELS", "/tmp/specv2-real-size-models")
    return base if model == DEFAULT_MODEL else f"{base}-{model}"  # 8b keeps the folder earlier runs used


def target_config(model=DEFAULT_MODEL):
    t = tiny()
    shape = SHAPES[model]
    if is_mla(model):
        return dict(
            architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3", **shape, moe_layer_freq=1,
            topk_method="noaux_tc", scoring_func="sigmoid", norm_topk_prob=True, routed_scaling_factor=2.5,
            ep_size=1, num_nextn_predict_layers=1, max_position_embeddings=CONTEXT, rope_theta=10000.0,
            rope_scaling=None, rms_norm_eps=1e-6, hidden_act="silu", attention_bias=False, attention_dropout=0.0,
            tie_word_embeddings=False, initializer_range=0.02, use_cache=True, bos_token_id=t.BOS,
            eos_token_id=t.EOS, pad_token_id=t.PAD, torch_dtype="bfloat16")
    return t.config("LlamaForCausalLM", shape["num_hidden_layers"], **shape,
                    max_position_embeddings=CONTEXT, rope_theta=ROPE_THETA)


def draft_config(model=DEFAULT_MODEL):
    t = tiny()
    shape = dict(SHAPES[model], num_hidden_layers=1)
    return t.config("LlamaForCausalLMEagle3", 1, **shape, draft_vocab_size=DRAFT_VOCAB,
                    max_position_embeddings=CONTEXT, rope_theta=ROPE_THETA)


def build(out_dir=None, model=DEFAULT_MODEL):
    """Write (once per stamp) and return {"target": dir[, "eagle3": dir]} (``model_names``)."""
    out_dir = os.path.abspath(out_dir or default_dir(model))
    paths = {n: os.path.join(out_dir, n) for n in model_names(model)}
    cfgs = {"target": target_config(model)}
    if "eagle3" in paths:
        cfgs["eagle3"] = draft_config(model)

    def write():
        for n, p in paths.items():
            os.makedirs(p, exist_ok=True)
            with open(os.path.join(p, "config.json"), "w") as f:
                json.dump(cfgs[n], f, indent=1)
            tiny().write_tokenizer(p, SHAPES[model]["vocab_size"], CONTEXT)

    outputs = [os.path.join(p, f) for p in paths.values() for f in ("config.json", "tokenizer.json")]
    tiny().build_once(out_dir, tiny().file_stamp(os.path.abspath(__file__), tiny().__file__), write, outputs)
    return paths


def describe_mla(model):
    """``describe`` of a DeepSeek-V3-class shape: parameters of the target (without its NextN layer) and of the NextN
    layer (its embedding and lm_head are the target's), MLA's latent KV bytes per token."""
    s = SHAPES[model]
    h, nh, v = s["hidden_size"], s["num_attention_heads"], s["vocab_size"]
    qlr, kvlr, rope, nope, vhd = (s[k] for k in ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim",
                                                 "qk_nope_head_dim", "v_head_dim"))
    attn = (h * qlr + qlr + qlr * nh * (nope + rope) + h * (kvlr + rope) + kvlr + kvlr * nh * (nope + vhd)
            + nh * vhd * h)
    dense = 3 * h * s["intermediate_size"]
    e = s["n_routed_experts"]
    moe = (e + s["n_shared_experts"]) * 3 * h * s["moe_intermediate_size"] + e * h  # experts, router (bias: buffer)
    layers, k = s["num_hidden_layers"], s["first_k_dense_replace"]
    target = k * (attn + dense + 2 * h) + (layers - k) * (attn + moe + 2 * h) + 2 * v * h + h
    draft = attn + moe + 2 * h + 2 * h * h + 3 * h  # decoder layer, eh_proj, enorm / hnorm / its final norm
    kv = (kvlr + rope) * 2  # the compressed latent + rope key, bf16
    return dict(s, shape=model, name=NAMES[model], draft="NextN (MTP), 1 layer, from the target's checkpoint",
                target_params_b=round(target / 1e9, 2), draft_params_b=round(draft / 1e9, 2),
                kv_bytes_per_token=layers * kv, draft_kv_bytes_per_token=kv, weights="dummy (--load-format dummy)")


def describe(model=DEFAULT_MODEL):
    """What the benchmark records about the models (meta.real_size.model)."""
    if is_mla(model):
        return describe_mla(model)
    shape = SHAPES[model]
    h, layers, inter = shape["hidden_size"], shape["num_hidden_layers"], shape["intermediate_size"]
    nh, nkv, hd, v = (shape[k] for k in ("num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size"))
    per_layer = h * (nh * hd) + 2 * h * (nkv * hd) + (nh * hd) * h + 3 * h * inter + 2 * h
    target_params = layers * per_layer + 2 * v * h + h
    draft_params = (3 * h * h + 2 * h * (nh * hd) + 4 * h * (nkv * hd) + (nh * hd) * h + 3 * h * inter + 4 * h
                    + DRAFT_VOCAB * h)  # fc, midlayer (qkv on 2h), norms, lm_head; embedding shared
    return dict(shape, shape=model, name=NAMES[model], draft="EAGLE3, 1 layer", draft_vocab_size=DRAFT_VOCAB,
                target_params_b=round(target_params / 1e9, 2), draft_params_b=round(draft_params / 1e9, 2),
                kv_bytes_per_token=layers * 2 * nkv * hd * 2, draft_kv_bytes_per_token=2 * nkv * hd * 2,
                weights="dummy (--load-format dummy)")


def main(argv=None):
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", nargs="?", default=None)
    ap.add_argument("--model", choices=list(SHAPES), default=DEFAULT_MODEL)
    a = ap.parse_args(sys.argv[1:] if argv is None else argv)
    t0 = time.time()
    paths = build(a.out_dir, a.model)
    print(json.dumps(dict(paths, model=describe(a.model), seconds=round(time.time() - t0, 2))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
