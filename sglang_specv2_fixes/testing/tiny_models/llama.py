"""Offline, deterministic tiny real-weight models for the registered GPU tests.

`python -m sglang_specv2_fixes.testing.tiny_models OUT_DIR [--check]` writes OUT_DIR/{target,eagle3,eagle}
(bf16 safetensors + config.json + tokenizer files) and prints a one-line JSON summary;
`build_all(out_dir)` does the same from Python (skipped when OUT_DIR/.stamp matches this file). The
pure-torch reference and ``--check`` are in ``llama_ref.py``.

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
import hashlib, json, math, os

import torch
from safetensors.torch import save_file

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


def write_tokenizer(d, vocab_size=V, max_length=4096):
    """The word-level tokenizer of ``vocab_size`` ids (bench/real_size_models.py: the 128256 of Llama 3) in ``d``."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    tk = Tokenizer(models.WordLevel({tok_name(i): i for i in range(vocab_size)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.decoder = decoders.WordPiece(prefix="##", cleanup=False)   # joins tokens with spaces
    tk.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    tk.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B",
                                                      special_tokens=[("<s>", BOS)])
    tk.save(os.path.join(d, "tokenizer.json"))
    sp = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
    tc = dict(sp, tokenizer_class="PreTrainedTokenizerFast", model_max_length=max_length,
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


def build_shape(out_dir, name, cfg, source):
    """A config-only model folder (config.json + the word-level tokenizer, no weights: served with
    ``--load-format dummy``): OUT_DIR/NAME, written once per stamp of ``source`` (the module that defines ``cfg``)
    and this file; returns its path."""
    path = os.path.join(os.path.abspath(out_dir), name)

    def write():
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)
        write_tokenizer(path)

    build_once(path, file_stamp(os.path.abspath(source), os.path.abspath(__file__)), write,
               [os.path.join(path, n) for n in ("config.json", "tokenizer.json")])
    return path


def write_model(path, weights, cfg):
    """One model directory: bf16 safetensors, config.json and the word-level tokenizer."""
    os.makedirs(path, exist_ok=True)
    save_file(weights, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    os.chmod(os.path.join(path, "model.safetensors"), 0o644)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    write_tokenizer(path)


def derived_eagle3_draft(path, transform, stamp_file):
    """A 1-layer EAGLE3 draft whose weights are ``transform(eagle3 weights)`` of the tiny models, written once
    to ``path`` (rebuilt when ``stamp_file`` or this module changes); returns ``path``. The registered rows
    use it for drafts that detect a bug (tests/registered/test_draft_extend_kv_range.py, ...)."""

    def write():
        write_model(path, transform(build_weights()[1]), config("LlamaForCausalLMEagle3", 1, draft_vocab_size=V))

    build_once(path, file_stamp(os.path.abspath(stamp_file), __file__), write, [os.path.join(path, "model.safetensors")])
    return path


def derived_target(path, stamp_file, **config_changes):
    """The tiny target under another ``config.json`` (``config_changes`` over its own: e.g. more ``eos_token_id``),
    written once to ``path`` beside the tiny models (weights and tokenizer files linked, not copied; rebuilt when
    ``stamp_file`` or this module changes); returns ``path``. The registered rows use it for a target whose
    config, not weights, sets up a bug (tests/registered/test_grammar_run_end.py)."""
    base = build_all(os.path.dirname(os.path.abspath(path)))["target"]

    def write():
        os.makedirs(path, exist_ok=True)
        for name in os.listdir(base):
            if name != "config.json" and not name.startswith("."):
                link = os.path.join(path, name)
                if os.path.lexists(link):
                    os.remove(link)
                os.symlink(os.path.join(base, name), link)
        with open(os.path.join(base, "config.json")) as f:
            cfg = json.load(f)
        cfg.update(config_changes)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)

    stamp = file_stamp(os.path.abspath(stamp_file), __file__) + json.dumps(config_changes, sort_keys=True)
    build_once(path, stamp, write, [os.path.join(path, "model.safetensors")])
    return path


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
