"""Offline, deterministic tiny real-weight DeepSeek-V3 target (``DeepseekV3ForCausalLM``: MLA attention, routed +
shared experts, one NextN / MTP layer in the same checkpoint) for the MTP rows (tests/registered/test_dsv3_mtp_*.py).

`python -m sglang_specv2_fixes.testing.tiny_models.deepseek_v3 OUT_DIR [--check]` writes OUT_DIR/deepseek_v3 (bf16
safetensors in the Hugging Face DeepSeek-V3 layout, MTP layer as ``model.layers.{L}.*``, + config.json + tokenizer
files) and prints a one-line JSON summary; `build(out_dir)` does the same from Python (once per stamp of this file and
llama.py). The pure-torch reference is ``deepseek_v3_ref.py``.

How SGLang 0.5.11 … 0.5.17 serve it (``--speculative-algorithm EAGLE``, no draft path):
* ServerArgs (``_handle_speculative_decoding``) fills ``speculative_draft_model_path`` with the model path for
  ``DeepseekV3ForCausalLM`` (a given path only logs "DeepSeek MTP does not require ..."), and
  ``auto_choose_speculative_params`` gives 3 steps / topk 1 / 4 draft tokens for it.
* ``ModelConfig._config_draft_model`` renames the draft's architecture to ``DeepseekV3ForCausalLMNextN``
  (models/deepseek_nextn.py); its ``load_weights`` keeps only ``model.layers.{L}.*`` (``_initialize_nextn_conf``:
  ``enorm`` / ``hnorm`` / ``eh_proj`` / ``shared_head.norm`` -> ``model.*``, the rest -> ``model.decoder.*``, and
  ``shared_head.head`` / ``embed_tokens`` skipped: the EAGLE worker hands the draft the target's embedding and head).
* The target's ``load_weights`` skips ``model.layers.{L}.*`` (``num_nextn_predict_layers`` 1).
* ``n_routed_experts`` 8 (not 256): ``determine_num_fused_shared_experts`` leaves the shared expert unfused, so
  ``mlp.shared_experts.*`` load as a plain MLP on every release.
* ``hidden_size`` is ``HIDDEN`` (512), not the walk's 256: on 0.5.16 / 0.5.17 the NextN layer's ``forward`` calls
  ``fused_eh_norm`` on CUDA, which takes a hidden size in (256, 8192] (a multiple of 256) only.
* 0.5.15.x's ``models/deepseek_v2`` imports the DSA indexer and with it ``cutlass`` (nvidia-cutlass-dsl), which the
  device bundle lacks: ci/gpu/bundle_shims gives that runner placeholder names (this target has no DSA indexer).

Design: the deterministic walk of llama.py (same embedding, final norm, lm_head, plan), so greedy output is
``llama`` / ``finish_line.walk(prompt)`` and the finish-line cases apply unchanged:
* MLA (q LoRA rank 128, kv LoRA rank 512, rope 64, nope 128, v 128, 16 heads: DeepSeek's kv / rope dims, the ones
  the MLA kernels are built for; 16 heads are what one rank of a TP-8 V3 holds) with small random projections that
  read the live dims (walk slots + scratch + const) and write only the scratch dims, so the context moves the
  log-softmax by up to ~0.3 over the vocabulary (the greedy token's by ~0.04) but cannot move the router or the
  argmax (greedy margin ~3, p_top ~0.5).
* layer 0 dense (``first_k_dense_replace`` 1), layers 1..L-1 and the MTP layer MoE: 8 routed experts in 2 groups,
  top-2 within 1 group (``noaux_tc``, sigmoid scores, zero ``e_score_correction_bias``, ``norm_topk_prob``,
  ``routed_scaling_factor`` 1) plus one shared expert. The router reads only the token's walk slot: the two chosen
  experts (both in one random group per (layer, slot)) get logit ``GATE``, the rest 0, so routing is a known function
  of the input token and no numerical noise flips it. Experts write the live dims with the Llama MLP scale.
* MTP layer: ``eh_proj`` = [0.35 * I | 0.65 * P] over (enorm(embed(x_{t+1})), hnorm(h_t)), where h_t is the
  target's normed final hidden state (a rep of x_t) and P the walk step on slots: both parts give rep(x_{t+1}),
  whose lm_head row is x_{t+2}. The hidden path outweighs the token path, so a hidden state of another position
  (stale, shifted, another request's) drafts the wrong token and acceptance collapses (the check's negative
  control: accept length < 2 with the hidden states one position off); a zero hidden state still drafts from the
  token alone. The draft's own output (``shared_head.norm``) is again a normed rep: chained steps keep drafting.
* The walk lives in the first ``H`` (256) hidden dims; ``widen`` pads every matrix to ``HIDDEN`` with zeros (read
  columns, written rows), so the extra dims stay 0 everywhere, and scales the hidden-size RMSNorm weights by
  sqrt(H / HIDDEN): the mean square over ``HIDDEN`` dims is H / HIDDEN of the one over ``H``, so every normed value
  is the 256-wide model's.
"""
import os

