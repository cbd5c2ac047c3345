"""Offline, deterministic tiny real-weight models for the registered GPU tests.

`python tests/registered/tiny_models.py OUT_DIR [--check]` writes OUT_DIR/{target,eagle3,eagle}
(bf16 safetensors + config.json + tokenizer files) and prints a one-line JSON summary;
`build_all(out_dir)` does the same from Python (skipped when OUT_DIR/.stamp matches this file).

Design: generation is a deterministic walk. Hidden dims (H=256) are split into T = 0..119 (one slot
per *walk token*), U = 120..239 (EAGLE3 token-copy slots), SCR = 240..254 (scratch), C = 255 (const).
* target embed: e(x) = onehot_T(slot(x)) + onehot_C + 0.1*noise_SCR. The 120 walk tokens own a slot;
  every other token (specials included) borrows a random slot, so any prompt behaves "ordinarily".
* target lm_head: logit(y) = B*n[slot] for y = next(slot) (a single 120-cycle over the walk tokens)
  plus a token bias read from the const dim: walk tokens -4, 8 fixed runner-up tokens 0, -.3 ..
  -2.1, the rest U(-4.5,-3.5), specials -8. So the greedy token is always a walk token, 3.5 above a
  fixed, well-spaced runner-up list (p_top ~ 0.5), EOS is never emitted.
* target layers: small random attention / MLP (norm weights ~1) that write only into T+SCR, so the
  residual stream stays ~ e(x) (aux hidden states of layers 2/4/5 too) while logits still move by
  ~0.1-0.5 with the context / KV (meaningful logprobs, a corrupt KV shows).
* EAGLE3 (sglang llama_eagle3): fc = [.5I .25I .25I] keeps h = rep(x_t) (T entry 1). Attention heads
  0/2 have a const q/k on the highest RoPE frequencies (score ~120 at distance 0, >=22 lower at
  any other distance up to 4096):
  they attend to themselves only and copy norm(embed(x_t+1)) into U. The MLP is linear (gate = const
  dim -> silu(27)=27) and computes out = .5*P(h_T) + .5*copy_U -> T, clearing U: the output hidden
  (pre-norm, what sglang feeds back for the next draft step) is again rep(next token) with the same
  scale, both when h comes from the target (fc) and from the draft itself. Draft lm_head = target's.
  Hidden path and token path each carry half the logit: a wrong hidden or wrong input id halves it
  and drafting collapses, so plumbing bugs show up as low acceptance. Heads 1/3: small noise.
* EAGLE (v1, sglang llama_eagle): fc = [.5*nc*I | .5*P] maps (embed(x_t+1), normed target hidden)
  to the normed-scale rep of x_t+1 (no final norm in v1; lm_head and embed are shared from the
  target, so the file has neither); layers.0 attention/MLP only add small noise.
Tokenizer: WordLevel, ids 0..6 = <unk> <s> </s> <pad> <|system|> <|user|> <|assistant|>, id i>=7 is
"t{i}"; whitespace split, <s> prepended, decode joins with spaces ("t10 t20"); unknown words -> <unk>.
"""
import argparse, hashlib, json, math, os, sys, time

import torch
from safetensors.torch import load_file, save_file

