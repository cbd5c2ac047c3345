"""Offline, deterministic tiny real-weight GPT-OSS (``GptOssForCausalLM``) for the hybrid-SWA row.

`python -m sglang_specv2_fixes.testing.tiny_models.swa OUT_DIR [--check]` writes OUT_DIR/gptoss_swa (bf16 safetensors in the
Hugging Face GPT-OSS layout + config.json + tokenizer files) and prints a one-line JSON summary;
`build(out_dir)` does the same from Python and returns the model dir (skipped when its .stamp matches
this file, llama.py and the torch version).

Why GPT-OSS: it is the one architecture that SGLang 0.5.11 and 0.5.12.post1 both route to the hybrid
SWA KV pool (configs/model_config.py ``is_hybrid_swa_model`` -> SWAKVPool + SWATokenToKVPoolAllocator +
SWARadixCache) that also runs on the device bundle: ``--attention-backend triton`` (sliding window and
attention sinks are implemented there), bf16 experts through SGLang's own triton fused MoE
(``--moe-runner-backend triton``; the GPT-OSS swiglu(alpha, limit) runs as a torch.compile'd function).

Design: the same deterministic walk as llama.py, so greedy text is known in advance and the tiny
EAGLE3 draft built there (no embedding of its own: it uses the target's) drafts this target as well as
the Llama one:
* ``model.embed_tokens``, ``model.norm`` and ``lm_head`` are tiny_models' target tensors (token slot
  one-hot + const dim; lm_head maps slot -> next walk token 3.5 logits above a fixed runner-up list).
* 8 layers, ``layer_types`` alternating sliding (window ``SLIDING_WINDOW`` = 16) / full, attention with
  biases and learned sinks, a 4-expert top-2 MoE (``intermediate_size`` 384, so no expert tensor is
  square and a transposed load fails loudly). All of it reads and writes only the live dims (walk
  slots + scratch) with small output scales, so the residual stream stays ~ e(x) (EAGLE3 aux states
  too) while logits still move by ~0.1 with the context (window, sinks and KV matter for logprobs).
Greedy continuation of any prompt is ``walk(last_token, n)``; ``check()`` verifies margins, that the
reference here equals Hugging Face ``GptOssForCausalLM`` (eager attention with sliding window and
sinks), and the simulated EAGLE3 acceptance of tiny_models' draft on this target.
"""
import math, os

import torch

from . import cli
from . import llama as tm
from . import llama_ref as ref