import torch

from . import cli
from . import llama as tm

NAME = "deepseek_v3"
H, V, D, I = tm.H, tm.V, tm.D, tm.I
HIDDEN = 512                            # the served hidden size (``widen``): the walk's H plus zero dims
L = 4                                   # target layers; the MTP layer is model.layers.4
NH = 16
Q_LORA, KV_LORA, ROPE, NOPE, VHD = 128, 512, 64, 128, 128
E, TOPK, N_GROUP, TOPK_GROUP, IM, N_SHARED = 8, 2, 2, 1, 256, 1
FIRST_DENSE = 1
EH_TOKEN = 0.35                         # eh_proj's weight on the token path (the hidden path gets the rest)
GATE = 8.0                              # router logit of the chosen experts (the others get 0)
EPS = 1e-6
ROPE_THETA = 10000.0
A_STD, O_STD = 0.06, 0.0015             # MLA projections read / o_proj write scale (scratch dims only)
SEED = 20261201


def rankings():
    """[L + 1, D, TOPK]: the experts each (layer, walk slot) routes to (layer L: the MTP layer), both in one group."""
    g = torch.Generator().manual_seed(SEED + 1)
    per = E // N_GROUP
    out = torch.zeros(L + 1, D, TOPK, dtype=torch.long)
    for l in range(L + 1):
        for s in range(D):
            grp = int(torch.randint(0, N_GROUP, (1,), generator=g))
            out[l, s] = grp * per + torch.randperm(per, generator=g)[:TOPK]
    return out


def route(token, layer):
    """The experts (sorted) ``token`` is routed to in MoE ``layer`` (``FIRST_DENSE`` … L; L is the MTP layer)."""
    slot = int(tm.plan()[4][token])
    return sorted(int(e) for e in rankings()[layer, slot])


def masks():
    live = torch.zeros(H, dtype=torch.bool)
    live[:D] = True
    live[tm.S0:] = True
    rmask = live.float()
    wmask = rmask.clone()
    wmask[tm.C] = 0                      # never write the const dim
    scratch = torch.zeros(H)
    scratch[tm.S0:tm.C] = 1
    return live, rmask, wmask, scratch


def _layer(w, p, rn, l, rank, moe):
    _, rmask, wmask, scratch = masks()
    w[p + "input_layernorm.weight"] = 1 + rn(H, std=0.05)
    w[p + "post_attention_layernorm.weight"] = 1 + rn(H, std=0.05)
    a = p + "self_attn."
    w[a + "q_a_proj.weight"] = rn(Q_LORA, H, std=A_STD) * rmask[None]
    w[a + "q_a_layernorm.weight"] = torch.ones(Q_LORA)
    w[a + "q_b_proj.weight"] = rn(NH * (NOPE + ROPE), Q_LORA, std=0.09)
    w[a + "kv_a_proj_with_mqa.weight"] = rn(KV_LORA + ROPE, H, std=A_STD) * rmask[None]
    w[a + "kv_a_layernorm.weight"] = torch.ones(KV_LORA)
    w[a + "kv_b_proj.weight"] = rn(NH * (NOPE + VHD), KV_LORA, std=0.05)
    w[a + "o_proj.weight"] = rn(H, NH * VHD, std=O_STD) * scratch[:, None]
    m = p + "mlp."
    if not moe:
        w[m + "gate_proj.weight"] = rn(I, H, std=0.03) * rmask[None]
        w[m + "up_proj.weight"] = rn(I, H, std=0.03) * rmask[None]
        w[m + "down_proj.weight"] = rn(H, I, std=tm.D_STD) * wmask[:, None]
        return
    gate = torch.zeros(E, H)
    for s in range(D):
        gate[rank[l, s], s] = GATE / tm.NC
    w[m + "gate.weight"] = gate
    w[m + "gate.e_score_correction_bias"] = torch.zeros(E)
    for e in range(E):
        x = m + f"experts.{e}."
        w[x + "gate_proj.weight"] = rn(IM, H, std=0.03) * rmask[None]
        w[x + "up_proj.weight"] = rn(IM, H, std=0.03) * rmask[None]
        w[x + "down_proj.weight"] = rn(H, IM, std=tm.D_STD) * wmask[:, None]
    x = m + "shared_experts."
    w[x + "gate_proj.weight"] = rn(IM * N_SHARED, H, std=0.03) * rmask[None]
    w[x + "up_proj.weight"] = rn(IM * N_SHARED, H, std=0.03) * rmask[None]
    w[x + "down_proj.weight"] = rn(H, IM * N_SHARED, std=tm.D_STD) * wmask[:, None]


