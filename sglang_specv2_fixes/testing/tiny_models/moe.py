"""Offline, deterministic tiny real-weight Qwen3-MoE target (``Qwen3MoeForCausalLM``) for the routed-experts row.

`python -m sglang_specv2_fixes.testing.tiny_models.moe OUT_DIR [--check]` writes OUT_DIR/qwen3_moe (bf16 safetensors in the
Hugging Face Qwen3-MoE layout + config.json + tokenizer files) and prints a one-line JSON summary;
`build(out_dir)` does the same from Python and returns the model dir (skipped when its .stamp matches
this file, llama.py and the torch version).

Why Qwen3-MoE: in SGLang 0.5.11 and 0.5.12.post1 (models/qwen3_moe.py, identical in both) it
* captures routed experts: ``Qwen3MoeSparseMoeBlock.topk = TopK(..., layer_id=layer_id)``, and
  ``select_experts`` feeds every MoE layer's ``topk_ids`` to the global routed-experts capturer;
* runs on the device bundle with ``--attention-backend triton`` and SGLang's triton fused MoE
  (``--moe-runner-backend triton``, plain bf16 experts);
* is an EAGLE3 target: ``set_eagle3_layers_to_capture`` (aux states = the residual stream at the input
  of layers 2, L//2, L-3, as for Llama) and ``get_embed_and_head`` (the EAGLE3 draft has no embedding
  of its own). Qwen2MoeForCausalLM lacks ``get_embed_and_head`` in both releases, Mixtral lacks
  ``set_eagle3_layers_to_capture``.

Design: the deterministic walk of llama.py, so greedy text is known in advance and tiny_models'
EAGLE3 draft drafts this target as well as the Llama one:
* ``model.embed_tokens``, ``model.norm``, ``lm_head``, the layer norms and the q/k/v/o projections are
  tiny_models' Llama target tensors, except that ``o_proj`` writes only the scratch dims (in the Llama
  target it also writes the walk slots: that context noise is what a router reading the slots would
  pick up). Qwen3-MoE adds per-head ``q_norm`` / ``k_norm`` (weights 1; they rescale q/k, whose entries
  have RMS ~1.4 here, so attention stays as small as in the Llama target).
* every layer is a top-``TOPK`` of ``E`` MoE (``moe_intermediate_size`` ``IM``, no shared expert,
  ``norm_topk_prob``). The router reads only the token's walk slot: ``gate[e, slot] = GATE / NC`` for
  the ``TOPK`` experts of a random ranking per (layer, slot), 0 elsewhere. So the routed experts are a
  known function of the *input token* (``route(token, layer)``), the chosen experts lead the others by
  ~GATE logits (``check()``: >= 5) and no numerical noise (batch shape, CUDA graph, tree attention)
  can flip them. Different tokens route differently (28 possible top-2 sets per layer, 8 layers), so
  rows of a wrong token are caught.
* experts are small random SwiGLU MLPs that read and write only the live dims (walk slots + scratch)
  with the Llama target's MLP scale, so the residual stream stays ~ e(x) (EAGLE3 aux states too) and
  logits still move by ~0.2 with the context.
Greedy continuation of any prompt is ``walk(last_token, n)``; ``check()`` verifies margins, routing =
``route()``, the pure-torch reference against Hugging Face ``Qwen3MoeForCausalLM`` (no missing /
unexpected keys, same greedy text, same router top-k) and the simulated EAGLE3 acceptance.
"""
import math, os

import torch

from . import cli
from . import llama as tm
from . import llama_ref as ref