H, V, D, NH, NKV, HD = tm.H, tm.V, tm.D, tm.NH, tm.NKV, tm.HD
L, E, TOPK, I = 8, 4, 2, 384
SLIDING_WINDOW = 16                      # HF semantics: the current token and the 15 before it
LAYER_TYPES = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(L)]
CAPTURE = [2, L // 2, L - 3]             # sglang's default EAGLE3 aux layers for GptOssForCausalLM
SWIGLU_LIMIT, ALPHA = 7.0, 1.702
ROPE_THETA = 10000.0
SEED = 20251122
NAME = "gptoss_swa"


def walk(last_token, n):
    """Greedy continuation of any prompt ending in ``last_token``: the next ``n`` tokens."""
    _, walk_ids, _, nxt, slot = tm.plan()
    s, out = int(slot[last_token]), []
    for _ in range(n):
        s = int(nxt[s])
        out.append(int(walk_ids[s]))
    return out


def build_weights():
    t, _, _ = tm.build_weights()               # tiny_models' Llama target: embed / norm / lm_head
    g = torch.Generator().manual_seed(SEED)
    rn = lambda *s, std=1.0: torch.randn(*s, generator=g) * std
    live = torch.zeros(H, dtype=torch.bool)
    live[:D] = True
    live[tm.S0:] = True
    wmask = live.float().clone()
    wmask[tm.C] = 0                          # never write the const dim
    rmask = live.float()
    w = {"model.embed_tokens.weight": t["model.embed_tokens.weight"].float(),
         "model.norm.weight": t["model.norm.weight"].float(),
         "lm_head.weight": t["lm_head.weight"].float()}
    for l in range(L):
        p = f"model.layers.{l}."
        w[p + "input_layernorm.weight"] = 1 + rn(H, std=0.05)
        w[p + "post_attention_layernorm.weight"] = 1 + rn(H, std=0.05)
        a = p + "self_attn."
        w[a + "q_proj.weight"] = rn(NH * HD, H, std=0.09) * rmask[None]
        w[a + "q_proj.bias"] = rn(NH * HD, std=0.05)
        w[a + "k_proj.weight"] = rn(NKV * HD, H, std=0.09) * rmask[None]
        w[a + "k_proj.bias"] = rn(NKV * HD, std=0.05)
        w[a + "v_proj.weight"] = rn(NKV * HD, H, std=0.05) * rmask[None]
        w[a + "v_proj.bias"] = rn(NKV * HD, std=0.05)
        w[a + "o_proj.weight"] = rn(H, NH * HD, std=tm.O_STD) * wmask[:, None]
        w[a + "o_proj.bias"] = rn(H, std=0.002) * wmask
        w[a + "sinks"] = torch.rand(NH, generator=g) * 3 - 1           # learned sink logits in [-1, 2)
        m = p + "mlp."
        w[m + "router.weight"] = rn(E, H, std=0.05) * rmask[None]
        w[m + "router.bias"] = rn(E, std=0.1)
        w[m + "experts.gate_up_proj"] = rn(E, H, 2 * I, std=0.03) * rmask[None, :, None]  # [E, H, 2I], gate/up interleaved
        w[m + "experts.gate_up_proj_bias"] = rn(E, 2 * I, std=0.02)
        w[m + "experts.down_proj"] = rn(E, I, H, std=tm.D_STD) * wmask[None, None, :]      # [E, I, H]
        w[m + "experts.down_proj_bias"] = rn(E, H, std=0.002) * wmask[None]
    return {k: v.to(torch.bfloat16).contiguous() for k, v in w.items()}


def config():
    return {
        "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
        "hidden_size": H, "intermediate_size": I, "num_hidden_layers": L, "num_attention_heads": NH,
        "num_key_value_heads": NKV, "head_dim": HD, "vocab_size": V,
        "num_local_experts": E, "num_experts_per_tok": TOPK, "experts_per_token": TOPK,
        "sliding_window": SLIDING_WINDOW, "layer_types": LAYER_TYPES,
        "max_position_embeddings": 4096, "rope_parameters": {"rope_type": "default", "rope_theta": ROPE_THETA},
        "rms_norm_eps": 1e-5, "hidden_act": "silu", "swiglu_limit": SWIGLU_LIMIT, "attention_bias": True,
        "attention_dropout": 0.0, "tie_word_embeddings": False, "router_aux_loss_coef": 0.9,
        "output_router_logits": False, "initializer_range": 0.02, "use_cache": True,
        "bos_token_id": tm.BOS, "eos_token_id": tm.EOS, "pad_token_id": tm.PAD, "dtype": "bfloat16",
    }


def build(out_dir):
    """Write OUT_DIR/gptoss_swa once per stamp (``llama.build_once``: file-locked, the stock and plugin
    runs may call it together)."""
    path = os.path.join(os.path.abspath(out_dir), NAME)
    tm.build_once(path, tm.file_stamp(os.path.abspath(__file__), os.path.abspath(tm.__file__)),
                  lambda: tm.write_model(path, build_weights(), config()),
                  [os.path.join(path, "model.safetensors")])
    return path


# ------------------- pure-torch reference (follows HF / sglang gpt_oss.py semantics) -------------------
def attn(W, p, x, pos, sliding):
    T = x.shape[0]
    q = ref.rope((x @ W[p + "q_proj.weight"].T + W[p + "q_proj.bias"]).view(T, NH, HD), pos)
    k = ref.rope((x @ W[p + "k_proj.weight"].T + W[p + "k_proj.bias"]).view(T, NKV, HD), pos)
    v = (x @ W[p + "v_proj.weight"].T + W[p + "v_proj.bias"]).view(T, NKV, HD)
    s = torch.einsum("qhd,khd->hqk", q.float(), k.float().repeat_interleave(NH // NKV, 1)) / math.sqrt(HD)
    qi, ki = torch.arange(T)[:, None], torch.arange(T)[None]
    mask = ki > qi
    if sliding:
        mask |= ki <= qi - SLIDING_WINDOW
    s = s.masked_fill(mask, float("-inf"))
    sink = W[p + "sinks"].float()[:, None, None].expand(NH, T, 1)
    a = torch.softmax(torch.cat([s, sink], -1), -1)[..., :-1]
    o = torch.einsum("hqk,khd->qhd", a, v.float().repeat_interleave(NH // NKV, 1)).to(x.dtype)
    return o.reshape(T, NH * HD) @ W[p + "o_proj.weight"].T + W[p + "o_proj.bias"]


def moe(W, p, x):
    logits = (x @ W[p + "router.weight"].T + W[p + "router.bias"]).float()
    top, idx = logits.topk(TOPK, -1)
    wts = torch.softmax(top, -1)
    out = torch.zeros(x.shape, dtype=torch.float32)
    for e in range(E):
        gu = x @ W[p + "experts.gate_up_proj"][e] + W[p + "experts.gate_up_proj_bias"][e]
        gate, up = gu[..., ::2].clamp(max=SWIGLU_LIMIT), gu[..., 1::2].clamp(-SWIGLU_LIMIT, SWIGLU_LIMIT)
        y = ((up + 1) * gate * torch.sigmoid(gate * ALPHA)) @ W[p + "experts.down_proj"][e] \
            + W[p + "experts.down_proj_bias"][e]
        out += (wts * (idx == e)).sum(-1, keepdim=True) * y.float()
    return out.to(x.dtype)


def target_fwd(W, toks):
    x, pos, aux = W["model.embed_tokens.weight"][toks], torch.arange(len(toks)), []
    for l in range(L):
        p = f"model.layers.{l}."
        if l in CAPTURE:
            aux.append(x)
        x = x + attn(W, p + "self_attn.", ref.rms(x, W[p + "input_layernorm.weight"]), pos,
                     LAYER_TYPES[l] == "sliding_attention")
        x = x + moe(W, p + "mlp.", ref.rms(x, W[p + "post_attention_layernorm.weight"]))
    n = ref.rms(x, W["model.norm.weight"])
    return (n @ W["lm_head.weight"].T).float(), torch.cat(aux, -1)


def logprobs(W, prompt, out_ids):
    """Log-probabilities of ``out_ids`` after ``prompt`` (what the server reports as output logprobs)."""
    seq = torch.tensor(list(prompt) + list(out_ids))
    lp = torch.log_softmax(target_fwd(W, seq)[0], -1)
    return [float(lp[len(prompt) - 1 + i, t]) for i, t in enumerate(out_ids)]


def check(path, n_new=40):
    import transformers

    prompts = ref.check_prompts(200)
    ok, res = True, {}
    E3 = ref.load(tm.build_all(os.path.dirname(path))["eagle3"])
    for dt in (torch.float32, torch.bfloat16):
        W = ref.load(path, dt)
        e3 = {k: v.to(dt) for k, v in E3.items()}
        s3 = lambda *a: ref.eagle3_step(e3, W, *a)
        for pi, pr in enumerate(prompts):
            seq = ref.greedy(target_fwd, W, pr, n_new)
            logits, aux = target_fwd(W, torch.tensor(seq))
            gen = logits[len(pr) - 1:-1]
            base = (ref.rms(W["model.embed_tokens.weight"][torch.tensor(seq)], W["model.norm.weight"])
                    @ W["lm_head.weight"].T).float()[len(pr) - 1:-1]
            top = gen.argmax(-1, keepdim=True)
            r = dict(min_margin=round(float(ref.margins(gen).min()), 3),
                     top_logit_ctx_shift=round(float((gen - base).gather(1, top).abs().mean()), 3),
                     max_ctx_shift=round(float((gen - base).abs().max()), 3),
                     is_walk=seq[len(pr):] == walk(pr[-1], n_new), eos_emitted=tm.EOS in seq[len(pr):])
            if dt == torch.bfloat16:
                r["eagle3_s3k1n4"] = round(ref.simulate(s3, seq, aux, len(pr), 3, 1, 4), 2)
            ok &= r["min_margin"] >= 2.0 and r["is_walk"] and not r["eos_emitted"]
            res[f"{'fp32' if dt == torch.float32 else 'bf16'}/p{pi}"] = r
    for k, r in res.items():
        print(k, "prompt_len", len(prompts[int(k[-1])]), r)
    # the sliding window matters: masking a far-away token changes late logits only through full layers
    cfg = transformers.AutoConfig.from_pretrained(path)
    print("hf config:", type(cfg).__name__, "layer_types", cfg.layer_types[:4], "sliding_window",
          cfg.sliding_window, "swiglu_limit", getattr(cfg, "swiglu_limit", None), "rope", cfg.rope_parameters,
          "dtype", getattr(cfg, "dtype", None))
    ok &= cfg.layer_types == LAYER_TYPES and cfg.sliding_window == SLIDING_WINDOW and cfg.swiglu_limit == SWIGLU_LIMIT
    hf, info = transformers.GptOssForCausalLM.from_pretrained(path, dtype=torch.float32, output_loading_info=True)
    hf = hf.eval()
    hf.config._attn_implementation = "eager"
    print("hf loading info:", {k: v for k, v in info.items() if v})
    ok &= not any(info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    ok &= ref.matches_hf(hf, target_fwd, ref.load(path), {pi: prompts[pi] for pi in (1, 3, 5)}, n_new)
    print("walk from t10:", walk(10, 8))
    print("CHECK", "OK" if ok else "FAILED")
    return ok


if __name__ == "__main__":
    cli(build, check)