def build_weights():
    t, _, _ = tm.build_weights()          # tiny_models' Llama target: embed / final norm / lm_head
    g = torch.Generator().manual_seed(SEED)
    rn = lambda *s, std=1.0: torch.randn(*s, generator=g) * std  # noqa: E731
    live, _, _, _ = masks()
    _, _, _, nxt, _ = tm.plan()
    w = {k: t[k].float() for k in ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight")}
    rank = rankings()
    for l in range(L + 1):
        _layer(w, f"model.layers.{l}.", rn, l, rank, moe=l >= FIRST_DENSE)
    P = torch.zeros(H, H)                 # rep(x) -> rep(next(x)); identity on scratch / const
    P[nxt, torch.arange(D)] = 1
    P[tm.S0:, tm.S0:] = torch.eye(H - tm.S0)
    p = f"model.layers.{L}."
    w[p + "enorm.weight"] = torch.ones(H)
    w[p + "hnorm.weight"] = torch.ones(H)
    w[p + "eh_proj.weight"] = torch.cat([EH_TOKEN * torch.diag(live.float()), (1 - EH_TOKEN) * P], 1)
    w[p + "shared_head.norm.weight"] = torch.ones(H)
    w[p + "shared_head.head.weight"] = w["lm_head.weight"].clone()     # as in DeepSeek's checkpoints
    w[p + "embed_tokens.weight"] = w["model.embed_tokens.weight"].clone()
    return {k: v.to(torch.bfloat16).contiguous() for k, v in widen(w).items()}


NORMS = ("input_layernorm.weight", "post_attention_layernorm.weight", "model.norm.weight", "enorm.weight",
         "hnorm.weight", "shared_head.norm.weight")
READS = ("q_a_proj.weight", "kv_a_proj_with_mqa.weight", "gate_proj.weight", "up_proj.weight", "mlp.gate.weight",
         "embed_tokens.weight", "lm_head.weight", "shared_head.head.weight")
WRITES = ("o_proj.weight", "down_proj.weight")


def widen(w):
    """The H-wide weights ``w`` as a ``HIDDEN``-wide model computing the same values (module docstring)."""
    pad = HIDDEN - H
    out = {}
    for k, v in w.items():
        if k.endswith(NORMS):
            v = torch.cat([v, torch.ones(pad)]) * (H / HIDDEN) ** 0.5
        elif k.endswith(READS):
            v = torch.cat([v, v.new_zeros(v.shape[0], pad)], 1)
        elif k.endswith(WRITES):
            v = torch.cat([v, v.new_zeros(pad, v.shape[1])], 0)
        elif k.endswith("eh_proj.weight"):           # [H, 2H] over (enorm(embed) | hnorm(hidden))
            e = v.new_zeros(HIDDEN, 2 * HIDDEN)
            e[:H, :H], e[:H, HIDDEN:HIDDEN + H] = v[:, :H], v[:, H:]
            v = e
        out[k] = v
    return out


def config():
    return {
        "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
        "hidden_size": HIDDEN, "intermediate_size": I, "num_hidden_layers": L, "vocab_size": V,
        "num_attention_heads": NH, "num_key_value_heads": NH,
        "q_lora_rank": Q_LORA, "kv_lora_rank": KV_LORA, "qk_rope_head_dim": ROPE, "qk_nope_head_dim": NOPE,
        "v_head_dim": VHD, "n_routed_experts": E, "num_experts_per_tok": TOPK, "n_shared_experts": N_SHARED,
        "moe_intermediate_size": IM, "first_k_dense_replace": FIRST_DENSE, "moe_layer_freq": 1,
        "n_group": N_GROUP, "topk_group": TOPK_GROUP, "topk_method": "noaux_tc", "scoring_func": "sigmoid",
        "norm_topk_prob": True, "routed_scaling_factor": 1.0, "aux_loss_alpha": 0.001, "seq_aux": True,
        "ep_size": 1, "num_nextn_predict_layers": 1,
        "rope_theta": ROPE_THETA, "rope_scaling": None, "rope_interleave": True,
        "max_position_embeddings": 4096, "rms_norm_eps": EPS, "hidden_act": "silu",
        "attention_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": False,
        "initializer_range": 0.02, "use_cache": True,
        "bos_token_id": tm.BOS, "eos_token_id": tm.EOS, "pad_token_id": tm.PAD, "torch_dtype": "bfloat16",
    }


def build(out_dir):
    """Write OUT_DIR/deepseek_v3 once per stamp (``llama.build_once``: file-locked); return its path."""
    path = os.path.join(os.path.abspath(out_dir), NAME)
    tm.build_once(path, tm.file_stamp(os.path.abspath(__file__), os.path.abspath(tm.__file__)),
                  lambda: tm.write_model(path, build_weights(), config()),
                  [os.path.join(path, "model.safetensors")])
    return path


if __name__ == "__main__":
    from .deepseek_v3_ref import check

    cli(build, check)