H, I, L, NH, NKV, HD, V, D = 256, 512, 8, 4, 2, 64, 1024, 120
U0, S0, C, NS = 120, 240, 255, 15
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]
BOS, EOS, PAD = 1, 2, 3
CAPTURE = [2, L // 2, L - 3]      # sglang's default EAGLE3 aux layers (stream at these layers' input)
SEED, TOP, SELF_SCORE = 20240611, 7.5, 120.0
O_STD, D_STD = 0.0012, 0.001          # target attention / MLP output scales (context effect)
RPW = [0.373, 0.106, 0.091, 0.056, 0.087, 0.101, 0.11, 0.076]  # RoPE pair weights, self-focus heads
NOM_MS = (2 + NS * 0.01) / H      # nominal mean square of an embedding (e entries 1, scratch 0.1)
NC = 1 / math.sqrt(NOM_MS)        # nominal normalized value of the token / const entries (~10.9)


def tok_name(i):
    return SPECIALS[i] if i < len(SPECIALS) else f"t{i}"


def plan():
    g = torch.Generator().manual_seed(SEED)
    ids = torch.randperm(V - len(SPECIALS), generator=g) + len(SPECIALS)
    walk, runners = ids[:D], ids[D:D + 8]
    cyc = torch.randperm(D, generator=g)
    nxt = torch.empty(D, dtype=torch.long)
    nxt[cyc] = cyc.roll(-1)                       # slot -> next slot, one cycle of length D
    slot = torch.randint(0, D, (V,), generator=g)
    slot[walk] = torch.arange(D)
    return g, walk, runners, nxt, slot


def build_weights():
    g, walk, runners, nxt, slot = plan()
    rn = lambda *s, std=1.0: torch.randn(*s, generator=g) * std
    P = torch.zeros(H, H)                          # rep(x) -> rep(next(x)); identity on C/SCR
    P[nxt, torch.arange(D)] = 1
    P[S0:, S0:] = torch.eye(H - S0)
    emb = torch.zeros(V, H)
    emb[torch.arange(V), slot] = 1
    emb[:, C] = 1
    emb[:, S0:S0 + NS] = rn(V, NS, std=0.1)
    bias = torch.rand(V, generator=g) - 4.5
    bias[walk] = -4.0
    bias[runners] = -0.3 * torch.arange(8.0)
    bias[:len(SPECIALS)] = -8.0
    lm = torch.zeros(V, H)
    lm[walk[nxt], torch.arange(D)] = TOP / NC
    lm[:, C] = bias / NC
    lm[:, S0:S0 + NS] = rn(V, NS, std=0.02)
    live = torch.zeros(H, dtype=torch.bool)        # dims the target may read / write
    live[:D] = True
    live[S0:] = True
    wmask, rmask = live.float()[:, None].clone(), live.float()[None, :]
    wmask[C] = 0                                   # never write the const dim
    t = {"model.embed_tokens.weight": emb, "model.norm.weight": torch.ones(H), "lm_head.weight": lm}
    for l in range(L):
        p = f"model.layers.{l}."
        t[p + "input_layernorm.weight"] = 1 + rn(H, std=0.05)
        t[p + "post_attention_layernorm.weight"] = 1 + rn(H, std=0.05)
        t[p + "self_attn.q_proj.weight"] = rn(NH * HD, H, std=0.09) * rmask
        t[p + "self_attn.k_proj.weight"] = rn(NKV * HD, H, std=0.09) * rmask
        t[p + "self_attn.v_proj.weight"] = rn(NKV * HD, H, std=0.05) * rmask
        t[p + "self_attn.o_proj.weight"] = rn(H, NH * HD, std=O_STD) * wmask
        t[p + "mlp.gate_proj.weight"] = rn(I, H, std=0.03) * rmask
        t[p + "mlp.up_proj.weight"] = rn(I, H, std=0.03) * rmask
        t[p + "mlp.down_proj.weight"] = rn(H, I, std=D_STD) * wmask

    # ---- EAGLE3 draft ----
    e3 = {"fc.weight": torch.cat([0.5 * torch.eye(H), 0.25 * torch.eye(H), 0.25 * torch.eye(H)], 1),
          "norm.weight": torch.ones(H), "lm_head.weight": lm.clone()}
    for n in ["input_layernorm", "hidden_norm", "post_attention_layernorm"]:
        e3[f"midlayer.{n}.weight"] = torch.ones(H)
    pv = torch.zeros(HD)
    pv[:len(RPW)] = torch.tensor(RPW).sqrt() * math.sqrt(SELF_SCORE * math.sqrt(HD)) / NC
    q = torch.zeros(NH * HD, 2 * H)
    q[HD:2 * HD, :D] = rn(HD, D, std=0.02)          # heads 1/3: weak content/position mixing
    q[3 * HD:, :D] = rn(HD, D, std=0.02)
    q[:HD, C], q[2 * HD:3 * HD, C] = pv, pv          # heads 0/2 (kv heads 0/1): self-focus
    k = torch.zeros(NKV * HD, 2 * H)
    k[:HD, C], k[HD:, C] = pv, pv
    v = torch.zeros(NKV * HD, 2 * H)
    v[torch.arange(D) % 60 + HD * (torch.arange(D) // 60), torch.arange(D)] = 1 / NC
    o = torch.zeros(H, NH * HD)
    o[U0 + torch.arange(D), torch.arange(D) % 60 + 2 * HD * (torch.arange(D) // 60)] = 1.0
    o[:D, HD:2 * HD] = rn(D, HD, std=0.01)
    o[:D, 3 * HD:] = rn(D, HD, std=0.01)
    ms_r = NOM_MS + 1 / H                            # mean square of r = h + copy
    G, coef = 3.0, ms_r / 3.0                        # silu(G*z_c) ~ G*z_c; m = coef*G*z_c*z
    gate = torch.zeros(I, H)
    gate[:2 * D, C] = G
    up = torch.zeros(I, H)
    up[torch.arange(2 * D), torch.arange(2 * D)] = 1
    down = torch.zeros(H, I)
    down[:, :D] = (0.5 * P[:, :D] - torch.eye(H)[:, :D]) * coef
    down[:, D:2 * D] = (0.5 * torch.eye(H)[:, :D] - torch.eye(H)[:, U0:U0 + D]) * coef
    for n, w in zip(["q", "k", "v", "o"], [q, k, v, o]):
        e3[f"midlayer.self_attn.{n}_proj.weight"] = w
    for n, w in zip(["gate", "up", "down"], [gate, up, down]):
        e3[f"midlayer.mlp.{n}_proj.weight"] = w

    # ---- EAGLE (v1) draft ----
    fc = torch.zeros(H, 2 * H)
    fc[:, :H] = 0.5 * NC * torch.diag(live.float())
    fc[:, H:] = 0.5 * P
    e1 = {"fc.weight": fc, "fc.bias": torch.zeros(H),
          "layers.0.post_attention_layernorm.weight": torch.ones(H),
          "layers.0.self_attn.q_proj.weight": rn(NH * HD, H, std=0.01) * rmask,
          "layers.0.self_attn.k_proj.weight": rn(NKV * HD, H, std=0.01) * rmask,
          "layers.0.self_attn.v_proj.weight": rn(NKV * HD, H, std=0.01) * rmask,
          "layers.0.self_attn.o_proj.weight": rn(H, NH * HD, std=0.01) * wmask,
          "layers.0.mlp.gate_proj.weight": rn(I, H, std=0.03) * rmask,
          "layers.0.mlp.up_proj.weight": rn(I, H, std=0.03) * rmask,
          "layers.0.mlp.down_proj.weight": rn(H, I, std=0.02) * wmask}
    bf = lambda d: {k_: v_.to(torch.bfloat16).contiguous() for k_, v_ in d.items()}
    return bf(t), bf(e3), bf(e1)


def config(arch, layers, **extra):
    cfg = {"architectures": [arch], "model_type": "llama", "hidden_size": H, "intermediate_size": I,
           "num_hidden_layers": layers, "num_attention_heads": NH, "num_key_value_heads": NKV,
           "head_dim": HD, "vocab_size": V, "max_position_embeddings": 4096, "rope_theta": 10000.0,
           "rope_scaling": None, "rms_norm_eps": 1e-5, "hidden_act": "silu",
           "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
           "bos_token_id": BOS, "eos_token_id": EOS, "pad_token_id": PAD,
           "initializer_range": 0.02, "use_cache": True, "torch_dtype": "bfloat16"}
    cfg.update(extra)
    return cfg


CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|> {% endif %}")


def write_tokenizer(d):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    tk = Tokenizer(models.WordLevel({tok_name(i): i for i in range(V)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.decoder = decoders.WordPiece(prefix="##", cleanup=False)   # joins tokens with spaces
    tk.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    tk.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B",
                                                      special_tokens=[("<s>", BOS)])
    tk.save(os.path.join(d, "tokenizer.json"))
    sp = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
    tc = dict(sp, tokenizer_class="PreTrainedTokenizerFast", model_max_length=4096,
              add_bos_token=True, add_eos_token=False, clean_up_tokenization_spaces=False,
              chat_template=CHAT_TEMPLATE)
    for name, obj in [("tokenizer_config.json", tc), ("special_tokens_map.json", sp),
                      ("generation_config.json", {"bos_token_id": BOS, "eos_token_id": EOS,
                                                  "pad_token_id": PAD})]:
        with open(os.path.join(d, name), "w") as f:
            json.dump(obj, f, indent=1)


def file_stamp(*paths):
    """sha256 over the given source files and the torch version: a built model is reused while it matches."""
    h = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            h.update(f.read())
    h.update(torch.__version__.split("+")[0].encode())
    return h.hexdigest()


def build_once(folder, stamp, write, outputs):
    """Call ``write()`` unless ``folder/.stamp`` equals ``stamp`` and every path in ``outputs`` exists; under a
    file lock in ``folder`` (parallel test processes share the models directory)."""
    import fcntl

    os.makedirs(folder, exist_ok=True)
    sf = os.path.join(folder, ".stamp")
    with open(os.path.join(folder, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(sf) and open(sf).read() == stamp and all(os.path.exists(p) for p in outputs):
            return
        if os.path.exists(sf):
            os.remove(sf)
        write()
        with open(sf, "w") as f:
            f.write(stamp)


def write_model(path, weights, cfg):
    """One model directory: bf16 safetensors, config.json and the word-level tokenizer."""
    os.makedirs(path, exist_ok=True)
    save_file(weights, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    os.chmod(os.path.join(path, "model.safetensors"), 0o644)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    write_tokenizer(path)


def build_all(out_dir):
    """Build (once per stamp) and return the model paths: OUT_DIR/{target,eagle3,eagle}."""
    out_dir = os.path.abspath(out_dir)
    paths = {n: os.path.join(out_dir, n) for n in ("target", "eagle3", "eagle")}

    def write():
        t, e3, e1 = build_weights()
        write_model(paths["target"], t, config("LlamaForCausalLM", L))
        write_model(paths["eagle3"], e3, config("LlamaForCausalLMEagle3", 1, draft_vocab_size=V))
        write_model(paths["eagle"], e1, config("LlamaForCausalLMEagle", 1))

    build_once(out_dir, file_stamp(os.path.abspath(__file__)), write,
               [os.path.join(p, "model.safetensors") for p in paths.values()])
    return paths


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


def greedy(T, prompt, n):
    seq = list(prompt)
    for _ in range(n):
        seq.append(int(target_fwd(T, torch.tensor(seq))[0][-1].argmax()))
    return seq


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
    load = lambda n, dt: {k: v.to(dt) for k, v in load_file(os.path.join(paths[n], "model.safetensors")).items()}
    g = torch.Generator().manual_seed(7)
    ordinary = lambda n: (torch.randint(len(SPECIALS), V, (n,), generator=g)).tolist()
    prompts = [[BOS] + ordinary(n) for n in (1, 5, 17, 40)] + [[BOS] + [500] * 12, [BOS] + ordinary(300)]
    res, ok = {}, True
    for dt in (torch.float32, torch.bfloat16):
        T, E3, E1 = load("target", dt), load("eagle3", dt), load("eagle", dt)
        s3 = lambda *a: eagle3_step(E3, T, *a)
        s1 = lambda *a: eagle_step(E1, T, *a)
        for pi, pr in enumerate(prompts):
            seq = greedy(T, pr, n_new)
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
    T = load("target", torch.float32)
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


def cli(build_fn, check_fn):
    """``python3 tiny_X.py OUT_DIR [--check]`` of every tiny-model builder: build (``build_fn(out_dir)`` gives
    one model dir or a {name: dir} map), print what was written as JSON, optionally run ``check_fn`` on it."""
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    t0 = time.time()
    built = build_fn(args.out_dir)

    def size(path):
        return os.path.getsize(os.path.join(path, "model.safetensors"))

    if isinstance(built, dict):
        info = dict(built, bytes={n: size(p) for n, p in built.items()})
    else:
        info = dict(path=built, bytes=size(built))
    print(json.dumps(dict(info, seconds=round(time.time() - t0, 2))))
    if args.check:
        sys.exit(0 if check_fn(built) else 1)


if __name__ == "__main__":
    cli(build_all, check)
