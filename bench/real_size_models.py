#!/usr/bin/env python3
"""Real-size model *shapes* for the serving benchmark: config.json + tokenizer only, served with dummy weights.

    python3 bench/real_size_models.py [OUT_DIR] [--model 8b|70b]   # writes OUT_DIR/{target,eagle3}; prints a JSON summary

``target``: a Llama-3.1-8B-shaped (``8b``, default) or Llama-3.1/3.3-70B-shaped ``LlamaForCausalLM`` (``SHAPES``,
untied lm_head; ~8.0 / ~70.6 B parameters); ``eagle3``: a 1-layer ``LlamaForCausalLMEagle3`` draft of the same width,
shaped like the public EAGLE3 drafts of those models (draft vocab 32000, its own lm_head, the target's embedding,
SGLang's default aux layers). Both get the tiny models' word-level tokenizer design over the full 128256 ids
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
NAMES = {"8b": "Llama-3.1-8B", "70b": "Llama-3.1-70B"}
DEFAULT_MODEL = "8b"
DRAFT_VOCAB = 32000
CONTEXT = 8192           # max_position_embeddings of both: ample for the benchmark's 200 + 256 tokens
ROPE_THETA = 500000.0
MODELS = ("target", "eagle3")


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
    return t.config("LlamaForCausalLM", shape["num_hidden_layers"], **shape,
                    max_position_embeddings=CONTEXT, rope_theta=ROPE_THETA)


def draft_config(model=DEFAULT_MODEL):
    t = tiny()
    shape = dict(SHAPES[model], num_hidden_layers=1)
    return t.config("LlamaForCausalLMEagle3", 1, **shape, draft_vocab_size=DRAFT_VOCAB,
                    max_position_embeddings=CONTEXT, rope_theta=ROPE_THETA)


def build(out_dir=None, model=DEFAULT_MODEL):
    """Write (once per stamp) and return {"target": dir, "eagle3": dir}."""
    out_dir = os.path.abspath(out_dir or default_dir(model))
    paths = {n: os.path.join(out_dir, n) for n in MODELS}
    cfgs = {"target": target_config(model), "eagle3": draft_config(model)}

    def write():
        for n, p in paths.items():
            os.makedirs(p, exist_ok=True)
            with open(os.path.join(p, "config.json"), "w") as f:
                json.dump(cfgs[n], f, indent=1)
            tiny().write_tokenizer(p, SHAPES[model]["vocab_size"], CONTEXT)

    outputs = [os.path.join(p, f) for p in paths.values() for f in ("config.json", "tokenizer.json")]
    tiny().build_once(out_dir, tiny().file_stamp(os.path.abspath(__file__), tiny().__file__), write, outputs)
    return paths


def describe(model=DEFAULT_MODEL):
    """What the benchmark records about the models (meta.real_size.model)."""
    shape = SHAPES[model]
    h, layers, inter = shape["hidden_size"], shape["num_hidden_layers"], shape["intermediate_size"]
    nh, nkv, hd, v = (shape[k] for k in ("num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size"))
    per_layer = h * (nh * hd) + 2 * h * (nkv * hd) + (nh * hd) * h + 3 * h * inter + 2 * h
    target_params = layers * per_layer + 2 * v * h + h
    draft_params = (3 * h * h + 2 * h * (nh * hd) + 4 * h * (nkv * hd) + (nh * hd) * h + 3 * h * inter + 4 * h
                    + DRAFT_VOCAB * h)  # fc, midlayer (qkv on 2h), norms, lm_head; embedding shared
    return dict(shape, shape=model, name=f"{NAMES[model]}-shaped", draft="EAGLE3, 1 layer", draft_vocab_size=DRAFT_VOCAB,
                target_params_b=round(target_params / 1e9, 2), draft_params_b=round(draft_params / 1e9, 2),
                kv_bytes_per_token=layers * 2 * nkv * hd * 2, weights="dummy (--load-format dummy)")


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
