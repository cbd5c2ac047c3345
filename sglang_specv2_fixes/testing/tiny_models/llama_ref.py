"""Pure-torch reference of the tiny Llama target and its EAGLE3 / EAGLE drafts (``llama.py``), the
simulated tree-drafting acceptance, and ``check()`` behind ``python -m sglang_specv2_fixes.testing.tiny_models
OUT_DIR --check`` (margins, drafts' acceptance, the tokenizer and Hugging Face ``LlamaForCausalLM`` against the
reference). The other references (``moe.py``, ``swa.py``, ``deepseek_v3_ref.py``) reuse the norm, RoPE, margins and
simulation, and the helpers every ``check()`` shares: ``load``, ``greedy``, ``check_prompts``, ``matches_hf``.
"""
import math, os

import torch
from safetensors.torch import load_file

from .llama import BOS, CAPTURE, EOS, HD, NH, NKV, SPECIALS, H, L, V, tok_name

# ------------------------- pure-torch reference (follows sglang's llama*.py) -------------------------
def rms(x, w, eps=1e-5):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def rope(x, pos):  # neox style, x [T, heads, HD]
    inv = 1.0 / (10000.0 ** (torch.arange(0, HD, 2).float() / HD))
    f = pos.float()[:, None] * inv[None]
    cos, sin = torch.cat([f.cos(), f.cos()], -1)[:, None], torch.cat([f.sin(), f.sin()], -1)[:, None]
    xf = x.float()
    rot = torch.cat([-xf[..., HD // 2:], xf[..., :HD // 2]], -1)
    return (xf * cos + rot * sin).to(x.dtype)


def attn(W, p, x, pos, kc, vc):
    T = x.shape[0]
    q = rope((x @ W[p + "q_proj.weight"].T).view(T, NH, HD), pos)
    k = rope((x @ W[p + "k_proj.weight"].T).view(T, NKV, HD), pos)
    v = (x @ W[p + "v_proj.weight"].T).view(T, NKV, HD)
    K, Vv = torch.cat([kc, k]), torch.cat([vc, v])
    n0 = kc.shape[0]
    s = torch.einsum("qhd,khd->hqk", q.float(), K.float().repeat_interleave(NH // NKV, 1)) / math.sqrt(HD)
    mask = torch.arange(n0 + T)[None] > (n0 + torch.arange(T))[:, None]
    a = torch.softmax(s.masked_fill(mask, float("-inf")), -1)
    o = torch.einsum("hqk,khd->qhd", a, Vv.float().repeat_interleave(NH // NKV, 1)).to(x.dtype)
    return o.reshape(T, NH * HD) @ W[p + "o_proj.weight"].T, K, Vv


def mlp(W, p, x):
    return (torch.nn.functional.silu(x @ W[p + "gate_proj.weight"].T) * (x @ W[p + "up_proj.weight"].T)) \
        @ W[p + "down_proj.weight"].T


def empty(dt):
    return torch.zeros(0, NKV, HD, dtype=dt)


def target_fwd(W, toks):
    x, pos, aux = W["model.embed_tokens.weight"][toks], torch.arange(len(toks)), []
    for l in range(L):
        p = f"model.layers.{l}."
        if l in CAPTURE:
            aux.append(x)
        a, _, _ = attn(W, p + "self_attn.", rms(x, W[p + "input_layernorm.weight"]), pos, empty(x.dtype), empty(x.dtype))
        x = x + a
        x = x + mlp(W, p + "mlp.", rms(x, W[p + "post_attention_layernorm.weight"]))
    n = rms(x, W["model.norm.weight"])
    return (n @ W["lm_head.weight"].T).float(), torch.cat(aux, -1), n


def eagle3_step(W, T, toks, hid, pos, kc, vc):
    h = hid @ W["fc.weight"].T if hid.shape[-1] != H else hid
    x = torch.cat([rms(T["model.embed_tokens.weight"][toks], W["midlayer.input_layernorm.weight"]),
                   rms(h, W["midlayer.hidden_norm.weight"])], -1)
    a, K, Vv = attn(W, "midlayer.self_attn.", x, pos, kc, vc)
    r = h + a
    out = r + mlp(W, "midlayer.mlp.", rms(r, W["midlayer.post_attention_layernorm.weight"]))
    return (rms(out, W["norm.weight"]) @ W["lm_head.weight"].T).float(), out, K, Vv


def eagle_step(W, T, toks, hid, pos, kc, vc):
    h = torch.cat([T["model.embed_tokens.weight"][toks], hid], -1) @ W["fc.weight"].T + W["fc.bias"]
    a, K, Vv = attn(W, "layers.0.self_attn.", h, pos, kc, vc)   # layer 0: no input_layernorm
    r = h + a
    out = r + mlp(W, "layers.0.mlp.", rms(r, W["layers.0.post_attention_layernorm.weight"]))
    return (out @ T["lm_head.weight"].T).float(), out, K, Vv


# ------------------------- what every tiny model's reference and check() share -------------------------
def load(path, dt=torch.float32):
    """The tensors of the tiny model written at ``path`` (its model.safetensors), as ``dt``."""
    return {k: v.to(dt) for k, v in load_file(os.path.join(path, "model.safetensors")).items()}


def greedy(fwd, W, prompt, n):
    """``prompt`` and the ``n`` greedy tokens after it, ``fwd(W, toks)[0]`` the logits [T, V] (a ``target_fwd``)."""
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(fwd(W, torch.tensor(seq))[0][-1].argmax()))
    return seq


def check_prompts(long_len, vocab=V):
    """The prompts of every ``check()``: BOS + seeded ordinary tokens (1, 5, 17, 40 of them), BOS + 12 x t500,
    BOS + ``long_len`` ordinary tokens."""
    g = torch.Generator().manual_seed(7)
    ordinary = lambda n: torch.randint(len(SPECIALS), vocab, (n,), generator=g).tolist()  # noqa: E731
    return [[BOS] + ordinary(n) for n in (1, 5, 17, 40)] + [[BOS] + [500] * 12, [BOS] + ordinary(long_len)]


def matches_hf(hf, fwd, W, prompts, n_new, tol=2e-3):
    """Whether Hugging Face model ``hf`` gives each prompt's reference greedy continuation (``greedy(fwd, W, ...)``,
    ``n_new`` tokens) as its own argmax and logits within ``tol`` of the reference's; prints each prompt's figures.
    ``prompts``: {index: prompt}."""
    ok = True
    for pi, prompt in prompts.items():
        seq = greedy(fwd, W, prompt, n_new)
        with torch.no_grad():
            hl = hf(torch.tensor([seq])).logits[0].float()
        diff = float((hl - fwd(W, torch.tensor(seq))[0]).abs().max())
        same = hl[len(prompt) - 1:-1].argmax(-1).tolist() == seq[len(prompt):]
        print(f"transformers p{pi} (len {len(seq)}): greedy equal={same} max|logit diff|={diff:.2e}")
        ok &= same and diff < tol
    return ok


def margins(logits):
    top2 = logits.topk(2, -1).values
    return top2[:, 0] - top2[:, 1]


def simulate(step, seq, hid, n_prompt, steps, topk, ndraft):
    """Mean accept length (accepted drafts + 1) of sglang-style tree drafting at every position."""
    seq_t = torch.tensor(seq)
    lg, outh, K, Vv = step(seq_t[1:], hid[:-1], torch.arange(len(seq) - 1), empty(hid.dtype), empty(hid.dtype))
    accs = []
    for t in range(n_prompt - 1, len(seq) - 2 - steps):
        p, i = torch.softmax(lg[t], -1).topk(topk)
        cur = [dict(s=float(p[j]), tok=int(i[j]), par=None, h=outh[t], kc=K[:t + 1], vc=Vv[:t + 1])
               for j in range(topk)]
        cands = list(cur)
        for d in range(1, steps):
            new = []
            for nd in cur:
                lg2, oh, K2, V2 = step(torch.tensor([nd["tok"]]), nd["h"][None], torch.tensor([t + d]), nd["kc"], nd["vc"])
                p, i = torch.softmax(lg2[0], -1).topk(topk)
                new += [dict(s=nd["s"] * float(p[j]), tok=int(i[j]), par=id(nd), h=oh[0], kc=K2, vc=V2)
                        for j in range(topk)]
            cands += new
            cur = sorted(new, key=lambda c: -c["s"])[:topk]
        chosen, par, acc = sorted(cands, key=lambda c: -c["s"])[:ndraft - 1], None, 0
        while t + 2 + acc < len(seq):
            nxt = [c for c in chosen if c["par"] == par and c["tok"] == seq[t + 2 + acc]]
            if not nxt:
                break
            acc, par = acc + 1, id(nxt[0])
        accs.append(acc + 1)
    return sum(accs) / len(accs)


def check(paths, n_new=64):
    prompts = check_prompts(300)
    res, ok = {}, True
    for dt in (torch.float32, torch.bfloat16):
        T, E3, E1 = (load(paths[n], dt) for n in ("target", "eagle3", "eagle"))
        s3 = lambda *a: eagle3_step(E3, T, *a)
        s1 = lambda *a: eagle_step(E1, T, *a)
        for pi, pr in enumerate(prompts):
            seq = greedy(target_fwd, T, pr, n_new)
            logits, aux, normed = target_fwd(T, torch.tensor(seq))
            gen = logits[len(pr) - 1:-1]
            base = (rms(T["model.embed_tokens.weight"][torch.tensor(seq)], T["model.norm.weight"])
                    @ T["lm_head.weight"].T).float()[len(pr) - 1:-1]
            top = gen.argmax(-1, keepdim=True)
            r = dict(min_margin=round(float(margins(gen).min()), 3),
                     top_logit_ctx_shift=round(float((gen - base).gather(1, top).abs().mean()), 3),
                     max_ctx_shift=round(float((gen - base).abs().max()), 3),
                     p_top_mean=round(float(torch.softmax(gen, -1).max(-1).values.mean()), 3),
                     eos_emitted=EOS in seq[len(pr):])
            if dt == torch.bfloat16:
                r["same_as_fp32"] = seq == res[f"fp32/p{pi}"]["seq"]
                for name, st, h in [("eagle3", s3, aux), ("eagle", s1, normed)]:
                    for steps, topk, nd in [(3, 1, 4), (3, 4, 8), (5, 8, 16)]:
                        r[f"{name}_s{steps}k{topk}n{nd}"] = round(simulate(st, seq, h, len(pr), steps, topk, nd), 2)
                    # negative control: hidden states off by one position must break chain drafting
                    r[f"{name}_s3k1n4_hidden_shifted"] = round(simulate(st, seq, h.roll(1, 0), len(pr), 3, 1, 4), 2)
                ok &= r["same_as_fp32"]
            ok &= r["min_margin"] >= 2.0 and not r["eos_emitted"]
            r["seq"] = seq
            res[f"{'fp32' if dt == torch.float32 else 'bf16'}/p{pi}"] = r
    for k_, r in res.items():
        print(k_, "prompt_len", len(prompts[int(k_[-1])]), {a: b for a, b in r.items() if a != "seq"})
    print("p0 greedy text:", " ".join(tok_name(i) for i in res["fp32/p0"]["seq"][:24]), "...")
    # a standard Llama implementation must read the target exactly as intended
    import transformers
    tok = transformers.AutoTokenizer.from_pretrained(paths["target"])
    ids = tok("t10 t20 hello")["input_ids"]
    chat = tok.apply_chat_template([{"role": "user", "content": "t9"}], add_generation_prompt=True, tokenize=False)
    print("tokenizer:", ids, repr(tok.decode([10, 20, 30])), repr(chat))
    ok &= ids == [BOS, 10, 20, 0] and tok.decode([10, 20, 30]) == "t10 t20 t30"
    hf = transformers.LlamaForCausalLM.from_pretrained(paths["target"], dtype=torch.float32).eval()
    T = load(paths["target"])
    for pi in (1, 5):
        seq = res[f"fp32/p{pi}"]["seq"]
        with torch.no_grad():
            hl = hf(torch.tensor([seq])).logits[0]
            cur = list(prompts[pi])
            for _ in range(n_new):
                cur.append(int(hf(torch.tensor([cur])).logits[0, -1].argmax()))
        diff = float((hl - target_fwd(T, torch.tensor(seq))[0]).abs().max())
        print(f"transformers p{pi}: greedy equal={cur == seq} max|logit diff|={diff:.2e}")
        ok &= cur == seq and diff < 1e-3
    print("CHECK", "OK" if ok else "FAILED")
    return ok
