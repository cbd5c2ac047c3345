"""Pure-torch reference of the tiny DeepSeek-V3 target and its MTP layer (``deepseek_v3.py``), following SGLang's
models/deepseek_v2.py / deepseek_nextn.py and Hugging Face's DeepseekV3 semantics: MLA (q / kv LoRA, interleaved
RoPE on the rope dims, softmax scale (nope + rope) ** -0.5), grouped sigmoid top-k routing with correction bias,
shared expert, the NextN layer (``eh_proj`` over enorm(embed) | hnorm(hidden), ``shared_head.norm``, the target's
lm_head). ``check()`` is behind ``python -m sglang_specv2_fixes.testing.tiny_models.deepseek_v3 OUT_DIR --check``.
"""
import math

import torch

from . import deepseek_v3 as ds
from . import llama as tm
from . import llama_ref as ref

H, L, NH, E, TOPK = ds.H, ds.L, ds.NH, ds.E, ds.TOPK
NOPE, ROPE, VHD, KVL = ds.NOPE, ds.ROPE, ds.VHD, ds.KV_LORA


def rms(x, w):
    return ref.rms(x, w, ds.EPS)


def rope_interleaved(x, pos):
    """GPT-J style RoPE on the last dim (pairs 2i, 2i+1): SGLang ``get_rope(..., is_neox_style=False)``."""
    d = x.shape[-1]
    inv = 1.0 / (ds.ROPE_THETA ** (torch.arange(0, d, 2).float() / d))
    f = pos.float()[:, None] * inv[None]                       # [T, d/2]
    shape = [f.shape[0]] + [1] * (x.dim() - 2) + [d // 2]
    cos, sin = f.cos().view(shape), f.sin().view(shape)
    xf = x.float()
    a, b = xf[..., 0::2], xf[..., 1::2]
    out = torch.stack([a * cos - b * sin, b * cos + a * sin], -1).flatten(-2)
    return out.to(x.dtype)


def mla(W, p, x, pos, cache):
    """MLA over the new tokens ``x`` [T, H] at ``pos`` after ``cache`` ([n0, KVL + ROPE]: the normed latent and the
    roped k_pe of earlier tokens, what SGLang's MLA KV pool holds); returns (output, new cache)."""
    T = x.shape[0]
    q = rms(x @ W[p + "q_a_proj.weight"].T, W[p + "q_a_layernorm.weight"]) @ W[p + "q_b_proj.weight"].T
    q = q.view(T, NH, NOPE + ROPE)
    q_nope, q_pe = q[..., :NOPE], rope_interleaved(q[..., NOPE:], pos)
    kv_a = x @ W[p + "kv_a_proj_with_mqa.weight"].T
    latent = rms(kv_a[:, :KVL], W[p + "kv_a_layernorm.weight"])
    k_pe = rope_interleaved(kv_a[:, KVL:], pos)
    cache = torch.cat([cache, torch.cat([latent, k_pe], -1)])
    n = cache.shape[0]
    kv = (cache[:, :KVL] @ W[p + "kv_b_proj.weight"].T).view(n, NH, NOPE + VHD)
    k_nope, v = kv[..., :NOPE], kv[..., NOPE:]
    s = (torch.einsum("qhd,khd->hqk", q_nope.float(), k_nope.float())
         + torch.einsum("qhd,kd->hqk", q_pe.float(), cache[:, KVL:].float())) / math.sqrt(NOPE + ROPE)
    n0 = n - T
    s = s.masked_fill(torch.arange(n)[None] > (n0 + torch.arange(T))[:, None], float("-inf"))
    o = torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), v.float()).to(x.dtype)
    return o.reshape(T, NH * VHD) @ W[p + "o_proj.weight"].T, cache


