#!/usr/bin/env python3
"""Real-size model *shapes* for the serving benchmark: config.json + tokenizer only, served with dummy weights.

    python3 bench/real_size_models.py OUT_DIR        # writes OUT_DIR/{target,eagle3}; prints a JSON summary

* ``target``: a Llama-3.1-8B-shaped ``LlamaForCausalLM`` (hidden 4096, 32 layers, intermediate 14336, 32 heads /
  8 KV heads of 128, vocab 128256, untied lm_head; ~8.0 B parameters, ~16 GB in bf16);
* ``eagle3``: a 1-layer ``LlamaForCausalLMEagle3`` draft of the same width, shaped like the public
  EAGLE3-LLaMA3.1-Instruct-8B draft (``draft_vocab_size`` 32000, its own lm_head; the embedding comes from the
  target; default aux layers of the target: 2 / 16 / 29);
* both with a word-level tokenizer of the full 128256 ids (made with ``tokenizers``, no download): the design of
  the tiny models' tokenizer (``sglang_specv2_fixes.testing.tiny_models.llama``: specials 0..6, id i >= 7 is
  ``t{i}``), same special tokens, chat template and helpers, imported from there.

No weights are written: the benchmark serves these with ``--load-format dummy`` and
``--speculative-draft-load-format dummy`` (SGLang's dummy init: small random values, so acceptance comes from
``SGLANG_SIMULATE_ACC_LEN``, set the same on both servers). ``build(out_dir)`` writes once per stamp (the hash of
this file and the tiny-model module it borrows from), under the tiny models' file lock.
"""

from __future__ import annotations

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Llama-3.1-8B / EAGLE3-LLaMA3.1-Instruct-8B shapes
TARGET_SHAPE = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                    num_key_value_heads=8, head_dim=128, vocab_size=128256)
DRAFT_VOCAB = 32000
CONTEXT = 8192           # max_position_embeddings of both: ample for the benchmark's 200 + 256 tokens
ROPE_THETA = 500000.0
MODELS = ("target", "eagle3")


def tiny():
    """The tiny Llama models' module (tokenizer design, config(), build_once, file_stamp)."""
    from sglang_specv2_fixes.testing.tiny_models import llama

    return llama


def default_dir():
    return os.environ.get("SPECV2_REAL_SIZE_MODELS", "/tmp/specv2-real-size-models")


def target_config():
    t = tiny()
    return t.config("LlamaForCausalLM", TARGET_SHAPE["num_hidden_layers"], **TARGET_SHAPE,
                    max_position_embeddings=CONTEXT, rope_theta=ROPE_THETA)


def draft_config():
    t = tiny()
    shape = dict(TARGET_SHAPE, num_hidden_layers=1)
    return t.config("LlamaForCausalLMEagle3", 1, **shape, draft_vocab_size=DRAFT_VOCAB,
                    max_position_embeddings=CONTEXT, rope_theta=ROPE_THETA)


def write_tokenizer(d, vocab_size):
    """tiny_models.llama.write_tokenizer with ``vocab_size`` ids (it writes the tiny vocabulary of 1024)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    t = tiny()
    tk = Tokenizer(models.WordLevel({t.tok_name(i): i for i in range(vocab_size)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.decoder = decoders.WordPiece(prefix="##", cleanup=False)   # joins tokens with spaces
    tk.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in t.SPECIALS])
    tk.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B",
                                                      special_tokens=[("<s>", t.BOS)])
    tk.save(os.path.join(d, "tokenizer.json"))
    sp = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
    tc = dict(sp, tokenizer_class="PreTrainedTokenizerFast", model_max_length=CONTEXT,
              add_bos_token=True, add_eos_token=False, clean_up_tokenization_spaces=False,
              chat_template=t.CHAT_TEMPLATE)
    for name, obj in [("tokenizer_config.json", tc), ("special_tokens_map.json", sp),
                      ("generation_config.json", {"bos_token_id": t.BOS, "eos_token_id": t.EOS,
                                                  "pad_token_id": t.PAD})]:
        with open(os.path.join(d, name), "w") as f:
            json.dump(obj, f, indent=1)


def stamp():
    import hashlib

    h = hashlib.sha256()
    for path in (os.path.abspath(__file__), tiny().__file__):
        with open(path, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def build(out_dir=None):
    """Write (once per stamp) and return {"target": dir, "eagle3": dir}."""
    out_dir = os.path.abspath(out_dir or default_dir())
    paths = {n: os.path.join(out_dir, n) for n in MODELS}
    cfgs = {"target": target_config(), "eagle3": draft_config()}

    def write():
        for n, p in paths.items():
            os.makedirs(p, exist_ok=True)
            with open(os.path.join(p, "config.json"), "w") as f:
                json.dump(cfgs[n], f, indent=1)
            write_tokenizer(p, TARGET_SHAPE["vocab_size"])

    outputs = [os.path.join(p, f) for p in paths.values() for f in ("config.json", "tokenizer.json")]
    tiny().build_once(out_dir, stamp(), write, outputs)
    return paths


def describe():
    """What the benchmark records about the models (meta.real_size.model)."""
    h, layers, inter = TARGET_SHAPE["hidden_size"], TARGET_SHAPE["num_hidden_layers"], TARGET_SHAPE["intermediate_size"]
    nh, nkv, hd, v = (TARGET_SHAPE[k] for k in ("num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size"))
    per_layer = h * (nh * hd) + 2 * h * (nkv * hd) + (nh * hd) * h + 3 * h * inter + 2 * h
    target_params = layers * per_layer + 2 * v * h + h
    draft_params = (3 * h * h + 2 * h * (nh * hd) + 4 * h * (nkv * hd) + (nh * hd) * h + 3 * h * inter + 4 * h
                    + DRAFT_VOCAB * h)  # fc, midlayer (qkv on 2h), norms, lm_head; embedding shared
    return dict(TARGET_SHAPE, draft="EAGLE3, 1 layer", draft_vocab_size=DRAFT_VOCAB,
                target_params_b=round(target_params / 1e9, 2), draft_params_b=round(draft_params / 1e9, 2),
                kv_bytes_per_token=layers * 2 * nkv * hd * 2, weights="dummy (--load-format dummy)")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        print(__doc__.strip())
        return 2
    t0 = time.time()
    paths = build(argv[0])
    print(json.dumps(dict(paths, model=describe(), seconds=round(time.time() - t0, 2))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