H, V, D, NH, NKV, HD, L = tm.H, tm.V, tm.D, tm.NH, tm.NKV, tm.HD, tm.L
E, TOPK, IM = 8, 2, 256
GATE = 8.0                               # router logit of the chosen experts (the others get ~0)
CAPTURE = [2, L // 2, L - 3]             # sglang's default EAGLE3 aux layers for Qwen3MoeForCausalLM
SEED = 20261122
NAME = "qwen3_moe"


def walk(last_token, n):
    """Greedy continuation of any prompt ending in ``last_token``: the next ``n`` tokens."""
    _, walk_ids, _, nxt, slot = tm.plan()
    s, out = int(slot[last_token]), []
    for _ in range(n):
        s = int(nxt[s])
        out.append(int(walk_ids[s]))
    return out


def rankings():
    """[L, D, E]: expert ids by router preference for each (layer, walk slot)."""
    g = torch.Generator().manual_seed(SEED + 1)
    return torch.stack([torch.stack([torch.randperm(E, generator=g) for _ in range(D)]) for _ in range(L)])


def route(token, layer):
    """The experts (sorted) this target routes ``token`` to in ``layer``."""
    slot = int(tm.plan()[4][token])
    return sorted(int(e) for e in rankings()[layer, slot, :TOPK])


def build_weights():
    t, _, _ = tm.build_weights()               # tiny_models' Llama target
    g = torch.Generator().manual_seed(SEED)
    rn = lambda *s, std=1.0: torch.randn(*s, generator=g) * std
    live = torch.zeros(H, dtype=torch.bool)
    live[:D] = True
    live[tm.S0:] = True
    wmask = live.float().clone()
    wmask[tm.C] = 0                          # never write the const dim
    rmask = live.float()
    keep = ("model.embed_tokens.", "model.norm.", "lm_head.", "input_layernorm.", "post_attention_layernorm.",
            "self_attn.")
    w = {k: v.float() for k, v in t.items() if any(s in k for s in keep)}
    rank = rankings()
    scratch = torch.zeros(H)
    scratch[tm.S0:] = 1
    scratch[tm.C] = 0
    for l in range(L):
        p = f"model.layers.{l}."
        # attention writes only the scratch dims: its writes into the walk slots are the context noise
        # the router would read (the one deviation from tiny_models' attention)
        w[p + "self_attn.o_proj.weight"] = w[p + "self_attn.o_proj.weight"] * scratch[:, None]
        w[p + "self_attn.q_norm.weight"] = torch.ones(HD)
        w[p + "self_attn.k_norm.weight"] = torch.ones(HD)
        gate = torch.zeros(E, H)
        for s in range(D):
            gate[rank[l, s, :TOPK], s] = GATE / tm.NC
        w[p + "mlp.gate.weight"] = gate
        for e in range(E):
            x = p + f"mlp.experts.{e}."
            w[x + "gate_proj.weight"] = rn(IM, H, std=0.03) * rmask[None]
            w[x + "up_proj.weight"] = rn(IM, H, std=0.03) * rmask[None]
            w[x + "down_proj.weight"] = rn(H, IM, std=tm.D_STD) * wmask[:, None]
    return {k: v.to(torch.bfloat16).contiguous() for k, v in w.items()}


def config():
    return {
        "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
        "hidden_size": H, "intermediate_size": tm.I, "num_hidden_layers": L, "num_attention_heads": NH,
        "num_key_value_heads": NKV, "head_dim": HD, "vocab_size": V,
        "num_experts": E, "num_experts_per_tok": TOPK, "moe_intermediate_size": IM, "norm_topk_prob": True,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "router_aux_loss_coef": 0.0,
        "output_router_logits": False, "use_sliding_window": False, "sliding_window": None,
        "max_window_layers": L, "max_position_embeddings": 4096,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}, "rms_norm_eps": 1e-5,
        "hidden_act": "silu", "attention_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": False,
        "initializer_range": 0.02, "use_cache": True,
        "bos_token_id": tm.BOS, "eos_token_id": tm.EOS, "pad_token_id": tm.PAD, "dtype": "bfloat16",
    }


def build(out_dir):
    """Write OUT_DIR/qwen3_moe once per stamp (``llama.build_once``: file-locked, the stock and plugin
    runs may call it together)."""
    path = os.path.join(os.path.abspath(out_dir), NAME)
    tm.build_once(path, tm.file_stamp(os.path.abspath(__file__), os.path.abspath(tm.__file__)),
                  lambda: tm.write_model(path, build_weights(), config()),
                  [os.path.join(path, "model.safetensors")])
    return path


