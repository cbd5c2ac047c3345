"""Detector drafts of the registered rows: the tiny EAGLE3 draft (``llama.build_weights()[1]``) turned so that one
spec-decoding bug shows as lost acceptance while correct metadata keeps every draft accepted. Checked on the
pure-torch reference of the tiny models in tests/cpu/test_detector_drafts.py; rows build them with
``draft(name)`` (written once per stamp under the tiny models' directory).

``prevtoken_weights``: heads 0/2 attend to the previous position (the self-focus query phase-shifted by one RoPE
step: score ~120 at distance 1, >= 27 lower elsewhere) and the MLP reads the copied token through the walk map
(out = 0.3 * P(h_T) + 0.7 * P(copy)). The previous position's draft input is the current token, so with a correct
draft chain the two halves agree. It sees a wrong token in the draft KV of the previous position (#26800, chunk
ends) and a draft decode step that runs one RoPE position off (#25015: distance 1 becomes 2).

``lookahead_weights``: heads 0/2 gain 48 score per position towards later keys (and lose it towards earlier ones), so
with correct causal metadata they still attend to themselves, but a draft-extend row that can see the rows after it
copies the next row's token instead; the draft mispredicts the successor of every third walk slot, so verifies
reject and the select row is not the last one (#26651: the triton draft-extend graph's KV range counted the draft
tokens twice).
"""

import math
import os


def _walk_mlp(w, tm, copy):
    """The MLP of a detector: out = 0.3 * P(h_T) + 0.7 * ``copy`` of the token half (upstream tiny draft: 0.5 / 0.5),
    P the walk map of ``tm.plan()``; returns the plan's walk and successor arrays."""
    import torch

    _, walk, _, nxt, _ = tm.plan()
    P = torch.zeros(tm.H, tm.H)
    P[nxt, torch.arange(tm.D)] = 1
    P[tm.S0:, tm.S0:] = torch.eye(tm.H - tm.S0)
    eye, coef = torch.eye(tm.H), (tm.NOM_MS + 1 / tm.H) / 3.0
    down = w["midlayer.mlp.down_proj.weight"]
    down[:, :tm.D] = (0.3 * P[:, :tm.D] - eye[:, :tm.D]) * coef
    copy_map = P if copy == "walk" else eye
    down[:, tm.D:2 * tm.D] = (0.7 * copy_map[:, :tm.D] - eye[:, tm.U0:tm.U0 + tm.D]) * coef
    return walk, nxt


def prevtoken_weights(e3):
    """The tiny EAGLE3 draft's tensors (``llama.build_weights()[1]``) turned into the previous-token detector."""
    import torch

    from . import llama as tm

    HD, C = tm.HD, tm.C
    w = {k: v.float().clone() for k, v in e3.items()}
    q = w["midlayer.self_attn.q_proj.weight"]
    inv = 1.0 / (10000.0 ** (torch.arange(0, HD, 2).float() / HD))
    for h in (0, 2):  # rotate each RoPE pair of the self-focus query by -theta_i: the peak moves to distance 1
        a, b = q[h * HD:h * HD + HD // 2, C].clone(), q[h * HD + HD // 2:(h + 1) * HD, C].clone()
        c, s = inv.cos(), -inv.sin()
        q[h * HD:h * HD + HD // 2, C] = a * c - b * s
        q[h * HD + HD // 2:(h + 1) * HD, C] = a * s + b * c
    _walk_mlp(w, tm, copy="walk")
    return {k_: v.to(torch.bfloat16).contiguous() for k_, v in w.items()}


ODD_PAIR = 26  # an unused low-frequency RoPE pair of heads 0/2 (the self-focus uses pairs 0..7)
FUTURE_SLOPE = 48.0  # score per position towards later keys


def lookahead_weights(e3):
    """The tiny EAGLE3 draft's tensors (``llama.build_weights()[1]``) turned into the look-ahead detector."""
    import torch

    from . import llama as tm

    HD, C, D = tm.HD, tm.C, tm.D
    w = {k: v.float().clone() for k, v in e3.items()}
    q, k = w["midlayer.self_attn.q_proj.weight"], w["midlayer.self_attn.k_proj.weight"]
    j, jj = ODD_PAIR, ODD_PAIR + HD // 2
    theta = 1.0 / (10000.0 ** (2 * j / HD))
    # neox RoPE: q_jj = k_j = b on the const dim adds b^2 * NC^2 * sin(theta * (pos_k - pos_q)) / sqrt(HD)
    b = math.sqrt(FUTURE_SLOPE * math.sqrt(HD) / theta) / tm.NC
    for h in range(tm.NH):
        q[h * HD + j] = 0
        q[h * HD + jj] = 0
    for h in (0, 2):
        q[h * HD + jj, C] = b
    for kv in range(tm.NKV):
        k[kv * HD + j] = 0
        k[kv * HD + jj] = 0
        k[kv * HD + j, C] = b
    walk, nxt = _walk_mlp(w, tm, copy="self")
    # lm_head: every third slot along the walk cycle predicts the token after its successor
    lm, s = w["lm_head.weight"], 0
    for i in range(D):
        if i % 3 == 0:
            good, bad = int(walk[nxt[s]]), int(walk[nxt[nxt[s]]])
            lm[bad, s], lm[good, s] = lm[good, s].clone(), 0.0
        s = int(nxt[s])
    return {k_: v.to(torch.bfloat16).contiguous() for k_, v in w.items()}


WEIGHTS = {"prevtoken": prevtoken_weights, "lookahead": lookahead_weights}


def draft(name):
    """Path of detector draft ``name`` (a key of ``WEIGHTS``): ``MODELS_DIR/eagle3-<name>``, written once per stamp
    of this module and the tiny models (file-locked: parallel rows share it)."""
    from ..config import MODELS_DIR
    from . import llama as tm

    return tm.derived_eagle3_draft(os.path.join(MODELS_DIR, f"eagle3-{name}"), WEIGHTS[name], __file__)
