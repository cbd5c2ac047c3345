"""Detector drafts of the registered rows: the tiny EAGLE3 draft (``llama.build_weights()[1]``) turned so that one
spec-decoding bug shows as lost acceptance while correct metadata keeps every draft accepted. Checked on the
pure-torch reference of the tiny models in tests/cpu/test_detector_drafts.py; rows build them with
``llama.derived_eagle3_draft(path, <weights function>, detectors.__file__)``.

``prevtoken_weights``: heads 0/2 attend to the previous position (the self-focus query phase-shifted by one RoPE
step: score ~120 at distance 1, >= 27 lower elsewhere) and the MLP reads the copied token through the walk map
(out = 0.3 * P(h_T) + 0.7 * P(copy)). The previous position's draft input is the current token, so with a correct
draft chain the two halves agree. It sees a wrong token in the draft KV of the previous position (#26800, chunk
ends) and a draft decode step that runs one RoPE position off (#25015: distance 1 becomes 2).
"""


def prevtoken_weights(e3):
    """The tiny EAGLE3 draft's tensors (``tiny_models.llama.build_weights()[1]``) turned into the detector."""
    import torch

    from . import llama as tm

    HD, C, D, U0 = tm.HD, tm.C, tm.D, tm.U0
    w = {k: v.float().clone() for k, v in e3.items()}
    q = w["midlayer.self_attn.q_proj.weight"]
    inv = 1.0 / (10000.0 ** (torch.arange(0, HD, 2).float() / HD))
    for h in (0, 2):  # rotate each RoPE pair of the self-focus query by -theta_i: the peak moves to distance 1
        a, b = q[h * HD:h * HD + HD // 2, C].clone(), q[h * HD + HD // 2:(h + 1) * HD, C].clone()
        c, s = inv.cos(), -inv.sin()
        q[h * HD:h * HD + HD // 2, C] = a * c - b * s
        q[h * HD + HD // 2:(h + 1) * HD, C] = a * s + b * c
    _, _, _, nxt, _ = tm.plan()
    P = torch.zeros(tm.H, tm.H)
    P[nxt, torch.arange(D)] = 1
    P[tm.S0:, tm.S0:] = torch.eye(tm.H - tm.S0)
    eye, coef = torch.eye(tm.H), (tm.NOM_MS + 1 / tm.H) / 3.0
    down = w["midlayer.mlp.down_proj.weight"]
    down[:, :D] = (0.3 * P[:, :D] - eye[:, :D]) * coef
    down[:, D:2 * D] = (0.7 * P[:, :D] - eye[:, U0:U0 + D]) * coef
    return {k_: v.to(torch.bfloat16).contiguous() for k_, v in w.items()}