# ------------------- pure-torch reference (follows HF / sglang qwen3_moe.py semantics) -------------------
def attn(W, p, x, pos):
    T = x.shape[0]
    q = ref.rms((x @ W[p + "q_proj.weight"].T).view(T, NH, HD), W[p + "q_norm.weight"])
    k = ref.rms((x @ W[p + "k_proj.weight"].T).view(T, NKV, HD), W[p + "k_norm.weight"])
    q, k = ref.rope(q, pos), ref.rope(k, pos)
    v = (x @ W[p + "v_proj.weight"].T).view(T, NKV, HD)
    s = torch.einsum("qhd,khd->hqk", q.float(), k.float().repeat_interleave(NH // NKV, 1)) / math.sqrt(HD)
    s = s.masked_fill(torch.arange(T)[None] > torch.arange(T)[:, None], float("-inf"))
    o = torch.einsum("hqk,khd->qhd", torch.softmax(s, -1), v.float().repeat_interleave(NH // NKV, 1)).to(x.dtype)
    return o.reshape(T, NH * HD) @ W[p + "o_proj.weight"].T


def moe(W, p, x):
    """(output, router logits, top-k expert ids) of one sparse MoE block."""
    logits = (x @ W[p + "gate.weight"].T).float()
    wts, idx = torch.softmax(logits, -1).topk(TOPK, -1)
    wts = wts / wts.sum(-1, keepdim=True)
    out = torch.zeros(x.shape, dtype=torch.float32)
    for e in range(E):
        q = p + f"experts.{e}."
        y = (torch.nn.functional.silu(x @ W[q + "gate_proj.weight"].T) * (x @ W[q + "up_proj.weight"].T)) \
            @ W[q + "down_proj.weight"].T
        out += (wts * (idx == e)).sum(-1, keepdim=True) * y.float()
    return out.to(x.dtype), logits, idx


def target_fwd(W, toks):
    """(logits, EAGLE3 aux hidden states, router logits [T, L, E], routed experts [T, L, TOPK])."""
    x, pos, aux, rl, ids = W["model.embed_tokens.weight"][toks], torch.arange(len(toks)), [], [], []
    for l in range(L):
        p = f"model.layers.{l}."
        if l in CAPTURE:
            aux.append(x)
        x = x + attn(W, p + "self_attn.", ref.rms(x, W[p + "input_layernorm.weight"]), pos)
        m, lg, idx = moe(W, p + "mlp.", ref.rms(x, W[p + "post_attention_layernorm.weight"]))
        x = x + m
        rl.append(lg)
        ids.append(idx)
    n = ref.rms(x, W["model.norm.weight"])
    return (n @ W["lm_head.weight"].T).float(), torch.cat(aux, -1), torch.stack(rl, 1), torch.stack(ids, 1)


def check(path, n_new=40):
    import transformers

    prompts = ref.check_prompts(200)
    ok, res = True, {}
    E3 = ref.load(tm.build_all(os.path.dirname(path))["eagle3"])
    table = torch.tensor([[route(tok, l) for l in range(L)] for tok in range(V)])  # [V, L, TOPK]
    for dt in (torch.float32, torch.bfloat16):
        W = ref.load(path, dt)
        e3 = {k: v.to(dt) for k, v in E3.items()}
        s3 = lambda *a: ref.eagle3_step(e3, W, *a)
        for pi, pr in enumerate(prompts):
            seq = ref.greedy(target_fwd, W, pr, n_new)
            logits, aux, rl, ids = target_fwd(W, torch.tensor(seq))
            gen = logits[len(pr) - 1:-1]
            srt = rl.sort(-1, descending=True).values
            r = dict(min_margin=round(float(ref.margins(gen).min()), 3),
                     router_gap=round(float((srt[..., TOPK - 1] - srt[..., TOPK]).min()), 3),
                     routing_is_table=bool(torch.equal(ids.sort(-1).values, table[torch.tensor(seq)])),
                     is_walk=seq[len(pr):] == walk(pr[-1], n_new), eos_emitted=tm.EOS in seq[len(pr):])
            if dt == torch.bfloat16:
                for steps, topk, nd in [(3, 1, 4), (3, 4, 8)]:
                    r[f"eagle3_s{steps}k{topk}n{nd}"] = round(ref.simulate(s3, seq, aux, len(pr), steps, topk, nd), 2)
                ok &= r["eagle3_s3k4n8"] >= 2.5
            ok &= (r["min_margin"] >= 2.0 and r["router_gap"] >= 5.0 and r["routing_is_table"] and r["is_walk"]
                   and not r["eos_emitted"])
            res[f"{'fp32' if dt == torch.float32 else 'bf16'}/p{pi}"] = r
    for k, r in res.items():
        print(k, "prompt_len", len(prompts[int(k[-1])]), r)
    cfg = transformers.AutoConfig.from_pretrained(path)
    print("hf config:", type(cfg).__name__, "experts", cfg.num_experts, "top-k", cfg.num_experts_per_tok,
          "head_dim", cfg.head_dim, "rope", cfg.rope_parameters, "norm_topk_prob", cfg.norm_topk_prob)
    ok &= (type(cfg).__name__ == "Qwen3MoeConfig" and cfg.head_dim == HD and cfg.num_experts == E
           and cfg.num_experts_per_tok == TOPK and cfg.rope_parameters.get("rope_theta") == 10000.0)
    hf, info = transformers.Qwen3MoeForCausalLM.from_pretrained(path, dtype=torch.float32, output_loading_info=True)
    hf = hf.eval()
    print("hf loading info:", {k: v for k, v in info.items() if v})
    ok &= not any(info.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))
    W = ref.load(path)
    for pi in (1, 3, 5):
        seq = ref.greedy(target_fwd, W, prompts[pi], n_new)
        with torch.no_grad():
            out = hf(torch.tensor([seq]), output_router_logits=True)
        logits, _, rl, ids = target_fwd(W, torch.tensor(seq))
        diff = float((out.logits[0].float() - logits).abs().max())
        hf_ids = torch.stack([r_.float().topk(TOPK, -1).indices for r_ in out.router_logits], 1)
        same = out.logits[0, len(prompts[pi]) - 1:-1].argmax(-1).tolist() == seq[len(prompts[pi]):]
        same_route = torch.equal(hf_ids.sort(-1).values, ids.sort(-1).values)
        print(f"transformers p{pi} (len {len(seq)}): greedy equal={same} routing equal={same_route} "
              f"max|logit diff|={diff:.2e}")
        ok &= same and same_route and diff < 2e-3
    print("walk from t10:", walk(10, 8), "route(t10):", [route(10, l) for l in range(L)])
    print("CHECK", "OK" if ok else "FAILED")
    return ok


if __name__ == "__main__":
    cli(build, check)