def moe(W, p, x):
    """(output, top-k expert ids [T, TOPK]) of one DeepSeek-V3 MoE block (``noaux_tc``, sigmoid, grouped)."""
    logits = (x @ W[p + "gate.weight"].T).float()
    scores = logits.sigmoid()
    choice = scores + W[p + "gate.e_score_correction_bias"].float()[None]
    T = x.shape[0]
    grp = choice.view(T, ds.N_GROUP, -1).topk(2, -1).values.sum(-1)
    keep = torch.zeros_like(grp).scatter_(1, grp.topk(ds.TOPK_GROUP, -1).indices, 1)
    keep = keep[:, :, None].expand(T, ds.N_GROUP, E // ds.N_GROUP).reshape(T, E).bool()
    idx = choice.masked_fill(~keep, float("-inf")).topk(TOPK, -1).indices
    wts = scores.gather(1, idx)
    wts = wts / wts.sum(-1, keepdim=True) * ds.config()["routed_scaling_factor"]
    out = torch.zeros(x.shape, dtype=torch.float32)
    for e in range(E):
        sel = (wts * (idx == e)).sum(-1, keepdim=True)
        if sel.any():
            out += sel * ref.mlp(W, p + f"experts.{e}.", x).float()
    out += ref.mlp(W, p + "shared_experts.", x).float()
    return out.to(x.dtype), idx


def empty_cache(dt):
    return torch.zeros(0, KVL + ROPE, dtype=dt)


def layer(W, l, x, pos, cache):
    """One decoder layer (``l`` = L: the MTP layer's): (output, new KV cache, routed experts or None)."""
    p = f"model.layers.{l}."
    a, cache = mla(W, p + "self_attn.", rms(x, W[p + "input_layernorm.weight"]), pos, cache)
    x = x + a
    h = rms(x, W[p + "post_attention_layernorm.weight"])
    if l >= ds.FIRST_DENSE:
        m, idx = moe(W, p + "mlp.", h)
    else:
        m, idx = ref.mlp(W, p + "mlp.", h), None
    return x + m, cache, idx


def target_fwd(W, toks):
    """(logits [T, V], the normed final hidden state [T, H] the MTP layer reads, routed experts [T, L - 1, TOPK])."""
    x, pos, ids = W["model.embed_tokens.weight"][toks], torch.arange(len(toks)), []
    for l in range(L):
        x, _, idx = layer(W, l, x, pos, empty_cache(x.dtype))
        if idx is not None:
            ids.append(idx)
    n = rms(x, W["model.norm.weight"])
    return (n @ W["lm_head.weight"].T).float(), n, torch.stack(ids, 1)


def mtp_step(W, toks, hid, pos, kc, vc=None):
    """One NextN step (``llama_ref.simulate``'s step signature): embedding of ``toks`` and hidden ``hid`` -> (logits,
    output hidden (``shared_head.norm``: what the next draft step reads), KV cache, KV cache)."""
    p = f"model.layers.{L}."
    if kc.dim() != 2:
        kc = empty_cache(hid.dtype)
    e = W["model.embed_tokens.weight"][toks]
    x = torch.cat([rms(e, W[p + "enorm.weight"]), rms(hid, W[p + "hnorm.weight"])], -1) @ W[p + "eh_proj.weight"].T
    x, cache, _ = layer(W, L, x, pos, kc)
    out = rms(x, W[p + "shared_head.norm.weight"])
    return (out @ W["lm_head.weight"].T).float(), out, cache, cache


def prompts_for_check():
    return ref.check_prompts(120, ds.V)


def stats(W, prompt, n_new, simulate_mtp=True):
    """The check's figures for one prompt: greedy margin, walk, EOS, routing = ``route()``, the MTP layer's simulated
    chain acceptance (accept length, drafts + 1) and the same with the hidden states one position off."""
    from .moe import walk

    seq = ref.greedy(target_fwd, W, prompt, n_new)
    logits, hid, ids = target_fwd(W, torch.tensor(seq))
    gen = logits[len(prompt) - 1:-1]
    table = torch.tensor([[ds.route(t, l) for l in range(ds.FIRST_DENSE, L)] for t in seq])
    r = dict(min_margin=round(float(ref.margins(gen).min()), 3),
             p_top_mean=round(float(torch.softmax(gen, -1).max(-1).values.mean()), 3),
             is_walk=seq[len(prompt):] == walk(prompt[-1], n_new), eos_emitted=tm.EOS in seq[len(prompt):],
             routing_is_table=bool(torch.equal(ids.sort(-1).values, table)))
    if simulate_mtp:
        step = lambda *a: mtp_step(W, *a)  # noqa: E731
        r["mtp_s3k1n4"] = round(ref.simulate(step, seq, hid, len(prompt), 3, 1, 4), 2)
        r["mtp_s5k1n6"] = round(ref.simulate(step, seq, hid, len(prompt), 5, 1, 6), 2)
        r["mtp_s3k1n4_hidden_shifted"] = round(ref.simulate(step, seq, hid.roll(1, 0), len(prompt), 3, 1, 4), 2)
    return seq, r


def check(path, n_new=24):
    """Margins, walk, routing, MTP acceptance (fp32 and bf16) and Hugging Face ``DeepseekV3ForCausalLM`` against the
    reference (no missing keys; unexpected ones only the MTP layer's; same greedy ids; logits within 2e-3)."""
    import transformers

    prompts = prompts_for_check()
    ok, res = True, {}
    for dt in (torch.float32, torch.bfloat16):
        W = ref.load(path, dt)
        for pi, pr in enumerate(prompts):
            seq, r = stats(W, pr, n_new, simulate_mtp=dt == torch.bfloat16)
            ok &= (r["min_margin"] >= 2.0 and r["is_walk"] and not r["eos_emitted"] and r["routing_is_table"])
            if "mtp_s3k1n4" in r:
                ok &= r["mtp_s3k1n4"] >= 3.5 and r["mtp_s3k1n4_hidden_shifted"] < 2.0
            k = f"{'fp32' if dt == torch.float32 else 'bf16'}/p{pi}"
            res[k] = r
            print(k, "prompt_len", len(pr), r, flush=True)
    hf, info = transformers.DeepseekV3ForCausalLM.from_pretrained(path, dtype=torch.float32, output_loading_info=True)
    hf = hf.eval()
    mtp = f"model.layers.{L}."
    print("hf loading info:", {k: (sorted(v)[:4], len(v)) for k, v in info.items() if v})
    ok &= not info.get("missing_keys") and not info.get("mismatched_keys")
    ok &= all(k.startswith(mtp) for k in info.get("unexpected_keys") or [])
    ok &= ref.matches_hf(hf, target_fwd, ref.load(path), {pi: prompts[pi] for pi in (1, 3)}, n_new)
    print("CHECK", "OK" if ok else "FAILED")
    return ok
